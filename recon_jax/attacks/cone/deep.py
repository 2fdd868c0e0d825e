"""Networks of two or more hidden layers: the last hidden layer's cone read
(:func:`recon_jax.attacks.cone.signed.read_signed`) gives the images' representations, each
inverted to an image (:func:`invert`) that seeds the first layer's facet of it; the seeds no
facet agreed with are moved and tried again, the images the agreed ones leave are read
(:func:`_deflated`), and the facets no seed reached are found by consensus (:func:`_unseeded`).
After a hand-over the search's candidates seed those facets again (:func:`first_layer_images`).
"""

from __future__ import annotations

from absl import logging
import numpy as np

from recon_jax.attacks import span
from recon_jax.attacks.cone.decoding import (
  PATTERN_AGREES,
  decode,
  one_image_seeds,
  pattern_agreement,
)
from recon_jax.attacks.cone.facets import DECODE_BOUND, SAME_FACET, add_facet, as_arrays, complement
from recon_jax.attacks.cone.programs import consensus_facet, seeded_facet, zero_split
from recon_jax.attacks.cone.reading import (
  Layers,
  Reading,
  dense_layers,
  first_triple,
  read,
  unsigned_first_layer,
)
from recon_jax.attacks.cone.signed import read_signed
from recon_jax.core import numerics, progress

# A representation's units above this fraction of its largest are active, the ones the
# inversion matches (:func:`invert`): the rest are at or near a ReLU's 0, where the map has
# no slope to invert.  No sweep of it is recorded.
ACTIVE = 1e-3
# Gauss-Newton steps of :func:`invert` at most: one is exact for two hidden layers (no layer
# between the image and the representation); past that each step takes the patterns of the
# layers between from the last estimate, and the loop stops once a step changes nothing.
INVERT_STEPS = 20
# A first-layer facet's image is a candidate where it agrees with its seed above this
# normalised cross-correlation: a seed inverted from a representation is its image to a few
# percent (two hidden layers, draw 10: 15 of 20 seeds at ncc > 0.95 alone).
SEED_AGREES = 0.9
# The unseeded consensus search stops after this many searches in a row found nothing (each
# of CONSENSUS_TRIALS draws of rows, milliseconds).  No sweep of it is recorded.
CONSENSUS_MISSES = 5
# Random images of the span whose representations the last layer's cone is searched from
# where the attacker holds no images (they also set the representations' scale); no sweep
# recorded.
RANDOM_POOL = 64


def first_layer_images(theta_star, theta_0, seeds, *, n=None, decay=None, bound=None):
  """``images [F, *seeds.shape[1:]]``: the first layer's facets of a network of two or more
  hidden layers that images near the training images (``seeds`` [S, ...] in the model's
  input space: a search's candidates) lead to, each decoded to the image on it.

  Below the last hidden layer the signs of the images' coefficients are lost, so the cone
  cannot find these facets from random starts; an image close to a training image holds
  nearly that image's units inactive, and the unsigned program from there lands on its
  facet (:func:`seeded_facet`), whose image is exact where the facet is.  ``bound``: the
  largest norm an image's span coefficients may take (default: 4 times the seeds' largest).
  """
  net_star, net_init = dense_layers(theta_star), dense_layers(theta_0)
  seeds = np.asarray(seeds, np.float64)
  if len(net_star) < 3 or not len(seeds):
    return np.zeros((0, *seeds.shape[1:]))
  reading = read(first_triple(net_star), first_triple(net_init), n, decay)
  if reading.cannot:
    return np.zeros((0, *seeds.shape[1:]))
  basis = reading.basis
  rows, layers = unsigned_first_layer(net_star, net_init, basis, reading.decay)
  coefficients = seeds.reshape(len(seeds), -1) @ basis
  if bound is None:
    bound = DECODE_BOUND * float(np.linalg.norm(coefficients, axis=1).max())
  # One seed per activation pattern: seeds whose patterns agree on PATTERN_AGREES of the
  # units lead to one facet, and each extra facet a program lands on blurs the others'
  # decoding (two hidden layers, tuning draws 11-15: 60 seeds gave 20-23 facets and 9-14
  # exact images, one per pattern 22-40 seeds, 17-21 facets, 13-18 images, in half the time).
  patterns, kept = [], []
  for c in coefficients:
    zero = layers.inactive(c)
    if all(np.mean(zero == p) < PATTERN_AGREES for p in patterns):
      patterns.append(zero)
      kept.append(c)
  normals, coefs, _ = _seeded_facets(rows, layers, kept, np.random.default_rng(0))
  out = []
  for q in range(len(normals)):
    progress.beat(f"cone, decoding the search's facet {q + 1} of {len(normals)}")
    out.append(basis @ decode(normals, coefs, q, layers, bound)[0])
  return np.array(out).reshape(len(out), *seeds.shape[1:])


