"""Audit the model you have, on the data you have: the main job's settings for a model file, the
images it was trained on, held-out images of the same distribution and, where known, the
weights its training started from.

:func:`audit_job` turns those files into a :class:`~recon_jax.job.settings.JobConfig`:
with theta_0 (``theta0``; ``init`` is its former name) the attack of a model fine-tuned from
known weights
(:data:`~recon_jax.job.settings.KNOWN_INIT_ATTACK`; candidates in the first layer's span
where that layer is dense; or the job's own ``attack``, e.g. ``cone``), without it Haim et
al.'s attack on theta* alone.  The run is the main job's, so its workdir, verdict and
report are the same.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from recon_jax.errors import ConfigError
from recon_jax.job.settings import KNOWN_INIT_ATTACK, JobConfig
from recon_jax.victims import importers

# Candidates per restart of a blind attack (no training images, so no n to scale with).
BLIND_CANDIDATES = 40


@dataclasses.dataclass(frozen=True)
class Audit:
  """What a model owner gives: files, and how the model was trained."""

  model: str = ""  # the model: a PyTorch state dict (.pt/.pth) or safetensors
  train: str = ""  # its training images: ImageFolder folder, .npz (x, y) or MNIST/CIFAR files
  heldout: str = ""  # held-out images of the same distribution (same formats)
  theta0: str = ""  # theta_0: the weights its training started from, same format ('' unknown)
  init: str = ""  # the former name of theta0, still read
  data_mean: str = ""  # .npy per-pixel mean the model was trained with ('' none)
  image_size: str = ""  # HxW: resize the images to this ('' as they are)
  loss: str = "logistic"  # how it was trained: logistic (one output) | ce (one per class)
  input_layout: str = "nchw"  # how it flattened conv features (PyTorch: nchw)


# The audit's own names of the main job's settings (its errors name these).
ALIASES = {
  "checkpoint": "model",
  "train_data": "train",
  "heldout_data": "heldout",
  "init_checkpoint": "theta0",
  "foreign.data_mean": "data_mean",
  "data_mean": "data_mean",
  "victim.loss": "loss",
  "foreign.input_layout": "input_layout",
}
# What --help says of each of the audit's own settings.
HELP = {
  "model": "the model: a PyTorch state dict (.pt/.pth) or safetensors file, weights [out, in]",
  "train": "its training images: an ImageFolder folder, an .npz (x, y) or MNIST/CIFAR files",
  "heldout": "held-out images of the same distribution (same formats)",
  "theta0": "theta_0, the weights its training started from (a published checkpoint, or its "
  "seed's initialisation), same format ('' unknown); not job.init, where the search's "
  "candidates start",
  "init": "the former name of theta0 (still read)",
  "data_mean": ".npy per-pixel mean the model was trained with ('' none)",
  "image_size": "HxW: resize the images to this ('' as they are)",
  "loss": "how it was trained: logistic (one output) | ce (one output per class)",
  "input_layout": "how it flattened conv features (PyTorch: nchw)",
}
# Not listed by the audit's --help: theta0's former name, and the main job's settings the
# audit sets from its own (the files, how a model is read, theta_0) or that do not apply to
# an imported model (victim.*: how the main job trains its victim).
NOT_LISTED = (
  "init",
  "job.victim.",
  "job.foreign.",
  "job.checkpoint",
  "job.train_data",
  "job.heldout_data",
  "job.init_checkpoint",
  "job.known_init",
  "job.image_size",
  "job.data_dir",
  "job.allow_data_mismatch",
  "job.use_cache",
)


def audit_job(audit: Audit, base: Optional[JobConfig] = None) -> JobConfig:
  """The main job's settings for ``audit`` (``base``: other settings, e.g. the restarts).
  Without ``train`` a blind attack: ``BLIND_CANDIDATES`` candidates unless ``base.m`` says.

  Raises ConfigError naming the audit's field that is missing or cannot be used; the
  files themselves are read and checked when the job is planned
  (:func:`recon_jax.job.planning.prepare`).
  """
  if not audit.model:
    raise ConfigError("model: give the model file to audit (.pt, .pth or .safetensors).", "model")
  if not audit.heldout:
    raise ConfigError(
      "heldout: give held-out images of the same distribution: they are the baseline that "
      "tells a reconstruction from a look-alike (and, without train, the inputs' size).",
      "heldout",
    )
  base = base or JobConfig()
  if not audit.train and not base.m:
    base = base.replace(m=BLIND_CANDIDATES)
  settings = dict(
    checkpoint=audit.model,
    train_data=audit.train,
    heldout_data=audit.heldout,
    image_size=audit.image_size,
    victim=dataclasses.replace(base.victim, loss=audit.loss),
    foreign=dataclasses.replace(
      base.foreign, data_mean=audit.data_mean, input_layout=audit.input_layout
    ),
  )
  theta0 = theta_0(audit)
  if theta0:
    settings.update(known_init=True, init_checkpoint=theta0)
    if base.attack == "kkt":  # the known-init search (its settings are kkt's; cone has none)
      settings.update(KNOWN_INIT_ATTACK, subspace=_dense_first_layer(audit.model))
  return base.replace(**settings)


def theta_0(audit: Audit) -> str:
  """The file of theta_0: ``theta0``, or ``init``, its former name (ConfigError when the two
  name different files)."""
  if audit.theta0 and audit.init and audit.theta0 != audit.init:
    raise ConfigError(
      f"theta0={audit.theta0!r} and init={audit.init!r} (the former name of theta0) name "
      "different files: give theta_0 once, as theta0.",
      "theta0",
    )
  return audit.theta0 or audit.init


def _dense_first_layer(path: str) -> bool:
  """Whether the model's first layer is dense (its candidates can live in the span)."""
  return importers.first_layer_input(path)[0] == "dense"
