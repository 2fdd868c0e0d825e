"""The audit's config: your model, its training images, held-out images, and (if known) the
weights its training started from; ``job`` holds the main job's other settings.

Presets (``--config=experiments/configs/audit.py:PRESET``):
  default  the files only: the attack follows from what you give (theta_0 or not)
  quick    the same with 4 restarts x 1000 steps (a first look: a sixteenth of the steps)
"""

import ml_collections

from recon_jax.core import rules
from recon_jax.job.audit import FIRST, NOT_LISTED  # noqa: F401 (--help's)
from recon_jax.job.audit import HELP as AUDIT_HELP
from recon_jax.job.settings import HELP as JOB_HELP
from recon_jax.job.settings import Threat, reconstruct_config

# The job's settings an audit holds at its top (the threat, the victim's loss) are not its job's.
_OWN = ("threat.", "victim.")
HELP = {
  **AUDIT_HELP,
  **{f"job.{k}": v for k, v in JOB_HELP.items() if not k.startswith(_OWN)},
}
HIDDEN = NOT_LISTED  # the job's settings an audit does not read

PRESETS = {
  "default": {},
  "quick": {"search": {"num_restarts": 4, "steps": 1000, "chunk_steps": 250}},
}


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict(rules.defaults_of(Threat))
  c.loss = "logistic"
  job = reconstruct_config(**PRESETS[preset])
  del job["threat"], job["victim"]  # the audit's own, at its top
  c.job = job
  return c
