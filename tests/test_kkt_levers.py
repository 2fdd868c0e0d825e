"""The KKT attack's search options on weight-decay victims: tied multipliers, the exact
derivative of a smooth victim, the first-layer subspace; and the stationary victim recipe.

Planted cases: a small softplus network trained by L-BFGS to a stationary point of
``mean logistic loss + wd/2 ||theta||^2``, where the training set solves the tied
equations exactly with ``lambda_i = sigma(-y_i Phi(x_i)) / wd`` (m = n, mean normalisation).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import implicit
from recon_jax.attacks import equations, kkt, span
from recon_jax.core import activations
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.types import Target
from recon_jax.victims import models, recipe, trained

WD = 0.1
pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture(autouse=True)
def _x64():
  jax.config.update("jax_enable_x64", True)
  yield


@pytest.fixture(scope="module")
def stationary():
  """(apply_fn, params, x, y): a 5-12-1 softplus net at a stationary point of the energy."""
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(0)
  n, d = 4, 5
  x = rng.normal(size=(n, d))
  y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
  module = models.build_model(
    "mlp", widths=(12,), bias="first", init="normal", init_std=0.5, activation="softplus"
  )
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (d,), jnp.float64)
  params, gnorm = implicit.train_to_convergence(
    apply_fn, params, jnp.asarray(x), jnp.asarray(y), "logistic", WD, tol=1e-12, maxiter=3000
  )
  assert gnorm < 1e-10
  return apply_fn, params, jnp.asarray(x), jnp.asarray(y)


def _target(params, y, ref=None):
  return Target(params, y, jnp.asarray(-10.0), jnp.asarray(10.0), reference=ref)


def test_tied_residual_vanishes_at_the_training_set(stationary):
  apply_fn, params, x, y = stationary
  res, lam = equations.tied_stationarity(apply_fn, _target(params, y), x, None)
  norm = float(sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(params)))
  assert float(res) / norm < 1e-18
  g = y * apply_fn(params, x)[:, 0]
  np.testing.assert_allclose(np.asarray(lam), np.asarray(jax.nn.sigmoid(-g)) / WD, rtol=1e-7)
  # Other inputs do not: the tied equations single out the training set here.
  other, _ = equations.tied_stationarity(apply_fn, _target(params, y), x + 0.3, None)
  assert float(other) / norm > 1e-4


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_tied_gradient_matches_finite_differences(stationary, sign):
  """Both branches: a reference the sum points towards, and one it points away from."""
  apply_fn, params, x, y = stationary
  ref = jax.tree_util.tree_map(lambda a: sign * a, params)
  target = _target(params, y, ref)
  x0 = x + 0.2 * jnp.asarray(np.random.default_rng(1).normal(size=x.shape))

  def loss(xx):
    return equations.tied_stationarity(apply_fn, target, xx, None)[0]

  grad = np.asarray(jax.jit(jax.grad(loss))(x0))
  loss_j = jax.jit(loss)
  eps, fd = 1e-6, np.zeros(x0.shape)
  for idx in np.ndindex(x0.shape):
    e = np.zeros(x0.shape)
    e[idx] = eps
    fd[idx] = (float(loss_j(x0 + e)) - float(loss_j(x0 - e))) / (2 * eps)
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-9)
  assert np.max(np.abs(fd)) > 1e-4


def _run(attack, x0, target, steps=300, lr=0.02):
  hp = {
    "lr_x": jnp.full(1, lr),
    "lr_lam": jnp.full(1, 0.01),
    "alpha": jnp.full(1, 10.0),
    "lam_min": jnp.full(1, 0.0),
  }
  return loop.run_stages(
    attack,
    lambda key, h: x0,
    jax.random.split(jax.random.PRNGKey(0), 1),
    [(steps, hp)],
    target,
    chunk_steps=steps // 2,
    log=False,
  )


def test_tied_attack_lowers_its_objective(stationary):
  apply_fn, params, x, y = stationary
  attack = kkt.kkt_attack(
    apply_fn,
    "binary",
    objective=kkt.Objective(derivative="exact"),
    multipliers=kkt.Multipliers(kind="tied"),
  )
  x0 = x + 0.3 * jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
  res = _run(attack, x0, _target(params, y), lr=0.05)
  norm = float(sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(params)))
  first = float(equations.tied_stationarity(apply_fn, _target(params, y), x0, None)[0]) / norm
  last = res.history[-1]["stat_rel"][0]
  assert last < 0.1 * first, (first, last)
  # lambda is the candidates' function, not an optimised variable: c sigma(-y Phi(x)),
  # stored from the last step's evaluation (one step behind the candidates).
  xs, lam = attack.candidates(jax.tree_util.tree_map(lambda a: a[0], res.state.inner))
  g = y * apply_fn(params, xs)[:, 0]
  ratio = np.asarray(lam) / np.asarray(jax.nn.sigmoid(-g))
  np.testing.assert_allclose(ratio, ratio[0], rtol=1e-3)


def test_exact_derivative_is_the_networks_own(stationary):
  apply_fn, params, x, y = stationary
  lam = jnp.linspace(0.5, 1.5, len(x))
  target = _target(params, y)
  hp = {
    k: jnp.asarray(v) for k, v in {"lr_x": 1.0, "lr_lam": 1.0, "alpha": 5.0, "lam_min": 0.0}.items()
  }
  exact = kkt.kkt_attack(
    apply_fn, "binary", objective=kkt.Objective(derivative="exact", w_lam=0.0, w_prior=0.0)
  )
  state = exact.init(jax.random.PRNGKey(0), hp, target, x)._replace(lam=lam)
  _, metrics = exact.step(state, hp, target)
  want = equations.stationarity(apply_fn, "binary", params, x, lam, y, None)
  np.testing.assert_allclose(float(metrics["stat"]), float(want), rtol=1e-12)
  surrogate = kkt.kkt_attack(apply_fn, "binary", objective=kkt.Objective(w_lam=0.0, w_prior=0.0))
  _, m2 = surrogate.step(state, hp, target)
  assert abs(float(m2["stat"]) - float(want)) > 1e-6 * float(want)  # softplus is not ReLU


def test_first_layer_basis_spans_the_data_and_the_attack_stays_in_it():
  rng = np.random.default_rng(3)
  n, d, h = 3, 9, 6
  xs = rng.normal(size=(n, d))
  kernel = xs.T @ rng.normal(size=(n, h))  # a first layer in the span of the data
  params = {"params": {"layer_0": {"kernel": jnp.asarray(kernel)}}}
  basis, info = span.span_basis(params, n=n)
  assert basis.shape == (d, n) and info.dim == n and info.rule == "noise"
  np.testing.assert_allclose(basis.T @ basis, np.eye(n), atol=1e-12)
  np.testing.assert_allclose(basis @ (basis.T @ xs.T), xs.T, atol=1e-12)

  module = models.build_model("mlp", widths=(h,), bias="none", init="normal", init_std=0.5)
  apply_fn = models.make_apply_fn(module)
  net = models.init_params(module, jax.random.PRNGKey(1), (d,), jnp.float64)
  net["params"]["layer_0"]["kernel"] = jnp.asarray(kernel)
  y = jnp.asarray([1.0, -1.0, 1.0, -1.0])
  attack = kkt.kkt_attack(apply_fn, "binary", subspace=kkt.Subspace(basis, (d,)))
  x0 = jnp.asarray(rng.normal(size=(4, d)))
  res = _run(attack, x0, _target(net, y), steps=40, lr=0.01)
  assert res.state.inner.x.shape[-1] == n  # the attack moves n coefficients, not d inputs
  out, _ = attack.candidates(jax.tree_util.tree_map(lambda a: a[0], res.state.inner))
  out = np.asarray(out)
  np.testing.assert_allclose(out, out @ basis @ basis.T, atol=1e-10)  # in the span
  assert res.history[-1]["stat_rel"][0] < res.history[0]["stat_rel"][0]
  with pytest.raises(ConfigError, match="first layer"):
    span.span_basis({"params": {"conv_0": {}}})


def test_bad_lever_options_are_refused():
  with pytest.raises(ConfigError, match="derivative"):
    kkt.Objective(derivative="fd")
  with pytest.raises(ConfigError, match="tied"):
    kkt.kkt_attack(lambda p, x, a=None: x, "multiclass", multipliers=kkt.Multipliers(kind="tied"))
  assert activations.resolve_derivative("auto", "softplus") == "exact"
  assert activations.resolve_derivative("auto", "relu") == "surrogate"
  assert activations.resolve_derivative("surrogate", "softplus") == "surrogate"


@pytest.mark.slow
def test_the_stationary_victim_recipe_meets_the_tolerance_it_reports():
  """The lfw_wd preset's recipe (softplus, a weight-decay phase, then L-BFGS to a relative
  gradient tolerance), on a tiny digits victim."""
  from experiments.configs import reconstruct

  preset = reconstruct.get_config("lfw_wd").victim
  assert preset.converge_tol > 0 and preset.wd > 0 and preset.activation == "softplus"
  cfg = recipe.VictimConfig(
    dataset="digits",
    n_per_class=3,
    widths=(8, 8),
    init="kaiming",
    init_std=None,
    first_layer_std=None,
    epochs=100,
    activation=preset.activation,
    wd=preset.wd,
    wd_epochs=50,
    converge_tol=preset.converge_tol,
  )
  ds = trained.load_data(cfg)
  _, history, summary, _ = trained.fit(cfg, ds)
  assert history[-1]["phase"] == "converge" and history[-1]["lbfgs_iters"] >= 1
  assert summary["stationary"] is True
  assert summary["grad_norm_rel"] <= cfg.converge_tol
  assert summary["train_error"] == 0.0  # stationary, and not at the trivial point
  assert 0.0 <= summary["test_accuracy"] <= 1.0  # said of the converged model, as of every phase
  # Unset, the new fields keep older victims' cache keys.
  plain = dataclasses.replace(cfg, converge_tol=0.0)
  d = plain.to_dict()
  for name in recipe.ADDED_FIELDS:
    d.pop(name)
  assert plain.key() == recipe.VictimConfig(**{**d, "widths": (8, 8)}).key()


def test_converge_tol_needs_weight_decay():
  cfg = recipe.VictimConfig(converge_tol=1e-8)
  with pytest.raises(ConfigError, match="converge_tol"):
    recipe.validate(cfg)
  recipe.validate(dataclasses.replace(cfg, weight_decay=1e-3))


def test_levenberg_marquardt_lowers_the_tied_residual_in_the_subspace(stationary):
  from recon_jax.attacks import gauss_newton

  apply_fn, params, x, y = stationary
  basis, _ = span.span_basis(params, 1e-8)
  assert 1 <= basis.shape[1] <= len(x)
  attack = gauss_newton.lm_attack(
    apply_fn, basis, x.shape[1:], residual_fn=equations.lm_residual("tied"), cg_maxiter=10
  )
  noise = 0.3 * jnp.asarray(np.random.default_rng(4).normal(size=x.shape))
  x0 = (x + noise) @ basis @ basis.T
  target = _target(params, y)
  norm = float(sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(params)))
  first = float(equations.tied_stationarity(apply_fn, target, x0, None)[0]) / norm
  res = _run(attack, x0, target, steps=20)
  last = res.history[-1]["stat_rel"][0]
  assert not np.asarray(res.state.diverged)[0]
  assert last < 0.1 * first, (first, last)
  xs, lam = attack.candidates(jax.tree_util.tree_map(lambda a: a[0], res.state.inner))
  np.testing.assert_allclose(np.asarray(xs), np.asarray(xs) @ basis @ basis.T, atol=1e-10)
  assert np.all(np.asarray(lam) >= 0)
  with pytest.raises(ConfigError, match="basis"):
    gauss_newton.lm_attack(apply_fn, None, x.shape[1:], residual_fn=equations.lm_residual("tied"))


def test_tv_prior_lowers_its_objective_and_smooths_the_candidates():
  """From noisy candidates on a tiny image victim, the attack with w_tv > 0 lowers its own
  loss (stationarity + hinge + box + w_tv TV) and ends smoother than the same run without."""
  from recon_jax import priors

  rng = np.random.default_rng(0)
  n, hw = 4, 4
  y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
  module = models.build_model("mlp", widths=(8,), init="normal", init_std=0.5, activation="relu")
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (hw, hw, 1), jnp.float64)
  target = _target(params, jnp.asarray(np.resize(y, 2 * n)))
  hp = {k: jnp.full(2, v) for k, v in (("lr_x", 0.05), ("lr_lam", 0.01), ("alpha", 10.0))}
  hp["lam_min"] = jnp.full(2, 0.1)
  start = jnp.asarray(rng.uniform(-0.5, 0.5, size=(2, 2 * n, hw, hw, 1)))
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  x_init = lambda key, h: start[jax.random.randint(key, (), 0, 2)]
  tv = {}
  for w in (0.0, 1.0):
    attack = kkt.kkt_attack(apply_fn, "binary", objective=kkt.Objective(w_tv=w))
    run = loop.run_stages(attack, x_init, keys, [(60, hp)], target, chunk_steps=30, log=False)
    first, last = run.history[0]["loss"], run.history[-1]["loss"]
    assert np.all(last < first), (w, first, last)
    cands = jax.vmap(attack.candidates)(run.state.inner)[0]
    tv[w] = float(jnp.mean(jax.vmap(priors.tv_prior)(cands)))
    if w:
      assert np.all(np.asarray(run.history[-1]["tv"]) < np.asarray(run.history[0]["tv"]))
  assert tv[1.0] < 0.5 * tv[0.0], tv


def test_w_tv_is_refused_where_it_cannot_apply():
  from experiments.configs import reconstruct as configs
  from recon_jax.attacks.spec import Setup

  cfg = configs.get_config("tiny")
  vcfg = recipe.VictimConfig(dataset="digits")
  for bad in (-1.0, float("nan"), float("inf")):
    cfg.kkt.w_tv = bad
    with pytest.raises(ConfigError, match="w_tv") as err:
      kkt.SPEC.check(cfg.kkt, Setup("binary", vcfg))
    assert err.value.argument == "w_tv"  # the option's own name (the job names kkt.w_tv)
  cfg.kkt.w_tv = 0.1
  toy = recipe.VictimConfig(dataset="toy2d")
  with pytest.raises(ConfigError, match="image candidates"):
    kkt.SPEC.check(cfg.kkt, Setup("binary", toy))
  kkt.SPEC.check(cfg.kkt, Setup("binary", recipe.VictimConfig(dataset="lfw")))
