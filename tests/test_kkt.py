"""Tests for recon_jax.attacks.kkt: stationarity, its gradients, the attack."""

import functools

from helpers import linear_apply, linear_problem, mlp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import equations, kkt
from recon_jax.core import activations, losses
from recon_jax.engine import inits, loop
from recon_jax.types import Target
from recon_jax.victims import descent, models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


ALPHA = 3.0


def _stat(problem, params, x, lam, labels, act=None, normalize="mean", apply_fn=linear_apply):
  return float(
    equations.stationarity(
      apply_fn,
      problem,
      params,
      jnp.asarray(x),
      jnp.asarray(lam),
      jnp.asarray(labels),
      act,
      normalize,
    )
  )


# ---------------------------------------------------------------- margins


def test_weighted_output_by_hand():
  x, y, lam = linear_problem()
  w = np.random.default_rng(1).normal(size=(8, 1))
  params = {"params": {"w": jnp.asarray(w)}}
  want = np.sum(lam * y * (x @ w)[:, 0])
  for normalize, scale in (("mean", 1 / 4), ("sum", 1.0)):
    got = equations.weighted_output(
      linear_apply,
      "binary",
      params,
      jnp.asarray(x),
      jnp.asarray(lam),
      jnp.asarray(y),
      None,
      normalize,
    )
    np.testing.assert_allclose(float(got), scale * want, rtol=1e-13)


# ---------------------------------------------------------------- planted KKT points


@pytest.mark.parametrize("normalize", ["mean", "sum"])
def test_stationarity_zero_at_planted_linear_kkt_point(normalize):
  x, y, lam = linear_problem()
  scale = 1 / x.shape[0] if normalize == "mean" else 1.0
  w = scale * (x.T @ (lam * y))[:, None]  # theta = (1/m) sum_i lam_i y_i x_i
  params = {"params": {"w": jnp.asarray(w)}}
  assert _stat("binary", params, x, lam, y, normalize=normalize) < 1e-28
  x_pert = x + 0.01 * np.random.default_rng(2).normal(size=x.shape)
  assert _stat("binary", params, x_pert, lam, y, normalize=normalize) > 1e-6
  assert _stat("binary", params, x, 1.1 * lam, y, normalize=normalize) > 1e-4
  assert _stat("binary", params, x, lam, -y, normalize=normalize) > 1e-1


def test_stationarity_zero_at_planted_general_point():
  m, d, c = 4, 8, 3
  rng = np.random.default_rng(3)
  x = rng.normal(size=(m, d))
  lam = rng.normal(size=(m, c))  # free real multipliers
  params = {"params": {"w": jnp.asarray(x.T @ lam / m)}}
  assert _stat("general", params, x, lam, np.zeros(m)) < 1e-28
  assert _stat("general", params, x, lam[:, ::-1], np.zeros(m)) > 1e-3


def test_multiclass_stationarity_by_hand():
  m, d, c = 4, 6, 3
  rng = np.random.default_rng(4)
  x = rng.normal(size=(m, d))
  w = rng.normal(size=(d, c))
  labels = np.array([0, 1, 2, 1])
  lam = rng.uniform(0.5, 2.0, size=(m,))
  out = x @ w
  grad_w = np.zeros_like(w)  # d/dW of (1/m) sum_i lam_i (x_i w_y - x_i w_j*)
  for i in range(m):
    others = np.where(np.arange(c) == labels[i], -np.inf, out[i])
    grad_w[:, labels[i]] += lam[i] * x[i] / m
    grad_w[:, np.argmax(others)] -= lam[i] * x[i] / m
  params = {"params": {"w": jnp.asarray(w)}}
  np.testing.assert_allclose(
    _stat("multiclass", params, x, lam, labels), np.sum((w - grad_w) ** 2), rtol=1e-13
  )


