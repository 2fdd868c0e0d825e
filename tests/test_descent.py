"""Tests for recon_jax.victims.descent: gradient-descent training, its schedules, resume and
failure mode."""

import dataclasses
import functools

from helpers import mlp
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.core import losses
from recon_jax.victims import descent, models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _blobs(num_classes, n_per_class=4, d=4, seed=0, scale=3.0):
  """Well separated Gaussian blobs; labels +-1 for two classes, ints otherwise."""
  rng = np.random.default_rng(seed)
  centers = scale * np.eye(d)[:num_classes]
  x = np.concatenate([c + 0.3 * rng.normal(size=(n_per_class, d)) for c in centers])
  cls = np.repeat(np.arange(num_classes), n_per_class)
  y = np.where(cls == 0, 1.0, -1.0) if num_classes == 2 else cls.astype(np.int32)
  return jnp.asarray(x), jnp.asarray(y)


_mlp = functools.partial(mlp, widths=(16, 16), d=4)


def _leaves(tree):
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


# ---------------------------------------------------------------- training


def test_one_step_is_sgd_on_the_objective():
  apply_fn, params = _mlp(widths=(8,))
  x, y = _blobs(2)
  cfg = descent.TrainConfig(loss="logistic", lr=0.3, epochs=1, chunk=1, weight_decay=0.1)
  new, history = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  g = jax.grad(losses.energy(apply_fn, "logistic", 0.1))(params, x, y)
  for n, p, gg in zip(_leaves(new), _leaves(params), _leaves(g)):
    np.testing.assert_allclose(n, p - 0.3 * gg, rtol=1e-13, atol=1e-15)
  assert len(history) == 1 and history[0]["epoch"] == 1


@pytest.mark.parametrize("adaptive", ["loss", "grad"])
def test_normalised_step_by_hand(adaptive):
  apply_fn, params = _mlp(widths=(8,))
  x, y = _blobs(2)
  cfg = descent.TrainConfig(loss="logistic", lr=0.3, epochs=1, chunk=1, adaptive=adaptive)
  new, _ = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  loss, g = jax.value_and_grad(losses.energy(apply_fn, "logistic"))(params, x, y)
  gnorm = np.sqrt(sum(np.sum(a**2) for a in _leaves(g)))
  rate = 0.3 / (float(loss) if adaptive == "loss" else gnorm)
  for n, p, gg in zip(_leaves(new), _leaves(params), _leaves(g)):
    np.testing.assert_allclose(n, p - rate * gg, rtol=1e-12, atol=1e-15)
  with pytest.raises(ValueError, match="adaptive"):
    descent.train(apply_fn, params, x, y, dataclasses.replace(cfg, adaptive="adam"))


def test_momentum_two_steps_by_hand():
  apply_fn, params = _mlp(widths=(8,))
  x, y = _blobs(2)
  lr, mu = 0.2, 0.9
  cfg = descent.TrainConfig(loss="logistic", lr=lr, epochs=2, chunk=2, momentum=mu)
  new, _ = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  grad = jax.grad(losses.energy(apply_fn, "logistic"))
  g0 = grad(params, x, y)
  p1 = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, g0)
  g1 = grad(p1, x, y)
  p2 = jax.tree_util.tree_map(lambda p, a, b: p - lr * (a + mu * b), p1, g1, g0)
  for a, b in zip(_leaves(new), _leaves(p2)):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_logistic_reaches_zero_train_error():
  apply_fn, params = _mlp()
  x, y = _blobs(2)
  x_test, y_test = _blobs(2, seed=1)
  cfg = descent.TrainConfig(loss="logistic", lr=0.1, epochs=200, chunk=100)
  init_loss = float(losses.energy(apply_fn, "logistic")(params, x, y))
  new, history = descent.train(
    apply_fn, params, x, y, cfg, x_test=x_test, y_test=y_test, log_every_chunk=False
  )
  assert [r["epoch"] for r in history] == [100, 200]
  assert history[-1]["train_error"] == 0.0
  assert history[-1]["test_accuracy"] == 1.0
  assert history[-1]["loss"] < 0.1 * init_loss
  assert np.all(np.asarray(losses.margins("logistic", apply_fn(new, x), y)) > 0)


def test_cross_entropy_three_classes():
  apply_fn, params = _mlp(out_dim=3)
  x, y = _blobs(3)
  cfg = descent.TrainConfig(loss="ce", lr=0.1, epochs=200, chunk=200)
  new, history = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  assert history[-1]["train_error"] == 0.0
  assert np.all(np.asarray(losses.margins("ce", apply_fn(new, x), y)) > 0)
  np.testing.assert_array_equal(np.asarray(jnp.argmax(apply_fn(new, x), -1)), np.asarray(y))