def represent(net, images):
  """[N, h] the inputs of the last hidden layer of ``net`` (:func:`dense_layers`) for
  ``images`` [N, d]: the activations after every layer before it."""
  a = np.asarray(images, np.float64)
  for kernel, bias in net[:-2]:
    a = np.maximum(a @ kernel + bias, 0.0)
  return a


def invert(rep, net_head, basis):
  """``c [k]``: span coefficients of the image ``basis c`` whose activations after
  ``net_head`` (``[(kernel, bias), ...]``, ReLU after each) match ``rep`` on the units
  active in it, by least squares; the layers in between take their units' patterns from
  the previous estimate (Gauss-Newton on a piecewise-linear map, from 0)."""
  active = rep > ACTIVE * rep.max()
  c = np.zeros(basis.shape[1])
  for _ in range(INVERT_STEPS):
    a_map, off = basis.T, np.zeros(basis.shape[0])  # the image is c @ a_map + off
    for kernel, bias in net_head[:-1]:
      z_map, z_off = a_map @ kernel, off @ kernel + bias
      on = c @ z_map + z_off > 0
      a_map, off = z_map * on, z_off * on
    kernel, bias = net_head[-1]
    z_map, z_off = a_map @ kernel, off @ kernel + bias
    new = numerics.lstsq(z_map[:, active].T, rep[active] - z_off[active])
    if not np.all(np.isfinite(new)) or np.allclose(new, c):
      break
    c = new
  return c


