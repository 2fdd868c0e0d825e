"""What the attacker sees of a victim: its parameters as a :class:`recon_jax.types.Target`.

:func:`make_target` turns theta* into the Target (theta*, the candidates' labels, the pixel
box moved by the training mean).  For a model fine-tuned from weights the attacker knows,
:func:`known_init_target` makes the reference the attack fits ``theta* - c theta_0``, with
``c`` the multiple of theta_0 that weight decay kept (:func:`decay_factor`, read off the
dense first layers, :func:`first_layer`, of theta* and theta_0 alone).
"""

from __future__ import annotations

from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core import arguments
from recon_jax.errors import ConfigError
from recon_jax.types import Target, float_dtype


def cast_params(params, dtype=None):
  """``params`` with every leaf a ``dtype`` array (default :func:`float_dtype`)."""
  dtype = dtype or float_dtype()
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


def make_target(
  params, labels, mean=None, *, box: Optional[Tuple[float, float]] = (0.0, 1.0), dtype=None
) -> Target:
  """What the attacker sees: theta*, the candidates' labels and the pixel box.

  Args:
    params: theta*.
    labels: [m] labels assumed for the candidates (see :func:`candidate_labels`).
    mean: the per-pixel mean subtracted from the training data (or None): the
      attack works in that shifted space, so the box moves with it.
    box: (lo, hi) pixel range of the data; None: no box (the 2-D toy).
    dtype: float dtype (default :func:`float_dtype`).
  """
  arguments.finite_tree("params", params)
  arguments.array("labels", labels, ndim=1)
  if mean is not None:
    arguments.array("mean", mean)
  if box is not None:
    if not (isinstance(box, (tuple, list)) and len(box) == 2):
      raise ConfigError(f"box must be (lo, hi) or None, got {box!r}.", "box")
    lo, hi = (arguments.number("box", v) for v in box)
    if not lo < hi:
      raise ConfigError(f"box must be (lo, hi) with lo < hi, got {box!r}.", "box")
  dtype = dtype or float_dtype()
  params = cast_params(params, dtype)
  labels = jnp.asarray(labels)
  if box is None:
    shape = np.shape(mean) if mean is not None else ()
    inf = jnp.full(shape, jnp.inf, dtype)
    return Target(params, labels, -inf, inf)
  lo, hi = box
  offset = np.zeros(()) if mean is None else np.asarray(mean)
  return Target(params, labels, jnp.asarray(lo - offset, dtype), jnp.asarray(hi - offset, dtype))


DECAY_GAIN = 10.0  # theta* - c theta_0 is taken where its tail energy is this many times lower


def first_layer(params):
  """``(kernel [d, h], bias [h])`` of a dense first layer in float64 (zeros for a missing
  bias), or None (a convolution first, or no ``layer_0`` kernel)."""
  layer = (params.get("params") or {}).get("layer_0") if hasattr(params, "get") else None
  kernel = None if not hasattr(layer, "get") else layer.get("kernel")
  if kernel is None or np.ndim(kernel) != 2:
    return None
  kernel = np.asarray(kernel, np.float64)
  bias = layer.get("bias")
  bias = np.zeros(kernel.shape[1]) if bias is None else np.asarray(bias, np.float64)
  return kernel, bias


def _complement(grams, c: float, rank: int):
  """``(V, tail)``: the directions of ``[K*; b*] - c [K_0; b_0]`` beyond its ``rank``
  largest singular values and the energy it leaves there, from the Gram matrices
  ``(A A^T, A B^T + B A^T, B B^T)`` of theta* (A) and theta_0 (B)."""
  aa, ab, bb = grams
  eig, vec = np.linalg.eigh(aa - c * ab + c * c * bb)  # ascending
  k = max(len(eig) - rank, 0)
  return vec[:, :k], float(np.sum(np.maximum(eig[:k], 0.0)))


