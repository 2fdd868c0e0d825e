"""Property tests (hypothesis) of recon_jax.eval.similarity on small 8x8x1 images."""

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import numpy as np
import pytest

from recon_jax.eval import similarity

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True)
TOL = 1e-6  # tests run with x64 on, so float64 arithmetic

unit = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False, width=64)
images = hnp.arrays(np.float64, (2, 8, 8, 1), elements=unit)
wide = hnp.arrays(
  np.float64, (2, 8, 8, 1), elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
)


@SETTINGS
@given(images, images)
def test_ssim_symmetric_and_at_most_one(a, b):
  ab = np.asarray(similarity.ssim(a, b))
  ba = np.asarray(similarity.ssim(b, a))
  np.testing.assert_allclose(ab, ba, atol=TOL)
  assert np.all(ab <= 1 + TOL) and np.all(ab >= -1 - TOL)
  m = np.asarray(similarity.ssim_matrix(a, b))
  np.testing.assert_allclose(m, np.asarray(similarity.ssim_matrix(b, a)).T, atol=TOL)
  np.testing.assert_allclose(np.diag(m), ab, atol=TOL)


@SETTINGS
@given(images)
def test_ssim_is_one_on_identical_images(a):
  np.testing.assert_allclose(np.asarray(similarity.ssim(a, a)), 1.0, atol=TOL)


@SETTINGS
@given(wide, wide)
def test_ncc_symmetric_and_bounded(a, b):
  m = np.asarray(similarity.ncc(a, b))
  np.testing.assert_allclose(m, np.asarray(similarity.ncc(b, a)).T, atol=TOL)
  assert np.all(np.abs(m) <= 1.0)


@SETTINGS
@given(wide, wide, st.floats(1e-2, 1e2), st.floats(-1e2, 1e2))
def test_ncc_invariant_to_positive_affine_intensity(a, b, scale, shift):
  flat = a.reshape(len(a), -1)
  # Nearly constant images are ill-conditioned (NCC of noise); not what is claimed.
  if np.any(flat.std(axis=1) < 1e-3 * (1 + np.abs(flat).max())):
    return
  base = np.asarray(similarity.ncc(a, b))
  np.testing.assert_allclose(np.asarray(similarity.ncc(scale * a + shift, b)), base, atol=1e-6)
  np.testing.assert_allclose(np.asarray(similarity.ncc(a, a)).diagonal(), 1.0, atol=TOL)


@SETTINGS
@given(wide)
def test_stretch_is_idempotent_and_in_unit_range(a):
  s = np.asarray(similarity.stretch(a))
  assert s.min() >= 0.0 and s.max() <= 1.0
  np.testing.assert_allclose(np.asarray(similarity.stretch(s)), s, atol=TOL)


@pytest.mark.parametrize("value", [0.0, 0.3, 1.0])
def test_ssim_one_on_constant_images(value):
  a = np.full((1, 8, 8, 1), value)
  np.testing.assert_allclose(np.asarray(similarity.ssim(a, a)), 1.0, atol=TOL)
