"""The initialisation study of Runkel et al. (2024, §4.3-4.5): bilevel and KKT attacks.

Presets (``--config=experiments/configs/init_study.py:PRESET``):
  default  10 + 10 digits, the 21-point eq. (10) grid, one-hidden width 256 (~8 min, 2-core CPU)
  quick    3 + 3 digits, the three settings only, small nets, few steps (~1 min)
  tiny     2 + 2 digits, the affine and KKT parts, 4 steps (the tests, seconds)

Settings that belong to one part are prefixed: ``bilevel_*`` (the bilevel attack
of §4.3/4.5 and its L-BFGS-trained victims), ``kkt_*`` (the KKT attack of §4.4
and its gradient-descent-trained MLP victim).  The KKT ranges are ``VALUE`` or
``LO:HI[:log|lin]``, one seeded draw per eq. (10) point.
"""

import ml_collections

from recon_jax.core import rules
from recon_jax.studies.init_study_settings import InitStudySettings

# Every setting, its default and what it means: that class.
HELP = rules.meanings_of(InitStudySettings)

PRESETS = {
  "default": dict(),
  "quick": dict(
    n_per_class=3,
    bilevel_width=16,
    kkt_width=16,
    bilevel_steps=20,
    chunk_steps=20,
    kkt_victim_epochs=2000,
    kkt_steps=100,
    grid=False,
    bilevel_inner_maxiter=50,
  ),
  "tiny": dict(
    n_per_class=2,
    parts="affine,kkt",
    bilevel_width=8,
    kkt_width=8,
    bilevel_steps=4,
    chunk_steps=2,
    kkt_steps=4,
    kkt_victim_epochs=200,
    bilevel_inner_maxiter=20,
    grid=False,
  ),
}


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  """The study's settings: their defaults, updated by ``PRESETS[preset]``."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict(rules.defaults_of(InitStudySettings))
  c.update(PRESETS[preset])
  return c
