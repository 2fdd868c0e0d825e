"""recon_jax.engine.inits: every x-initialisation, by its formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.engine import inits
from recon_jax.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

KEY = jax.random.PRNGKey(0)
SHAPE = (3, 2, 1)


def test_gaussian_scales_with_sigma_and_depends_on_the_key():
  init = inits.gaussian(4000, SHAPE, jnp.float64)
  x = init(KEY, {"sigma_x": jnp.asarray(0.01)})
  assert x.shape == (4000, *SHAPE) and x.dtype == jnp.float64
  assert abs(float(jnp.std(x)) - 0.01) < 0.0005 and abs(float(jnp.mean(x))) < 0.0005
  y = init(jax.random.PRNGKey(1), {"sigma_x": jnp.asarray(0.01)})
  assert not np.array_equal(x, y)


def test_uniform_is_in_the_pixel_box_minus_the_offset():
  offset = np.full(SHAPE, 0.25)
  x = inits.uniform(1000, SHAPE, offset, jnp.float64)(KEY, {})
  assert float(x.min()) >= -0.25 and float(x.max()) <= 0.75
  assert abs(float(x.mean()) - 0.25) < 0.02


def test_fixed_tiles_the_images_to_m_rows():
  x = np.arange(2 * 6, dtype=np.float64).reshape(2, *SHAPE)
  got = inits.fixed(x, 5, jnp.float64)(KEY, {})
  np.testing.assert_array_equal(got, np.concatenate([x, x, x[:1]]))


def test_seeded_puts_each_given_image_in_a_slot_of_its_own_label_and_draws_the_rest():
  given = np.arange(3 * 6, dtype=np.float64).reshape(3, *SHAPE) + 1.0
  labels = np.array([-1.0, 1.0, -1.0])
  slots = np.array([1.0, 1.0, -1.0, -1.0, -1.0])  # two positive slots, three negative
  x = inits.seeded(inits.gaussian(5, SHAPE, jnp.float64), given, labels, slots)
  got = np.asarray(x(KEY, {"sigma_x": jnp.asarray(1e-3)}))
  np.testing.assert_array_equal(got[0], given[1])  # the positive image: the first + slot
  np.testing.assert_array_equal(got[2:4], given[[0, 2]])  # the negatives, in order
  assert np.abs(got[[1, 4]]).max() < 0.01  # the other slots: the Gaussian draw
  too_many = np.ones((4, *SHAPE))
  got = inits.seeded(inits.fixed(np.zeros((1, *SHAPE)), 5), too_many, np.ones(4), slots)(KEY, {})
  assert float(got[:2].min()) == 1 and float(np.abs(got[2:]).max()) == 0  # two + slots only
  unseeded = inits.gaussian(5, SHAPE)
  assert inits.seeded(unseeded, given, np.zeros(3), slots) is unseeded  # no label in common


def test_mix_is_runkels_eq_10():
  gt, part = np.ones((2, *SHAPE)), np.zeros((2, *SHAPE))
  init = inits.mix(gt, part, 2, dtype=jnp.float64)
  noise = inits.uniform(2, SHAPE, 0.0, jnp.float64)(KEY, {})
  for l1, l2 in [(1.0, 1.0), (0.0, 1.0), (0.5, 0.5), (0.3, 0.0)]:
    x = init(KEY, {"mix_l1": jnp.asarray(l1), "mix_l2": jnp.asarray(l2)})
    np.testing.assert_allclose(x, l2 * (l1 * gt + (1 - l1) * part) + (1 - l2) * noise)


def test_mix_grid_has_no_duplicate_noise_starts():
  l1, l2 = inits.mix_grid()
  assert len(l1) == 21 and np.sum(l2 == 0) == 1  # 1 + 4 x 5
  assert len(set(zip(l1.tolist(), l2.tolist()))) == 21


def test_make_x_init_by_name_and_what_each_needs():
  x = np.zeros((2, *SHAPE))
  for scheme in inits.INIT_SCHEMES:
    init = inits.make_x_init(scheme, m=4, input_shape=SHAPE, oracle=x, x_part=x + 1)
    hp = {"sigma_x": jnp.asarray(0.1), "mix_l1": jnp.asarray(1.0), "mix_l2": jnp.asarray(1.0)}
    assert init(KEY, hp).shape == (4, *SHAPE), scheme
  for scheme in ("ground_truth", "partition", "mix"):
    with pytest.raises(ConfigError, match=f"init={scheme}"):
      inits.make_x_init(scheme, m=4, input_shape=SHAPE)
  with pytest.raises(ConfigError, match="init must be one of"):
    inits.make_x_init("zeros", m=4, input_shape=SHAPE)
