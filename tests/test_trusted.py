"""Which reconstructions are real: the candidate-level truth and the attacker-score report."""

import functools
import json

from helpers import linear_apply
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import reconstruct as configs
from recon_jax.attacker import selection, stability
from recon_jax.core import activations
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.eval import similarity
from recon_jax.eval import trusted as ident
from recon_jax.job import pipeline, planning
from recon_jax.job.settings import JobConfig
from recon_jax.victims import models, targets, trained

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


# ---------------------------------------------------------------- candidate_truth


def _digits():
  """The tiny preset's data: 3 + 3 digits (8x8) and their held-out split, in pixel space."""
  ds = trained.load_data(planning.victim_config(JobConfig(**configs.get_config("tiny"))))
  return ds, ds.x_train + ds.mean, ds.x_test + ds.mean


def test_candidate_truth_planted():
  ds, train, held = _digits()
  rng = np.random.default_rng(0)
  cands = np.stack(
    [
      train[2],  # a copy: real, matches image 2
      0.5 * train[4] + 0.2,  # contrast and brightness changed: real
      held[7],  # a digit never trained on: not real
      rng.uniform(size=train.shape[1:]),  # noise: not real
      np.full(train.shape[1:], 0.5),  # constant: not real
    ]
  ).astype(np.float32)
  truth = ident.candidate_truth(cands, train, held, 0.8)
  np.testing.assert_array_equal(truth.real, [True, True, False, False, False])
  assert truth.train_idx[0] == 2 and truth.train_idx[1] == 4
  np.testing.assert_allclose(truth.ssim_train[:2], 1.0, atol=1e-4)
  assert truth.ssim_heldout[2] == pytest.approx(1.0, abs=1e-4)  # it found itself
  assert truth.ssim_train[2] < 0.99 and truth.ssim_train[3] < 0.8
  # Without held-out references only the threshold decides: a copy is still real.
  no_ref = ident.candidate_truth(cands, train, None, 0.8)
  np.testing.assert_array_equal(no_ref.real, truth.ssim_train >= 0.8)
  assert np.all(np.isinf(no_ref.ssim_heldout))
  # A training image also among the held-out images ties with itself: not strictly real.
  tied = ident.candidate_truth(cands[:1], train, np.concatenate([held, train[2:3]]), 0.8)
  assert not tied.real[0]
  empty = ident.candidate_truth(cands[:0], train, held, 0.8)
  assert empty.real.shape == (0,) and empty.real.dtype == bool


def _exhaustive_truth(cands, train, held, thr):
  """candidate_truth as it was: every candidate's SSIM with every training and held-out image."""
  c = similarity.stretch(cands)
  s_train = np.asarray(similarity.ssim_matrix(c, similarity.stretch(train)), np.float64)
  s_held = np.asarray(similarity.ssim_matrix(c, similarity.stretch(held)), np.float64)
  idx = s_train.argmax(axis=1)
  best = s_train[np.arange(len(c)), idx]
  return (best >= thr) & (best > s_held.max(axis=1)), idx, best, s_held.max(axis=1)


def test_candidate_truth_compares_with_every_held_out_image_only_where_it_decides(monkeypatch):
  ds, train, held = _digits()
  rng = np.random.default_rng(1)
  held = np.asarray(held[:300], np.float64)
  # training images that are noisy copies of held-out ones: a candidate near such a held-out
  # image passes the threshold and is rejected by the held-out reference
  twins = held[:12] + rng.normal(0, 0.08, held[:12].shape)
  train = np.concatenate([np.asarray(train, np.float64), twins])
  pick = rng.integers(0, len(train), 60)
  other = rng.integers(0, len(held), 60)
  mix = rng.uniform(0.0, 0.5, size=(60, 1, 1, 1))  # from a copy to half a held-out digit
  cands = np.concatenate(
    [
      (1 - mix) * train[pick] + mix * held[other] + rng.normal(0, 0.02, train[pick].shape),
      held[:12] + rng.normal(0, 0.02, held[:12].shape),
      rng.uniform(size=(20, *train.shape[1:])),  # noise
    ]
  )
  thr = 0.8
  real, idx, best, held_max = _exhaustive_truth(cands, train, held, thr)
  assert 5 <= real.sum() <= 55  # some pass the strict rule, some do not
  assert ((best >= thr) & ~real).sum() >= 3  # some the held-out reference rejects
  # The prefilter on, with one correlated reference: its first maximum is often not the
  # exhaustive one, so a candidate it let pass unchecked would pass wrongly.
  monkeypatch.setattr(similarity, "EXACT_PAIRS", 0)
  monkeypatch.setattr(similarity, "PREFILTER_K", 1)
  pairs = []
  full = similarity.ssim_matrix
  monkeypatch.setattr(
    similarity, "ssim_matrix", lambda a, b, *k: pairs.append(len(a) * len(b)) or full(a, b, *k)
  )
  fast = ident.candidate_truth(cands, train, held, thr)
  np.testing.assert_array_equal(fast.real, real)
  np.testing.assert_array_equal(fast.train_idx, idx)
  np.testing.assert_allclose(fast.ssim_train, best, rtol=0, atol=1e-12)
  np.testing.assert_allclose(fast.ssim_heldout[real], held_max[real], rtol=0, atol=1e-12)
  assert np.all(fast.ssim_heldout <= held_max + 1e-12)  # a lower bound elsewhere
  # Every candidate against every training image, and only the undecided ones (at most the
  # candidates at the threshold) against every held-out image.
  assert sum(pairs) <= len(cands) * len(train) + int((best >= thr).sum()) * len(held)


