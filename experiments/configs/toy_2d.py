"""The 2-D toy of Haim et al. 2022 §4 (Fig. 2): n points on the unit circle, alternating labels.

Presets (``--config=experiments/configs/toy_2d.py:PRESET``):
  paper   n = 20, 2-1000-1000-1 victim, 4 restarts x (5000 + 3000 refinement) steps
          (the default; ~13 min on 2 CPU cores)
  small   the same with width 200 and 8 restarts (~2 min)
  quick   n = 4, width 16, 2 restarts x 60 steps (a smoke test, seconds)

Ranges are ``VALUE`` or ``LO:HI[:log|lin]``, one draw per restart.  The
settings named ``victim_*`` are the victim's training recipe; the attack's
candidates always start from N(0, sigma_x^2) (Haim §4).
"""

import ml_collections

from recon_jax.core import rules
from recon_jax.studies.toy import ToySettings

# Every setting, its default and what it means: recon_jax.studies.toy.ToySettings.
HELP = rules.meanings_of(ToySettings)

PRESETS = {
  "paper": {},
  "small": {"width": 200, "num_restarts": 8},
  "quick": {
    "n_train": 4,
    "width": 16,
    "victim_epochs": 300,
    "m": 8,
    "num_restarts": 2,
    "steps": 40,
    "chunk_steps": 20,
    "refine_steps": 20,
  },
}


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  """The toy's settings for ``preset`` (see the module docstring)."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict(rules.defaults_of(ToySettings))
  c.update(PRESETS[preset])
  return c