def decay_factor(star, init, n: int, iterations: int = 30) -> float:
  """``c`` in (0, 1]: the multiple of theta_0 that training by gradient descent (full or
  mini-batch, with momentum) with coupled weight decay kept in the first layer (``(1 - lr
  wd)^T`` for plain gradient descent), read off theta* and theta_0 alone: each a pair
  ``(kernel [d, h], bias [h])`` of the dense first layer, or the parameters themselves
  (:func:`first_layer`).  ``[K*, b*] - c [K_0, b_0]`` is a combination of the ``n`` labelled
  images only at that ``c``: the one that leaves the least energy beyond rank n.  Found by
  alternating the directions beyond rank n at the current ``c`` with the ``c`` that leaves
  least in them (a least-squares ratio), from 1; a few eigendecompositions.  1 where the
  least tail is at 1 or no smaller multiple removes :data:`DECAY_GAIN` times more (no weight
  decay), and for a first layer that is not dense."""
  if isinstance(star, dict) or isinstance(init, dict):
    star, init = first_layer(star), first_layer(init)
    if star is None or init is None:
      return 1.0
  a = np.concatenate([np.asarray(star[0], np.float64), np.asarray(star[1], np.float64)[None]], 0)
  b = np.concatenate([np.asarray(init[0], np.float64), np.asarray(init[1], np.float64)[None]], 0)
  if a.shape[0] > a.shape[1]:  # the smaller Gram matrix has the same nonzero spectrum
    a, b = a.T, b.T
  grams = (a @ a.T, a @ b.T + b @ a.T, b @ b.T)
  rank = int(n)
  if rank >= min(a.shape):
    return 1.0
  v, tail_at_1 = _complement(grams, 1.0, rank)
  c = 1.0
  for _ in range(int(iterations)):
    # The c that leaves least of A - c B in the directions v: <V^T A, V^T B> / |V^T B|^2.
    cross, own = np.sum(v * (grams[1] @ v)) / 2.0, np.sum(v * (grams[2] @ v))
    new = float(np.clip(cross / own, 1e-6, 1.0)) if own > 0 else 1.0
    v, tail = _complement(grams, new, rank)
    done = abs(new - c) <= 1e-9 * max(c, 1e-6)
    c = new
    if done:
      break
  if c >= 1.0 or tail * DECAY_GAIN > tail_at_1:
    return 1.0
  return c


def known_init_target(target: Target, init, linearize: float = 1.0, decay: float = 1.0) -> Target:
  """The attacker's view of a model fine-tuned from weights it knows (theta_0 = ``init``).

  Training added ``theta* - theta_0``, a sum of the training samples' gradients along
  the way; that is the reference the KKT sum must reproduce (Loo et al. 2024).  The
  gradients are taken at ``theta_0 + linearize (theta* - theta_0)``: 1 at theta*
  (Haim et al.'s point), 0.5 halfway, where a model that moved little from theta_0
  is best described by one gradient per sample (on LFW fine-tuning victims the truth's
  residual is 5-10x lower there than at theta*).  With coupled weight decay training kept
  only ``decay`` times theta_0 (:func:`decay_factor`), and the reference is
  ``theta* - decay theta_0`` (:attr:`~recon_jax.types.Target.decay` records it).

  Raises:
    ConfigError: ``linearize`` outside [0, 1], ``decay`` outside (0, 1], or ``init`` of
      another structure.
  """
  if isinstance(decay, bool) or not (np.isfinite(decay) and 0 < decay <= 1):
    raise ConfigError(f"decay must be in (0, 1], got {decay!r}.", "decay")
  if isinstance(linearize, bool) or not (np.isfinite(linearize) and 0 <= linearize <= 1):
    raise ConfigError(f"linearize must be in [0, 1], got {linearize!r}.", "linearize")
  params = target.params
  init = cast_params(init, jax.tree_util.tree_leaves(params)[0].dtype)
  if jax.tree_util.tree_structure(init) != jax.tree_util.tree_structure(params):
    raise ConfigError("init must have the structure of the victim's parameters.", "init")
  change = jax.tree_util.tree_map(jnp.subtract, params, init)
  at = jax.tree_util.tree_map(lambda a, d: a + linearize * d, init, change)
  if decay == 1.0:
    return target._replace(params=at, reference=change)
  kept = jax.tree_util.tree_map(lambda a, b: a - decay * b, params, init)
  return target._replace(params=at, reference=kept, decay=float(decay))
