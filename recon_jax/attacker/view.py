"""The threat model: what the attacker holds (:class:`AttackerView`) and the one oracle.

The job builds the view once from its dataset, its victim and its threat settings
(:func:`view_of`); the attacks and the engine are handed it (in their
:class:`recon_jax.attacks.Setup`) and never the dataset, so no training image reaches a
search by accident.  Where a search is meant to start from training images (``init``
``ground_truth`` or ``mix``, the initialisation study's corners of Runkel et al.'s eq. 10),
they come through :func:`oracle_starts`, by name, and the report says so
(``oracle_starts`` in metrics.json): an attacker has no such oracle.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from recon_jax import data
from recon_jax.types import Target

# The x-inits that start from training images (recon_jax.engine.inits): an oracle's starts.
ORACLE_INITS = ("ground_truth", "mix")


class AttackerView(NamedTuple):
  """What the attacker holds; no field holds a training image."""

  target: Target  # theta*, the candidates' labels, the pixel box (theta* - theta_0, known_init)
  input_shape: Tuple[int, ...]  # one image's shape
  n: int  # how many training images there are (a count; 0: a blind attack)
  # images that are not training images ([N, *input_shape], minus the data mean): the
  # public pool, else the held-out images (a direct attack may start there)
  public: np.ndarray
  partition: np.ndarray  # the public pool alone ([0, ...] without one): init=partition
  offset: np.ndarray  # the mean subtracted from every image (0: none): where pixel 0 lies
  theta0: Any = None  # theta_0 where the threat model knows it (threat.known_init), else None


def view_of(ds: data.Dataset, target: Target, theta0: Any = None) -> AttackerView:
  """The attacker's view of a job on dataset ``ds``: its ``target`` (theta* as
  :func:`recon_jax.victims.targets.make_target` built it), the shape and count of the
  training images but none of them, the images that are not training images, the data
  mean, and ``theta0`` where the threat model gives it."""
  return AttackerView(
    target=target,
    input_shape=tuple(ds.x_train.shape[1:]),
    n=len(ds.x_train),
    public=ds.x_part if len(ds.x_part) else ds.x_test,
    partition=ds.x_part,
    offset=ds.mean,
    theta0=theta0,
  )


class OracleStarts(NamedTuple):
  """Training images handed to a search as its starts: an oracle no attacker has."""

  images: np.ndarray  # [n, *input_shape]: the training images (minus the data mean)
  init: str  # the x-init that starts from them (ORACLE_INITS)


def oracle_starts(ds: data.Dataset, init: str) -> Optional[OracleStarts]:
  """The training images of ``ds`` as the starts of x-init ``init`` where it reads them
  (:data:`ORACLE_INITS`); None for every other init (they read no training image)."""
  if init not in ORACLE_INITS:
    return None
  return OracleStarts(np.asarray(ds.x_train), init)
