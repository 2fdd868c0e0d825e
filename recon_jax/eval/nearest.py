"""Nearest neighbours of reconstructions in reference sets (the initialisation study).

Runkel et al. (2024, §4.3-4.5) ask where a reconstruction ends up: at a
training image, at the disjoint partition it may have started from, or at the
uniform noise it started from.  For every reconstruction these functions give
the distance to the nearest image of a reference set (per-image L2 norm of the
difference, in pixel space) and the highest SSIM to any of them; :func:`summary`
averages both over the reconstructions for several named reference sets.

Pure functions of numpy arrays (images ``[N, H, W, C]`` in pixel space).
"""

from __future__ import annotations

from typing import Mapping, Optional, Tuple

import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.eval import similarity


def _flat(x, name: str) -> np.ndarray:
  x = np.asarray(x, np.float64)
  if x.ndim < 2:
    raise ConfigError(f"{name} must be a batch of images [N, ...], got shape {x.shape}.")
  return x.reshape(x.shape[0], int(np.prod(x.shape[1:])))


def l2_distances(x, ref) -> np.ndarray:
  """``[n, k]`` matrix of ``||x_i - ref_j||_2`` (each image flattened), computed in float64.

  The differences are formed explicitly (no ``|a|^2 + |b|^2 - 2ab`` expansion),
  so an exact copy of a reference image is at distance 0.
  """
  a, b = _flat(x, "x"), _flat(ref, "ref")
  if a.shape[1] != b.shape[1]:
    raise ConfigError(f"x and ref images differ in size: {a.shape[1]} vs {b.shape[1]} values.")
  out = np.empty((a.shape[0], b.shape[0]))
  for i, row in enumerate(a):  # one row at a time: memory k x d, not n x k x d
    out[i] = np.sqrt(np.sum(np.square(b - row[None]), axis=1))
  return out


def nearest_l2(x, ref) -> Tuple[np.ndarray, np.ndarray]:
  """(distance [n], index [n]) of the nearest reference image of each ``x_i`` in L2."""
  d = l2_distances(x, ref)
  if d.shape[1] == 0:
    raise ConfigError("ref holds no images.")
  j = np.argmin(d, axis=1)
  return d[np.arange(len(d)), j], j


def nearest_ssim(x, ref, *, filter_size: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
  """(SSIM [n], index [n]) of the most similar reference image of each ``x_i``.

  Both sets are clipped to [0, 1] (the SSIM's value range) and compared in
  float32; ``filter_size`` as :func:`recon_jax.eval.similarity.ssim_matrix`.
  """
  x, ref = np.asarray(x), np.asarray(ref)
  if len(ref) == 0:
    raise ConfigError("ref holds no images.")
  s = np.asarray(
    similarity.ssim_matrix(
      np.clip(x, 0, 1).astype(np.float32),
      np.clip(ref, 0, 1).astype(np.float32),
      filter_size=filter_size,
    ),
    np.float64,
  )
  j = np.argmax(s, axis=1)
  return s[np.arange(len(s)), j], j


def summary(x, references: Mapping[str, np.ndarray], *, filter_size: Optional[int] = None) -> dict:
  """Mean nearest-neighbour L2 and SSIM of the reconstructions ``x`` to each reference set.

  Args:
    x: ``[n, H, W, C]`` reconstructions in pixel space.
    references: name -> ``[k, H, W, C]`` reference images (e.g. ``train``,
      ``partition``, ``noise``).
    filter_size: SSIM window (default by image size).

  Returns:
    ``{'l2_<name>': mean over x of the L2 distance to the nearest reference,
    'ssim_<name>': mean over x of the highest SSIM to a reference}`` (floats).
  """
  out = {}
  for name, ref in references.items():
    d, _ = nearest_l2(x, ref)
    s, _ = nearest_ssim(x, ref, filter_size=filter_size)
    out[f"l2_{name}"] = float(np.mean(d))
    out[f"ssim_{name}"] = float(np.mean(s))
  return out