def test_stationarity_zero_at_planted_two_class_multiclass_point():
  # With two classes the runner-up is always the other class, so
  # theta = (1/m) sum_i lam_i x_i (e_y - e_other)^T is an exact KKT point.
  m, d = 4, 6
  rng = np.random.default_rng(10)
  x = rng.normal(size=(m, d))
  labels = np.array([0, 1, 1, 0])
  lam = rng.uniform(0.5, 2.0, size=(m,))
  sign = np.stack([np.where(labels == 0, 1.0, -1.0), np.where(labels == 1, 1.0, -1.0)], 1)
  params = {"params": {"w": jnp.asarray(x.T @ (lam[:, None] * sign) / m)}}
  assert _stat("multiclass", params, x, lam, labels) < 1e-28
  assert _stat("multiclass", params, x, lam, 1 - labels) > 1e-2


def test_mean_and_sum_normalisation_differ_by_m():
  x, y, lam = linear_problem()
  params = {"params": {"w": jnp.asarray(np.random.default_rng(5).normal(size=(8, 1)))}}
  np.testing.assert_allclose(
    _stat("binary", params, x, lam, y, normalize="mean"),
    _stat("binary", params, x, lam / 4, y, normalize="sum"),
    rtol=1e-13,
  )


# ---------------------------------------------------------------- gradients


_mlp = functools.partial(mlp, widths=(8, 8), d=5, std=0.5, bias_shift=0.1)


@pytest.mark.parametrize("problem, out_dim", [("binary", 1), ("multiclass", 3), ("general", 2)])
def test_stationarity_gradient_matches_finite_differences(problem, out_dim):
  apply_fn, params = _mlp(out_dim=out_dim)
  m, d = 3, 5
  rng = np.random.default_rng(6)
  x = jnp.asarray(rng.normal(size=(m, d)))
  if problem == "general":
    lam = jnp.asarray(rng.normal(size=(m, out_dim)))
    labels = jnp.zeros(m)
  else:
    lam = jnp.asarray(rng.uniform(0.5, 2.0, size=(m,)))
    labels = jnp.asarray([1.0, -1.0, 1.0]) if problem == "binary" else jnp.asarray([0, 2, 1])

  def loss(xx, ll):
    return equations.stationarity(apply_fn, problem, params, xx, ll, labels, jax.nn.softplus)

  gx, gl = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, lam)
  loss_j = jax.jit(loss)
  eps = 1e-6
  for arr, grad, which in ((x, gx, 0), (lam, gl, 1)):
    fd = np.zeros(arr.shape)
    for idx in np.ndindex(arr.shape):
      e = np.zeros(arr.shape)
      e[idx] = eps
      args_p = (x + e, lam) if which == 0 else (x, lam + e)
      args_m = (x - e, lam) if which == 0 else (x, lam - e)
      fd[idx] = (float(loss_j(*args_p)) - float(loss_j(*args_m))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-8)
    assert np.max(np.abs(fd)) > 1e-3


def _step_gradient(attack, state, hp, target):
  """With SGD at rate 1 and no momentum, a step moves (x, lam) by minus the gradient."""
  new, metrics = jax.jit(attack.step)(state, hp, target)
  return np.asarray(state.x - new.x), np.asarray(state.lam - new.lam), metrics


def _attack_setup(apply_fn, params, m, d, seed=7):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(m, d)))
  lam = jnp.asarray(rng.uniform(0.5, 2.0, size=(m,)))
  labels = jnp.asarray(np.where(np.arange(m) % 2 == 0, 1.0, -1.0))
  target = Target(params, labels, jnp.asarray(-10.0), jnp.asarray(10.0))
  hp = {
    "lr_x": jnp.asarray(1.0),
    "lr_lam": jnp.asarray(1.0),
    "alpha": jnp.asarray(ALPHA),
    "lam_min": jnp.asarray(0.0),
  }
  attack = kkt.kkt_attack(apply_fn, "binary", steps=kkt.Steps("sgd", momentum=0.0))
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)
  return attack, state._replace(lam=lam), hp, target


