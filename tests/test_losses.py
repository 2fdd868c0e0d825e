"""Tests for recon_jax.core.losses: per-sample losses, margins, the training energy, tree norms."""

import functools

from helpers import mlp
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.core import losses

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

_mlp = functools.partial(mlp, widths=(8,), d=4)


def _blobs(n_per_class=4, d=4, seed=0):
  rng = np.random.default_rng(seed)
  x = np.concatenate([c + 0.3 * rng.normal(size=(n_per_class, d)) for c in 3.0 * np.eye(d)[:2]])
  return jnp.asarray(x), jnp.asarray(np.repeat([1.0, -1.0], n_per_class))


def _leaves(tree):
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def test_problem_for_loss_and_output_width():
  assert [losses.problem_for_loss(l) for l in losses.LOSSES] == ["binary", "multiclass", "general"]
  assert losses.num_outputs("ce", 10) == 10 and losses.num_outputs("logistic", 2) == 1
  with pytest.raises(ValueError, match="loss must be one of"):
    losses.problem_for_loss("hinge")


def test_tree_norms_by_hand():
  a = {"w": jnp.array([[1.0, 2.0]]), "b": jnp.array([3.0])}
  b = {"w": jnp.array([[0.0, 1.0]]), "b": jnp.array([-1.0])}
  assert float(losses.tree_sq_norm(a)) == 14.0
  assert float(losses.tree_dot(a, b)) == 2.0 - 3.0
  assert float(losses.tree_sq_dist(a, b)) == 1.0 + 1.0 + 16.0


def test_per_sample_losses_by_hand():
  out = jnp.array([[2.0, -1.0, 0.5], [0.0, 1.0, 3.0]])
  y = jnp.array([1.0, -1.0])
  np.testing.assert_allclose(
    np.asarray(losses.per_sample_loss("logistic", out[:, :1], y)),
    [np.log1p(np.exp(-2.0)), np.log(2.0)],
    rtol=1e-14,
  )
  labels = jnp.array([0, 2])
  o = np.asarray(out)
  want = [np.log(np.exp(o[0]).sum()) - o[0, 0], np.log(np.exp(o[1]).sum()) - o[1, 2]]
  np.testing.assert_allclose(
    np.asarray(losses.per_sample_loss("ce", out, labels)), want, rtol=1e-14
  )
  np.testing.assert_allclose(
    np.asarray(losses.per_sample_loss("mse", out[:, :1], jnp.array([1.5, -2.0]))),
    [0.5 * 0.25, 0.5 * 4.0],
    rtol=1e-14,
  )
  with pytest.raises(ValueError, match="loss must be one of"):
    losses.per_sample_loss("hinge", out, y)


def test_margins_by_hand():
  out = jnp.array([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0], [5.0, 5.0, -1.0], [0.0, -1.0, 4.0]])
  y = jnp.array([1, 0, 1, 2])
  # f_y - max_{j != y} f_j: 3-2, 1-3, 5-5 (tie), 4-0.
  np.testing.assert_allclose(np.asarray(losses.margins("ce", out, y)), [1.0, -2.0, 0.0, 4.0])
  b = jnp.array([[2.0], [-0.5], [1.5]])
  np.testing.assert_allclose(
    np.asarray(losses.margins("logistic", b, jnp.array([1.0, 1.0, -1.0]))), [2.0, -0.5, -1.5]
  )
  np.testing.assert_allclose(np.asarray(losses.margins("mse", b, jnp.zeros(3))), np.asarray(b))


def test_error_rate_and_predictions():
  out = jnp.array([[0.3], [-0.2], [0.0], [-1.0]])
  y = jnp.array([1.0, 1.0, -1.0, -1.0])
  # Predictions: +1, -1, +1 (0 counts as +1), -1 -> two wrong.
  np.testing.assert_allclose(float(losses.error_rate("logistic", out, y)), 0.5)
  out_c = jnp.array([[0.1, 0.9], [0.8, 0.2], [0.4, 0.6]])
  np.testing.assert_allclose(float(losses.error_rate("ce", out_c, jnp.array([1, 1, 1]))), 1 / 3)


def test_kkt_margins_agree_with_training_margins():
  out = jnp.array([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0], [5.0, 5.0, -1.0], [0.0, -1.0, 4.0]])
  labels = jnp.array([1, 0, 1, 2])
  mc = np.asarray(losses.margins("multiclass", out, labels))
  np.testing.assert_allclose(mc, [1.0, -2.0, 0.0, 4.0])
  np.testing.assert_allclose(mc, np.asarray(losses.margins("ce", out, labels)))
  np.testing.assert_allclose(
    np.asarray(losses.margins("binary", out[:, :1], jnp.array([1.0, -1.0, -1.0, 1.0]))),
    [1.0, -1.0, -5.0, 0.0],
  )
  np.testing.assert_array_equal(np.asarray(losses.margins("general", out, jnp.zeros(4))), out)
  with pytest.raises(ValueError, match="problem must be one of"):
    losses.margins("ranking", out, labels)


def test_weight_decay_term_and_gradient():
  apply_fn, params = _mlp(widths=(8,))
  x, y = _blobs()
  wd = 0.37
  e0 = losses.energy(apply_fn, "logistic", 0.0)
  e1 = losses.energy(apply_fn, "logistic", wd)
  sq = sum(float(np.sum(a.astype(np.float64) ** 2)) for a in _leaves(params))
  np.testing.assert_allclose(float(e1(params, x, y) - e0(params, x, y)), wd / 2 * sq, rtol=1e-12)
  g0 = jax.grad(e0)(params, x, y)
  g1 = jax.grad(e1)(params, x, y)
  for a, b, p in zip(_leaves(g1), _leaves(g0), _leaves(params)):
    np.testing.assert_allclose(a - b, wd * p, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("problem, out_dim", [("binary", 1), ("multiclass", 3), ("general", 2)])
def test_margin_jacobian_matches_float64_finite_differences(problem, out_dim):
  apply_fn, params = _mlp(out_dim=out_dim, widths=(5,))
  x, _ = _blobs(n_per_class=2)
  labels = jnp.array([1.0, -1.0, 1.0, -1.0]) if problem == "binary" else jnp.array([0, 2, 1, 0])
  flat, unravel = jax.flatten_util.ravel_pytree(params)
  jac = np.asarray(losses.margin_jacobian(apply_fn, problem, params, x, labels))
  c = out_dim if problem == "general" else 1
  assert jac.shape == (4, c, flat.size)

  def g(v):
    return np.asarray(losses.margins(problem, apply_fn(unravel(v), x, None), labels)).reshape(4, c)

  h = 1e-6
  for k in np.random.default_rng(0).choice(flat.size, size=12, replace=False):
    e = jnp.zeros_like(flat).at[k].set(h)
    np.testing.assert_allclose(jac[:, :, k], (g(flat + e) - g(flat - e)) / (2 * h), atol=1e-7)
  batched = losses.margin_jacobian(apply_fn, problem, params, x, labels, batch_size=3)
  np.testing.assert_allclose(np.asarray(batched), jac, rtol=1e-12, atol=1e-14)
  with pytest.raises(ValueError, match="batch_size must be > 0"):
    losses.margin_jacobian(apply_fn, problem, params, x, labels, batch_size=0)
