"""From facets to images: each facet's image, orthogonal to the other facets' normals and
leaving its units inactive (:func:`decode`, through the run's memo as ``cone.decode``),
whether an image and its facet agree (:func:`sharpness`, :func:`pattern_agreement`: a blend
where they do not), and the images the agreed ones leave, read off the units active on one
of them alone (:func:`one_image_seeds`).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from recon_jax.attacks.cone.facets import complement
from recon_jax.attacks.cone.programs import zero_split
from recon_jax.attacks.cone.reading import NEGLIGIBLE, Layers
from recon_jax.core import numerics
from recon_jax.engine import resume

# A facet's image agrees with it where it leaves inactive this share of the units, as the
# facet holds them: only such images seed the reading of the images they leave, a facet no
# seed reached is kept only so, and seeds whose patterns agree this much are one seed (two
# hidden layers, tuning draws 11-15: one seed per pattern gave 17-21 facets and 13-18 exact
# images, all 60 seeds 20-23 and 9-14, in twice the time).
PATTERN_AGREES = 0.9
# Rows this parallel (|cosine|) in the complement of the agreed images are one image's units
# (:func:`one_image_seeds`), at least ONE_IMAGE_ROWS of them; the largest DEFLATE_TRIES
# groups are tried as seeds in each round.  Built on two hidden layers, draws 10-12: images at
# ncc > 0.95 from 16, 16, 16 to 18, 17, 16.
ONE_IMAGE = 0.995
ONE_IMAGE_ROWS = 8
DEFLATE_TRIES = 4


def decode(normals, coefs, q: int, layers: Layers, bound: float):
  """:func:`solve_decode` through the run's memo (as :func:`facet`)."""
  inputs = (normals, coefs[q], np.array(q), np.array(float(bound)), *layers.biases)
  out = resume.remembered(
    "cone.decode", inputs, lambda: np.append(*solve_decode(normals, coefs, q, layers, bound))
  )
  return out[:-1], float(out[-1])


def solve_decode(normals, coefs, q: int, layers: Layers, bound: float):
  """``(c [k], label)``: the span coefficients of facet ``q``'s image and its label (+-1).

  The image's generator ``y [c, 1]`` is orthogonal to every other facet's normal (least
  squares); along what that leaves free, the point where the units on facet q are inactive
  at theta_0 and theta* with the least violation (coefficients within ``bound``)."""
  k = normals.shape[1] - 1
  others = np.delete(normals, q, axis=0)
  c0 = np.zeros(k)
  free = np.eye(k)
  if len(others):
    c0 = numerics.lstsq(others[:, :k], -others[:, k])
    _, sv, vt = numerics.svd(others[:, :k])
    rank = numerics.rank(sv, 1e-8)
    free = vt[rank:].T
  if free.shape[1]:
    g, b = layers.stacked(zero_split(coefs[q])[0])
    s, f = g.shape[1], free.shape[1]
    a_ub = sparse.hstack([sparse.csr_matrix(g.T @ free), -sparse.identity(s)]).tocsr()
    res = numerics.linprog(
      np.concatenate([np.zeros(f), np.ones(s)]),
      A_ub=a_ub,
      b_ub=-b - c0 @ g,
      bounds=[(-bound, bound)] * f + [(0, None)] * s,
    )
    if res.status == 0:
      c0 = c0 + free @ res.x[:f]
  label = 1.0 if normals[q, :k] @ c0 + normals[q, k] >= 0 else -1.0
  return c0, label


def sharpness(layers: Layers, c, coef) -> float:
  """How far the units image ``c`` leaves inactive at theta_0 and theta* and the units its
  facet (unit coefficients ``coef``) holds at 0 are one set: the smaller of the share of the
  first that the facet holds and the share of the second that the image leaves inactive.
  An image's facet holds every unit inactive on it throughout training and no other, so
  both are near 1 where the facet is the image's; where the program landed between facets
  the image is a blend, and one of the two falls (:data:`SHARP`): its image leaves inactive
  units the facet does not hold, or, where the other facets fix the image with no freedom
  left (every facet of the span found), it leaves active units the facet holds."""
  inactive, on = layers.inactive(c), zero_split(coef)[0]
  both = int((inactive & on).sum())
  return float(min(both / max(int(inactive.sum()), 1), both / max(int(on.sum()), 1)))


def pattern_agreement(layers: Layers, c, coef) -> float:
  """The share of the units on which image ``c`` is inactive exactly where its facet (unit
  coefficients ``coef``) holds them: near 1 for a facet's image, read right."""
  return float(np.mean(layers.inactive(c) == zero_split(coef)[0]))


def agrees(layers: Layers, c, coef) -> bool:
  """Whether image ``c`` agrees with its facet on :data:`PATTERN_AGREES` of the units."""
  return pattern_agreement(layers, c, coef) >= PATTERN_AGREES


def one_image_seeds(rows, layers: Layers, agreed: list, tries: int = DEFLATE_TRIES) -> list:
  """``[c, ...]``: images (span coefficients) read where the ``agreed`` images (span
  coefficients of images known exactly) are not, largest evidence first.

  In the complement of the agreed images' generators a unit's row mixes only the images left
  alone, so the units active on just one of them (a quarter of the units for four images,
  each active on about half) are parallel there (:data:`ONE_IMAGE`), and a group of them
  gives that image's direction.  What the complement lost, its multiple of each agreed
  image, comes back from the group's units that the agreed image leaves inactive at theta_0
  and theta*: their rows hold that image only through the missing one (the median ratio)."""
  gens = np.array([np.append(c, 1.0) for c in agreed])
  rest = complement(gens)  # [k + 1, r]
  if rest.shape[1] == 0:
    return []
  projected = rows @ rest
  norms = np.linalg.norm(projected, axis=1)
  big = np.flatnonzero(norms > NEGLIGIBLE * np.median(np.linalg.norm(rows, axis=1)))
  if len(big) < ONE_IMAGE_ROWS:
    return []
  unit = projected[big] / norms[big, None]
  near = np.abs(unit @ unit.T) > ONE_IMAGE
  free = np.ones(len(big), bool)
  inactive = np.array([layers.inactive(c) for c in agreed])[:, big]  # [F, units]
  out = []
  while len(out) < tries:
    counts = (near & free[None, :]).sum(1) * free
    i = int(np.argmax(counts))
    if counts[i] < ONE_IMAGE_ROWS:
      break
    group = near[i] & free
    free &= ~group
    direction = rest @ np.sum(unit[group] * np.sign(unit[group] @ unit[i])[:, None], axis=0)
    basis = np.concatenate([direction[None], gens], 0).T  # [k + 1, 1 + F]
    parts = np.linalg.pinv(basis) @ rows[big[group]].T  # [1 + F, g]: exact, in the span
    share = np.zeros(len(gens))
    for f in range(len(gens)):
      off = inactive[f, group]
      if off.sum() >= 3:
        share[f] = np.median(parts[1 + f, off] / parts[0, off])
    g = direction + share @ gens
    if abs(g[-1]) > 1e-9 * np.linalg.norm(g):
      out.append(g[:-1] / g[-1])
  return out
