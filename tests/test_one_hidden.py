"""The KKT sum of a one-hidden-layer network in closed form (equations.one_hidden_sum): the same
value and the same gradient in the candidates and multipliers as autodiff (float64), in pixels
and in the span's coordinates, for the surrogate, ReLU's own and a smooth derivative, and for
the first-order and Levenberg-Marquardt attacks; networks it does not describe keep autodiff."""

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import equations, gauss_newton, kkt, span
from recon_jax.core import activations
from recon_jax.errors import ConfigError
from recon_jax.types import Target
from recon_jax.victims import models, targets

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture(autouse=True)
def _x64():
  jax.config.update("jax_enable_x64", True)
  yield


D, H, M = 10, 14, 5


def _net(arch="mlp", widths=(H,), bias="all", activation="relu", seed=0):
  module = models.build_model(arch, widths=widths, bias=bias, activation=activation)
  params = models.init_params(module, jax.random.PRNGKey(seed), (D,), jnp.float64)
  return models.make_apply_fn(module), params


def _problem(seed=0, bias="all", activation="relu"):
  """(apply_fn, marked, target, x, lam): a D-H-1 net, a known-init target halfway, m = M."""
  apply_fn, theta0 = _net(bias=bias, activation=activation, seed=seed)
  rng = np.random.default_rng(seed)
  star = jax.tree_util.tree_map(lambda a: a + 0.1 * rng.normal(size=a.shape), theta0)
  labels = jnp.asarray([1.0, -1.0, 1.0, -1.0, 1.0])
  target = targets.make_target(star, labels, np.zeros(D))
  target = targets.known_init_target(target, theta0, 0.5)
  own = activations.get_activation(activation)
  marked = equations.one_hidden(apply_fn, target.params, own, (D,))
  assert isinstance(marked, equations.OneHidden)
  x = jnp.asarray(rng.normal(size=(M, D)))
  lam = jnp.asarray(rng.uniform(0.1, 1.0, M))
  return apply_fn, marked, target, x, lam


def _value_and_grad(apply_fn, target, x, lam, act, normalize="mean"):
  def f(x, lam):
    return equations.stationarity(
      apply_fn, "binary", target.params, x, lam, target.labels, act, normalize, target.reference
    )

  return jax.value_and_grad(f, argnums=(0, 1))(x, lam)


@pytest.mark.parametrize(
  "act,bias,normalize",
  [
    (functools.partial(activations.surrogate_relu, alpha=3.0), "all", "mean"),
    (None, "all", "sum"),  # the network's own ReLU: a step derivative
    (None, "first", "mean"),  # no output bias
  ],
)
def test_the_closed_form_sum_is_autodiffs_value_and_gradient(act, bias, normalize):
  apply_fn, marked, target, x, lam = _problem(bias=bias)
  want, (gx, gl) = _value_and_grad(apply_fn, target, x, lam, act, normalize)
  got, (hx, hl) = _value_and_grad(marked, target, x, lam, act, normalize)
  assert float(want) > 1e-3  # a residual far from zero: every term counts
  np.testing.assert_allclose(got, want, rtol=1e-12)
  np.testing.assert_allclose(hx, gx, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(hl, gl, rtol=1e-9, atol=1e-12)


def test_a_smooth_activation_and_finite_differences():
  """softplus, the network's own derivative (act None): the closed form's gradient is its
  value's, by central differences in float64."""
  apply_fn, marked, target, x, lam = _problem(seed=1, activation="softplus")
  want, (gx, _) = _value_and_grad(apply_fn, target, x, lam, None)
  got, (hx, _) = _value_and_grad(marked, target, x, lam, None)
  np.testing.assert_allclose(got, want, rtol=1e-12)
  np.testing.assert_allclose(hx, gx, rtol=1e-9, atol=1e-12)
  v = jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
  f = lambda e: _value_and_grad(marked, target, x + e * v, lam, None)[0]
  fd = (f(1e-6) - f(-1e-6)) / 2e-6
  np.testing.assert_allclose(fd, jnp.sum(hx * v), rtol=1e-6)


def test_in_the_spans_coordinates_the_attacks_loss_and_step_are_autodiffs():
  """kkt_attack with a (whitened) basis: its loss and one Adam step from the same state."""
  apply_fn, marked, target, x, lam = _problem(seed=3)
  basis = np.linalg.qr(np.random.default_rng(4).normal(size=(D, 4)))[0]
  basis, dual = span.whitened(basis, np.array([4.0, 2.0, 1.0, 0.5]), 0.5)
  hp = {
    k: jnp.asarray(v)
    for k, v in {"lr_x": 0.01, "lr_lam": 0.01, "alpha": 5.0, "lam_min": 0.2}.items()
  }
  out = []
  for fn in (apply_fn, marked):
    attack = kkt.kkt_attack(
      fn, "binary", steps=kkt.Steps("adam"), subspace=kkt.Subspace(basis, (D,), dual)
    )
    t = attack.prepare(target)
    state = attack.init(jax.random.PRNGKey(0), hp, t, x)
    state, metrics = attack.step(state, hp, t)
    state, metrics = attack.step(state, hp, t)
    out.append((state.x, state.lam, metrics["loss"]))
  for a, b in zip(*out):
    np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)


