"""Tests for recon_jax.victims.models: the surrogate ReLU, homogeneity, initialisers, builders."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.core import activations
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


ALPHA = 3.0


def _bits(a):
  return np.asarray(a, np.float64).view(np.int64)


# ---------------------------------------------------------------- surrogate ReLU

SPECIAL = np.array(
  [-0.0, 0.0, -1e308, 1e308, 3.5, -2.0, np.inf, -np.inf, 1e-300, -1e-300, 0.1, -0.1]
)


@pytest.fixture
def optimized():
  """XLA's optimisations on (as in production) for a test of the compiled program's bits."""
  jax.config.update("jax_disable_most_optimizations", False)
  jax.clear_caches()  # no executable compiled without optimisations is reused
  yield
  jax.config.update("jax_disable_most_optimizations", True)
  jax.clear_caches()


@pytest.mark.usefixtures("optimized")
@pytest.mark.parametrize("fn", [activations.surrogate_relu, activations.surrogate_relu_jvp])
def test_surrogate_forward_is_relu_bitwise(fn):
  x = jnp.asarray(SPECIAL)
  want = _bits(jax.nn.relu(x))
  np.testing.assert_array_equal(_bits(fn(x, ALPHA)), want)
  np.testing.assert_array_equal(_bits(jax.jit(fn)(x, ALPHA)), want)
  # The primal computed inside a differentiated program is the same ReLU.
  y, _ = jax.vjp(lambda z: fn(z, ALPHA), x)
  np.testing.assert_array_equal(_bits(y), want)
  y, _ = jax.jvp(lambda z: activations.surrogate_relu_jvp(z, ALPHA), (x,), (jnp.ones_like(x),))
  np.testing.assert_array_equal(_bits(y), want)


@pytest.mark.usefixtures("optimized")
def test_surrogate_relu_float32_forward():
  x = jnp.asarray([-1.5, 0.0, 2.25, 1e30], jnp.float32)
  y = activations.surrogate_relu(x, ALPHA)
  assert y.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(y), np.asarray(jax.nn.relu(x)))


def test_surrogate_first_derivative_is_sigmoid():
  x = jnp.linspace(-4.0, 4.0, 17)
  sig = 1.0 / (1.0 + np.exp(-ALPHA * np.asarray(x)))
  g_vjp = jax.vmap(jax.grad(lambda z: activations.surrogate_relu(z, ALPHA)))(x)
  g_jvp = jax.vmap(jax.grad(lambda z: activations.surrogate_relu_jvp(z, ALPHA)))(x)
  _, t_fwd = jax.jvp(lambda z: activations.surrogate_relu_jvp(z, ALPHA), (x,), (jnp.ones_like(x),))
  for g in (g_vjp, g_jvp, t_fwd):
    np.testing.assert_allclose(np.asarray(g), sig, rtol=1e-14, atol=0)
  # Not ReLU's step: at x = -1 ReLU has slope 0, the surrogate sigmoid(-3).
  assert float(g_vjp[4]) > 1e-3


def test_surrogate_alpha_gets_zero_gradient():
  # alpha is a hyperparameter: the custom_vjp reports no gradient for it.
  g = jax.grad(lambda a: jnp.sum(activations.surrogate_relu(jnp.array([0.5, -0.5]), a)))(2.0)
  assert float(g) == 0.0


def test_surrogate_second_derivative_is_sigmoid_derivative():
  x = jnp.linspace(-2.0, 2.0, 9)
  s = 1.0 / (1.0 + np.exp(-ALPHA * np.asarray(x)))
  for fn in (activations.surrogate_relu, activations.surrogate_relu_jvp):
    h = jax.vmap(jax.grad(jax.grad(lambda z: fn(z, ALPHA))))(x)
    np.testing.assert_allclose(np.asarray(h), ALPHA * s * (1 - s), rtol=1e-13)
  # True ReLU has zero curvature everywhere off 0.
  h_relu = jax.vmap(jax.grad(jax.grad(jax.nn.relu)))(x)
  assert np.all(np.asarray(h_relu) == 0)


# ------------------------------------------------- grad of grad (one hidden layer)


def _one_hidden_setup(seed=0, d=5, h=7, m=4):
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(h, d))
  v = rng.normal(size=(h,))
  x = rng.normal(size=(m, d))
  lam = rng.uniform(0.5, 1.5, size=(m,))
  return w, v, x, lam


def _kkt_loss(act, w, v, x, lam):
  """||theta - sum_i lam_i grad_theta Phi(theta; x_i)||^2 with Phi = v . act(W x)."""
  theta = {"w": jnp.asarray(w), "v": jnp.asarray(v)}

  def weighted(p):
    out = act(x @ p["w"].T) @ p["v"]  # [m]
    return jnp.sum(lam * out)

  g = jax.grad(weighted)(theta)
  return sum(jnp.sum(jnp.square(theta[k] - g[k])) for k in theta)


def _kkt_grad_by_hand(w, v, x, lam, alpha):
  """d/dx_i of the loss above, written out, with the surrogate derivative s = sigmoid(alpha z).

  R_W = W - sum_i lam_i (v*s_i) x_i^T,  R_v = v - sum_i lam_i relu(z_i),  z_i = W x_i.
  dL/dx_i = -2 lam_i [R_W^T (v*s_i) + W^T (v * s'_i * (R_W x_i)) + W^T (R_v * s_i)],
  s' = alpha s (1 - s).
  """
  z = x @ w.T  # [m, h]
  s = 1.0 / (1.0 + np.exp(-alpha * z))
  ds = alpha * s * (1 - s)
  r_w = w - np.einsum("i,ik,id->kd", lam, v * s, x)
  r_v = v - np.einsum("i,ik->k", lam, np.maximum(z, 0))
  grad_x = np.zeros_like(x)
  grad_lam = np.zeros_like(lam)
  for i in range(x.shape[0]):
    grad_x[i] = (
      -2 * lam[i] * (r_w.T @ (v * s[i]) + w.T @ (v * ds[i] * (r_w @ x[i])) + w.T @ (r_v * s[i]))
    )
    grad_lam[i] = -2 * (np.sum(r_w * np.outer(v * s[i], x[i])) + r_v @ np.maximum(z[i], 0))
  return grad_x, grad_lam


def test_grad_of_grad_matches_hand_formula_and_jvp_twin():
  w, v, x, lam = _one_hidden_setup()
  want_x, want_lam = _kkt_grad_by_hand(w, v, x, lam, ALPHA)
  acts = {
    "vjp": functools.partial(activations.surrogate_relu, alpha=ALPHA),
    "jvp": functools.partial(activations.surrogate_relu_jvp, alpha=ALPHA),
    "relu": jax.nn.relu,
  }

  @jax.jit  # one compiled program for all three (eagerly, every op compiles on its own)
  def grads(xx, ll):
    return {
      name: jax.grad(functools.partial(_kkt_loss, act, w, v), argnums=(0, 1))(xx, ll)
      for name, act in acts.items()
    }

  got = grads(jnp.asarray(x), jnp.asarray(lam))
  for name in ("vjp", "jvp"):
    gx, glam = got[name]
    np.testing.assert_allclose(np.asarray(gx), want_x, rtol=1e-12, atol=1e-13, err_msg=name)
    np.testing.assert_allclose(np.asarray(glam), want_lam, rtol=1e-12, atol=1e-13, err_msg=name)
  # The same loss through true ReLU differs: it has the step, not sigmoid, and no s'.
  gx_relu = got["relu"][0]
  assert np.max(np.abs(np.asarray(gx_relu) - want_x)) > 1e-2 * np.max(np.abs(want_x))


def test_grad_of_grad_second_order_term_is_present():
  # Dropping the s' term from the hand formula must break the match, so the
  # check above really tests the surrogate at the second differentiation level.
  w, v, x, lam = _one_hidden_setup(seed=1)
  gx = jax.jit(
    jax.grad(
      functools.partial(_kkt_loss, functools.partial(activations.surrogate_relu, alpha=ALPHA), w, v)
    )
  )(jnp.asarray(x), jnp.asarray(lam))
  z = x @ w.T
  s = 1.0 / (1.0 + np.exp(-ALPHA * z))
  r_w = w - np.einsum("i,ik,id->kd", lam, v * s, x)
  r_v = v - np.einsum("i,ik->k", lam, np.maximum(z, 0))
  first_order_only = np.stack(
    [-2 * lam[i] * (r_w.T @ (v * s[i]) + w.T @ (r_v * s[i])) for i in range(x.shape[0])]
  )
  assert np.max(np.abs(np.asarray(gx) - first_order_only)) > 1e-3


# ------------------------------------------------------------ homogeneity


def _mlp(bias, widths=(8, 8), out_dim=1):
  return models.build_model(
    "mlp", out_dim=out_dim, widths=widths, bias=bias, init="normal", init_std=0.5
  )


@pytest.mark.parametrize("bias", ["none", "first"])
def test_mlp_is_homogeneous_of_degree_num_layers(bias):
  module = _mlp(bias)
  apply_fn = jax.jit(models.make_apply_fn(module))
  params = models.init_params(module, jax.random.PRNGKey(0), (6,), jnp.float64)
  if bias == "first":  # zero-initialised: make the first-layer bias matter
    params["params"]["layer_0"]["bias"] = 0.3 * jnp.ones(8)
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 6), jnp.float64)
  out = apply_fn(params, x)
  assert float(jnp.max(jnp.abs(out))) > 1e-3
  n_layers = 3
  # Scaling by 2 is exact in floating point: equality is bitwise.
  out2 = apply_fn(jax.tree_util.tree_map(lambda a: 2 * a, params), x)
  np.testing.assert_array_equal(np.asarray(out2), 2.0**n_layers * np.asarray(out))
  out_c = apply_fn(jax.tree_util.tree_map(lambda a: 0.7 * a, params), x)
  np.testing.assert_allclose(np.asarray(out_c), 0.7**n_layers * np.asarray(out), rtol=1e-12)


def test_mlp_with_all_biases_is_not_homogeneous():
  module = _mlp("all")
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (6,), jnp.float64)
  params = jax.tree_util.tree_map(lambda a: a + 0.3, params)  # non-zero biases
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 6), jnp.float64)
  out = np.asarray(apply_fn(params, x))
  out_c = np.asarray(apply_fn(jax.tree_util.tree_map(lambda a: 0.7 * a, params), x))
  assert np.max(np.abs(out_c - 0.7**3 * out)) > 1e-3


def test_bias_modes_create_the_stated_parameters():
  x_shape = (6,)
  got = {}
  for bias in models.BIAS_MODES:
    p = models.init_params(_mlp(bias), jax.random.PRNGKey(0), x_shape)["params"]
    got[bias] = sorted(k for k in p if "bias" in p[k])
  assert got == {"none": [], "first": ["layer_0"], "all": ["layer_0", "layer_1", "layer_2"]}


def test_euler_identity_with_relu_and_surrogate_deviation():
  # For a degree-L homogeneous net <theta, grad_theta Phi> = L Phi (true ReLU).
  module = _mlp("none", widths=(8,))
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (6,), jnp.float64)
  x = jax.random.normal(jax.random.PRNGKey(1), (1, 6), jnp.float64)

  def euler(act):
    phi = lambda p: apply_fn(p, x, act)[0, 0]  # noqa: E731
    g = jax.grad(phi)(params)
    inner = sum(
      jnp.vdot(a, b)
      for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(g))
    )
    return float(inner), float(phi(params))

  inner, phi = euler(None)
  np.testing.assert_allclose(inner, 2 * phi, rtol=1e-12)
  # The surrogate keeps the forward, but its gradient is not ReLU's:
  # <theta, grad> - 2 Phi = sum_k v_k (z_k s(z_k) - relu(z_k)) for one hidden layer.
  surrogate = functools.partial(activations.surrogate_relu, alpha=ALPHA)
  inner_s, phi_s = euler(surrogate)
  assert phi_s == phi
  w0 = np.asarray(params["params"]["layer_0"]["kernel"])
  v = np.asarray(params["params"]["layer_1"]["kernel"])[:, 0]
  z = np.asarray(x)[0] @ w0
  s = 1.0 / (1.0 + np.exp(-ALPHA * z))
  np.testing.assert_allclose(
    inner_s - 2 * phi, np.sum(v * (z * s - np.maximum(z, 0))), rtol=1e-10, atol=1e-14
  )
  # ...and the gap closes as alpha grows.
  inner_sharp, _ = euler(functools.partial(activations.surrogate_relu, alpha=1e4))
  assert abs(inner_sharp - 2 * phi) < 1e-3 * abs(inner_s - 2 * phi)


# ------------------------------------------------------------ initialisers


def test_first_layer_std_and_init_std_respected():
  module = models.build_model(
    "mlp", widths=(32, 32), bias="first", init="normal", init_std=0.003, first_layer_std=1e-4
  )
  p = models.init_params(module, jax.random.PRNGKey(0), (16,), jnp.float64)["params"]
  k0 = np.asarray(p["layer_0"]["kernel"])
  k1 = np.asarray(p["layer_1"]["kernel"])
  assert k0.shape == (16, 32) and k1.shape == (32, 32)
  np.testing.assert_allclose(k0.std(), 1e-4, rtol=0.1)
  np.testing.assert_allclose(k1.std(), 0.003, rtol=0.1)
  assert abs(k0.mean()) < 3e-5
  assert np.all(np.asarray(p["layer_0"]["bias"]) == 0)
  assert p["layer_2"]["kernel"].dtype == jnp.float64


def test_kaiming_std_is_he():
  module = models.build_model("mlp", widths=(32,), bias="none", init="kaiming")
  p = models.init_params(module, jax.random.PRNGKey(3), (16,))["params"]
  np.testing.assert_allclose(np.asarray(p["layer_0"]["kernel"]).std(), np.sqrt(2 / 16), rtol=0.1)
  np.testing.assert_allclose(np.asarray(p["layer_1"]["kernel"]).std(), np.sqrt(2 / 32), rtol=0.3)
  small = models.build_model("mlp", widths=(32,), bias="none", init="kaiming", init_gain=0.1)
  q = models.init_params(small, jax.random.PRNGKey(3), (16,))["params"]
  np.testing.assert_allclose(
    np.asarray(q["layer_0"]["kernel"]), 0.1 * np.asarray(p["layer_0"]["kernel"]), rtol=1e-6
  )


@pytest.mark.parametrize("arch", ["mlp", "affine", "one_hidden"])
def test_uniform_init_in_unit_interval(arch):
  module = models.build_model(arch, widths=(32,), bias="all", init="uniform")
  p = models.init_params(module, jax.random.PRNGKey(0), (16,), jnp.float64)
  leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(p)]
  assert any(a.ndim == 1 for a in leaves)  # biases are drawn too
  for a in leaves:
    assert np.all(a >= 0) and np.all(a < 1)
  flat = np.concatenate([a.ravel() for a in leaves])
  np.testing.assert_allclose(flat.mean(), 0.5, atol=0.05)
  np.testing.assert_allclose(flat.std(), np.sqrt(1 / 12), rtol=0.1)


# ------------------------------------------------------------ builders and errors


@pytest.mark.parametrize(
  "kwargs, match",
  [
    (dict(arch="resnet"), "unknown architecture"),
    (dict(arch="mlp", bias="some"), "bias"),
    (dict(arch="mlp", widths=(8, 0)), "widths"),
    (dict(arch="mlp", activation="swish"), "unknown activation"),
  ],
)
def test_build_model_rejects_bad_config(kwargs, match):
  arch = kwargs.pop("arch")
  with pytest.raises(ValueError, match=match):
    models.build_model(arch, **kwargs)


def test_bad_init_scheme_raises_on_init():
  for init, kw, match in [("orthogonal", {}, "unknown init"), ("normal", {}, "std > 0")]:
    module = models.build_model("mlp", widths=(4,), init=init, **kw)
    with pytest.raises(ValueError, match=match):
      models.init_params(module, jax.random.PRNGKey(0), (3,))


def test_get_activation():
  z = jnp.array([-1.0, 0.5])
  np.testing.assert_array_equal(np.asarray(activations.get_activation("relu")(z)), [0.0, 0.5])
  np.testing.assert_array_equal(np.asarray(activations.get_activation("identity")(z)), z)
  act = activations.get_activation("surrogate_relu", alpha=2.0)
  np.testing.assert_allclose(
    float(jax.grad(lambda t: act(t))(-1.0)), 1 / (1 + np.exp(2.0)), rtol=1e-14
  )
  for alpha in (None, 0.0, -1.0):
    with pytest.raises(ValueError, match="alpha > 0"):
      activations.get_activation("surrogate_relu", alpha=alpha)


@pytest.mark.parametrize(
  "arch, shape, out_dim",
  [("mlp", (4, 4, 1), 3), ("affine", (5,), 2), ("one_hidden", (5,), 1), ("cnn", (6, 6, 2), 1)],
)
def test_output_shapes(arch, shape, out_dim):
  module = models.build_model(arch, out_dim=out_dim, widths=(4, 4))
  apply_fn = jax.jit(models.make_apply_fn(module))
  params = models.init_params(module, jax.random.PRNGKey(0), shape)
  assert apply_fn(params, jnp.zeros((3, *shape), jnp.float32)).shape == (3, out_dim)


def test_default_activation_and_act_override():
  module = models.build_model(
    "mlp", widths=(8,), bias="all", activation="tanh", init="normal", init_std=1.0
  )
  apply_fn = models.make_apply_fn(module)
  p = models.init_params(module, jax.random.PRNGKey(0), (4,), jnp.float64)
  x = jax.random.normal(jax.random.PRNGKey(1), (3, 4), jnp.float64)
  k0, b0 = p["params"]["layer_0"]["kernel"], p["params"]["layer_0"]["bias"]
  k1, b1 = p["params"]["layer_1"]["kernel"], p["params"]["layer_1"]["bias"]
  for act, fn in ((None, jnp.tanh), (jax.nn.relu, jax.nn.relu)):
    want = fn(x @ k0 + b0[None]) @ k1 + b1[None]
    np.testing.assert_allclose(np.asarray(apply_fn(p, x, act)), np.asarray(want), rtol=1e-13)


def test_small_cnn_with_surrogate():
  module = models.build_model("cnn", widths=(4, 4), bias="first")
  apply_fn = models.make_apply_fn(module)
  # One compiled initialiser (eagerly, each op of the conv initialisers compiles on its own).
  init = jax.jit(models.init_params, static_argnums=(0, 2, 3))
  params = init(module, jax.random.PRNGKey(0), (6, 6, 1), jnp.float64)
  params = jax.tree_util.tree_map(lambda a: a + 0.05, params)  # non-zero first bias
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 6, 6, 1), jnp.float64)
  surrogate = functools.partial(activations.surrogate_relu, alpha=ALPHA)
  np.testing.assert_array_equal(
    np.asarray(apply_fn(params, x, surrogate)), np.asarray(apply_fn(params, x))
  )

  def loss(xx, act):
    g = jax.grad(lambda p: jnp.sum(apply_fn(p, xx, act)))(params)
    return sum(
      jnp.sum(jnp.square(a - b))
      for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(g))
    )

  acts = (surrogate, functools.partial(activations.surrogate_relu_jvp, alpha=ALPHA), jax.nn.relu)
  # The three gradients in one compiled program (one compile instead of three).
  grads = jax.jit(lambda xx: [jax.grad(loss)(xx, act) for act in acts])(x)
  g_s, g_twin, g_relu = (np.asarray(g) for g in grads)
  assert np.all(np.isfinite(g_s))
  np.testing.assert_allclose(g_s, g_twin, rtol=1e-11, atol=1e-14)
  assert np.max(np.abs(g_s - g_relu)) > 1e-3 * np.max(np.abs(g_s))