def test_attack_gradient_matches_hand_formula():
  """The grad-of-grad check on the attack's full loss, one hidden layer, no biases."""
  m, d, h = 4, 5, 7
  apply_fn, params = _mlp(widths=(h,), bias="none", d=d)
  attack, state, hp, target = _attack_setup(apply_fn, params, m, d)
  gx, glam, metrics = _step_gradient(attack, state, hp, target)

  w = np.asarray(params["params"]["layer_0"]["kernel"]).T  # [h, d]
  v = np.asarray(params["params"]["layer_1"]["kernel"])[:, 0]  # [h]
  x, lam, y = np.asarray(state.x), np.asarray(state.lam), np.asarray(target.labels)
  c = lam * y / m  # weighted_output = sum_i c_i Phi(x_i)
  z = x @ w.T
  s = 1.0 / (1.0 + np.exp(-ALPHA * z))
  ds = ALPHA * s * (1 - s)
  r_w = w - np.einsum("i,ik,id->kd", c, v * s, x)
  r_v = v - np.einsum("i,ik->k", c, np.maximum(z, 0))
  want_x = np.stack(
    [
      -2 * c[i] * (r_w.T @ (v * s[i]) + w.T @ (v * ds[i] * (r_w @ x[i])) + w.T @ (r_v * s[i]))
      for i in range(m)
    ]
  )
  dstat_dc = np.array(
    [-2 * (np.sum(r_w * np.outer(v * s[i], x[i])) + r_v @ np.maximum(z[i], 0)) for i in range(m)]
  )
  stat = np.sum(r_w**2) + np.sum(r_v**2)

  np.testing.assert_allclose(float(metrics["stat"]), stat, rtol=1e-12)
  np.testing.assert_allclose(
    float(metrics["stat_rel"]), stat / (np.sum(w**2) + np.sum(v**2)), rtol=1e-12
  )
  assert float(metrics["prior"]) == 0.0 and float(metrics["lam_pen"]) == 0.0
  np.testing.assert_allclose(float(metrics["loss"]), stat, rtol=1e-12)
  np.testing.assert_allclose(gx, want_x, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(glam, dstat_dc * y / m, rtol=1e-9, atol=1e-12)


def test_attack_gradient_matches_custom_jvp_twin():
  """Two hidden layers with a first-layer bias: the custom_vjp surrogate equals its twin."""
  m, d = 4, 5
  apply_fn, params = _mlp(widths=(8, 8), bias="first", d=d)
  attack, state, hp, target = _attack_setup(apply_fn, params, m, d)
  gx, glam, _ = _step_gradient(attack, state, hp, target)

  def loss(x, lam, act):
    return equations.stationarity(apply_fn, "binary", params, x, lam, target.labels, act)

  twin = functools.partial(activations.surrogate_relu_jvp, alpha=ALPHA)
  grad = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
  tx, tl = grad(state.x, state.lam, twin)
  np.testing.assert_allclose(gx, np.asarray(tx), rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(glam, np.asarray(tl), rtol=1e-9, atol=1e-12)
  rx, _ = grad(state.x, state.lam, jax.nn.relu)
  assert np.max(np.abs(gx - np.asarray(rx))) > 1e-2 * np.max(np.abs(gx))


def test_attack_penalties_enter_the_loss():
  m, d = 3, 4
  apply_fn, params = _mlp(widths=(4,), bias="none", d=d)
  attack, state, hp, target = _attack_setup(apply_fn, params, m, d)
  x = state.x.at[0, 0].set(12.0)  # 2 above the box
  lam = jnp.asarray([0.5, 2.0, -1.0])
  hp = dict(hp, lam_min=jnp.asarray(1.0))
  _, metrics = jax.jit(attack.step)(state._replace(x=x, lam=lam), hp, target)
  np.testing.assert_allclose(float(metrics["lam_pen"]), 0.5**2 + 2.0**2, rtol=1e-14)
  np.testing.assert_allclose(float(metrics["prior"]), 2.0**2 / d, rtol=1e-14)
  np.testing.assert_allclose(
    float(metrics["loss"]),
    float(metrics["stat"] + metrics["lam_pen"] + metrics["prior"]),
    rtol=1e-14,
  )


def test_general_attack_state_and_candidates():
  apply_fn, params = _mlp(out_dim=2, widths=(4,), d=3)
  attack = kkt.kkt_attack(
    apply_fn, "general", multipliers=kkt.Multipliers(outputs=2), steps=kkt.Steps("adam")
  )
  target = Target(params, jnp.zeros(5), jnp.asarray(-1.0), jnp.asarray(1.0))
  hp = {
    "lr_x": jnp.asarray(0.01),
    "lr_lam": jnp.asarray(0.01),
    "alpha": jnp.asarray(ALPHA),
    "lam_min": jnp.asarray(0.0),
  }
  state = attack.init(jax.random.PRNGKey(0), hp, target, jnp.zeros((5, 3)))
  assert state.lam.shape == (5, 2)
  assert np.all(np.abs(np.asarray(state.lam)) <= 1.0)
  new, metrics = jax.jit(attack.step)(state, hp, target)
  assert float(metrics["lam_pen"]) == 0.0
  xs, wts = attack.candidates(new)
  np.testing.assert_allclose(np.asarray(wts), np.linalg.norm(np.asarray(new.lam), axis=1))
  assert xs.shape == (5, 3)


def test_attack_rejects_bad_options():
  for make, match in [
    (lambda: kkt.kkt_attack(linear_apply, problem="ranking"), "problem"),
    (lambda: kkt.Objective(normalize="max"), "normalize"),
    (lambda: kkt.Steps("lbfgs"), "optimizer"),
    (lambda: kkt.kkt_attack(linear_apply, multipliers="tied"), "Multipliers"),
  ]:
    with pytest.raises(ValueError, match=match):
      make()


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_attack_reduces_stationarity_on_trained_victim():
  d, n = 8, 6
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, d))
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
  module = models.build_model(
    "mlp", widths=(16, 16), bias="first", init="normal", init_std=0.05, first_layer_std=0.05
  )
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (d,), jnp.float64)
  params, hist = descent.train(
    apply_fn,
    params,
    jnp.asarray(x),
    jnp.asarray(y),
    descent.TrainConfig(loss="logistic", lr=0.5, epochs=300, chunk=300),
    log_every_chunk=False,
  )
  assert hist[-1]["train_error"] == 0.0 and hist[-1]["loss"] < 0.01

  r = 3
  target = Target(params, jnp.asarray(y), jnp.asarray(-3.0), jnp.asarray(3.0))
  attack = kkt.kkt_attack(apply_fn, "binary")
  hp = {
    "lr_x": jnp.full(r, 0.01),
    "lr_lam": jnp.full(r, 0.01),
    "alpha": jnp.full(r, 10.0),
    "lam_min": jnp.full(r, 0.01),
    "sigma_x": jnp.full(r, 0.1),
  }
  keys = jax.random.split(jax.random.PRNGKey(1), r)
  x_init = inits.gaussian(n, (d,), jnp.float64)
  init_fn, _ = loop.make_runner(attack, x_init)
  s0 = init_fn(keys, hp, target)
  act = functools.partial(activations.surrogate_relu, alpha=10.0)
  norm = float(losses.tree_sq_norm(params))
  stat = jax.jit(
    jax.vmap(
      lambda xx, ll: equations.stationarity(apply_fn, "binary", params, xx, ll, target.labels, act)
    )
  )
  before = np.asarray(stat(s0.inner.x, s0.inner.lam)) / norm
  res = loop.run_stages(attack, x_init, keys, [(300, hp)], target, chunk_steps=150, log=False)
  after = res.history[-1]["stat_rel"]
  assert not np.any(np.asarray(res.state.diverged))
  assert np.all(after * 4 <= before), (before, after)
  assert np.all(after < 0.2)