def test_levenberg_marquardt_steps_through_the_closed_form():
  """Forward-mode products (LM's) of the closed form: the same step as autodiff's."""
  apply_fn, marked, target, x, _ = _problem(seed=5)
  target = target._replace(box_lo=target.box_lo[None], box_hi=target.box_hi[None])  # [m, D]
  basis = np.linalg.qr(np.random.default_rng(6).normal(size=(D, 4)))[0]
  hp = {"alpha": jnp.asarray(5.0), "lam_min": jnp.asarray(0.2)}
  out = []
  for fn in (apply_fn, marked):
    attack = gauss_newton.lm_attack(
      fn,
      basis,
      (D,),
      residual_fn=equations.lm_residual("tied"),
      derivative="surrogate",
      cg_maxiter=5,
    )
    t = attack.prepare(target)
    # jitted, as the loop runs them: eager, LM's init and step compile ~4x longer
    state = jax.jit(attack.init)(jax.random.PRNGKey(0), hp, t, x)
    state, metrics = jax.jit(attack.step)(state, hp, t)
    out.append((state.x, metrics["loss"]))
  for a, b in zip(*out):
    np.testing.assert_allclose(b, a, rtol=1e-8, atol=1e-12)


def test_only_a_one_hidden_layer_binary_network_is_marked():
  apply_fn, params = _net()
  relu = jax.nn.relu
  assert isinstance(equations.one_hidden(apply_fn, params, relu, (D,)), equations.OneHidden)
  # two hidden layers, another problem, no activation, another input size: autodiff
  deep_fn, deep = _net(widths=(H, H))
  assert equations.one_hidden(deep_fn, deep, relu, (D,)) is deep_fn
  assert equations.one_hidden(apply_fn, params, relu, (D,), "multiclass") is apply_fn
  assert equations.one_hidden(apply_fn, params, None, (D,)) is apply_fn
  assert equations.one_hidden(apply_fn, params, relu, (D + 1,)) is apply_fn
  # a network of that shape that computes something else (here: another activation)
  assert equations.one_hidden(apply_fn, params, jnp.tanh, (D,)) is apply_fn
  # the marked function is the network it wraps
  x = jnp.ones((2, D))
  marked = equations.one_hidden(apply_fn, params, relu, (D,))
  np.testing.assert_array_equal(marked(params, x), apply_fn(params, x))


@pytest.mark.parametrize("lam_init, in_closed_form", [("uniform", False), ("fit", True)])
def test_the_job_builds_the_closed_form_where_the_multipliers_are_fitted(
  monkeypatch, lam_init, in_closed_form
):
  """The main job's kkt attack on a one-hidden-layer victim takes the sum in closed form
  where its multipliers are fitted (lam_init='fit'), autodiff otherwise."""
  from recon_jax.attacks.spec import Common, Setup
  from recon_jax.job.settings import JobConfig
  from recon_jax.victims.recipe import VictimConfig

  apply_fn, params = _net()
  labels = jnp.ones(3)
  t = Target(params, labels, jnp.zeros(D), jnp.ones(D))
  setup = Setup("binary", VictimConfig(arch="mlp", widths=(H,)), apply_fn=apply_fn)
  setup = setup._replace(input_shape=(D,), n=3, target=t, common=Common.of(JobConfig()))
  calls = []
  closed = equations.one_hidden_sum
  monkeypatch.setattr(
    equations, "one_hidden_sum", lambda *a, **k: calls.append(1) or closed(*a, **k)
  )
  built = kkt._build(kkt.KKTOptions(lam_init=lam_init), setup)
  hp = {
    k: jnp.asarray(v) for k, v in {"lr_x": 0.1, "lr_lam": 0.1, "alpha": 5.0, "lam_min": 0.2}.items()
  }
  built.step(built.init(jax.random.PRNGKey(0), hp, t, jnp.zeros((3, D))), hp, t)
  assert bool(calls) == in_closed_form


