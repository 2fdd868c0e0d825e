"""The facet search: from the activation patterns of random images of the span or of images
the attacker holds (:func:`find_facets`, :func:`facets_from`), each facet kept where it holds
enough units with a clear gap and is new (:func:`add_facet`), until the search's patience
runs out (:class:`_Patience`); then the facets those starts missed, where only they can be
(:func:`peel`).  The programs are :mod:`recon_jax.attacks.cone.programs`'; no decoding here.
"""

from __future__ import annotations

import time
from typing import Iterable

import numpy as np

from recon_jax.attacks.cone.programs import MIN_GAP, MIN_ON_FACET, facet, zero_split
from recon_jax.attacks.cone.reading import Layers
from recon_jax.core import numerics, progress

# Cosine between two facets' unit coefficients (or two decoded images' normalised
# cross-correlation) that makes them one: a program that lands on a facet found before gives
# it again to rounding, and 0.95 leaves room for a noisy facet.  No sweep of it is recorded.
SAME_FACET = 0.95
# Random sign patterns of :func:`peel` in the complement of the images found: 30 programs in
# those few dimensions added 8 images over 10 searches on tuning draws 10-14 (10 + 10 faces).
PEEL_STARTS = 30
# The random or held starts stop after this many in a row found no new facet, or this many
# seconds without one; before the first facet after FIRST_PATIENCE starts or
# FIRST_PATIENCE_S seconds (no cone to read, or programs too large: at n = 500 one start's
# programs take a minute and more on 2 cores).  On tuning draws 10-14 they give the same
# images as no patience at all.
PATIENCE = 25
FIRST_PATIENCE = 10
PATIENCE_S = 120.0
FIRST_PATIENCE_S = 60.0
# The random starts are images of the span whose norm is the pixel box's diagonal over this
# (of the order of an image's distance from the box's centre), and a decoded image's span
# coefficients are sought within DECODE_BOUND times that norm (a bound the images, inside the
# box, stay well within).  Set when the cone was built; no sweep recorded.
START_DIVISOR = 4.0
DECODE_BOUND = 4.0


class _Patience:
  """When a facet search gives up: :data:`PATIENCE` starts or :data:`PATIENCE_S` seconds in a
  row without a new facet (:data:`FIRST_PATIENCE`, :data:`FIRST_PATIENCE_S` before the
  first one)."""

  def __init__(self):
    self.idle, self.since = 0, time.monotonic()

  def update(self, found: bool) -> None:
    if found:
      self.idle, self.since = 0, time.monotonic()
    else:
      self.idle += 1

  def over(self, any_found: bool) -> bool:
    starts, seconds = (PATIENCE, PATIENCE_S) if any_found else (FIRST_PATIENCE, FIRST_PATIENCE_S)
    return self.idle >= starts or time.monotonic() - self.since > seconds


def find_facets(rows, layers: Layers, starts: int, scale: float, rng, limit: int, mixed=False):
  """``(normals [F, k + 1], coefficients [F, u])``: up to ``limit`` distinct facets that
  hold at least :data:`MIN_ON_FACET` of the units with a clear gap, from up to ``starts``
  random images of the span (coefficients of norm ``scale``, drawn one start at a time);
  the search stops when its patience runs out (:class:`_Patience`)."""
  k = rows.shape[1] - 1
  randoms = (scale * c / np.linalg.norm(c) for c in (rng.normal(size=k) for _ in range(starts)))
  what = f"random starts (at most {starts})"
  return facets_from(rows, layers, randoms, limit, what=what, mixed=mixed)


def facets_from(
  rows,
  layers: Layers,
  starts: Iterable,
  limit: int,
  normals=(),
  coefs=(),
  what: str = "",
  mixed: bool = False,
  noise: float = 0.0,
):
  """``(normals, coefficients)``: the facets ``normals`` and ``coefs`` already found, and
  those reached from the activation patterns of ``starts`` (span coefficients [k] of
  images: random ones, or images the attacker holds that are not training images), until
  ``limit`` facets or the search's patience runs out (:class:`_Patience`).  Real images
  share more of a training image's pattern than random points of the span do (at 25 + 25
  faces, 50 public images found 12 facets the random starts had missed)."""
  normals, coefs, patience = list(normals), list(coefs), _Patience()
  starts, done = iter(starts), 0
  # A start is drawn only once the search goes on (random starts share the rng with peel).
  while len(normals) < limit and not patience.over(bool(normals)):
    c = next(starts, None)
    if c is None:
      break
    before = len(normals)
    add_facet(rows, facet(rows, layers.inactive(c), mixed), normals, coefs, not mixed, noise)
    patience.update(len(normals) > before)
    done += 1
    progress.beat(f"cone, {what}: {len(normals)} facets after {done} starts")
  return as_arrays(rows, normals, coefs)