def _ncc(a, b) -> float:
  a, b = a - a.mean(), b - b.mean()
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def read_deep(net_star, net_init, reading: Reading, n, scale, rng, starts, held=None, mixed=False):
  """``([(c [k], label), ...], read)``: the images of a network of two or more hidden layers,
  and how many of them are read exactly (first-layer facets).

  Its last hidden layer's change, signed by the output weights, is a cone of the training
  images' representations (the activations feeding that layer), as one hidden layer's is of
  the images: those move while training (by 20-25 % on the LFW fine-tuning victims), so the
  change spans more than n directions and its top n hold their average, which the same
  facet programs read to 0.98-1.0 normalised cross-correlation.  Each representation is
  inverted to an image of the first layer's span at the weights halfway (:func:`invert`),
  and that image seeds an unsigned facet program on the first layer's change
  (:func:`seeded_facet`: below the last hidden layer a unit's change mixes the images with
  either sign, but an image's facet still holds every unit inactive on it); where the image
  that facet decodes to agrees with its seed (:data:`SEED_AGREES`) both are candidates.
  The seeds no facet agreed with are moved where the agreed facets leave their generators
  (orthogonal to every agreed normal) and tried once more."""
  decay, basis = reading.decay, reading.basis
  n_eff = int(n) if n else int(reading.info.dim) + 1
  last = lambda net: (*net[-2], net[-1][0][:, 0])  # noqa: E731
  s_star, s_init = last(net_star), last(net_init)
  rep_change = {"params": {"layer_0": {"kernel": s_star[0] - decay * s_init[0]}}}
  rep_basis, _ = span.span_basis(rep_change, n=n_eff)
  rep_basis = rep_basis[:, :n_eff]  # the representations' average over training
  mid = [((a + b) / 2.0, (c + d) / 2.0) for (a, c), (b, d) in zip(net_star, net_init)]
  pool = held
  if pool is None:
    pool = (basis @ rng.normal(size=(basis.shape[1], RANDOM_POOL))).T
    pool *= scale / np.linalg.norm(pool, axis=1, keepdims=True)
  reps_held = represent(mid, pool)
  rep_scale = float(np.median(np.linalg.norm(reps_held, axis=1)))
  read_reps, _ = read_signed(
    s_star, s_init, rep_basis, decay, n_eff, rep_scale, rng, starts,
    reps_held if held is not None else None, mixed, exact_span=False,
  )  # fmt: skip
  seeds = []
  for i, (c, y) in enumerate(read_reps):
    progress.beat(f"cone, inverting representation {i + 1} of {len(read_reps)}")
    seeds.append((invert(rep_basis @ c, mid[:-2], basis), y))
  # The first layer's facets, one program per seed.
  rows, layers = unsigned_first_layer(net_star, net_init, basis, decay)
  bound = DECODE_BOUND * scale
  normals, coefs, origin = _seeded_facets(rows, layers, [c for c, _ in seeds], rng)
  agreed = _agreeing(normals, coefs, origin, seeds, layers, basis, bound, SEED_AGREES)
  # Again with the facets that agreed only, for the seeds the first round left: each seed
  # projected where its generator must be, orthogonal to every agreed facet's normal.
  keep = [q for q, i in enumerate(origin) if i in agreed]
  normals, coefs, origin = normals[keep], coefs[keep], [origin[q] for q in keep]
  if len(normals) and len(agreed) < len(seeds):
    free = complement(normals)  # [k + 1, r]
    moved = {}
    for i, (c, _) in enumerate(seeds):
      g = free @ (free.T @ np.append(c, 1.0))
      if i not in agreed and abs(g[-1]) > 1e-9:
        moved[i] = g[:-1] / g[-1]
    normals, coefs, more = _seeded_facets(rows, layers, moved, rng, normals, coefs)
    origin = origin + more
    seeds_moved = [(moved.get(i, c), y) for i, (c, y) in enumerate(seeds)]
    agreed = _agreeing(normals, coefs, origin, seeds_moved, layers, basis, bound, SEED_AGREES)
  # Where the agreed images are not, units active on one of the images left alone: their
  # rows, lifted back, seed those images' facets; again while a round adds one.
  normals, origin, agreed, tried = _deflated(
    rows, layers, normals, coefs, origin, agreed, seeds, basis, bound, rng, n_eff
  )
  # The facets no seed reached: where the agreed images' generators are not, the units'
  # rows mix the images left alone, in a few directions, where consensus finds their facets.
  found = _unseeded(rows, layers, normals[[origin.index(i) for i in agreed]], agreed, rng, n_eff)
  # Each seed, and beside it the image its facet decoded to where they agree (exact where
  # the facet is: the seed is its representation's inverse, to a few percent); the seeds
  # read where the agreed images are not whose facets agreed, beside their images; and the
  # images of the facets found without a seed.
  every = list(seeds) + tried
  out = (
    list(seeds)
    + [every[i] for i in sorted(agreed) if i >= len(seeds)]
    + [(c, every[i][1]) for i, c in sorted(agreed.items())]
    + [(c, 0.0) for c in found]
  )
  return out, len(agreed) + len(found)


def _deflated(rows, layers, normals, coefs, origin, agreed, seeds, basis, bound, rng, limit):
  """``(normals, origin, agreed, tried)``: :func:`one_image_seeds` tried as seeds, round after
  round while one agrees with its facet's image (:data:`SEED_AGREES`); each is numbered after
  the ``seeds`` in the order of ``tried`` (``[(c, 0.0), ...]``, its label unknown), and the
  images of those that agreed are added to ``agreed``."""
  keep = [q for q, i in enumerate(origin) if i in agreed]
  normals, origin = normals[keep], [origin[q] for q in keep]
  coefs = coefs[keep]
  agreed, extra = dict(agreed), []
  while agreed and len(agreed) < limit:
    before = len(agreed)
    for c in one_image_seeds(rows, layers, list(agreed.values())):
      i = len(seeds) + len(extra)
      extra.append((c, 0.0))
      normals, coefs, more = _seeded_facets(rows, layers, {i: c}, rng, normals, coefs)
      if not more:
        continue
      q = len(normals) - 1
      d = _seed_image(normals, coefs, q, c, layers, basis, bound, SEED_AGREES, agreed.values())
      if d is not None:
        agreed[i], origin = d, origin + more
      else:
        normals, coefs = normals[:-1], coefs[:-1]
    if len(agreed) == before:
      break
  return normals, origin, agreed, extra