def test_fitted_multipliers_are_the_nonnegative_least_squares_fit():
  """lam_init='fit': the Gram in closed form gives autodiff's residual for any multipliers,
  and the fitted ones are scipy's NNLS on the stacked autodiff gradients."""
  from scipy.optimize import nnls

  apply_fn, marked, target, x, lam = _problem(seed=7)
  act = functools.partial(activations.surrogate_relu, alpha=4.0)
  flat = lambda t: jax.flatten_util.ravel_pytree(t)[0]
  rows = jax.vmap(
    lambda xi, yi: flat(jax.grad(lambda p: yi * apply_fn(p, xi[None], act)[0, 0])(target.params))
  )(x, target.labels)
  fit = flat(target.fit)
  q_mat, q_vec = equations.one_hidden_gram(marked, target.params, target.fit, x, target.labels, act)
  np.testing.assert_allclose(q_mat, rows @ rows.T, rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(q_vec, rows @ fit, rtol=1e-10, atol=1e-12)
  want = nnls(np.asarray(rows.T), np.asarray(fit))[0]
  got = equations.fitted_multipliers(
    marked, target.params, target.fit, x, target.labels, act, "sum", iters=3000
  )
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
  mean = equations.fitted_multipliers(
    marked, target.params, target.fit, x, target.labels, act, "mean", iters=3000
  )
  np.testing.assert_allclose(mean, M * want, rtol=1e-5, atol=1e-6)
  # the attack starts there: its first stationarity is the fit's, below random multipliers'
  hp = {
    k: jnp.asarray(v) for k, v in {"lr_x": 0.0, "lr_lam": 0.0, "alpha": 4.0, "lam_min": 0.0}.items()
  }
  stat = []
  for how in ("uniform", "fit"):
    attack = kkt.kkt_attack(
      marked, "binary", steps=kkt.Steps("adam"), multipliers=kkt.Multipliers(init=how)
    )
    state = attack.init(jax.random.PRNGKey(0), hp, target, x)
    stat.append(float(attack.step(state, hp, target)[1]["stat"]))
  best = float(jnp.sum((fit - rows.T @ jnp.asarray(want)) ** 2))
  np.testing.assert_allclose(stat[1], best, rtol=1e-6)
  assert stat[0] > stat[1]
  with pytest.raises(ConfigError, match="init='fit'"):  # not marked: no closed form
    kkt.kkt_attack(apply_fn, "binary", multipliers=kkt.Multipliers(init="fit"))


def test_refitted_multipliers_follow_the_candidates():
  """lam_refit_every=2: after every second step the multipliers are the fit at the candidates
  of that step, and between refits they move by the optimiser."""
  _, marked, target, x, _ = _problem(seed=8)
  act = functools.partial(activations.surrogate_relu, alpha=4.0)
  hp = {
    k: jnp.asarray(v)
    for k, v in {"lr_x": 0.05, "lr_lam": 0.05, "alpha": 4.0, "lam_min": 0.0}.items()
  }
  attack = kkt.kkt_attack(
    marked,
    "binary",
    steps=kkt.Steps("adam"),
    multipliers=kkt.Multipliers(init="fit", refit_every=2),
  )
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)
  fit = lambda s: equations.fitted_multipliers(
    marked, target.params, target.fit, s.x, target.labels, act, "mean"
  )
  state = attack.step(state, hp, target)[0]
  assert float(jnp.max(jnp.abs(state.lam - fit(state)))) > 1e-4  # moved by Adam, not refitted
  state = attack.step(state, hp, target)[0]
  np.testing.assert_allclose(state.lam, fit(state), rtol=1e-10, atol=1e-12)
  for bad in (-1, 1.5):
    with pytest.raises(ConfigError, match="refit_every"):
      kkt.Multipliers(refit_every=bad)
  with pytest.raises(ConfigError, match="refit_every"):
    kkt.kkt_attack(marked, "binary", multipliers=kkt.Multipliers(kind="tied", refit_every=5))
