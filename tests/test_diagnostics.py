"""Tests for recon_jax.eval.diagnostics: the KKT oracle residual, the kink fraction, the
float32 floor."""

from helpers import linear_apply, linear_problem
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.eval import diagnostics

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def test_kink_fraction_counts_units_whose_kink_is_on_a_training_point():
  x = np.array([[1.0, 0.0], [0.0, 1.0]])
  # unit 0: w.x + b = 0 at x_0 (kink on the data); unit 1: never zero on the data.
  kernel = np.array([[1.0, 1.0], [0.0, 1.0]])
  bias = np.array([-1.0, 5.0])
  params = {"params": {"layer_0": {"kernel": kernel, "bias": bias}}}
  assert diagnostics.kink_fraction(params, x) == 0.5


def test_oracle_recovers_planted_binary_multipliers():
  x, y, lam = linear_problem(m=4, d=8)
  params = {"params": {"w": jnp.asarray((x.T @ (lam * y))[:, None])}}  # paper eq. (6), no 1/m
  res = diagnostics.oracle_residual(linear_apply, "binary", params, x, y)
  assert res["residual_rel"] < 1e-20
  np.testing.assert_allclose(res["lam"], lam, rtol=1e-9)
  assert res["n_active"] == 4


def test_oracle_residual_positive_for_random_params():
  x, y, _ = linear_problem(m=3, d=8)
  w = np.random.default_rng(8).normal(size=(8, 1))
  res = diagnostics.oracle_residual(linear_apply, "binary", {"params": {"w": jnp.asarray(w)}}, x, y)
  # Non-negative least squares by hand: the residual can be no smaller than the
  # unconstrained fit's.
  v = (x * y[:, None]).T
  sol, *_ = np.linalg.lstsq(v, w[:, 0], rcond=None)
  floor = np.sum((w[:, 0] - v @ sol) ** 2) / np.sum(w**2)
  assert res["residual_rel"] >= floor - 1e-12
  assert res["residual_rel"] > 0.05
  assert np.all(res["lam"] >= 0)


def test_oracle_general_recovers_multipliers():
  m, d, c = 3, 8, 2
  rng = np.random.default_rng(9)
  x = rng.normal(size=(m, d))
  lam = rng.normal(size=(m, c))
  params = {"params": {"w": jnp.asarray(x.T @ lam)}}
  res = diagnostics.oracle_residual(linear_apply, "general", params, x, np.zeros(m))
  assert res["residual_rel"] < 1e-20
  assert res["lam"].shape == (m, c)  # documented: [n, C]
  np.testing.assert_allclose(res["lam"], lam, rtol=1e-9)


def test_float32_floor_warning():
  stalled = [{"loss": np.array([1e-3, 2.0]), "stat_rel": np.array([1e-7, 1.0])}] * 4
  assert "float32" in diagnostics.float32_floor_warning(stalled, np.float32)
  assert diagnostics.float32_floor_warning(stalled, np.float64) is None
  moving = [{"loss": np.array([1e-3 * 0.9**i])} for i in range(4)]
  assert diagnostics.float32_floor_warning(moving, np.float32) is None
  assert diagnostics.float32_floor_warning(stalled[:1], np.float32) is None
  # Stuck far from stationarity (lambda collapsed to 0): not a precision problem.
  collapsed = [{"loss": np.array([0.01]), "stat_rel": np.array([1.0])}] * 4
  assert diagnostics.float32_floor_warning(collapsed, np.float32) is None
  nan = [{"loss": np.array([np.nan])}] * 4
  assert diagnostics.float32_floor_warning(nan, np.float32) is None


def test_host_linear_algebra_runs_on_one_blas_thread():
  """Beside XLA's threads a BLAS pool of several threads spun against them (a 0.15 s fit took
  13-25 s): the wrapped functions see one thread, and the caller's setting comes back."""
  from threadpoolctl import threadpool_info

  from recon_jax.eval.diagnostics import one_blas_thread

  blas = lambda: [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
  before = blas()
  inside = one_blas_thread(blas)()
  assert inside and all(n == 1 for n in inside)
  assert blas() == before