def test_mse_regression_loss_decreases():
  apply_fn, params = _mlp(widths=(16,), bias="all")
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(8, 4)))
  y = jnp.asarray(np.sin(np.asarray(x)[:, 0]) + 0.5 * np.asarray(x)[:, 1])
  cfg = descent.TrainConfig(loss="mse", lr=0.05, epochs=300, chunk=100)
  init_loss = float(losses.energy(apply_fn, "mse")(params, x, y))
  _, history = descent.train(apply_fn, params, x, y, cfg, x_test=x, y_test=y, log_every_chunk=False)
  trace = [r["loss"] for r in history]
  assert trace == sorted(trace, reverse=True)
  assert trace[-1] < 0.2 * init_loss
  # On the training points the test MSE is twice the mean 0.5 (f - y)^2 loss.
  np.testing.assert_allclose(history[-1]["test_mse"], 2 * trace[-1], rtol=1e-10)


def test_loss_threshold_stops_early():
  apply_fn, params = _mlp()
  x, y = _blobs(2)
  cfg = descent.TrainConfig(loss="logistic", lr=0.1, epochs=2000, chunk=20, loss_threshold=0.2)
  _, history = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  assert len(history) < 100
  assert history[-1]["loss"] <= 0.2
  assert all(r["loss"] > 0.2 for r in history[:-1])


def test_minibatches_are_seeded():
  apply_fn, params = _mlp(widths=(8,))
  x, y = _blobs(2)
  cfg = descent.TrainConfig(loss="logistic", lr=0.1, epochs=10, chunk=10, batch_size=3)
  a, _ = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  b, _ = descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  c, _ = descent.train(
    apply_fn, params, x, y, dataclasses.replace(cfg, seed=1), log_every_chunk=False
  )
  full, _ = descent.train(
    apply_fn, params, x, y, dataclasses.replace(cfg, batch_size=None), log_every_chunk=False
  )
  for u, v in zip(_leaves(a), _leaves(b)):
    np.testing.assert_array_equal(u, v)
  assert any(not np.array_equal(u, v) for u, v in zip(_leaves(a), _leaves(c)))
  assert any(not np.array_equal(u, v) for u, v in zip(_leaves(a), _leaves(full)))


def _affine_regression():
  module = models.build_model("affine", init="normal", init_std=0.1)
  params = models.init_params(module, jax.random.PRNGKey(0), (4,), jnp.float64)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8, 4))
  y = x @ np.array([1.0, -1.0, 0.5, 0.0])
  xa = np.concatenate([x, np.ones((8, 1))], axis=1)
  lam_max = np.linalg.eigvalsh(xa.T @ xa / 8).max()  # Hessian of the mse objective
  return models.make_apply_fn(module), params, jnp.asarray(x), jnp.asarray(y), lam_max


def test_divergence_raises_and_keeps_last_finite_chunk():
  apply_fn, params, x, y, lam_max = _affine_regression()
  # GD on a quadratic with lr = 10 / lam_max multiplies the top error component by
  # -9 each step: the loss (81^t) overflows after ~160 steps, i.e. in chunk 7.
  cfg = descent.TrainConfig(loss="mse", lr=10.0 / lam_max, epochs=300, chunk=25)
  seen = []
  with pytest.raises(descent.TrainError, match="diverged") as err:
    descent.train(
      apply_fn,
      params,
      x,
      y,
      cfg,
      log_every_chunk=False,
      callback=lambda state, rec: seen.append(state.params),
    )
  assert len(seen) >= 2  # some chunks finished before the blow-up
  assert len(err.value.history) == len(seen)
  got = _leaves(err.value.params)
  assert all(np.all(np.isfinite(a)) for a in got)
  for a, b in zip(got, _leaves(seen[-1])):
    np.testing.assert_array_equal(a, b)
  assert max(np.max(np.abs(a)) for a in got) > 1e10  # it was on its way out


def test_divergence_in_first_chunk_returns_initial_params():
  apply_fn, params, x, y, _ = _affine_regression()
  cfg = descent.TrainConfig(loss="mse", lr=1e200, epochs=20, chunk=10)
  with pytest.raises(descent.TrainError) as err:
    descent.train(apply_fn, params, x, y, cfg, log_every_chunk=False)
  assert err.value.history == []
  for a, b in zip(_leaves(err.value.params), _leaves(params)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("field, value", [("lr", 0.0), ("lr", -1.0), ("epochs", 0)])
def test_bad_config_rejected(field, value):
  apply_fn, params = _mlp(widths=(4,))
  x, y = _blobs(2)
  cfg = dataclasses.replace(descent.TrainConfig(), **{field: value})
  with pytest.raises(ValueError, match=field):
    descent.train(apply_fn, params, x, y, cfg)
