"""Identifiability: the truth's stationarity residual against the attack's, and the verdict.

Planted linear problems (``Phi(x) = x w``, ``grad_w Phi = x``) where the answer is
known in closed form: a reference that the training set reproduces exactly, and one
that only another input reproduces.
"""

import json

from helpers import linear_apply
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.eval import diagnostics
from recon_jax.eval import identifiability as ident
from recon_jax.eval.metrics_json import Metrics
from recon_jax.studies import efficacy

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture(autouse=True)
def _x64():
  jax.config.update("jax_enable_x64", True)
  yield


def _truth(n=4, d=12, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, d))
  y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
  return x, y, rng


def test_truth_fits_best_when_theta_is_its_kkt_sum():
  x, y, rng = _truth()
  lam = rng.uniform(0.5, 2.0, size=len(x))
  params = {"params": {"w": jnp.asarray((x.T @ (lam * y))[:, None])}}
  # Three restarts of 2n random candidates each, with random weights.
  cands = rng.normal(size=(3, 8, x.shape[1]))
  weights = rng.uniform(size=(3, 8))
  labels = np.tile([1.0, -1.0], 4)
  out = ident.identifiability(linear_apply, "binary", params, x, y, cands, weights, labels)
  assert out["truth_residual"] < 1e-20
  assert out["attack_best_residual"] > 1e-3
  assert out["ratio"] >= 1.0
  assert out["verdict"] == ident.TRUTH_FITS_BEST
  assert out["attack_median_residual"] >= out["attack_best_residual"]
  assert len(out["per_restart_residual"]) == 3


def test_other_images_fit_better_than_the_truth():
  x, y, rng = _truth(n=2, d=12)
  w = rng.normal(size=(12, 1))  # not in the span of the two training points
  params = {"params": {"w": jnp.asarray(w)}}
  # A restart whose highest-weight candidates contain the reference itself (label +1):
  # it reproduces theta* exactly, the truth cannot.
  cands = rng.normal(size=(2, 4, 12))
  cands[1, 2] = w[:, 0]
  weights = np.array([[1.0, 1.0, 0.1, 0.1], [0.0, 0.0, 5.0, 1.0]])
  labels = np.array([1.0, -1.0, 1.0, -1.0])
  out = ident.identifiability(linear_apply, "binary", params, x, y, cands, weights, labels)
  assert out["truth_residual"] > 0.05
  assert out["attack_best_residual"] < 1e-20
  assert out["best_restart"] == 1
  assert out["ratio"] < 1.0
  assert out["verdict"] == ident.PREFERS_OTHER


def test_the_comparison_uses_the_n_highest_weight_candidates():
  x, y, rng = _truth(n=2, d=12)
  w = rng.normal(size=(12, 1))
  params = {"params": {"w": jnp.asarray(w)}}
  cands = rng.normal(size=(1, 4, 12))
  cands[0, 3] = w[:, 0]  # the exact fit, but with the lowest weight: not among the top n = 2
  weights = np.array([[3.0, 2.0, 1.0, 0.5]])
  labels = np.array([1.0, -1.0, 1.0, 1.0])
  out = ident.identifiability(linear_apply, "binary", params, x, y, cands, weights, labels)
  assert out["attack_best_residual"] > 0.05
  assert out["attack_best_residual_all_m"] < 1e-20  # all m candidates do contain it
  np.testing.assert_array_equal(ident.top_n(weights[0], 2), [0, 1])


def test_diverged_restarts_are_left_out_and_none_left_says_so():
  x, y, rng = _truth()
  params = {"params": {"w": jnp.asarray(rng.normal(size=(12, 1)))}}
  cands, weights, labels = rng.normal(size=(2, 4, 12)), np.ones((2, 4)), np.tile([1.0, -1.0], 2)
  out = ident.identifiability(
    linear_apply, "binary", params, x, y, cands, weights, labels, diverged=[True, False]
  )
  assert out["per_restart_residual"][0] is None and out["best_restart"] == 1
  none = ident.identifiability(
    linear_apply, "binary", params, x, y, cands, weights, labels, diverged=[True, True]
  )
  assert none["ratio"] is None and none["verdict"] == ident.NOTHING_TO_SCORE
  assert "truth residual" in ident.line(none)


def test_reference_replaces_theta_star():
  # A known initialisation: theta* - theta_0 is the KKT sum, theta* itself is not.
  x, y, rng = _truth()
  lam = rng.uniform(0.5, 2.0, size=len(x))
  delta = (x.T @ (lam * y))[:, None]
  theta0 = rng.normal(size=delta.shape)
  params = {"params": {"w": jnp.asarray(delta + theta0)}}
  cands, weights, labels = rng.normal(size=(1, 4, 12)), np.ones((1, 4)), np.tile([1.0, -1.0], 2)
  plain = ident.identifiability(linear_apply, "binary", params, x, y, cands, weights, labels)
  known = ident.identifiability(
    linear_apply,
    "binary",
    params,
    x,
    y,
    cands,
    weights,
    labels,
    reference={"params": {"w": jnp.asarray(delta)}},
  )
  assert plain["truth_residual"] > 1e-3 and known["truth_residual"] < 1e-20


