"""The first layer's span (recon_jax.attacks.span): its rank without a tolerance, the target in
its coordinates, and an attack that searches coefficients there (float64, planted)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import equations, kkt, span
from recon_jax.core import activations
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.types import Target, prepared
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


@pytest.fixture(autouse=True)
def _x64():
  jax.config.update("jax_enable_x64", True)
  yield


def _change(rng, n, d, h, weak=1.0, noise=1e-7):
  """A first-layer change X^T A (n training inputs) plus rounding-like noise; sample 0
  contributes ``weak`` times as much as the others."""
  x = rng.normal(size=(n, d))
  a = rng.normal(size=(n, h))
  a[0] *= weak
  return x, x.T @ a + noise * rng.normal(size=(d, h))


def test_the_span_is_the_training_inputs_above_the_noise_floor():
  rng = np.random.default_rng(0)
  n, d, h = 5, 40, 60
  x, kernel = _change(rng, n, d, h, weak=1e-3)
  basis, info = span.span_basis({"params": {"layer_0": {"kernel": kernel}}}, n=n)
  assert info.dim == n and info.rule == "noise" and basis.shape == (d, n)
  np.testing.assert_allclose(basis.T @ basis, np.eye(n), atol=1e-10)
  inside = basis @ (basis.T @ x.T)
  assert np.linalg.norm(inside - x.T) < 1e-4 * np.linalg.norm(x)  # the weak one included
  summary = info.summary()
  assert summary["dim"] == n and summary["weakest_kept_rel"] > 10 * summary["noise_floor_rel"]
  # A fixed tolerance above the weak sample's share drops it; 0 (automatic) does not.
  assert span.span_basis({"params": {"layer_0": {"kernel": kernel}}}, 1e-2)[1].dim == n - 1
  # Inputs constant over the training set (an empty border): their directions are exact
  # zeros, neither data nor noise, and the floor is read from the rest.
  _, wide = _change(rng, n, d, 150, weak=1e-3)  # h > d, as in the victims
  dead = np.concatenate([wide, np.zeros((60, 150))])  # 60 more inputs training never moved
  assert span.span_basis({"params": {"layer_0": {"kernel": dead}}}, n=n)[1].dim == n
  # A kernel that fills every direction (no noise bulk): all of them are kept.
  full = rng.normal(size=(d, h))
  assert span.span_basis({"params": {"layer_0": {"kernel": full}}}, n=n)[1].rule == "all"
  for bad in (-0.1, 1.0, float("nan"), True):
    with pytest.raises(ConfigError, match="rel_tol"):
      span.span_basis({"params": {"layer_0": {"kernel": kernel}}}, bad)
  with pytest.raises(ConfigError, match="dense first layer"):
    span.span_basis({"params": {"conv_0": {"kernel": np.ones((3, 3, 1, 2))}}})
  with pytest.raises(ConfigError, match="zero"):
    span.span_basis({"params": {"layer_0": {"kernel": np.zeros((d, h))}}})


@pytest.fixture(scope="module")
def net():
  """(apply_fn, theta*, theta_0, x, y): a 12-16-1 ReLU net whose first layer moved in the
  span of its 3 training inputs."""
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(1)
  n, d, h = 3, 12, 16
  module = models.build_model("one_hidden", widths=(h,), init="kaiming")
  apply_fn = models.make_apply_fn(module)
  theta0 = models.init_params(module, jax.random.PRNGKey(0), (d,), jnp.float64)
  x = rng.normal(size=(n, d))
  star = jax.tree_util.tree_map(lambda a: a + 0.1 * rng.normal(size=a.shape), theta0)
  star["params"]["layer_0"]["kernel"] = theta0["params"]["layer_0"]["kernel"] + x.T @ rng.normal(
    size=(n, h)
  )
  return apply_fn, star, theta0, jnp.asarray(x), jnp.asarray([1.0, -1.0, 1.0])


def test_the_reduced_target_gives_the_same_residual_up_to_a_constant(net):
  """In the span's coordinates the network computes what it computes on the decoded
  images, and the squared residual is the full one minus what lies outside the span."""
  apply_fn, star, theta0, x, y = net
  change = jax.tree_util.tree_map(jnp.subtract, star, theta0)
  target = Target(star, y, jnp.asarray(-5.0), jnp.asarray(5.0), reference=change)
  basis, info = span.span_basis(change, n=3)
  seen = span.reduce_target(target, basis)
  assert span.reduce_target(seen, basis) is seen  # idempotent
  rng = np.random.default_rng(2)
  c = jnp.asarray(rng.normal(size=(4, info.dim)))
  xs = span.decode(c, basis, (12,))
  np.testing.assert_allclose(span.encode(xs, basis), c, atol=1e-12)
  np.testing.assert_allclose(apply_fn(seen.params, c), apply_fn(star, xs), atol=1e-12)
  act = functools.partial(activations.surrogate_relu, alpha=5.0)
  lam = jnp.asarray(rng.uniform(size=4))
  labels = jnp.asarray([1.0, -1.0, 1.0, -1.0])
  full = equations.stationarity(apply_fn, "binary", star, xs, lam, labels, act, reference=change)
  reduced = equations.stationarity(
    apply_fn, "binary", seen.params, c, lam, labels, act, reference=seen.reference
  )
  np.testing.assert_allclose(float(reduced + seen.span.outside), float(full), rtol=1e-10)
  np.testing.assert_allclose(
    float(equations.relative(reduced, seen)), float(equations.relative(full, target)), rtol=1e-10
  )
  with pytest.raises(ConfigError, match="basis"):
    span.reduce_target(target, np.ones((5, 2)))


def test_whitened_coordinates_weight_the_first_layer_residual_by_direction(net):
  """With whitened coordinates the network still computes what it computes on the decoded
  images, encode inverts decode, and the first layer's residual is the orthonormal one with
  direction j scaled by w_j = (s_j / s_1)^-power (normalised so the reference's first-layer
  energy is unchanged); the other layers' residual is untouched."""
  apply_fn, star, theta0, x, y = net
  change = jax.tree_util.tree_map(jnp.subtract, star, theta0)
  target = Target(star, y, jnp.asarray(-5.0), jnp.asarray(5.0), reference=change)
  basis, info = span.span_basis(change, n=3)
  s = info.singular_values[: info.dim]
  assert s[0] > 2 * s[-1]  # directions of unequal weight, or the test would prove nothing
  fwd, dual = span.whitened(basis, info.singular_values, 1.0)
  w = np.linalg.norm(dual, axis=0)  # the columns of basis are unit vectors
  np.testing.assert_allclose(w * s / (w[0] * s[0]), 1.0, rtol=1e-10)  # every direction alike
  np.testing.assert_allclose(np.sum((w * s) ** 2), np.sum(s**2), rtol=1e-10)
  orth, white = span.reduce_target(target, basis), span.reduce_target(target, fwd, dual)
  rng = np.random.default_rng(4)
  c = jnp.asarray(rng.normal(size=(4, info.dim)))  # orthonormal coordinates
  cw = c * w[None, :]  # the same candidates in whitened coordinates
  xs = span.decode(c, basis, (12,))
  np.testing.assert_allclose(span.decode(cw, fwd, (12,)), xs, atol=1e-12)
  np.testing.assert_allclose(span.encode(xs, white.span.encoder()), cw, atol=1e-10)
  np.testing.assert_allclose(apply_fn(white.params, cw), apply_fn(star, xs), atol=1e-12)
  act = functools.partial(activations.surrogate_relu, alpha=5.0)
  lam, labels = jnp.asarray(rng.uniform(size=4)), jnp.asarray([1.0, -1.0, 1.0, -1.0])

  def residual(t, coeffs):
    grads = jax.grad(equations.weighted_output, argnums=2)(
      apply_fn, "binary", t.params, coeffs, lam, labels, act
    )
    return jax.tree_util.tree_map(jnp.subtract, t.fit, grads)

  r_orth, r_white = residual(orth, c)["params"], residual(white, cw)["params"]
  k_orth = r_orth["layer_0"]["kernel"]
  np.testing.assert_allclose(r_white["layer_0"]["kernel"], k_orth * w[:, None], atol=1e-10)
  np.testing.assert_allclose(r_white["layer_0"]["bias"], r_orth["layer_0"]["bias"], atol=1e-12)
  np.testing.assert_allclose(r_white["layer_1"]["kernel"], r_orth["layer_1"]["kernel"], atol=1e-12)
  assert white.span.outside == pytest.approx(float(orth.span.outside), rel=1e-10)
  assert span.whitened(basis, info.singular_values, 0.0)[1] is None
  for bad in (-0.5, 1.5, float("nan")):
    with pytest.raises(ConfigError, match="power"):
      span.whitened(basis, info.singular_values, bad)


