"""Tests for recon_jax.attacks.closed_form: the multiplier solve, the objective, its gradient."""

import functools

from helpers import linear_apply
import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from recon_jax.attacks import closed_form as cf
from recon_jax.attacks import equations
from recon_jax.core import activations, losses
from recon_jax.engine import loop
from recon_jax.types import Target
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


ALPHA = 5.0
SOLVE = jax.jit(cf.solve_multipliers, static_argnums=(2, 3), static_argnames="polish")


@functools.partial(jax.jit, static_argnums=(0, 1, 5))
def JAC(apply_fn, problem, params, x, labels, act):  # noqa: N802
  """The Gram system's rows: [m * C', P]."""
  j = losses.margin_jacobian(apply_fn, problem, params, x, labels, act)
  return j.reshape(-1, j.shape[-1])


def _mlp(out_dim=1, widths=(6,), d=4, seed=0, std=0.5):
  """A bias-free ReLU MLP with N(0, std^2) weights (drawn by hand: no eager flax init)."""
  module = models.build_model("mlp", out_dim=out_dim, widths=widths, bias="none")
  rng = np.random.default_rng(seed)
  sizes = (d, *widths, out_dim)
  params = {
    "params": {
      f"layer_{i}": {"kernel": jnp.asarray(std * rng.normal(size=(a, b)))}
      for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))
    }
  }
  return models.make_apply_fn(module), params


def _flat(params):
  return np.asarray(ravel_pytree(params)[0])


def _labels(problem, m, rng):
  if problem == "binary":
    return jnp.asarray(np.where(np.arange(m) % 2 == 0, 1.0, -1.0))
  if problem == "multiclass":
    return jnp.asarray(np.arange(m) % 3)
  return jnp.zeros(m)


# ---------------------------------------------------------------- the multiplier solve


def test_jacobian_rows_are_margin_gradients():
  rng = np.random.default_rng(0)
  x, w = rng.normal(size=(5, 4)), rng.normal(size=(4, 1))
  y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
  j = JAC(
    linear_apply, "binary", {"params": {"w": jnp.asarray(w)}}, jnp.asarray(x), jnp.asarray(y), None
  )
  np.testing.assert_allclose(np.asarray(j), y[:, None] * x, rtol=1e-14)
  # 'general' with C outputs: row i*C + c is grad_W Phi_c(x_i) = x_i e_c^T, flattened.
  w3 = rng.normal(size=(4, 3))
  j3 = np.asarray(
    JAC(
      linear_apply,
      "general",
      {"params": {"w": jnp.asarray(w3)}},
      jnp.asarray(x),
      jnp.zeros(5),
      None,
    )
  )
  want = np.stack([np.outer(x[i], np.eye(3)[c]).ravel() for i in range(5) for c in range(3)])
  np.testing.assert_allclose(j3, want, rtol=1e-14)
  # 'multiclass': grad_W (Phi_y - Phi_j*) = x_i (e_y - e_j*)^T, j* the runner-up.
  labels = np.array([0, 1, 2, 1, 0])
  jm = np.asarray(
    JAC(
      linear_apply,
      "multiclass",
      {"params": {"w": jnp.asarray(w3)}},
      jnp.asarray(x),
      jnp.asarray(labels),
      None,
    )
  )
  out = np.where(np.eye(3, dtype=bool)[labels], -np.inf, x @ w3)
  sign = np.eye(3)[labels] - np.eye(3)[np.argmax(out, axis=1)]
  np.testing.assert_allclose(
    jm, np.stack([np.outer(x[i], sign[i]).ravel() for i in range(5)]), rtol=1e-14
  )


