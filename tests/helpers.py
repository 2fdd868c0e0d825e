"""Small planted models the tests share: a linear model with closed-form KKT points, and MLPs."""

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.victims import models


def linear_apply(p, x, act=None):
  """Bias-free linear model ``x w`` (w: [d, C]), homogeneous of degree 1: grad_w of the
  margin ``y x w`` is ``y x``, so ``theta = sum_i lam_i y_i x_i`` is a KKT point by hand."""
  del act
  return x.reshape(x.shape[0], -1) @ p["params"]["w"]


def linear_problem(m=4, d=8, seed=0):
  """``(x [m, d], y = +-1 alternating, lam in [0.5, 2])`` for :func:`linear_apply`."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(m, d))
  y = np.where(np.arange(m) % 2 == 0, 1.0, -1.0)
  lam = rng.uniform(0.5, 2.0, size=(m,))
  return x, y, lam


def mlp(widths=(8, 8), *, out_dim=1, bias="first", d=5, seed=0, std=None, bias_shift=0.0):
  """``(apply_fn, float64 params)`` of a ReLU MLP d-widths-out_dim.

  ``std``: N(0, std^2) weights in every layer (None: He init); ``bias_shift`` is added to
  every bias (zero-initialised otherwise), so that the biases matter.
  """
  module = models.build_model(
    "mlp",
    out_dim=out_dim,
    widths=widths,
    bias=bias,
    init="normal" if std else "kaiming",
    init_std=std,
    first_layer_std=std,
  )
  params = models.init_params(module, jax.random.PRNGKey(seed), (d,), jnp.float64)
  if bias_shift:
    params = jax.tree_util.tree_map(lambda a: a + bias_shift if a.ndim == 1 else a, params)
  return models.make_apply_fn(module), params
