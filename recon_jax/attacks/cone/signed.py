"""The signed cone of one hidden layer read end to end (:func:`read_signed`): the facet
search, the decoding, the missed facets and the images the others leave, round after round,
and how many of the facets found are sharp.
"""

from __future__ import annotations

import numpy as np

from recon_jax.attacks.cone.decoding import agrees, decode, one_image_seeds, sharpness
from recon_jax.attacks.cone.facets import DECODE_BOUND, PEEL_STARTS, facets_from, find_facets, peel
from recon_jax.attacks.cone.handover import SHARP
from recon_jax.attacks.cone.reading import Layers, coefficient_noise, signed_rows
from recon_jax.core import progress


def read_signed(
  star, init, basis, decay, n, scale, rng, starts, held=None, mixed=False, exact_span=True
):
  """``([(c [k], label), ...], sharp)``: the images (span coefficients in ``basis``) read off
  the signed cone of one hidden layer's change, and how many of their facets are sharp
  (:func:`sharpness`; the others' images are blends).  ``star``, ``init``:
  :func:`hidden_layer` triples; ``held`` [N, d]: images the attacker holds, or None;
  ``mixed``: see :func:`facet`.
  ``exact_span`` False: what lies outside ``basis`` is no noise (the last hidden layer's
  inputs move in training), and coefficients are not floored at it
  (:func:`coefficient_noise`)."""
  rows, units = signed_rows(star, init, basis, decay)
  layers = Layers.of(star, init, basis, units)
  # One facet per image, in the k + 1 dimensions of the span and the bias.
  limit = min(int(n), basis.shape[1] + 1) if n else basis.shape[1] + 1

  def read_all(normals, coefs):
    out = []
    for q in range(len(normals)):
      progress.beat(f"cone, decoding image {q + 1} of {len(normals)}")
      out.append(decode(normals, coefs, q, layers, DECODE_BOUND * scale))
    return out

  normals, coefs = find_facets(rows, layers, starts, scale, rng, limit, mixed)
  # Where the random starts found fewer than half the facets, the images training weighted
  # least are most of what is left, and their facets sit at the noise (:func:`add_facet`).  Not
  # before: a facet kept so is less exact, and the other images' decoding uses its normal.
  noise = 0.0
  if exact_span and len(normals) < limit / 2:
    noise = coefficient_noise(star, init, basis, units, decay)
  # Images resemble the training images more than random points of the span do: at 50 + 50
  # faces the random starts find no facet and the held images' patterns find dozens (their
  # patience bounds what they cost where they find none).
  if held is not None and len(normals) < min(limit, basis.shape[1]):
    what = "starts from images held"
    normals, coefs = facets_from(
      rows, layers, held @ basis, limit, normals, coefs, what, mixed, noise
    )
  out = read_all(normals, coefs)
  if out and len(out) < limit:
    generators = [y * np.append(c, 1.0) for c, y in out]
    normals, coefs = peel(rows, normals, coefs, generators, PEEL_STARTS, rng, limit, mixed, noise)
    out = read_all(normals, coefs)
  # The images the facets' own images leave (:func:`one_image_seeds`, from those whose
  # pattern agrees with their facet), round after round while a round adds a facet.
  while out and len(out) < limit:
    exact = [c for (c, _), z in zip(out, coefs) if agrees(layers, c, z)]
    seeds = one_image_seeds(rows, layers, exact) if exact else []
    before = len(normals)
    what = "images the others leave"
    normals, coefs = facets_from(rows, layers, seeds, limit, normals, coefs, what, mixed, noise)
    if len(normals) == before:
      break
    out = read_all(normals, coefs)
  return out, int(sum(sharpness(layers, c, z) >= SHARP for (c, _), z in zip(out, coefs)))