def test_unconstrained_solve_matches_lstsq():
  """'general' on a tiny MLP: lambda* is the least-squares fit of theta by the materialised G."""
  apply_fn, params = _mlp(out_dim=2)
  m = 5
  x = jnp.asarray(np.random.default_rng(0).normal(size=(m, 4)))
  act = jax.nn.softplus

  def jac_and_lam(xx):
    j = JAC(apply_fn, "general", params, xx, jnp.zeros(m), act)
    _, lam = cf.projection_residual(
      apply_fn, "general", params, xx, jnp.zeros(m), act, ridge=0.0, num_outputs=2
    )
    return j, lam

  j, lam = jax.jit(jac_and_lam)(x)
  g, theta = np.asarray(j).T, _flat(params)
  assert g.shape == (theta.size, 2 * m) and np.linalg.matrix_rank(g) == 2 * m
  want = np.linalg.lstsq(g, theta, rcond=None)[0]
  assert lam.shape == (m, 2)
  np.testing.assert_allclose(
    np.asarray(lam).ravel(), want, rtol=1e-8, atol=1e-10 * np.max(np.abs(want))
  )


def _nnls_problem(seed, n=8, p=30, neg=0.5):
  """Random G, theta = G lambda_true + noise with some lambda_true < 0: active constraints."""
  rng = np.random.default_rng(seed)
  g = rng.normal(size=(p, n)) + (0.8 * rng.normal(size=(p, 1)) if seed % 2 else 0)
  lam = rng.uniform(0.2, 1.0, size=n) * np.where(rng.uniform(size=n) < neg, -1.0, 1.0)
  theta = g @ lam + 0.3 * rng.normal(size=p)
  return g, theta


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nonneg_solve_matches_scipy_nnls(seed):
  g, theta = _nnls_problem(seed)
  want, _ = scipy.optimize.nnls(g, theta)
  assert np.sum(want == 0) >= 1, "the case must have active constraints"
  k, b = jnp.asarray(g.T @ g), jnp.asarray(g.T @ theta)
  rng = np.random.default_rng(10 + seed)
  for lam0 in (None, jnp.asarray(rng.uniform(0, 2, size=b.shape))):
    got = np.asarray(SOLVE(k, b, True, 200, 0.0, lam0))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.max(want))
    assert np.all(got >= 0) and np.all(got[want == 0] == 0)
  # Without the polish, accelerated projected gradient alone gets there too.
  got = np.asarray(SOLVE(k, b, True, 3000, 0.0, None, polish=False))
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.max(want))


def test_nonneg_solve_all_inactive_and_all_active():
  rng = np.random.default_rng(5)
  g = rng.normal(size=(20, 4))
  for lam_true, want in ((np.array([1.0, 2.0, 0.5, 1.5]), None), (-np.ones(4), np.zeros(4))):
    theta = g @ lam_true
    got = np.asarray(SOLVE(jnp.asarray(g.T @ g), jnp.asarray(g.T @ theta), True, 50, 0.0))
    np.testing.assert_allclose(got, lam_true if want is None else want, atol=1e-10)


def test_ridge_shrinks_towards_zero():
  g, theta = _nnls_problem(0)
  k, b = jnp.asarray(g.T @ g), jnp.asarray(g.T @ theta)
  for nonneg in (False, True):
    l0 = np.asarray(SOLVE(k, b, nonneg, 200, 0.0))
    l1 = np.asarray(SOLVE(k, b, nonneg, 200, 1e-2))
    eps = 1e-2 * np.trace(g.T @ g) / g.shape[1]
    if not nonneg:
      np.testing.assert_allclose(
        l1, np.linalg.solve(g.T @ g + eps * np.eye(8), g.T @ theta), rtol=1e-10
      )
    assert np.linalg.norm(l1) < np.linalg.norm(l0)


# ---------------------------------------------------------------- the objective


def _step(attack, x, params, labels, alpha=ALPHA, box=10.0):
  target = Target(params, labels, jnp.asarray(-box), jnp.asarray(box))
  hp = {
    "lr_x": jnp.asarray(1.0),
    "alpha": jnp.asarray(alpha),
    "lr_lam": jnp.asarray(3.0),
    "lam_min": jnp.asarray(0.5),
  }
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)
  new, metrics = jax.jit(attack.step)(state, hp, target)
  return state, new, metrics


