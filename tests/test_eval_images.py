"""Tests for recon_jax.eval.images and recon_jax.io.plots (fast, CPU)."""

import json
import warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
import pytest

from recon_jax.errors import ConfigError
from recon_jax.eval import evaluation, images, points, similarity
from recon_jax.io import plots
from recon_jax.job import figures as report_figures

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

H = 12  # Small images keep SSIM compiles cheap; default window is 3 here.


def smooth_images(rng, n, h=H, c=1):
  """Piecewise-constant random images, box-blurred: structured, not white noise.

  SSIM on white noise says little; blurred blocks behave more like real
  images (neighbouring pixels correlate).
  """
  low = rng.uniform(size=(n, h // 3, h // 3, c))
  x = np.kron(low, np.ones((1, 3, 3, 1)))
  p = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge")
  return sum(p[:, i : i + h, j : j + h] for i in range(3) for j in range(3)) / 9.0


@pytest.fixture
def rng():
  return np.random.default_rng(0)


# ---------------------------------------------------------------- SSIM


def test_ssim_identity_difference_symmetry(rng):
  a = rng.uniform(size=(4, 16, 16, 3))
  b = rng.uniform(size=(4, 16, 16, 3))
  np.testing.assert_allclose(np.asarray(similarity.ssim(a, a)), 1.0, atol=1e-6)
  assert np.all(np.asarray(similarity.ssim(a, b)) < 0.5)
  np.testing.assert_allclose(
    np.asarray(similarity.ssim(a, b)), np.asarray(similarity.ssim(b, a)), atol=1e-12
  )


def test_ssim_matrix_matches_pairwise(rng):
  a = smooth_images(rng, 3)
  b = smooth_images(rng, 4)
  mat = np.asarray(similarity.ssim_matrix(a, b))
  assert mat.shape == (3, 4)
  for i in range(3):
    pair = np.asarray(similarity.ssim(np.repeat(a[i : i + 1], 4, axis=0), b))
    np.testing.assert_allclose(mat[i], pair, atol=1e-10)
  assert similarity.ssim_matrix(a, b[:0]).shape == (3, 0)


def test_default_filter_size_and_thresholds():
  assert similarity.default_filter_size(32) == 11
  assert similarity.default_filter_size(25) == 7
  assert similarity.default_filter_size(16) == 7
  assert similarity.default_filter_size(8) == 3
  assert similarity.default_filter_size(2) == 2  # never larger than the image
  with pytest.raises(ValueError):
    similarity.ssim(np.zeros((1, 4, 4, 1)), np.zeros((1, 4, 4, 1)), filter_size=5)
  assert images.strict_threshold_for(8) == 0.8
  assert images.strict_threshold_for(25) == 0.7
  assert images.strict_threshold_for(32) == 0.7


# ---------------------------------------------------------------- stretch / NCC


def test_stretch_range_and_constant(rng):
  x = rng.normal(size=(3, 5, 5, 2)) * 7 - 2
  s = np.asarray(similarity.stretch(x))
  assert s.min(axis=(1, 2, 3)).tolist() == [0.0, 0.0, 0.0]
  assert s.max(axis=(1, 2, 3)).tolist() == [1.0, 1.0, 1.0]
  const = np.asarray(similarity.stretch(np.full((2, 4, 4, 1), 3.3)))
  assert not np.isnan(const).any()
  np.testing.assert_array_equal(const, 0.5)


def test_ncc_affine_invariance_and_constant(rng):
  a = rng.uniform(size=(3, 6, 6, 1))
  np.testing.assert_allclose(np.diag(np.asarray(similarity.ncc(a, a))), 1.0, atol=1e-12)
  np.testing.assert_allclose(np.diag(np.asarray(similarity.ncc(a, -a))), -1.0, atol=1e-12)
  np.testing.assert_allclose(np.diag(np.asarray(similarity.ncc(a, 2 * a + 3))), 1.0, atol=1e-12)
  np.testing.assert_allclose(np.diag(np.asarray(similarity.ncc(0.5 * a - 1, a))), 1.0, atol=1e-12)
  mixed = np.concatenate([a, np.full((1, 6, 6, 1), 2.0)])
  ncc = np.asarray(similarity.ncc(mixed, mixed))
  assert not np.isnan(ncc).any()
  np.testing.assert_array_equal(ncc[3], 0.0)
  assert np.all(np.abs(ncc) <= 1.0)


def test_match_recovers_permutation(rng):
  train = similarity.stretch(smooth_images(rng, 7))
  perm = rng.permutation(7)
  cands = similarity.stretch(np.asarray(train)[perm] + 0.01 * rng.normal(size=(7, H, H, 1)))
  _, best_idx, _ = images.match_and_vote(train, cands)
  # cands[j] is a copy of train[perm[j]], so train i is found at inv[i].
  np.testing.assert_array_equal(np.asarray(best_idx), np.argsort(perm))


def test_voting_averages_near_duplicates(rng):
  train = np.asarray(similarity.stretch(smooth_images(rng, 2)))
  c0 = train[0] + 0.01 * rng.normal(size=train[0].shape)
  c1 = train[0] + 0.01 * rng.normal(size=train[0].shape)
  junk = rng.uniform(size=(3, H, H, 1))
  cands = np.asarray(similarity.stretch(np.stack([c0, c1, train[1], *junk])))
  recon, best_idx, n_votes = images.match_and_vote(train, cands, vote_frac=0.9)
  assert np.asarray(n_votes).tolist() == [2, 1]
  assert int(best_idx[1]) == 2
  expected = np.asarray(similarity.stretch(0.5 * (cands[0:1] + cands[1:2])))[0]
  np.testing.assert_allclose(np.asarray(recon[0]), expected, atol=1e-12)
  np.testing.assert_allclose(np.asarray(recon[1]), cands[2], atol=1e-12)


def test_match_never_picks_padding(rng):
  # Both real NCCs are about -1; internal zero-padding of the candidate
  # batch (which would score NCC 0) must never be chosen or vote.
  train = np.asarray(similarity.stretch(smooth_images(rng, 1)))
  cands = np.concatenate([1.0 - train, 1.0 - train + 0.01 * rng.normal(size=train.shape)])
  recon, best_idx, n_votes = images.match_and_vote(train, cands)
  assert int(best_idx[0]) in (0, 1)
  assert int(n_votes[0]) == 1
  expected = np.asarray(similarity.stretch(cands[int(best_idx[0])][None]))[0]
  np.testing.assert_allclose(np.asarray(recon[0]), expected, atol=1e-12)


# ---------------------------------------------------------------- evaluate


def test_evaluate_exact_train_copies(rng):
  train = smooth_images(rng, 5)
  heldout = smooth_images(rng, 6)
  cands = np.concatenate([train[[0, 2, 4]] * 3.0 + 1.0, rng.uniform(size=(3, H, H, 1))])
  res = images.evaluate(cands, train, heldout, ssim_threshold=0.8)
  assert res.recovered_strict == 3
  assert res.recovered_strict_mask.tolist() == [True, False, True, False, True]
  np.testing.assert_allclose(res.ssim[[0, 2, 4]], 1.0, atol=1e-6)
  assert set(res.order[:3].tolist()) == {0, 2, 4}
  assert np.all(np.diff(res.ssim[res.order]) <= 0)
  assert res.n_train == 5 and res.recon.shape == train.shape
  assert res.mean_ssim_top10 == pytest.approx(res.ssim.mean())  # k capped at n
  d = res.to_dict()
  json.dumps(d, allow_nan=False)
  for key in (
    "recovered_strict",
    "n_ssim_gt_0.4",
    "n_ssim_gt_0.5",
    "n_ssim_gt_0.6",
    "mean_ssim_top10",
    "mean_ssim_top45",
    "n_train",
  ):
    assert key in d
  assert d["recovered_strict"] == 3


def test_evaluate_heldout_copies_not_strict(rng):
  # Held-out images are noisy versions of the training images (same
  # "class"), so copies of them reach SSIM > 0.8 against train: a bare
  # threshold would call them recovered, strict recovery must not.
  train = smooth_images(rng, 5)
  heldout = train + 0.05 * rng.normal(size=train.shape)
  res = images.evaluate(heldout.copy(), train, heldout, ssim_threshold=0.8)
  assert np.all(res.ssim >= 0.8)
  assert res.recovered_strict == 0
  np.testing.assert_array_equal(res.nearest_heldout_idx, np.arange(5))
  np.testing.assert_allclose(res.ssim_heldout_max, 1.0, atol=1e-6)
  # Excluding the copies from the reference set changes the verdict.
  ex = images.evaluate(
    heldout.copy(), train, heldout, ssim_threshold=0.8, heldout_exclude=[0, 1, 2]
  )
  assert not set(ex.nearest_heldout_idx.tolist()) & {0, 1, 2}
  assert ex.n_heldout_ref == 2
  assert ex.recovered_strict == 3


def test_mean_image_baseline(rng):
  train = smooth_images(rng, 6)
  heldout = smooth_images(rng, 5)
  res = images.mean_image_baseline(train, heldout, train.mean(axis=0), ssim_threshold=0.8)
  assert res.n_candidates == 1
  assert np.all(res.best_idx == 0)
  for count in (res.recovered_strict, res.n_ssim_gt_04, res.n_ssim_gt_05, res.n_ssim_gt_06):
    assert 0 <= count <= res.n_train
  json.dumps(res.summary(), allow_nan=False)


def test_heldout_baseline_excludes_drawn(rng):
  train = smooth_images(rng, 5)
  # Held-out = noisy train copies: each drawn image would match itself
  # with SSIM 1 were it not excluded from the references.
  heldout = np.concatenate([train, train]) + 0.05 * rng.normal(size=(10, H, H, 1))
  res = images.heldout_baseline(0, train, heldout, 4, ssim_threshold=0.8)
  assert res.n_candidates == 4 and res.heldout_excluded.size == 4
  assert res.n_heldout_ref == 6
  assert not set(res.nearest_heldout_idx.tolist()) & set(res.heldout_excluded.tolist())
  assert np.all(res.ssim_heldout_max < 1.0 - 1e-6)
  assert 0 <= res.recovered_strict <= res.n_train
  same = images.heldout_baseline(jax.random.PRNGKey(0), train, heldout, 4, ssim_threshold=0.8)
  np.testing.assert_array_equal(same.heldout_excluded, res.heldout_excluded)
  capped = images.heldout_baseline(1, train, heldout, 100, ssim_threshold=0.8)
  assert capped.n_candidates == 10 and capped.n_heldout_ref == 0
  assert np.all(capped.nearest_heldout_idx == -1)
  json.dumps(capped.to_dict(), allow_nan=False)


# ---------------------------------------------------------------- point helpers


def test_greedy_dedup_and_lambda_filter():
  pts = np.array([[0.0, 0.0], [0.0, 0.01], [1.0, 1.0]])
  for seed in range(4):
    kept = points.greedy_dedup(pts, 0.03, seed)
    assert kept.sum() == 2 and kept[2] and kept[0] != kept[1]
  assert points.greedy_dedup(pts, 0.005, 0).sum() == 3
  mask = points.lambda_filter(np.array([0.1, 5.0, 10.0, 4.99]), 5.0)
  assert mask.tolist() == [False, True, True, False]


def test_points_recovered():
  train = np.array([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
  kept = np.array([[0.0, 0.01], [1.0, 1.04], [3.0, 3.0]])
  count, dists = points.points_recovered(kept, train, tol=0.05)
  assert count == 2
  np.testing.assert_allclose(dists[:2], [0.01, 0.04], atol=1e-12)
  assert dists[2] > 2.0
  count0, dists0 = points.points_recovered(np.zeros((0, 2)), train)
  assert count0 == 0 and np.all(np.isinf(dists0))


def test_spearman():
  x = np.arange(10.0)
  assert evaluation.spearman(x, x**3) == pytest.approx(1.0)
  assert evaluation.spearman(x, -x) == pytest.approx(-1.0)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert np.isnan(evaluation.spearman(x, np.ones(10)))
    assert np.isnan(evaluation.spearman([1.0], [2.0]))
  assert evaluation.spearman([1.0, 2.0, np.nan, 3.0], [1.0, 2.0, 0.0, 3.0]) == pytest.approx(1.0)


# ---------------------------------------------------------------- plotting


def _png_shape(path):
  assert path.exists() and path.stat().st_size > 0
  return plt.imread(path).shape


def test_image_grid_wraps(tmp_path, rng):
  imgs = rng.uniform(size=(45, 8, 8, 1))
  wrapped = tmp_path / "grid45.png"
  plots.image_grid(
    wrapped,
    [imgs, imgs, imgs],
    row_labels=["a", "b", "c"],
    col_titles=[f"{i}" for i in range(45)],
    title="wrap",
  )
  h, w = _png_shape(wrapped)[:2]
  # 3 blocks x 3 rows by 15 columns: far taller than one 3 x 45 strip would be.
  assert h > 0.4 * w
  rgb = tmp_path / "rgb.png"
  plots.image_grid(rgb, [rng.uniform(size=(4, 8, 8, 3))])
  _png_shape(rgb)
  assert not plt.get_fignums()


def test_reconstruction_and_other_figures(tmp_path, rng):
  train = smooth_images(rng, 5)
  heldout = smooth_images(rng, 6)
  cands = np.concatenate([train[[0, 2]], rng.uniform(size=(3, H, H, 1))])
  res = images.evaluate(cands, train, heldout, ssim_threshold=0.8)
  report_figures.reconstruction_figure(
    tmp_path / "sub" / "rec.png", res, similarity.stretch(train), similarity.stretch(heldout), k=45
  )
  _png_shape(tmp_path / "sub" / "rec.png")
  margins = rng.uniform(size=5)
  report_figures.ssim_vs_margin(
    tmp_path / "svm.png", margins, res.ssim, (0.4, 0.8), res.recovered_strict_mask
  )
  report_figures.ssim_vs_margin(tmp_path / "svm2.png", margins, res.ssim)
  xs = np.linspace(-1, 1, 20)
  field = (xs, xs, np.add.outer(xs, xs))
  train2 = rng.normal(size=(6, 2))
  labels = np.array([1, -1] * 3)
  plots.points_2d_panels(
    tmp_path / "pts.png",
    [
      {"title": "data", "train": train2, "train_labels": labels, "field": field},
      {
        "title": "result",
        "points": rng.normal(size=(10, 2)),
        "labels": np.ones(10),
        "train": train2,
        "train_labels": labels,
      },
      {"title": "colours", "points": rng.normal(size=(2, 2)), "colors": ["r", "g"]},
    ],
  )
  plots.heatmap(
    tmp_path / "hm.png", np.array([[0.1, np.nan], [0.5, 0.9]]), ["a", "b"], [1, 2], "x", "y", "t"
  )
  plots.line_plot(tmp_path / "lp.png", [1, 2, 3], {"u": [1, 2, 3], "v": [3, 2, 1]}, "x", "y", "t")
  for name in ("svm.png", "svm2.png", "pts.png", "hm.png", "lp.png"):
    _png_shape(tmp_path / name)
  assert not plt.get_fignums()


# ---------------------------------------------------------------- pooled counts


def test_the_pooled_count_is_at_least_every_restarts_count(rng):
  """Restart A holds training image 0 exactly; restart B a noisy copy of it (close enough
  to vote) and image 1 exactly.  Voting over the pool averages A's and B's copies of
  image 0 and blurs it below a strict threshold that A's copy alone passes: the pooled
  voted evaluation misses an image a restart recovers.  The combined count does not."""
  x = smooth_images(rng, 2 + 6)
  train, held = x[:2], x[2:]
  noisy = np.clip(train[0] + 0.08 * rng.normal(size=train[0].shape), 0, 1)
  a = np.stack([train[0], held[0] * 0.5])
  b = np.stack([noisy, train[1]])
  kw = dict(ssim_threshold=0.97)
  one = [images.evaluate(c, train, held, **kw) for c in (a, b)]
  pooled = images.evaluate(np.concatenate([a, b]), train, held, **kw)
  assert one[0].recovered_strict_mask[0] and not pooled.recovered_strict_mask[0]
  both = images.combine([pooled, *one])
  assert both.recovered_strict >= max(r.recovered_strict for r in one)
  assert list(both.recovered_strict_mask) == [True, True]
  assert both.source[0] == 1  # image 0 from restart A's own evaluation
  assert both.n_ssim_gt_04 == 2 and both.ssim[0] == pytest.approx(1.0, abs=1e-5)
  # A held-out baseline scored the same way: in groups as well as pooled.
  grouped = images.heldout_baseline(0, train, held, 4, group=2, **kw)
  assert grouped.source is not None and grouped.n_candidates == 4


def test_images_read_beside_a_search_count_as_groups_of_their_own(rng):
  """Images the attacker read beside a search (the cone's before a hand-over, the facets the
  search's candidates led to) are scored as groups of their own: an exact copy among them
  counts even where every restart lost it, and the held-out baseline draws as many more."""
  from recon_jax.data import load_dataset

  ds = load_dataset("digits", n_per_class=2, seed=0)
  ds = ds._replace(x_test=ds.x_test[:40], y_test=ds.y_test[:40])
  noise = rng.normal(size=(1, 3, *ds.x_train.shape[1:])).astype(np.float32)
  args = (noise, np.ones((1, 3)), np.zeros(1), ds)
  alone = evaluation.evaluate_candidates(*args)
  assert alone["attack"]["recovered_strict"] == 0
  both = evaluation.evaluate_candidates(*args, also=[ds.x_train[:2], ds.x_train[3:], noise[0, :0]])
  assert both["attack"]["recovered_strict"] == 3
  assert list(np.flatnonzero(both["_result"].recovered_strict_mask)) == [0, 1, 3]
  assert both["baselines"]["heldout"]["n_candidates"] == 3 + 2 + 1
  assert alone["baselines"]["heldout"]["n_candidates"] == 3
  # the restarts' own view is the search's alone: the attacker's pick does not see them
  assert both["per_restart"][0]["recovered_strict"] == 0
  for bad in ([ds.x_train[:2, :3]], ds.x_train[:2]):
    with pytest.raises(ConfigError) as e:
      evaluation.evaluate_candidates(*args, also=bad)
    assert e.value.argument == "also"


def test_the_span_holds_the_images_it_was_made_of_and_not_the_others():
  """Planted: a span of training images 0 and 1 gives those two back exactly and leaves
  the others (their projections are blends of 0 and 1)."""
  from recon_jax.data import load_dataset

  ds = load_dataset("digits", n_per_class=3, seed=0)
  ds = ds._replace(x_test=ds.x_test[:40], y_test=ds.y_test[:40])
  flat = ds.x_train.reshape(len(ds.x_train), -1).astype(np.float64)
  basis = np.linalg.qr(flat[:2].T)[0]
  out = evaluation.span_ceiling(basis, ds)
  assert out["span_dim"] == 2 and out["recovered_strict"] == 2
  assert out["missing"] == [2, 3, 4, 5]
  full = evaluation.span_ceiling(np.linalg.qr(flat.T)[0], ds)
  assert full["recovered_strict"] == 6 and full["missing"] == []
  with pytest.raises(ConfigError) as e:
    evaluation.span_ceiling(basis[:10], ds)
  assert e.value.argument == "basis"