@pytest.mark.parametrize(
  "args, argument",
  [
    (dict(cands_pixel=np.zeros((2, 8, 8))), "cands_pixel"),
    (dict(cands_pixel=np.zeros((2, 7, 8, 1))), "cands_pixel"),
    (dict(ssim_threshold=1.5), "ssim_threshold"),
    (dict(x_heldout_pixel=np.zeros((3, 4, 4, 1))), "x_heldout_pixel"),
  ],
)
def test_candidate_truth_bad_input(args, argument):
  kw = dict(
    cands_pixel=np.zeros((2, 8, 8, 1)),
    x_train_pixel=np.zeros((3, 8, 8, 1)),
    x_heldout_pixel=None,
    ssim_threshold=0.8,
  )
  kw.update(args)
  with pytest.raises(ConfigError, match=f"^{argument}"):
    ident.candidate_truth(**kw)


# ---------------------------------------------------------------- identification_report


@pytest.fixture(scope="module")
def planted():
  """A victim at an exact KKT point of its training images, attacked by 3 restarts.

  theta = (1/m) sum_i lam_i y_i x_i over the 6 training digits, each twice
  (m = 12), so the attack's stationarity residual is 0 there.  Restarts 0 and
  1 start AT that solution (x and lambda: an init that plants lambda), restart
  2 from uniform noise with random multipliers; :func:`loop.run_attack`
  runs 3 steps (the planted restarts do not move: every gradient is 0).
  """
  ds, _, _ = _digits()
  n = len(ds.x_train)
  m = 2 * n
  rng = np.random.default_rng(0)
  x_gt = np.concatenate([ds.x_train, ds.x_train]).astype(np.float64)
  labels = np.concatenate([ds.y_train, ds.y_train])
  lam_gt = np.tile(rng.uniform(1.0, 1.5, n), 2)
  w = (x_gt.reshape(m, -1).T @ (lam_gt * labels))[:, None] / m
  target = targets.make_target({"params": {"w": w}}, labels, ds.mean)
  kkt_attack = pipeline.make_attack(configs.get_config("tiny"), linear_apply, "binary")
  noise = jnp.asarray(rng.uniform(size=x_gt.shape) - ds.mean)

  def init(key, hp, tgt, x0):
    state = kkt_attack.init(key, hp, tgt, x0)
    return state._replace(lam=jnp.where(hp["gt"] > 0, jnp.asarray(lam_gt), state.lam))

  attack = kkt_attack._replace(init=init)

  def x_init(key, hp):
    del key
    return jnp.where(hp["gt"] > 0, jnp.asarray(x_gt), noise)

  # The x_i-only Hessian is 2 (lam_i / m)^2 ~ 0.02: lr 10 (momentum 0.9) returns in ~30 steps.
  hp = {
    "lr_x": np.full(3, 10.0),
    "lr_lam": np.full(3, 1e-3),
    "alpha": np.full(3, 20.0),
    "lam_min": np.full(3, 0.0),
    "gt": np.array([1.0, 1.0, 0.0]),
  }
  run = loop.run_attack(
    attack,
    x_init,
    jax.random.split(jax.random.PRNGKey(0), 3),
    [(3, hp)],
    target,
    chunk_steps=3,
    log=False,
  )
  np.testing.assert_allclose(run.candidates[:2], np.stack([x_gt, x_gt]), atol=1e-12)
  kw = dict(
    attack=attack,
    run=run,
    hparams=hp,
    target=target,
    apply_fn=linear_apply,
    problem="binary",
    ds=ds,
  )
  options = ident.IdentifyOptions(stability_steps=30, stability_candidates=30, key=3)
  return kw, _report(kw, options, with_arrays=True)


