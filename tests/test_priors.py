"""recon_jax.priors: the box prior, the lambda hinge and the projection, by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax import priors

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


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


def test_tv_prior_of_a_step_edge_and_of_a_constant_image():
  eps = 1e-3
  flat = jnp.full((2, 4, 5, 1), 0.3)
  np.testing.assert_allclose(priors.tv_prior(flat, eps), 0.0, atol=1e-12)
  # One candidate, a vertical edge of height h between columns 1 and 2: the 4 pixels of
  # column 1 have dw = h, every other difference is 0.
  h = 0.7
  edge = jnp.zeros((1, 4, 5)).at[:, :, 2:].set(h)
  want = 4 * (np.sqrt(h**2 + eps**2) - eps) / 20
  np.testing.assert_allclose(priors.tv_prior(edge, eps), want, rtol=1e-6)
  # [m, H, W] and [m, H, W, 1] are the same images; candidates add up.
  np.testing.assert_allclose(priors.tv_prior(edge[..., None], eps), want, rtol=1e-6)
  np.testing.assert_allclose(priors.tv_prior(jnp.concatenate([edge, edge]), eps), 2 * want)


def test_tv_prior_gradient_matches_finite_differences_and_noise_pays_more():
  with jax.enable_x64(True):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4, 2)))
    g = jax.grad(priors.tv_prior)(x)
    v = jnp.asarray(np.random.default_rng(1).normal(size=x.shape))
    h = 1e-6
    fd = (priors.tv_prior(x + h * v) - priors.tv_prior(x - h * v)) / (2 * h)
    np.testing.assert_allclose(float(jnp.sum(g * v)), float(fd), rtol=1e-6)
  i, j = np.mgrid[:8, :8]
  smooth = jnp.asarray((i + j) / 14.0)[None]  # a plane from 0 to 1
  noise = jnp.asarray(np.random.default_rng(2).uniform(size=(1, 8, 8)))  # also in [0, 1]
  assert priors.tv_prior(noise) > 3 * priors.tv_prior(smooth)


def test_tv_prior_refuses_vectors():
  with pytest.raises(ValueError, match="tv_prior"):
    priors.tv_prior(jnp.zeros((3, 2)))
