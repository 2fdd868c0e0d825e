"""The scoring at real sizes counts what the exhaustive scoring counts.

SSIM is computed by the library's own kernel (dm-pix's formula, each image's local moments
shared by all its pairs), and beyond ``similarity.EXACT_PAIRS`` pairs the strict rule's
held-out reference is searched among each reconstruction's most correlated held-out images
first, every held-out image only where the rule still needs it.  Both must leave every
count, score and decision as the exhaustive dm-pix computation has them.
"""

import dm_pix
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import data
from recon_jax.eval import evaluation, images, membership, similarity

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture
def rng():
  return np.random.default_rng(0)


@pytest.mark.parametrize("filter_size", [3, 7, 11])
@pytest.mark.parametrize("channels", [1, 3])
def test_the_ssim_kernel_is_dm_pix_ssim(rng, filter_size, channels):
  a = jnp.asarray(rng.random((4, 24, 26, channels)))
  b = jnp.asarray(rng.random((6, 24, 26, channels)))
  b = b.at[0].set(a[0]).at[1].set(0.5)  # an identical image and a constant one
  # every pair, in dm-pix's own batched call (one program, not 24 calls op by op)
  every = lambda x: jnp.broadcast_to(x, (4, 6, *a.shape[1:])).reshape(24, *a.shape[1:])
  pair = lambda x, y: dm_pix.ssim(x, y, max_val=1.0, filter_size=filter_size)
  ref = np.asarray(jax.jit(pair)(every(a[:, None]), every(b))).reshape(4, 6)
  mat = np.asarray(similarity.ssim_matrix(a, b, filter_size))
  np.testing.assert_allclose(mat, ref, rtol=0, atol=1e-12)  # float64 (tests run with x64)
  pairs = np.asarray(similarity.ssim(a, b[:4], filter_size=filter_size))
  np.testing.assert_allclose(pairs, np.diag(ref[:, :4]), rtol=0, atol=1e-12)
  a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
  np.testing.assert_allclose(
    np.asarray(similarity.ssim_matrix(a32, b32, filter_size)), ref, rtol=0, atol=2e-6
  )


@pytest.fixture(scope="module")
def planted():
  """24 training digits of mnist5k and 100 held-out ones (float64), and candidates: noisy
  copies of a third of the training digits (some pass the strict rule, some do not), a few
  held-out digits (close to a training digit without being one) and noise."""
  ds = data.load_dataset("mnist5k", n_per_class=12, n_test_per_class=50, seed=3, subtract_mean=True)
  rng = np.random.default_rng(0)
  x = np.asarray(ds.x_train, np.float64)
  spread = float(np.std(x))
  picked = np.repeat(np.arange(0, 24, 3), 2)
  noise = rng.uniform(0.02, 0.6, size=len(picked))[:, None, None, None] * spread
  copies = x[picked] + noise * rng.normal(size=(len(picked), *x.shape[1:]))
  held = np.asarray(ds.x_test[:8], np.float64)
  rest = rng.normal(0.0, spread, size=(48 - len(picked) - 8, *x.shape[1:]))
  cands = np.concatenate([copies, held, rest])[rng.permutation(48)].reshape(3, 16, *x.shape[1:])
  return ds._replace(x_test=ds.x_test[8:]), cands


def _exhaustive(monkeypatch):
  monkeypatch.setattr(similarity, "EXACT_PAIRS", 10**12)


def _prefiltered(monkeypatch):
  monkeypatch.setattr(similarity, "EXACT_PAIRS", 0)


def _evaluate(planted, mode, monkeypatch):
  ds, cands = planted
  mode(monkeypatch)
  px = lambda a: np.asarray(a, np.float64) + np.asarray(ds.mean, np.float64)  # float64
  kw = dict(ssim_threshold=0.7)
  x_train, x_held = px(ds.x_train), px(ds.x_test)
  out = {
    "pooled": images.evaluate(px(cands.reshape(-1, *cands.shape[2:])), x_train, x_held, **kw),
    "restart": images.evaluate(px(cands[1]), x_train, x_held, **kw),
    "mean": images.mean_image_baseline(x_train, x_held, px(np.zeros(x_train.shape[1:])), **kw),
    "heldout": images.heldout_baseline(0, x_train, x_held, 48, group=16, **kw),
  }
  ev = evaluation.evaluate_candidates(
    cands, np.arange(48.0).reshape(3, 16), np.array([0.3, 0.1, 0.2]), ds, ssim_threshold=0.7
  )
  ev.pop("_result")
  return out, ev


