"""recon_jax: training-data reconstruction attacks (Haim et al. 2022, DecoReco, Runkel et al. 2024).

The public API: the data, the victim, what the attacker sees (:class:`Target`),
the attacks (pure ``init``/``step`` pairs, :class:`Attack`), the one batched
loop behind :func:`run_attack`, and the evaluation.  The submodules hold the
rest (``recon_jax.core.losses``, ``recon_jax.eval``, ``recon_jax.eval.diagnostics``, ...);
``recon_jax.cli`` runs a config-driven script of your own from the command line.
"""

from recon_jax.attacks.bilevel import bilevel_attack
from recon_jax.attacks.closed_form import closed_form_attack
from recon_jax.attacks.inversion import inversion_attack
from recon_jax.attacks.kkt import kkt_attack
from recon_jax.data import Dataset, load_dataset
from recon_jax.engine.inits import make_x_init
from recon_jax.engine.loop import AttackRun, run_attack
from recon_jax.engine.sweep import random_search
from recon_jax.errors import ConfigError, Error
from recon_jax.eval.evaluation import evaluate_candidates
from recon_jax.eval.identifiability import identifiability
from recon_jax.job.pipeline import reconstruct
from recon_jax.job.planning import candidate_labels
from recon_jax.job.settings import JobConfig, Threat, reconstruct_config
from recon_jax.types import Attack, Target
from recon_jax.victims.recipe import VictimConfig
from recon_jax.victims.sources import Victim, import_victim, load_or_train_victim
from recon_jax.victims.targets import make_target

__all__ = [
  "Attack",
  "AttackRun",
  "ConfigError",
  "Dataset",
  "Error",
  "JobConfig",
  "Target",
  "Threat",
  "Victim",
  "VictimConfig",
  "bilevel_attack",
  "candidate_labels",
  "closed_form_attack",
  "evaluate_candidates",
  "identifiability",
  "import_victim",
  "inversion_attack",
  "kkt_attack",
  "load_dataset",
  "load_or_train_victim",
  "make_target",
  "make_x_init",
  "random_search",
  "reconstruct",
  "reconstruct_config",
  "run_attack",
]
