"""x-initialisations shared by every attack: ``(key, hparams) -> x0 [m, *input_shape]``.

All live in the attack's input space (pixel space minus the training mean
when the data were mean-subtracted).  Per-restart quantities (the Gaussian
scale ``sigma_x``, the eq. (10) mixing weights ``mix_l1``, ``mix_l2``) are read
from the restart's hyperparameters, so a grid of them is one vmapped program.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core import arguments
from recon_jax.errors import ConfigError

INIT_SCHEMES = ("gaussian", "uniform", "ground_truth", "partition", "mix")


def _fit_rows(x: np.ndarray, m: int) -> jnp.ndarray:
  """``m`` rows of ``x``: the first m, or ``x`` tiled when it has fewer rows."""
  x = jnp.asarray(x)
  reps = -(-m // x.shape[0])
  return jnp.concatenate([x] * reps, axis=0)[:m]


def gaussian(m: int, input_shape: Sequence[int], dtype=jnp.float32):
  """x ~ N(0, sigma_x^2), sigma_x from ``hparams['sigma_x']`` (Haim et al.)."""

  def init(key, hparams):
    return hparams["sigma_x"].astype(dtype) * jax.random.normal(key, (m, *input_shape), dtype)

  return init


def uniform(m: int, input_shape: Sequence[int], offset=0.0, dtype=jnp.float32):
  """x ~ U(0, 1) in pixel space, minus ``offset`` (the training mean, if subtracted)."""
  offset = jnp.broadcast_to(jnp.asarray(offset, dtype), tuple(input_shape))[None]

  def init(key, hparams):
    del hparams
    return jax.random.uniform(key, (m, *input_shape), dtype) - offset

  return init


def fixed(x: np.ndarray, m: int, dtype=jnp.float32):
  """The given images (ground truth or a disjoint partition), tiled to m rows."""
  x0 = _fit_rows(x, m).astype(dtype)

  def init(key, hparams):
    del key, hparams
    return x0

  return init


def mix(x_gt: np.ndarray, x_part: np.ndarray, m: int, offset=0.0, dtype=jnp.float32):
  """Runkel et al. eq. (10): ``l2 (l1 x_GT + (1 - l1) x_part) + (1 - l2) x_rnd``.

  ``x_rnd ~ U(0, 1)`` in pixel space; ``l1 = hparams['mix_l1']``,
  ``l2 = hparams['mix_l2']`` are per-restart scalars.
  """
  gt = _fit_rows(x_gt, m).astype(dtype)
  part = _fit_rows(x_part, m).astype(dtype)
  noise = uniform(m, gt.shape[1:], offset, dtype)

  def init(key, hparams):
    l1 = hparams["mix_l1"].astype(dtype)
    l2 = hparams["mix_l2"].astype(dtype)
    return l2 * (l1 * gt + (1 - l1) * part) + (1 - l2) * noise(key, hparams)

  return init


def seeded(init, images, labels, slots_labels):
  """``init`` with given candidates in place: ``images`` [F, ...] (labels ``labels`` [F]) put
  in order into the slots whose label in ``slots_labels`` [m] is theirs (as many as there are
  such slots); the other slots as ``init`` draws them.  A search then starts from what
  another attack read (the cone's images, :mod:`recon_jax.job.pipeline`)."""
  images, labels = np.asarray(images), np.asarray(labels)
  slots_labels = np.asarray(slots_labels)
  slots, rows = [], []
  for y in np.unique(labels):
    free = np.flatnonzero(slots_labels == y)
    mine = np.flatnonzero(labels == y)[: len(free)]
    slots.extend(free[: len(mine)])
    rows.extend(mine)
  if not rows:
    return init
  where, given = jnp.asarray(slots, jnp.int32), jnp.asarray(images[rows])

  def start(key, hparams):
    x = init(key, hparams)
    return x.at[where].set(given.astype(x.dtype))

  return start


def mix_grid(values: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0)):
  """The eq. (10) grid without duplicates: l2 = 0 is one start whatever l1 is.

  Returns:
    (l1 [k], l2 [k]) arrays; l1 is NaN-free (0.0) at l2 = 0.
  """
  pairs = [(0.0, 0.0)] + [(a, b) for b in values if b > 0 for a in values]
  arr = np.array(pairs, dtype=np.float64)
  return arr[:, 0], arr[:, 1]


def make_x_init(
  scheme: str, *, m: int, input_shape, oracle=None, x_part=None, offset=0.0, dtype=jnp.float32
):
  """x-initialisation by name (see module docstring); ConfigError naming a bad argument
  (the scheme, ``m``, ``input_shape``, or images of another shape).  ``oracle``: the
  training images ``ground_truth`` and ``mix`` start from, which no attacker holds (the job
  and the init study hand them in from :func:`recon_jax.attacker.view.oracle_starts`, and
  say so); ``x_part``: the public pool ``partition`` and ``mix`` start from."""
  if scheme not in INIT_SCHEMES:
    raise ConfigError(f"init must be one of {INIT_SCHEMES}, got {scheme!r}.", "init")
  m = arguments.count("m", m)
  input_shape = arguments.shape_of("input_shape", input_shape)
  uses = {"ground_truth": ("oracle",), "partition": ("x_part",), "mix": ("oracle", "x_part")}
  for name, x in (("oracle", oracle), ("x_part", x_part)):
    if x is not None:  # empty only where the scheme does not read it (a blind attack's)
      needed = name in uses.get(scheme, ())
      arguments.array(
        name, x, shape=(None, *input_shape), ndim=1 + len(input_shape), nonempty=needed
      )
  arguments.array("offset", offset, nonempty=False)
  if scheme == "gaussian":
    return gaussian(m, input_shape, dtype)
  if scheme == "uniform":
    return uniform(m, input_shape, offset, dtype)
  if scheme == "ground_truth":
    if oracle is None:
      raise ConfigError("init=ground_truth needs the training images (oracle).", "oracle")
    return fixed(oracle, m, dtype)
  if scheme == "partition":
    if x_part is None:
      raise ConfigError("init=partition needs the disjoint partition images.")
    return fixed(x_part, m, dtype)
  if scheme == "mix":
    if oracle is None or x_part is None:
      raise ConfigError("init=mix needs the training images (oracle) and the partition images.")
    return mix(oracle, x_part, m, offset, dtype)
  raise ConfigError(f"init must be one of {INIT_SCHEMES}, got {scheme!r}.")