def as_arrays(rows, normals: list, coefs: list):
  """``(normals [F, k + 1], coefficients [F, u])`` of the facets listed (F may be 0)."""
  return np.reshape(normals, (-1, rows.shape[1])), np.reshape(coefs, (-1, len(rows)))


def add_facet(rows, h, normals: list, coefs: list, signed: bool = True, noise: float = 0.0) -> None:
  """Appends the facet of normal ``h`` to ``normals`` and its unit coefficients to ``coefs``
  where it holds enough units with a clear gap and is not one of them already (``signed``
  False: the coefficients' sizes, for rows whose signs are not known).

  A linear program's vertex holds about k units at exactly 0 whatever facet it is on.  On
  the facets of the images training weighted least, those split off alone from the units
  the facet holds at the noise level, and the facet is lost (at 50 + 50 faces, two thirds of
  those found).  Where that happens, the coefficients floored at ``noise``
  (:func:`coefficient_noise`; 0: never) are split instead, and kept where they make a facet;
  a facet the unfloored split accepts is kept as it is."""
  if h is None:
    return
  coef = rows @ h if signed else np.abs(rows @ h)
  on, gap = zero_split(coef)
  if (on.mean() < MIN_ON_FACET or gap < MIN_GAP) and noise > 0:
    coef = np.maximum(coef, noise)
    on, gap = zero_split(coef)
  if on.mean() < MIN_ON_FACET or gap < MIN_GAP:
    return
  unit = coef / np.linalg.norm(coef)
  if any(abs(unit @ other) > SAME_FACET for other in coefs):
    return
  normals.append(h)
  coefs.append(unit)


def peel(rows, normals, coefs, generators, starts: int, rng, limit: int, mixed=False, noise=0.0):
  """The facets the random starts missed, searched where only they can be.

  A facet's normal is orthogonal to every generator but its own, so the facets not yet
  found have their normals in the complement of the ``generators`` [F, k + 1] decoded from
  the facets found.  Projected there, the units' rows are combinations of the missing
  generators alone: a program in a few dimensions instead of k + 1, from ``starts`` random
  sign patterns.  Returns ``(normals, coefficients)`` with the facets found appended."""
  generators = np.reshape(generators, (-1, rows.shape[1]))
  rest = complement(generators)
  normals, coefs = list(normals), list(coefs)
  projected = rows @ rest
  for i in range(int(starts) if rest.shape[1] else 0):
    if len(normals) >= limit:
      break
    h = facet(projected, projected @ rng.normal(size=rest.shape[1]) <= 0, mixed)
    add_facet(rows, None if h is None else rest @ h, normals, coefs, not mixed, noise)
    progress.beat(f"cone, the missed facets: {len(normals)} facets after {i + 1} starts")
  return as_arrays(rows, normals, coefs)


def complement(vectors):
  """``[k + 1, r]``: an orthonormal basis of the directions the rows of ``vectors``
  ``[F, k + 1]`` leave (where the facets or generators not yet found must be)."""
  vectors = np.asarray(vectors)
  return numerics.svd(vectors)[2][len(vectors) :].T


def with_mirrors(images, input_shape):
  """``[N or 2N, d]``: flat ``images`` followed by their mirror images (the width axis of an
  ``input_shape`` of height, width and channels reversed; other shapes: the images alone).
  A mirrored face is another face, and its pattern lands on other facets: at 50 + 50 faces
  (draw 10) 100 held images and their mirrors found 50 facets against 38, and 26 images at
  SSIM 0.7 against 16."""
  shape = tuple(input_shape)
  if len(shape) != 3 or shape[1] < 2:
    return images
  mirrored = np.asarray(images).reshape(-1, *shape)[:, :, ::-1, :]
  return np.concatenate([images, mirrored.reshape(len(images), -1)])