def test_loss_is_one_minus_projection_in_unconstrained_case():
  apply_fn, params = _mlp(out_dim=2, widths=(5,), d=3, seed=3)
  m = 4
  x = jnp.asarray(np.random.default_rng(3).normal(size=(m, 3)))
  attack = cf.closed_form_attack(apply_fn, "general", num_outputs=2, ridge=0.0, w_prior=0.0)
  _, new, metrics = _step(attack, x, params, jnp.zeros(m))
  act = functools.partial(activations.surrogate_relu, alpha=ALPHA)
  g = np.asarray(JAC(apply_fn, "general", params, x, jnp.zeros(m), act)).T
  theta = _flat(params)
  q, _ = np.linalg.qr(g)  # orthonormal basis of span G (full column rank)
  assert np.linalg.matrix_rank(g) == g.shape[1] < theta.size
  want = 1 - np.sum((q.T @ theta) ** 2) / np.sum(theta**2)
  assert 1e-3 < want < 1
  np.testing.assert_allclose(float(metrics["stat_rel"]), want, rtol=1e-9)
  np.testing.assert_allclose(float(metrics["loss"]), want, rtol=1e-9)
  assert float(metrics["n_active"]) == 2 * m and new.lam.shape == (m, 2)
  xs, wts = attack.candidates(new)
  assert xs.shape == x.shape
  np.testing.assert_allclose(np.asarray(wts), np.linalg.norm(np.asarray(new.lam), axis=1))


@pytest.mark.parametrize("problem, out_dim", [("binary", 1), ("general", 2)])
def test_gradient_matches_finite_differences_of_resolved_objective(problem, out_dim):
  """dL/dx (envelope theorem, lambda* held) = central differences of L with lambda* re-solved."""
  apply_fn, params = _mlp(out_dim=out_dim, widths=(6,), d=4, seed=1)
  m = 4
  rng = np.random.default_rng(7)
  x = jnp.asarray(rng.normal(size=(m, 4)))
  labels = _labels(problem, m, rng)
  act = jax.nn.softplus  # smooth, so that finite differences see the same derivative
  kw = dict(iters=400, ridge=0.0, num_outputs=out_dim)
  # One compiled program: (L, lambda*) and dL/dx; the differences reuse its value.
  value_and_grad = jax.jit(
    jax.value_and_grad(
      lambda xx: cf.projection_residual(apply_fn, problem, params, xx, labels, act, **kw),
      has_aux=True,
    )
  )
  (_, lam), grad = value_and_grad(x)
  if problem != "general":
    assert 0 < np.sum(np.asarray(lam) > 0) <= m
  eps = 1e-6
  fd = np.zeros(x.shape)
  for idx in np.ndindex(x.shape):
    e = np.zeros(x.shape)
    e[idx] = eps
    fd[idx] = (float(value_and_grad(x + e)[0][0]) - float(value_and_grad(x - e)[0][0])) / (2 * eps)
  assert np.max(np.abs(fd)) > 1e-3
  np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-5, atol=1e-7 * np.max(np.abs(fd)))


