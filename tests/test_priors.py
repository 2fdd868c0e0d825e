"""recon_jax.priors: the box prior, the lambda hinge and the projection, by hand."""

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import priors


def test_box_prior_is_the_mean_squared_excess_per_candidate_summed():
  x = jnp.array([[[0.5, 1.5], [-0.5, 0.0]], [[0.2, 0.3], [0.4, 0.6]]])  # 2 candidates of 2x2
  # candidate 0: excess 0.5 above 1 and 0.5 below 0 -> mean of squares (0.25 + 0.25) / 4
  np.testing.assert_allclose(priors.box_prior(x, 0.0, 1.0), 0.125)
  # per-pixel bounds (after mean subtraction: -mean .. 1 - mean)
  mean = jnp.full((2, 2), 0.5)
  np.testing.assert_allclose(priors.box_prior(x - mean[None], -mean, 1 - mean), 0.125)
  g = jax.grad(priors.box_prior)(x, 0.0, 1.0)
  np.testing.assert_allclose(g[0], [[0.0, 0.25], [-0.25, 0.0]])  # 2 * excess / 4 pixels
  assert not np.any(g[1])


def test_lambda_prior_penalises_only_below_lam_min():
  lam = jnp.array([0.1, 0.5, 2.0])
  np.testing.assert_allclose(priors.lambda_prior(lam, 0.5), 0.16)
  np.testing.assert_allclose(jax.grad(priors.lambda_prior)(lam, 0.5), [-0.8, 0.0, 0.0])


def test_project_box_clips_to_per_pixel_bounds():
  x = jnp.array([[[-1.0, 0.5], [2.0, 0.9]]])
  hi = jnp.array([[1.0, 1.0], [1.0, 0.8]])
  np.testing.assert_allclose(priors.project_box(x, 0.0, hi), [[[0.0, 0.5], [1.0, 0.8]]])
