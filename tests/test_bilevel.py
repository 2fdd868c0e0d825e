"""Bilevel attack (Runkel et al. 2024) and its implicit differentiation, in float64."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import implicit, loop
from recon_jax.attacks.bilevel import bilevel_attack, make_energy, tree_sq_dist
from recon_jax.inits import fixed
from recon_jax.models import Affine, OneHidden, init_params, make_apply_fn
from recon_jax.types import Target

N, D, WD = 4, 6, 0.1
Y = jnp.array([1.0, -1.0, 1.0, -1.0])


def _affine():
  module = Affine(init_scheme="normal", init_std=0.5)
  return make_apply_fn(module), init_params(module, jax.random.PRNGKey(1), (D,), jnp.float64)


def _data(seed=0):
  return jax.random.uniform(jax.random.PRNGKey(seed), (N, D), jnp.float64)


def _victim(apply_fn, p0, x, act=None):
  params, gnorm = implicit.train_to_convergence(apply_fn, p0, x, Y, "logistic", WD,
                                                tol=1e-12, maxiter=2000, act=act)
  assert gnorm < 1e-9
  return params


def _target(params):
  return Target(params, Y, jnp.zeros(()), jnp.ones(()))


def _unrolled(energy, steps=3000, lr=0.5):
  """theta(x) by differentiating through plain GD steps (the unrolled reference)."""
  def solve(theta, x, y):
    def body(_, th):
      g = jax.grad(energy)(th, x, y)
      return jax.tree_util.tree_map(lambda a, b: a - lr * b, th, g)
    return jax.lax.fori_loop(0, steps, body, theta)
  return solve


def _rel(a, b):
  return float(np.linalg.norm(np.ravel(a - b)) / np.linalg.norm(np.ravel(b)))


def test_implicit_gradient_matches_fd_and_unrolled():
  apply_fn, p0 = _affine()
  x_train = _data(0)
  pstar = _victim(apply_fn, p0, x_train)
  x = _data(5)  # a point away from the training data: a non-zero gradient
  energy = make_energy(apply_fn, "logistic", WD)

  def outer(solve):
    return jax.jit(lambda xx: tree_sq_dist(solve(pstar, xx, Y), pstar))

  unrolled = outer(_unrolled(energy))
  g_unr = jax.grad(unrolled)(x)
  eps = 1e-6
  fd = np.zeros((N, D))
  for i in range(N):
    for j in range(D):
      e = jnp.zeros((N, D)).at[i, j].set(eps)
      fd[i, j] = (unrolled(x + e) - unrolled(x - e)) / (2 * eps)
  assert _rel(g_unr, fd) < 1e-4

  cg = implicit.make_inner_solve(energy, hessian_solve="cg", tol=1e-12, maxiter=500)
  g_cg = jax.grad(outer(lambda *a: cg(*a)[0]))(x)
  assert _rel(g_cg, fd) < 1e-4
  assert _rel(g_cg, g_unr) < 1e-4

  # Quasi-Newton: H^{-1} from the L-BFGS memory is an approximation; on this
  # problem it is measured at ~8-16% relative error (direction still right).
  qn = implicit.make_inner_solve(energy, hessian_solve="lbfgs", tol=1e-9, maxiter=500)
  g_qn = np.asarray(jax.grad(outer(lambda *a: qn(*a)[0]))(x))
  cos = float(np.vdot(g_qn, fd) / np.linalg.norm(g_qn) / np.linalg.norm(fd))
  assert _rel(g_qn, fd) < 0.3
  assert cos > 0.95


def test_affine_ground_truth_init_stays():
  apply_fn, p0 = _affine()
  x_train = _data(0)
  pstar = _victim(apply_fn, p0, x_train)
  attack = bilevel_attack(apply_fn, "logistic", wd=WD, inner_tol=1e-10)
  res = loop.run(attack, fixed(np.asarray(x_train), N, jnp.float64),
                 jax.random.split(jax.random.PRNGKey(0), 1), {"lr_x": jnp.array([1.0])},
                 _target(pstar), num_steps=20, chunk_steps=20, log=False)
  last = res.history[-1]
  assert last["param_dist"][0] < 1e-16
  assert last["inner_grad_norm"][0] < 1e-9
  x = np.asarray(res.state.inner.x[0])
  assert np.linalg.norm(x - np.asarray(x_train)) < 1e-6


def test_one_hidden_softplus_decreases_upper_loss():
  module = OneHidden(width=8, init_scheme="normal", init_std=0.5)
  apply_fn = make_apply_fn(module)
  p0 = init_params(module, jax.random.PRNGKey(2), (D,), jnp.float64)
  x_train = _data(0)
  pstar = _victim(apply_fn, p0, x_train, act=jax.nn.softplus)
  x0 = np.asarray(x_train) + 0.2 * np.asarray(jax.random.normal(jax.random.PRNGKey(3), (N, D)))
  attack = bilevel_attack(apply_fn, "logistic", wd=WD, act="softplus", inner_tol=1e-9)
  res = loop.run(attack, fixed(x0, N, jnp.float64), jax.random.split(jax.random.PRNGKey(0), 1),
                 {"lr_x": jnp.array([0.5])}, _target(pstar), num_steps=60, chunk_steps=20,
                 log=False)
  first, last = res.history[0], res.history[-1]
  state0 = attack.init(jax.random.PRNGKey(0), {"lr_x": jnp.array(0.5)}, _target(pstar),
                       jnp.asarray(x0))
  _, m0 = attack.step(state0, {"lr_x": jnp.array(0.5)}, _target(pstar))
  assert float(last["loss"][0]) < 0.2 * float(m0["loss"])
  assert float(last["inner_grad_norm"][0]) < 1e-7  # the smooth inner problem converges
  assert not bool(last["diverged"][0])
  assert float(first["loss"][0]) >= float(last["loss"][0])


def test_unconverged_inner_is_reported_and_zero_wd_refused():
  apply_fn, p0 = _affine()
  x_train = _data(0)
  pstar = _victim(apply_fn, p0, x_train)
  attack = bilevel_attack(apply_fn, "logistic", wd=WD, inner_maxiter=1, theta0="gaussian",
                          warm_start=False, inner_tol=1e-10)
  state = attack.init(jax.random.PRNGKey(0), {"lr_x": jnp.array(0.1)}, _target(pstar),
                      _data(7))
  _, metrics = attack.step(state, {"lr_x": jnp.array(0.1)}, _target(pstar))
  assert float(metrics["inner_grad_norm"]) > 1e-6  # not converged, and says so
  assert float(metrics["inner_iters"]) == 1
  with pytest.raises(ValueError, match="wd > 0"):
    bilevel_attack(apply_fn, "logistic", wd=0.0)
  bilevel_attack(apply_fn, "logistic", wd=0.0, allow_zero_wd=True)  # explicit opt-in


def test_vmap_and_map_batching_agree():
  apply_fn, p0 = _affine()
  x_train = _data(0)
  pstar = _victim(apply_fn, p0, x_train)
  attack = bilevel_attack(apply_fn, "logistic", wd=WD, inner_tol=1e-10)

  def x_init(key, hp):
    return jax.random.uniform(key, (N, D), jnp.float64)

  keys = jax.random.split(jax.random.PRNGKey(4), 3)
  hp = {"lr_x": jnp.array([0.5, 1.0, 2.0])}
  out = {b: loop.run(attack, x_init, keys, hp, _target(pstar), num_steps=5, chunk_steps=5,
                     batching=b, log=False) for b in ("vmap", "map")}
  np.testing.assert_allclose(out["vmap"].state.inner.x, out["map"].state.inner.x,
                             rtol=1e-7, atol=1e-9)
  np.testing.assert_allclose(out["vmap"].history[-1]["loss"], out["map"].history[-1]["loss"],
                             rtol=1e-7, atol=1e-12)