def _report(kw, options=None, **extra):
  """The report of the planted run ``kw`` (its dict, with ``run`` replaced as a test needs)."""
  ran = ident.AttackerRun(*(kw[name] for name in ident.AttackerRun._fields))
  return ident.identification_report(ran, kw["ds"], options, **extra)


def test_report_planted_candidates_score_high(planted):
  kw, rep = planted
  arrays = rep["_arrays"]
  rep = {k: v for k, v in rep.items() if k != "_arrays"}
  json.dumps(rep)  # JSON-able (NaN allowed)
  assert set(rep) >= {"scores", "top", "trusted_score", "skipped", "truth", "settings"}
  assert set(rep["scores"]) == set(ident.SCORES) and rep["skipped"] == {}
  for name, res in rep["scores"].items():
    assert set(res) == {"auc", "precision@5", "precision@10", "n", "n_recovered", "base_rate"}
    assert np.isnan(res["auc"]) or 0.0 <= res["auc"] <= 1.0, name
  m = kw["run"].candidates.shape[1]
  # Restarts 0 and 1 are the training images; restart 2's are noise.
  assert rep["truth"]["n_candidates"] == 3 * m and rep["truth"]["n_real"] == 2 * m
  assert rep["truth"]["n_distinct_real"] == m // 2
  np.testing.assert_array_equal(arrays["real"], np.repeat([True, True, False], m))
  np.testing.assert_array_equal(arrays["train_idx"][:m], np.tile(np.arange(m // 2), 2))
  # Every candidate is found again by another restart (agreement), comes back after a kick
  # while a noise candidate drifts away (stability), and has the larger multiplier.
  for name in ("agreement", "stability", "lambda"):
    assert rep["scores"][name]["auc"] == 1.0 and rep["scores"][name]["precision@10"] == 1.0
  assert np.nanmin(arrays["stability"][: 2 * m]) > 0.5  # 1: back exactly; momentum lags
  # Stability ran on the 30 largest multipliers only (all 24 planted, 6 noise).
  picked = ~np.isnan(arrays["stability"])
  assert picked.sum() == 30 and rep["scores"]["stability"]["n"] == 30
  assert np.min(arrays["lambda"][picked]) >= np.max(arrays["lambda"][~picked])
  assert rep["settings"]["stability_candidates"] == 30
  assert rep["settings"]["leave_one_out_normalize"] == "mean"
  # The trusted score: agreement, ties broken by lambda.
  top = rep["top"]
  assert rep["trusted_score"] == "agreement" and [t["rank"] for t in top] == list(range(10))
  assert all(t["recovered_strict"] and t["restart"] in (0, 1) and t["score"] == 0.5 for t in top)
  lam = [t["lambda"] for t in top]
  assert lam == sorted(lam, reverse=True)
  # Each image is held 4 times (twice per planted restart, same lambda): 4 + 4 + 2.
  assert rep["top_distinct_recovered"] == len({t["train_idx"] for t in top}) == 3


def test_report_scores_are_the_attacker_functions(planted):
  """The pooled scores are recon_jax.attacker.selection's, restart by restart (with the documented keys)."""
  kw, rep = planted
  arrays, run, target = rep["_arrays"], kw["run"], kw["target"]
  inner, m = run.state.inner, run.candidates.shape[1]
  np.testing.assert_allclose(
    arrays["agreement"], np.asarray(selection.agreement_score(run.candidates)).reshape(-1)
  )
  np.testing.assert_allclose(arrays["lambda"], inner.lam.reshape(-1))
  np.testing.assert_allclose(
    arrays["margin"],
    selection.margin_score(
      linear_apply, "binary", target, inner.x.reshape(3 * m, 8, 8, 1), jnp.tile(target.labels, 3)
    ),
  )
  np.testing.assert_allclose(
    arrays["leave_one_out"][2 * m :],
    selection.leave_one_out_score(linear_apply, "binary", target, inner.x[2], inner.lam[2]),
    rtol=1e-10,
  )
  picked = np.flatnonzero(~np.isnan(arrays["stability"]))
  keys = jax.random.split(jax.random.split(jax.random.PRNGKey(3))[1], len(picked))
  hp = {k: jnp.asarray(v) for k, v in kw["hparams"].items()}
  # The report steps each kicked candidate alone, batched over pairs of several restarts;
  # each pair is the re-run of its whole restart.
  assert stability.alone_applies(kw["attack"], "x")
  assert len(np.unique(picked // m)) >= 2
  one = jax.jit(
    lambda r, i, k: stability.stability_score(
      kw["attack"]._replace(alone=None),
      jax.tree_util.tree_map(lambda a: a[r], inner),
      {n: v[r] for n, v in hp.items()},
      target,
      i,
      k,
      steps=30,
      noise_scale=0.05,
    )
  )
  whole = [one(j // m, j % m, keys[k]) for k, j in enumerate(picked)]
  np.testing.assert_allclose(arrays["stability"][picked], whole, rtol=1e-9)


def test_leave_one_out_uses_each_restarts_surrogate():
  """On an MLP the per-restart leave-one-out takes the surrogate ReLU at that restart's alpha."""
  module = models.build_model(
    "mlp", out_dim=1, widths=(6,), bias="first", init="normal", init_std=0.5, first_layer_std=0.5
  )
  params = models.init_params(module, jax.random.PRNGKey(0), (5,), jnp.float64)
  apply_fn = models.make_apply_fn(module)
  rng = np.random.default_rng(1)
  x, lam = jnp.asarray(rng.normal(size=(2, 4, 5))), jnp.asarray(rng.uniform(0.5, 2, (2, 4)))
  target = targets.make_target(params, np.array([1.0, -1.0, 1.0, -1.0]), box=None)
  alpha = jnp.asarray([3.0, 30.0])
  got = ident._leave_one_out_restarts(apply_fn, "binary", target, x, lam, alpha, "sum", True)
  for r in range(2):
    act = functools.partial(activations.surrogate_relu, alpha=float(alpha[r]))
    np.testing.assert_allclose(
      got[r],
      selection.leave_one_out_score(apply_fn, "binary", target, x[r], lam[r], act, normalize="sum"),
      rtol=1e-10,
    )
  assert not np.allclose(got[0], got[1])


def test_report_when_every_restart_diverged(planted):
  kw, _ = planted
  r = kw["run"].candidates.shape[0]
  dead = kw["run"]._replace(diverged=np.ones(r, bool), final_loss=np.full(r, np.nan))
  rep = _report(dict(kw, run=dead))
  assert rep["scores"] == {} and rep["top"] == [] and rep["trusted_score"] is None
  assert set(rep["skipped"]) == set(ident.SCORES) and rep["truth"]["n_candidates"] == 0
  told = _report(dict(kw, run=dead), ident.IdentifyOptions(trust_order=("lambda", "margin")))
  assert told["settings"]["trust_order"] == ["lambda", "margin"]
  for bad, argument in (
    (dict(stability_select="best"), "stability_select"),
    (dict(stability_candidates=-1), "stability_candidates"),
    (dict(normalize="max"), "normalize"),
    (dict(trust_order=("stability",)), "trust_order"),
    (dict(trust_order=()), "trust_order"),
  ):
    with pytest.raises(ConfigError, match=f"^{argument}"):
      ident.IdentifyOptions(**bad)
  with pytest.raises(ConfigError, match="^candidates"):
    _report(kw, candidates=np.zeros((2, 3)))


def test_the_truth_is_told_on_the_candidates_the_caller_scores(planted):
  """The job scores its candidates clipped to the pixel box, not the state's: the report
  tells real or not on those (``candidates``), its scores still the state's."""
  kw, rep = planted
  scored = np.array(kw["run"].candidates)
  scored[1] = np.random.default_rng(1).uniform(size=scored[1].shape) - kw["ds"].mean
  told = _report(
    kw, ident.IdentifyOptions(stability_candidates=0), candidates=scored, with_arrays=True
  )["_arrays"]
  m = scored.shape[1]
  np.testing.assert_array_equal(told["real"], np.repeat([True, False, False], m))
  np.testing.assert_allclose(told["lambda"], rep["_arrays"]["lambda"])