def test_step_moves_x_by_the_envelope_gradient():
  """With SGD at rate 1 and no momentum, a step moves x by minus grad of L + w_prior * prior."""
  apply_fn, params = _mlp(widths=(6,), d=4, seed=2)
  m = 4
  x = jnp.asarray(np.clip(np.random.default_rng(8).normal(size=(m, 4)), -1.9, 1.9))
  x = x.at[0, 0].set(2.5)
  labels = _labels("binary", m, None)
  attack = cf.closed_form_attack(
    apply_fn, "binary", momentum=0.0, w_prior=3.0, ridge=0.0, nnls_iters=300
  )
  state, new, metrics = _step(attack, x, params, labels, box=2.0)
  act = functools.partial(activations.surrogate_relu, alpha=ALPHA)

  def full(xx):
    rel, lam = cf.projection_residual(
      apply_fn, "binary", params, xx, labels, act, iters=300, ridge=0.0
    )
    return rel + 3.0 * jnp.asarray(0.5**2 / 4), lam  # plus the prior's value, constant here

  (val, lam), g = jax.jit(jax.value_and_grad(full, has_aux=True))(x)
  g = g.at[0, 0].add(3.0 * 2 * 0.5 / 4)  # d/dx of 3 * (x - 2)^2 / d at x = 2.5
  np.testing.assert_allclose(np.asarray(x - new.x), np.asarray(g), rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(float(metrics["loss"]), float(val), rtol=1e-10)
  np.testing.assert_allclose(float(metrics["prior"]), 0.5**2 / 4, rtol=1e-12)
  np.testing.assert_allclose(np.asarray(new.lam), np.asarray(lam), rtol=1e-10, atol=1e-14)
  assert float(metrics["n_active"]) == np.sum(np.asarray(lam) > 0)
  np.testing.assert_array_equal(np.asarray(attack.candidates(new)[1]), np.asarray(new.lam))


def test_rescale_keeps_candidate_norms():
  apply_fn, params = _mlp(widths=(6,), d=4)
  x = jnp.asarray(np.random.default_rng(9).normal(size=(4, 4)))
  labels = _labels("binary", 4, None)
  target = Target(params, labels, jnp.asarray(-1.0), jnp.asarray(1.0))
  keep = cf.closed_form_attack(apply_fn, "binary", rescale=True)
  np.testing.assert_allclose(
    np.asarray(keep.init(None, {}, target, x).radius),
    np.linalg.norm(np.asarray(x), axis=1),
    rtol=1e-14,
  )
  attack = cf.closed_form_attack(apply_fn, "binary", rescale=2.0, optimizer="adam")
  _, new, _ = _step(attack, x, params, labels)
  np.testing.assert_allclose(np.linalg.norm(np.asarray(new.x), axis=1), 2.0, rtol=1e-12)
  unit = np.asarray(x) / np.linalg.norm(np.asarray(x), axis=1, keepdims=True)
  assert np.max(np.abs(np.asarray(new.x) / 2.0 - unit)) > 1e-4  # it moved, not just rescaled


def test_rejects_bad_options():
  for kw, match in [
    (dict(problem="ranking"), "problem"),
    (dict(nnls_iters=-1), "nnls_iters"),
    (dict(ridge=-1e-3), "ridge"),
    (dict(rescale=0.0), "rescale"),
    (dict(rescale="yes"), "rescale"),
    (dict(num_outputs=0), "num_outputs"),
    (dict(optimizer="lbfgs"), "optimizer"),
  ]:
    with pytest.raises(ValueError, match=match):
      cf.closed_form_attack(linear_apply, **kw)
  attack = cf.closed_form_attack(linear_apply, "general", num_outputs=2)
  params = {"params": {"w": jnp.zeros((3, 3))}}
  with pytest.raises(ValueError, match="num_outputs"):
    attack.init(
      jax.random.PRNGKey(0), {}, Target(params, jnp.zeros(2), -1.0, 1.0), jnp.zeros((2, 3))
    )


# ---------------------------------------------------------------- planted KKT point


def _planted(d=5, h=16, m=4, seed=0, iters=400):
  """theta* with theta* = sum_i lambda_i grad g_i(theta*; x_i) exactly (surrogate derivative).

  For fixed (x, lambda), F(theta) = sum_i lambda_i grad g_i(theta; x_i) is found
  an eigenvector of by the shifted power iteration theta <- theta + F(theta) / |mu|;
  at F(theta) = mu theta the multipliers lambda / mu plant theta exactly.
  """
  apply_fn, params = _mlp(widths=(h,), d=d, seed=seed)
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(m, d)))
  y = jnp.asarray(np.where(np.arange(m) % 2 == 0, 1.0, -1.0))
  lam = jnp.asarray(rng.uniform(0.5, 1.5, size=m))
  act = functools.partial(activations.surrogate_relu, alpha=ALPHA)

  def f(p):
    return jax.grad(equations.weighted_output, argnums=2)(
      apply_fn, "binary", p, x, lam, y, act, "sum"
    )

  def body(_, th):
    fth = f(th)
    mu = jnp.abs(losses.tree_dot(fth, th) / losses.tree_sq_norm(th))
    new = jax.tree_util.tree_map(lambda a, b: a + b / mu, th, fth)
    return jax.tree_util.tree_map(lambda a: a / jnp.sqrt(losses.tree_sq_norm(new)), new)

  def plant(p):
    theta = jax.lax.fori_loop(0, iters, body, p)
    return theta, f(theta)

  theta, fth = jax.jit(plant)(params)
  mu = float(losses.tree_dot(fth, theta))
  assert (
    mu > 0
    and float(losses.tree_sq_dist(fth, jax.tree_util.tree_map(lambda a: mu * a, theta)))
    < 1e-20 * mu**2
  )
  return apply_fn, theta, x, y, lam / mu