def test_stationarity_fit_general_matches_lstsq():
  rng = np.random.default_rng(3)
  x = rng.normal(size=(3, 6))
  w = rng.normal(size=(6, 2))
  params = {"params": {"w": jnp.asarray(w)}}
  cols = diagnostics.gradient_matrix(linear_apply, "general", params)
  fit = diagnostics.stationarity_fit(cols, "general", params, x, np.zeros(3))
  # grad of output c w.r.t. w is x in column c: the best fit is the projection of each
  # column of w onto the span of the rows of x.
  proj = x.T @ np.linalg.lstsq(x.T, w, rcond=None)[0]
  np.testing.assert_allclose(fit["residual_rel"], np.sum((w - proj) ** 2) / np.sum(w**2), rtol=1e-9)
  assert fit["lam"].shape == (3, 2)


def test_a_multioutput_victims_identifiability_reads_back_typed():
  """A multiclass or regression victim's multipliers are per image and output ([n][k]); the
  typed report reads them as written (they once read as a gap, with a warning per draw)."""
  rng = np.random.default_rng(4)
  x = rng.normal(size=(3, 6))
  params = {"params": {"w": jnp.asarray(rng.normal(size=(6, 2)))}}
  cands, weights = rng.normal(size=(2, 3, 6)), np.ones((2, 3))
  out = ident.identifiability(
    linear_apply, "general", params, x, np.zeros(3), cands, weights, np.zeros(3)
  )
  assert np.shape(out["truth_lam"]) == (3, 2)
  problems = []
  m = Metrics.from_metrics({"identifiability": json.loads(json.dumps(out))}, problems=problems)
  assert problems == [] and m.identifiability.truth_lam == out["truth_lam"]
  flat = {"identifiability": {"truth_lam": [0.5, 1.0, 2.0]}}  # a binary victim's: per image
  assert Metrics.from_metrics(flat, problems=problems).identifiability.truth_lam == [0.5, 1.0, 2.0]
  Metrics.from_metrics({"identifiability": {"truth_lam": [[0.5], "x"]}}, problems=problems)
  assert len(problems) == 1 and problems[0].startswith("identifiability.truth_lam holds")


def test_efficacy_aggregates_the_ratio_per_draw():
  base = {
    "recovered_strict": 1,
    "n_ssim_gt_0.4": 3,
    "baseline_mean_image_recovered_strict": 0,
    "baseline_mean_image_n_ssim_gt_0.4": 1,
    "oracle_residual_rel": 0.1,
    "timing": {"total_s": 1.0},
  }
  draws = [efficacy.draw_numbers(dict(base, identifiability={"ratio": r})) for r in (0.5, 2.0, 1e4)]
  agg = efficacy.aggregate(draws)
  assert agg["identifiability_ratio"]["per_draw"] == [0.5, 2.0, 1e4]
  np.testing.assert_allclose(agg["log10_identifiability_ratio"]["mean"], np.log10(1e4) / 3)
  assert agg["identifiability_ratio"]["n"] == 3
  missing = efficacy.draw_numbers(base)  # a report without the section (an older run)
  assert missing["identifiability_ratio"] is None


def _one_hidden(kernel, w2):
  from recon_jax.victims import models

  module = models.build_model("mlp", widths=(kernel.shape[1],), bias="first", activation="softplus")
  params = {
    "params": {
      "layer_0": {"kernel": jnp.asarray(kernel), "bias": jnp.full(kernel.shape[1], 0.1)},
      "layer_1": {"kernel": jnp.asarray(w2)},
    }
  }
  return models.make_apply_fn(module), params