def test_adam_on_the_coefficients_keeps_the_candidates_in_the_span(net):
  """Adam scales each entry of what it moves: on pixels it would leave the span, on the
  span's coefficients it cannot; the objective goes down."""
  apply_fn, star, theta0, x, y = net
  change = jax.tree_util.tree_map(jnp.subtract, star, theta0)
  basis, _ = span.span_basis(change, n=3)
  attack = kkt.kkt_attack(
    apply_fn, "binary", steps=kkt.Steps("adam"), subspace=kkt.Subspace(basis, (12,))
  )
  target = Target(star, jnp.asarray([1.0, -1.0, 1.0, -1.0]), jnp.asarray(-5.0), jnp.asarray(5.0))
  target = target._replace(reference=change)
  hp = {
    "lr_x": jnp.full(2, 0.05),
    "lr_lam": jnp.full(2, 0.05),
    "alpha": jnp.full(2, 10.0),
    "lam_min": jnp.full(2, 0.0),
  }
  x0 = jnp.asarray(np.random.default_rng(3).normal(size=(4, 12)))
  res = loop.run_stages(
    attack,
    lambda k, h: x0,
    jax.random.split(jax.random.PRNGKey(0), 2),
    [(60, hp)],
    target,
    chunk_steps=30,
    log=False,
  )
  assert res.state.inner.x.shape == (2, 4, basis.shape[1])
  cands, _ = jax.vmap(attack.candidates)(res.state.inner)
  flat = np.asarray(cands).reshape(-1, 12)
  np.testing.assert_allclose(flat, flat @ basis @ basis.T, atol=1e-10)
  assert np.all(res.history[-1]["stat_rel"] < res.history[0]["stat_rel"])
  assert prepared(attack, target).span is not None
  with pytest.raises(TypeError, match="input_shape"):
    kkt.Subspace(basis)