def test_the_prefiltered_strict_rule_counts_what_the_exhaustive_one_counts(planted, monkeypatch):
  exact, ev_exact = _evaluate(planted, _exhaustive, monkeypatch)
  fast, ev_fast = _evaluate(planted, _prefiltered, monkeypatch)
  assert exact["pooled"].recovered_strict >= 2  # planted copies do pass
  assert exact["pooled"].recovered_strict < int((exact["pooled"].ssim >= 0.7).sum()) or (
    exact["heldout"].recovered_strict < int((exact["heldout"].ssim >= 0.7).sum())
  )  # and the held-out reference does reject some reconstruction above the threshold
  for name in exact:
    e, f = exact[name], fast[name]
    assert e.summary() == f.summary(), name
    np.testing.assert_array_equal(e.recovered_strict_mask, f.recovered_strict_mask)
    np.testing.assert_array_equal(e.ssim, f.ssim)
    np.testing.assert_array_equal(e.best_idx, f.best_idx)
    np.testing.assert_array_equal(e.n_votes, f.n_votes)
    # where the rule needed the held-out reference whole, its maximum is the exhaustive one;
    # elsewhere the correlated held-out images give a lower bound that already decided
    need = e.ssim >= 0.7
    passed = f.recovered_strict_mask
    np.testing.assert_allclose(f.ssim_heldout_max[passed], e.ssim_heldout_max[passed], atol=1e-12)
    np.testing.assert_array_equal(f.nearest_heldout_idx[passed], e.nearest_heldout_idx[passed])
    assert np.all(f.ssim_heldout_max <= e.ssim_heldout_max + 1e-12)
    assert np.all(f.ssim_heldout_max[need & ~passed] >= f.ssim[need & ~passed])
  for ev in (ev_exact, ev_fast):  # the bounds that decided, as checked above
    for key in ("ssim_heldout_max", "nearest_heldout_idx"):
      ev["per_sample"].pop(key)
  assert ev_exact == ev_fast  # every other count and score evaluate_candidates reports


def test_best_ssim_is_the_exhaustive_maximum_on_the_rows_it_is_asked_for(rng, monkeypatch):
  a = jnp.asarray(rng.random((10, 12, 12, 1)))
  b = jnp.asarray(rng.random((40, 12, 12, 1)))
  full = np.asarray(similarity.ssim_matrix(a, b, 3))
  rows = np.arange(10) % 3 == 0
  best, idx = similarity.best_ssim(a, b, 3, need=lambda top: rows, exact_pairs=0)
  np.testing.assert_allclose(best[rows], full.max(axis=1)[rows], atol=1e-12)
  np.testing.assert_array_equal(idx[rows], full.argmax(axis=1)[rows])
  np.testing.assert_allclose(best, full[np.arange(10), idx], atol=1e-12)  # a real pair's SSIM
  exact, exact_idx = similarity.best_ssim(a, b, 3)  # 400 pairs: every one
  np.testing.assert_array_equal(exact, full.max(axis=1))
  np.testing.assert_array_equal(exact_idx, full.argmax(axis=1))


def test_membership_scores_do_not_depend_on_the_prefilter(planted, monkeypatch):
  ds, cands = planted
  given = evaluation.pixel_space(np.concatenate([ds.x_train, ds.x_test[:40]]), ds)
  sets = [evaluation.pixel_space(c, ds) for c in cands]
  _exhaustive(monkeypatch)
  exact = membership.image_scores(sets, given)
  _prefiltered(monkeypatch)
  fast = membership.image_scores(sets, given)
  for key in exact:
    np.testing.assert_array_equal(exact[key], fast[key])
