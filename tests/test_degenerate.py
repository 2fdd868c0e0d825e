"""Empty and degenerate inputs of the host's linear algebra, and an attack that finds nothing.

An attack that read no candidate (the cone without a facet: digits 30 + 30, n = 60 of
d = 64) took the run down: the identifiability fit called scipy's NNLS on a matrix of no
columns, which aborts the process ("double free", exit 134).  Every fit, SVD and linear
program now goes through :mod:`recon_jax.core.numerics`, tested here at each edge (in this
process: an abort would end the test session, not fail a test), and every registered
attack's zero-candidate run is scored and concluded like any other.
"""

import ast
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
from test_metrics_json import assert_round_trip

from experiments.configs import reconstruct as configs
from recon_jax import attacks
from recon_jax.attacks import search
from recon_jax.core import numerics
from recon_jax.data import load_dataset
from recon_jax.eval import diagnostics, evaluation, identifiability, verdict
from recon_jax.eval.metrics_json import Metrics
from recon_jax.job import planning
from recon_jax.job import run as job_run
from recon_jax.job.settings import nested
from recon_jax.victims import models, sources

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

SHAPES = [(5, 0), (0, 0), (0, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_empty_fit_has_its_exact_answer(shape):
  a, b = np.zeros(shape), np.arange(shape[0], dtype=float) + 1.0
  x, rnorm = numerics.nnls(a, b)
  assert x.shape == (shape[1],) and np.all(x == 0)
  assert rnorm == pytest.approx(np.linalg.norm(b))  # nothing is explained
  y = numerics.lstsq(a, b)
  assert y.shape == (shape[1],) and np.all(y == 0)
  u, s, vt = numerics.svd(a)
  assert u.shape == (shape[0],) * 2 and vt.shape == (shape[1],) * 2
  assert numerics.rank(s, 1e-8) == 0


def test_a_non_finite_fit_is_nan_not_an_exception():
  a = np.array([[1.0, np.nan], [0.0, 1.0]])
  x, rnorm = numerics.nnls(a, np.ones(2))
  assert x.shape == (2,) and np.all(np.isnan(x)) and np.isnan(rnorm)
  assert np.all(np.isnan(numerics.lstsq(a, np.ones(2))))
  u, s, vt = numerics.svd(a)
  assert s.size == 0 and u.shape == (2, 2) and vt.shape == (2, 2)
  assert numerics.rank(s, 1e-8) == 0


def test_a_degenerate_fit_agrees_with_the_solvers():
  a = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # rank 1
  b = np.array([2.0, 2.0, 1.0])
  x, rnorm = numerics.nnls(a, b)
  assert np.all(x >= 0) and a[0] @ x == pytest.approx(2.0) and rnorm == pytest.approx(1.0)
  assert numerics.lstsq(a, b) == pytest.approx([1.0, 1.0])  # the minimum-norm solution
  assert numerics.rank(numerics.svd(a)[1], 1e-8) == 1
  assert numerics.rank(numerics.svd(np.zeros((3, 2)))[1], 1e-8) == 0


def test_a_linear_program_of_no_variables_or_no_rows_is_solved():
  res = numerics.linprog(np.zeros(0), A_ub=np.zeros((2, 0)), b_ub=np.ones(2))
  assert res.success and res.x.shape == (0,)
  res = numerics.linprog(np.zeros(0), A_ub=np.zeros((1, 0)), b_ub=-np.ones(1))
  assert not res.success  # 0 <= -1 has no solution
  res = numerics.linprog(np.zeros(0), A_eq=scipy.sparse.csr_matrix((0, 0)), b_eq=np.zeros(0))
  assert res.success
  # no equality rows (as the flat family's program has when the first layer has full rank)
  res = numerics.linprog(
    -np.ones(2), A_ub=np.eye(2), b_ub=np.ones(2), A_eq=np.zeros((0, 2)), b_eq=np.zeros(0)
  )
  assert res.success and res.x == pytest.approx([1.0, 1.0])
  res = numerics.linprog(np.array([1.0, np.inf]), A_ub=np.eye(2), b_ub=np.ones(2))
  assert not res.success and np.all(np.isnan(res.x))


@pytest.fixture(scope="module")
def mlp():
  module = models.build_model("mlp", widths=(6,), init="normal", init_std=0.5)
  params = models.init_params(module, jax.random.PRNGKey(0), (4,), jnp.float64)
  apply_fn = models.make_apply_fn(module)
  rng = np.random.default_rng(0)
  x = rng.uniform(size=(3, 4))
  y = np.array([1.0, -1.0, 1.0])
  return apply_fn, params, x, y


def test_no_candidate_explains_nothing_and_a_nan_one_is_not_scored(mlp):
  apply_fn, params, x, y = mlp
  cols = diagnostics.gradient_matrix(apply_fn, "binary", params)
  fit = diagnostics.stationarity_fit(cols, "binary", params, x[:0], y[:0], leave_one_out=True)
  assert fit["residual_rel"] == 1.0 and fit["lam"].shape == (0,) and fit["n_active"] == 0
  assert fit["leave_one_out_gain"].shape == (0,)
  bad = np.where(np.arange(4) == 1, np.nan, x[:1])
  assert np.isnan(diagnostics.stationarity_fit(cols, "binary", params, bad, y[:1])["residual_rel"])
  # Through the identifiability check: one restart with no candidate, one with a NaN one.
  cands = np.stack([x[:1], bad])[:, :, :]
  out = identifiability.identifiability(
    apply_fn, "binary", params, x, y, cands[:, :0], np.ones((2, 0)), np.zeros(0)
  )
  assert out["per_restart_residual"] == [1.0, 1.0]
  assert out["ratio"] == pytest.approx(1.0 / out["truth_residual"])
  out = identifiability.identifiability(
    apply_fn, "binary", params, x, y, cands, np.ones((2, 1)), np.ones(1)
  )
  assert out["per_restart_residual"][1] is None and out["best_restart"] == 0


def test_a_run_without_candidates_is_evaluated_as_recovering_nothing():
  ds = load_dataset("digits", n_per_class=2, seed=0)
  ds = ds._replace(x_test=ds.x_test[:20], y_test=ds.y_test[:20])  # a small held-out baseline
  cands = np.zeros((2, 0, *ds.x_train.shape[1:]), np.float32)
  out = evaluation.evaluate_candidates(cands, np.ones((2, 0)), np.zeros(2), ds)
  assert out["attack"]["recovered_strict"] == 0 and out["attack"]["n_candidates"] == 0
  assert out["attack"]["all_restarts_diverged"] is False  # none diverged: none was found
  assert [p["recovered_strict"] for p in out["per_restart"]] == [0, 0]


# The host's fits, SVDs and linear programs go through core/numerics.
GUARDED = {("scipy", "optimize", "nnls"), ("scipy", "optimize", "linprog")}
GUARDED |= {(p, "linalg", f) for p in ("np", "numpy", "scipy") for f in ("lstsq", "svd")}


def _calls(tree):
  """Dotted names called (``np.linalg.svd``) and names imported from scipy.optimize."""
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module in ("scipy.optimize", "numpy.linalg"):
      for alias in node.names:
        yield (*node.module.split("."), alias.name)
    if isinstance(node, ast.Call):
      parts, f = [], node.func
      while isinstance(f, ast.Attribute):
        parts.insert(0, f.attr)
        f = f.value
      if isinstance(f, ast.Name):
        yield (f.id, *parts)


def test_the_library_calls_the_host_solvers_only_through_numerics():
  found = {}
  for path in sorted((ROOT / "recon_jax").rglob("*.py")):
    rel = str(path.relative_to(ROOT))
    if rel == "recon_jax/core/numerics.py":
      continue
    calls = set(_calls(ast.parse(path.read_text())))
    bad = {c for c in calls if any(c[-len(g) :] == g for g in GUARDED)}
    if bad:
      found[rel] = sorted(".".join(c) for c in bad)
  assert not found, f"call recon_jax.core.numerics instead: {found}"
  assert ("np", "linalg", "svd") in set(
    _calls(ast.parse((ROOT / "recon_jax/core/numerics.py").read_text()))
  )  # the walk sees such a call


def _none_found(real):
  """find_candidates as an attack that found no candidate (the cone without a facet)."""

  def found(*args, **kwargs):
    f = real(*args, **kwargs)
    run = f.run
    if run is not None:
      run = run._replace(candidates=run.candidates[:, :0], weights=run.weights[:, :0])
    labels = None if f.labels is None else f.labels[:0]
    return f._replace(
      candidates=f.candidates[:, :0], weights=f.weights[:, :0], run=run, labels=labels
    )

  return found


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, s in attacks.specs().items() if s.reconstructs))
def test_every_attack_that_finds_no_candidate_is_scored_and_concluded(name, tmp_path, monkeypatch):
  monkeypatch.setattr(search, "find_candidates", _none_found(search.find_candidates))
  cfg = configs.get_config("tiny")
  cfg.attack = name
  spec = attacks.get(name)
  if spec.examples:  # the run its contract test makes, in as few steps
    cfg.update(nested(spec.examples[0].settings))
    cfg.search.steps = cfg.search.chunk_steps = spec.examples[0].steps
  if spec.reads_init:  # the cone: one hidden layer, theta_0 known
    cfg.victim.widths, cfg.threat.known_init = (32,), True
  if name == "bilevel":  # its inner problem needs weight decay
    cfg.victim.weight_decay = 0.01
  metrics = job_run.run_reconstruction(planning.prepare(cfg), str(tmp_path / "w")).to_dict()
  assert_round_trip(metrics, (tmp_path / "w" / "metrics.json").read_text())
  assert metrics["m"] == 0 and metrics["recovered_strict"] == 0
  # No candidate claims no reconstruction; the weights' membership tests may still tell the
  # training images apart (the tiny victim's 6 images do), and then the verdict rests on them
  # alone and says that nothing was reconstructed.
  by_weights = verdict.weights_evidence(Metrics.from_metrics(metrics))
  if by_weights is None:
    assert metrics["verdict"] == "no_evidence", metrics["verdict_line"]
  else:
    assert metrics["verdict"] == "leaks", metrics["verdict_line"]
    assert metrics["verdict_line"].startswith(f"leaks: {by_weights}; no image reconstructed")
  assert all(r in (None, 1.0) for r in metrics["identifiability"]["per_restart_residual"])
  assert (tmp_path / "w" / "report.md").exists()


