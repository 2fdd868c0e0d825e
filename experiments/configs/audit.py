"""The audit's config: your model, its training images, held-out images, and (if known) the
weights its training started from; ``job`` holds the main job's other settings.

Presets (``--config=experiments/configs/audit.py:PRESET``):
  default  the files only: the attack follows from what you give (theta_0 or not)
  quick    the same with 4 restarts x 1000 steps (a first look, a quarter of the time)

Weights are read in PyTorch's orientation (a Linear layer's weight is [out, in]).  --help
does not list the main job's settings that the audit sets from its own (the files, how a
model is read: job.foreign.*) or that do not apply to an imported model (job.victim.*).
"""

import ml_collections

from recon_jax.job.audit import Audit
from recon_jax.job.settings import HELP as JOB_HELP
from recon_jax.job.settings import reconstruct_config

HELP = {
  "model": "the model: a PyTorch state dict (.pt/.pth) or safetensors file",
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
  **{f"job.{k}": v for k, v in JOB_HELP.items()},
}

# Not listed by --help: the main job's settings an audit sets from its own (the files, how the
# model is read, theta_0) and its victim.* training settings, which an audit does not read.
HIDDEN = (
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

PRESETS = {"default": {}, "quick": {"num_restarts": 4, "steps": 1000, "chunk_steps": 250}}


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict(Audit().__dict__)
  c.job = reconstruct_config(**PRESETS[preset])
  return c