def test_known_initialisation_fits_theta_star_minus_theta0():
  """Loo et al.'s threat model: the KKT sum reproduces theta* - theta_0, not theta*."""
  x, y, lam = linear_problem()
  w0 = np.random.default_rng(5).normal(size=(x.shape[1], 1))
  delta = (x.T @ (lam * y))[:, None] / x.shape[0]
  params = {"params": {"w": jnp.asarray(w0 + delta)}}
  ref = {"params": {"w": jnp.asarray(delta)}}
  args = (linear_apply, "binary", params, jnp.asarray(x), jnp.asarray(lam), jnp.asarray(y), None)
  assert float(equations.stationarity(*args, "mean", ref)) < 1e-28  # the planted point fits
  assert float(equations.stationarity(*args, "mean")) > 1e-2  # without theta_0 it does not
  # The attack with Target.reference lowers its own objective from perturbed candidates.
  target = Target(params, jnp.asarray(y), jnp.asarray(-10.0), jnp.asarray(10.0), reference=ref)
  attack = kkt.kkt_attack(linear_apply, "binary")
  hp = {
    "lr_x": jnp.full(1, 0.05),
    "lr_lam": jnp.full(1, 0.05),
    "alpha": jnp.full(1, 10.0),
    "lam_min": jnp.full(1, 0.01),
    "sigma_x": jnp.full(1, 0.1),
  }
  x0 = jnp.asarray(x + 0.3 * np.random.default_rng(6).normal(size=x.shape))
  res = loop.run_stages(
    attack,
    lambda key, h: x0,
    jax.random.split(jax.random.PRNGKey(0), 1),
    [(200, hp)],
    target,
    chunk_steps=100,
    log=False,
  )
  first, last = res.history[0]["stat_rel"][0], res.history[-1]["stat_rel"][0]
  assert last < 0.1 * first