def test_a_model_whose_outputs_overflow_float32_is_refused_before_any_work(tmp_path, capsys):
  """Weights of about 1e20 (float32 holds them) give outputs of about 1e40 on the digits: the
  run used to go through its whole search, then exit 2 'every restart diverged'."""
  from safetensors.numpy import save_file

  from experiments import reconstruct
  from recon_jax import cli

  rng = np.random.default_rng(0)
  model = {
    "fc1.weight": (rng.normal(size=(16, 64)) * 1e20).astype(np.float32),
    "fc1.bias": np.zeros(16, np.float32),
    "fc2.weight": (rng.normal(size=(1, 16)) * 1e20).astype(np.float32),
    "fc2.bias": np.zeros(1, np.float32),
  }
  path = tmp_path / "huge.safetensors"
  save_file(model, str(path))
  cfg = configs.get_config("tiny")
  cfg.threat.model = str(path)
  cfg.victim.widths = (16,)
  work = tmp_path / "w"
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: reconstruct.job(cfg, str(work)), cfg)
  err = capsys.readouterr().err.strip()
  assert e.value.code == 1 and "\n" not in err, err
  assert err.startswith(f"error: {path}: the model's outputs overflow float32 on ")
  assert err.endswith("rescale them, or run in float64 (--config.runtime.x64=True)."), err
  assert not work.exists()  # refused before the workdir was made
  # In float64 the same outputs are finite: let through (the job set float32; the suite's
  # fixture sets the precision back after the test).
  jax.config.update("jax_enable_x64", True)
  module = models.build_model("mlp", widths=(16,), init="normal", init_std=1.0)
  params = {"params": {"layer_0": {"kernel": model["fc1.weight"].T, "bias": model["fc1.bias"]}}}
  params["params"]["layer_1"] = {"kernel": model["fc2.weight"].T, "bias": model["fc2.bias"]}
  ds = load_dataset("digits", n_per_class=3, seed=0)
  flat = ds._replace(x_train=ds.x_train.reshape(6, -1), x_test=ds.x_test.reshape(-1, 64))
  sources.check_outputs(models.make_apply_fn(module), params, flat, str(path))