def test_a_low_rank_first_layer_leaves_a_flat_family_of_exact_solutions():
  """K of rank 1 and 4 samples through 3 units: moving the samples along directions K does
  not see, combined across samples in the left null space of M, changes nothing."""
  rng = np.random.default_rng(4)
  d, h, n = 6, 3, 4
  kernel = np.outer(rng.normal(size=d), rng.normal(size=h))
  apply_fn, params = _one_hidden(kernel, rng.normal(size=(h, 1)))
  x = rng.uniform(0.2, 0.8, size=(n, d))
  y = np.array([1.0, -1.0, 1.0, -1.0])
  cands, weights = rng.uniform(0.2, 0.8, size=(2, 2 * n, d)), np.ones((2, 2 * n))
  out = ident.identifiability(
    apply_fn,
    "binary",
    params,
    x,
    y,
    cands,
    weights,
    np.tile(y, 2),
    box=(np.zeros(d), np.ones(d)),
  )
  fam = out["family"]
  assert fam["first_layer_rank"] == 1
  active = int(np.sum(np.asarray(out["truth_lam"]) > 0))
  assert fam["multiplier_rank"] <= min(active, h)
  assert fam["dimension"] == (n - fam["multiplier_rank"]) * (d - 1) > 0
  # The witness: far from the training set, inside the box, with the truth's residual.
  assert fam["witness_distance"] > 0.01
  assert fam["witness_residual"] <= out["truth_residual"] * (1 + 1e-6) + 1e-15
  assert fam["confirmed"]
  assert "the first layer has rank 1 on 6 inputs" in ident.line(out)
  assert out["verdict"] in (ident.NOT_UNIQUE, ident.PREFERS_OTHER)
  if out["ratio"] >= 1:
    assert out["verdict"] == ident.NOT_UNIQUE  # never "the training set fits best"


def test_a_full_rank_first_layer_and_independent_units_leave_no_family():
  rng = np.random.default_rng(5)
  d, h, n = 4, 8, 3
  apply_fn, params = _one_hidden(rng.normal(size=(d, h)), rng.normal(size=(h, 1)))
  x = rng.normal(size=(n, d))
  y = np.array([1.0, -1.0, 1.0])
  cols = diagnostics.gradient_matrix(apply_fn, "binary", params)
  lam = np.ones(n)
  fam = ident.flat_family("binary", params, params, x, y, lam, cols, 0.1)
  assert fam["first_layer_rank"] == d and fam["dimension"] == 0 and not fam["confirmed"]
  assert ident.why(fam) == ""
  assert ident.verdict(2.0, fam) == ident.TRUTH_FITS_BEST
  assert ident.verdict(2.0, {"confirmed": True}) == ident.NOT_UNIQUE
  assert ident.verdict(0.5, {"confirmed": True}) == ident.PREFERS_OTHER


def test_leave_one_out_gain_is_each_orthogonal_samples_own_share():
  # Orthonormal inputs: leaving sample i out loses exactly lambda_i^2 ||x_i||^2 of the
  # planted sum, whatever the others do; a sample with lambda = 0 costs nothing.
  x = np.linalg.qr(np.random.default_rng(5).normal(size=(8, 4)))[0].T  # [4, 8], orthonormal
  y = np.array([1.0, -1.0, 1.0, -1.0])
  lam = np.array([2.0, 1.0, 0.5, 0.0])
  theta = x.T @ (lam * y)
  params = {"params": {"w": jnp.asarray(theta[:, None])}}
  cols = diagnostics.gradient_matrix(linear_apply, "binary", params)
  fit = diagnostics.stationarity_fit(cols, "binary", params, x, y, leave_one_out=True)
  np.testing.assert_allclose(fit["leave_one_out_gain"], lam**2 / np.sum(lam**2), atol=1e-12)
  out = ident.identifiability(linear_apply, "binary", params, x, y, x[None], lam[None], y)
  np.testing.assert_allclose(out["truth_leave_one_out"], lam**2 / np.sum(lam**2), atol=1e-12)
  miss = ident.missed(out, [True, True, False, False])
  assert miss["images"] == [2, 3] and miss["weakness_rank"] == [2, 1]
  with pytest.raises(ValueError, match="recovered must have one entry per training image"):
    ident.missed(out, [True, False])


def test_leave_one_out_gain_drops_all_outputs_of_a_sample_in_general():
  x = np.linalg.qr(np.random.default_rng(6).normal(size=(6, 3)))[0].T  # [3, 6], orthonormal
  a = np.array([[1.0, -2.0], [0.5, 0.0], [0.0, 0.0]])  # each sample's two output weights
  w = x.T @ a
  params = {"params": {"w": jnp.asarray(w)}}
  cols = diagnostics.gradient_matrix(linear_apply, "general", params)
  fit = diagnostics.stationarity_fit(cols, "general", params, x, np.zeros(3), leave_one_out=True)
  np.testing.assert_allclose(
    fit["leave_one_out_gain"], np.sum(a**2, axis=1) / np.sum(a**2), atol=1e-12
  )


def test_leave_one_out_gain_of_a_lone_sample_is_all_it_explains():
  x, y = np.array([[1.0, 0.0, 0.0]]), np.array([1.0])
  params = {"params": {"w": jnp.asarray([[2.0], [0.0], [1.0]])}}
  cols = diagnostics.gradient_matrix(linear_apply, "binary", params)
  fit = diagnostics.stationarity_fit(cols, "binary", params, x, y, leave_one_out=True)
  np.testing.assert_allclose(fit["leave_one_out_gain"], [4.0 / 5.0], atol=1e-12)