def test_planted_point_has_zero_loss_and_the_planted_multipliers():
  apply_fn, theta, x, y, lam = _planted()
  act = functools.partial(activations.surrogate_relu, alpha=ALPHA)
  objective = jax.jit(
    lambda xx: cf.projection_residual(apply_fn, "binary", theta, xx, y, act, ridge=0.0)
  )
  loss, lam_star = objective(x)
  assert float(loss) < 1e-20
  np.testing.assert_allclose(np.asarray(lam_star), np.asarray(lam), rtol=1e-8)
  off = np.random.default_rng(4).normal(size=x.shape)
  assert float(objective(x + 0.3 * off)[0]) > 1e-4


def test_attack_recovers_planted_random_features_data():
  """Random features ``v^T relu(W x)``, W fixed (Iurada et al.'s setting), v* planted.

  ``v* = sum_i lambda_i y_i relu(W x_i)``: from candidates 0.3 off in every
  coordinate the loss falls by orders of magnitude in 300 steps and the
  candidates line up with the planted points (the model is positively
  homogeneous in x, so only directions are identifiable).  (The planted MLP
  above has a rank-one first layer, so its zero set is large and the
  candidates need not return to the planted points.)
  """
  d, p, m = 5, 40, 4
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.normal(size=(p, d)) / np.sqrt(d))

  def rf_apply(params, xx, act=None):
    return (act or jax.nn.relu)(xx.reshape(xx.shape[0], -1) @ w.T) @ params["params"]["v"]

  x = jnp.asarray(rng.normal(size=(m, d)))
  y = jnp.asarray([1.0, -1.0, 1.0, -1.0])
  lam = rng.uniform(0.5, 1.5, size=m)
  v = np.sum(np.maximum(np.asarray(x) @ np.asarray(w).T, 0) * (lam * np.asarray(y))[:, None], 0)
  theta = {"params": {"v": jnp.asarray(v[:, None])}}
  target = Target(theta, y, jnp.asarray(-5.0), jnp.asarray(5.0))
  noise = jnp.asarray(0.3 * np.random.default_rng(1).normal(size=(8, m, d))[[0, 2]])
  r = noise.shape[0]

  def perturbed(key, hp):
    return x + noise[hp["restart"]]

  attack = cf.closed_form_attack(rf_apply, "binary")
  hp = {"lr_x": jnp.full(r, 1.0), "alpha": jnp.full(r, 20.0), "restart": jnp.arange(r)}
  keys = jax.random.split(jax.random.PRNGKey(0), r)
  res = loop.run_stages(attack, perturbed, keys, [(300, hp)], target, chunk_steps=150, log=False)
  act = functools.partial(activations.surrogate_relu, alpha=20.0)
  objective = jax.jit(
    jax.vmap(lambda xx: cf.projection_residual(rf_apply, "binary", theta, xx, y, act)[0])
  )
  before, at_planted = objective(x[None] + noise), objective(x[None])
  last = res.history[-1]["stat_rel"]
  assert not np.any(np.asarray(res.state.diverged))
  assert float(at_planted[0]) < 1e-9  # the ridge 1e-6 floor
  assert np.all(np.asarray(before) > 1e-5), before
  assert np.all(last < 1e-2 * np.asarray(before)), (before, last)

  def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)

  cos = np.sum(unit(np.asarray(res.state.inner.x)) * unit(np.asarray(x))[None], -1)
  cos0 = np.sum(unit(np.asarray(x[None] + noise)) * unit(np.asarray(x))[None], -1)
  assert np.all(cos > np.cos(np.radians(2.0))) and np.all(cos0 < np.cos(np.radians(4.0))), (
    cos0,
    cos,
  )