def test_annealed_alpha_stages_lower_the_objective():
  """sweep.anneal's stages (alpha rising to 200) run on the one loop and lower the objective.

  The objective changes with alpha, so it is compared at the last stage's alpha: the
  stationarity of the initial and of the final candidates and multipliers at alpha = 200.
  """
  from recon_jax.engine import sweep

  d, n = 6, 4
  y = np.array([1.0, -1.0, 1.0, -1.0])
  module = models.build_model("mlp", widths=(8,), bias="none", init="normal", init_std=0.5)
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (d,), jnp.float64)
  target = Target(params, jnp.asarray(y), jnp.asarray(-5.0), jnp.asarray(5.0))
  attack = kkt.kkt_attack(apply_fn, "binary")
  hp = {
    "lr_x": np.full(2, 0.01),
    "lr_lam": np.full(2, 0.01),
    "alpha": np.array([5.0, 10.0]),
    "lam_min": np.full(2, 0.01),
    "sigma_x": np.full(2, 0.5),
  }
  stages = sweep.anneal(hp, steps=300, alpha_end=200.0, num_stages=3)
  x_init = inits.gaussian(n, (d,), jnp.float64)
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  init_fn, _ = loop.make_runner(attack, x_init)
  s0 = init_fn(keys, {k: jnp.asarray(v) for k, v in hp.items()}, target)
  res = loop.run_stages(attack, x_init, keys, stages, target, chunk_steps=100, log=False)
  act = functools.partial(activations.surrogate_relu, alpha=200.0)
  stat = jax.jit(
    jax.vmap(
      lambda xx, ll: equations.stationarity(apply_fn, "binary", params, xx, ll, target.labels, act)
    )
  )
  before = np.asarray(stat(s0.inner.x, s0.inner.lam))
  after = np.asarray(stat(res.state.inner.x, res.state.inner.lam))
  assert not np.any(np.asarray(res.state.diverged))
  assert np.all(after < before), (before, after)
