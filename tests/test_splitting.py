"""Sample splitting: its second-order prediction, its eigenpair, and that a split lowers the
KKT objective where plain descent has stalled."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import equations, kkt, splitting
from recon_jax.errors import ConfigError
from recon_jax.types import Target
from recon_jax.victims import models
from tests.helpers import mlp

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture(scope="module")
def case():
  """A softplus float64 MLP (its own derivative), m = 8 candidates in 5-D, residual nonzero."""
  module = models.build_model("mlp", widths=(6, 6), activation="softplus", init="kaiming")
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(1), (5,), jnp.float64)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(8, 5)))
  y = jnp.asarray([1.0, -1.0] * 4)
  lam = jnp.asarray([2.0, 1.5, 1.0, 0.8, 0.5, 0.4, 0.0, 0.0])  # one free slot per label
  act = None  # the network's own softplus
  target = Target(params, y, jnp.asarray(-10.0), jnp.asarray(10.0))
  return apply_fn, target, x, y, lam, act


def _objective(apply_fn, target, x, lam, y, act):
  return equations.stationarity(apply_fn, "binary", target.params, x, lam, y, act, "mean")


def _residual(apply_fn, target, x, lam, y, act):
  g = jax.grad(equations.weighted_output, argnums=2)(
    apply_fn, "binary", target.params, x, lam, y, act, "mean"
  )
  return jax.tree_util.tree_map(jnp.subtract, target.params, g)


@pytest.mark.slow
def test_scores_are_the_top_eigenpair_of_the_splitting_matrix(case):
  apply_fn, target, x, y, lam, act = case
  r = _residual(apply_fn, target, x, lam, y, act)
  mu, v = splitting.split_scores(apply_fn, "binary", target.params, r, x, lam, y, act, iters=5)

  def hessian(z, label):
    f = lambda w: splitting._directional_margin(  # noqa: E731
      apply_fn, "binary", target.params, r, w, label, act
    )
    return jax.hessian(f)(z)

  s = np.asarray(lam[:6, None, None] * jax.jit(jax.vmap(hessian))(x[:6], y[:6]))
  for i in range(6):
    top = np.linalg.eigvalsh(s[i])[-1]
    np.testing.assert_allclose(float(mu[i]), top, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(s[i] @ np.asarray(v[i]), float(mu[i]) * np.asarray(v[i]), atol=1e-6)


def test_a_split_changes_the_objective_as_the_second_order_term_predicts(case):
  apply_fn, target, x, y, lam, act = case
  r = _residual(apply_fn, target, x, lam, y, act)
  mu, v = splitting.split_scores(apply_fn, "binary", target.params, r, x, lam, y, act, iters=5)
  before = _objective(apply_fn, target, x, lam, y, act)
  i = int(jnp.argmax(jnp.where(lam > 0, mu, -jnp.inf)))
  assert float(mu[i]) > 0  # this case has a descent split
  for eps in (1e-2, 3e-3):
    x2, lam2, moved = splitting.split(x, lam, y, mu, v, eps)
    free = 6 if float(y[i]) > 0 else 7  # the free slot with its label
    assert np.asarray(moved).tolist() == [k in (i, free) for k in range(8)]
    change = _objective(apply_fn, target, x2, lam2, y, act) - before
    predicted = -(eps**2) * float(mu[i]) / x.shape[0]
    assert float(change) < 0
    np.testing.assert_allclose(float(change), predicted, rtol=0.05)


def test_no_split_without_a_free_slot_or_a_descent_direction(case):
  _, _, x, y, lam, _ = case
  busy = jnp.asarray([2.0, 1.5, 1.0, 0.8, 0.9, 0.7, 0.6, 0.6])  # all > 2.0 / 4
  mu = jnp.ones(8)
  v = jnp.ones_like(x)
  x2, lam2, moved = splitting.split(x, busy, y, mu, v, 0.1)
  assert not np.any(moved) and np.array_equal(x2, x) and np.array_equal(lam2, busy)
  x3, _, moved = splitting.split(x, lam, y, -mu, v, 0.1)  # every split would raise the loss
  assert not np.any(moved) and np.array_equal(x3, x)


@pytest.mark.slow
def test_the_attack_splits_where_descent_has_stalled(case):
  """Plain descent on 6 candidates to a stall; the same 6 plus 2 unused slots (lam 0, the
  same objective) under the splitting attack: its split lowers the objective below where
  descent stalled."""
  apply_fn, target, x, y, lam, act = case
  hp = {
    "lr_x": jnp.asarray(0.005),
    "lr_lam": jnp.asarray(0.005),
    "alpha": jnp.asarray(5.0),
    "lam_min": jnp.asarray(0.0),
  }
  live = target._replace(labels=y[:6])
  kw = dict(objective=kkt.Objective(w_prior=0.0, derivative="exact"))  # the lam >= 0 hinge on
  plain = kkt.kkt_attack(apply_fn, "binary", **kw)
  state = plain.init(jax.random.PRNGKey(0), hp, live, x[:6])._replace(lam=lam[:6])
  step = jax.jit(plain.step)
  for _ in range(1000):
    state, m = step(state, hp, live)
  plain_next = float(step(state, hp, live)[1]["stat"])
  split = kkt.kkt_attack(apply_fn, "binary", splitting=kkt.Splitting(every=1, eps=0.2), **kw)
  s = split.init(jax.random.PRNGKey(0), hp, target, x)
  # normalize='mean' divides the sum by m: the multipliers scale by 8/6 for the same sum.
  s = s._replace(x=s.x.at[:6].set(state.x), lam=jnp.zeros(8).at[:6].set(state.lam * 8 / 6))
  before = float(_objective(apply_fn, target, s.x, s.lam, y, act))
  stalled = float(_objective(apply_fn, live, state.x, state.lam, y[:6], act))
  np.testing.assert_allclose(before, stalled, rtol=1e-9)  # the same objective
  s2, m2 = jax.jit(split.step)(s, hp, target)
  assert float(m2["split"]) == 1.0 and int(s2.count) == 1
  after = float(_objective(apply_fn, target, s2.x, s2.lam, y, act))
  assert after < min(before, plain_next)


def test_bad_split_options_are_refused():
  apply_fn, _ = mlp((4,), d=3)
  with pytest.raises(ConfigError, match="every"):
    kkt.Splitting(every=-1)
  with pytest.raises(ConfigError, match="free multipliers"):
    kkt.kkt_attack(
      apply_fn,
      "binary",
      splitting=kkt.Splitting(every=10),
      multipliers=kkt.Multipliers(kind="tied"),
    )
  with pytest.raises(ConfigError, match="eps"):
    kkt.Splitting(every=10, eps=0.0)