def _unseeded(rows, layers: Layers, normals, agreed: dict, rng, limit: int) -> list:
  """``[c, ...]``: the images of the facets no seed reached, searched by consensus in the
  complement of the ``agreed`` images' generators, each kept where the units its decoded
  image leaves inactive are the facet's (:data:`PATTERN_AGREES`)."""
  if not agreed or len(agreed) >= limit:
    return []
  rest = complement([np.append(c, 1.0) for c in agreed.values()])  # [k + 1, r]
  if rest.shape[1] < 2:
    return []
  projected = rows @ rest
  normals, coefs = list(normals), [np.abs(rows @ h) / np.linalg.norm(rows @ h) for h in normals]
  first, misses = len(normals), 0
  while len(normals) < limit and misses < CONSENSUS_MISSES:
    progress.beat(f"cone, the facets no seed reached: {len(normals) - first} found")
    h = consensus_facet(projected, np.ones(len(rows), bool), rng)
    before = len(normals)
    add_facet(rows, None if h is None else rest @ h, normals, coefs, False)
    misses = 0 if len(normals) > before else misses + 1
  if len(normals) == first:
    return []
  normals, coefs = as_arrays(rows, normals, coefs)
  out = []
  for q in range(first, len(normals)):
    c, _ = decode(normals, coefs, q, layers, np.inf)
    agree = pattern_agreement(layers, c, coefs[q])
    logging.info("cone: a facet no seed reached; its image's pattern agrees on %.3f", agree)
    if agree >= PATTERN_AGREES:
      out.append(c)
  return out


def _seeded_facets(rows, layers: Layers, seeds, rng, normals=(), coefs=()):
  """``(normals, coefficients, origin)``: the facets ``normals``/``coefs`` and those that
  :func:`seeded_facet` reaches from each of ``seeds`` (span coefficients: a list, or a dict
  by the seed's number), ``origin`` the number of the seed each new facet came from."""
  normals, coefs, origin = list(normals), list(coefs), []
  items = seeds.items() if isinstance(seeds, dict) else enumerate(seeds)
  for j, (i, c) in enumerate(items):
    progress.beat(f"cone, the first layer's facet of image {j + 1} of {len(seeds)}")
    before = len(normals)
    zero = layers.inactive(c)
    h = consensus_facet(rows, zero, rng)
    if h is not None:  # polished by the program, from the units it holds
      zero = zero_split(np.abs(rows @ h))[0]
    h = seeded_facet(rows, zero, np.append(c, 1.0))
    add_facet(rows, h, normals, coefs, False)
    if len(normals) > before:
      origin.append(i)
  return (*as_arrays(rows, normals, coefs), origin)


def _agreeing(normals, coefs, origin, seeds, layers: Layers, basis, bound, threshold) -> dict:
  """``{seed number: c}``: the images the facets decode to (:func:`decode`, each facet
  against all the others) that agree with the seed they came from (normalised
  cross-correlation >= ``threshold``), one per seed, no two alike."""
  out = {}
  for q, i in enumerate(origin):
    progress.beat(f"cone, decoding image {q + 1} of {len(origin)}")
    c = _seed_image(normals, coefs, q, seeds[i][0], layers, basis, bound, threshold, out.values())
    if c is not None:
      out[i] = c
  return out


def _seed_image(normals, coefs, q, seed, layers: Layers, basis, bound, threshold, others):
  """``c``: the image facet ``q`` decodes to (:func:`decode`) where it agrees with ``seed``
  (normalised cross-correlation >= ``threshold``) and is none of the ``others`` (span
  coefficients, :data:`SAME_FACET`); else None."""
  c, _ = decode(normals, coefs, q, layers, bound)
  image = basis @ c
  if _ncc(image, basis @ seed) < threshold:
    return None
  if any(_ncc(image, basis @ other) > SAME_FACET for other in others):
    return None
  return c
