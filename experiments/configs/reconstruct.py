"""The main job: victim -> attack (the cone by default, or a KKT search) -> evaluation -> report.

Presets (``--config=experiments/configs/reconstruct.py:PRESET``):
  finetune  (default) a model fine-tuned from weights the attacker knows: 10 faces + 10
          non-faces of scikit-image's LFW subset, one hidden layer of 2048 ReLU units from
          a published He initialisation, 2000 epochs of GD; the images are read off the
          cone of the first layer's change (attack=cone: linear programs, no search), and
          where it reads fewer than that change's span holds the KKT search in the span
          takes over from them (cone.cone_search_minutes)
  finetune_kkt  the same, the KKT search on theta* - theta_0 in that change's span (any depth)
  lfw     the same images, Haim et al.'s setting: 625-256-256-1 victim from a small init,
          the attacker knows theta* only
  digits  25 + 25 scikit-learn digits (even vs odd), 64-256-256-1 victim, 6000 steps
  lfw_wd  the same data and network with softplus units trained with weight decay to a
          stationary point (float64): the training set is an exact zero of the equations
  tiny    3 + 3 digits, 64-32-32-1 victim (He init, 400 epochs), 2 restarts x 20 steps
          (a smoke test, seconds)
  paper   Haim et al. App. B: d-1000-1000-1 victim, 100 restarts of their hyperparameter
          ranges (set victim.dataset and data_dir to your MNIST/CIFAR-10 folder)
  paper_mnist5k  the same on the embedded mnist5k digits, their n = 500 (250 odd + 250
          even), without the attacker's own scores; made for an accelerator (about 14 min
          projected on one H200, docs/log/leakage.md)

Ranges are ``VALUE`` or ``LO:HI[:log|lin]``, one draw per restart.  The settings, defaults
and meanings are the library's (``recon_jax.job.settings``); a preset overrides some.
"""

import ml_collections

from experiments.configs.victim import PRESETS as victim_presets
from recon_jax.job.settings import (  # noqa: F401 (HELP: --help)
  HELP,
  KNOWN_INIT_ATTACK,
  reconstruct_config,
)

FINETUNE = victim_presets["finetune"]  # the victim of both finetune presets
KNOWN_INIT = dict(known_init=True)  # their threat: the attacker knows theta_0
NO_SCORES = dict(identify=False)  # without the attacker's own scores
# Haim et al. App. B's victim: the first layer from std 1e-4, 10^5 epochs of GD at lr 0.01.
PAPER_VICTIM = dict(n_per_class=250, widths=(1000, 1000), init="kaiming", init_std=None)
PAPER_VICTIM.update(first_layer_std=1e-4, lr=0.01, epochs=100_000)
PAPER = dict(search=dict(num_restarts=100, steps=50_000, chunk_steps=5000, sweep="paper"))
PRESETS = {
  "finetune": dict(victim=FINETUNE, threat=KNOWN_INIT, attack="cone", linearize=0.5),
  "finetune_kkt": dict(victim=FINETUNE, threat=KNOWN_INIT, **KNOWN_INIT_ATTACK),
  "lfw": dict(),
  "digits": dict(victim=victim_presets["digits"], search=dict(steps=6000)),
  # A victim at a stationary point of a weight-decay-regularised loss, where the training set
  # is an exact zero of the stationarity equations: softplus units, 10^4 epochs of GD, 2000
  # with weight decay 1e-2, then L-BFGS to ||grad E|| <= 1e-10 ||theta||, all in float64.
  "lfw_wd": dict(
    victim=dict(activation="softplus", wd=1e-2, wd_epochs=2000, converge_tol=1e-10),
    runtime=dict(x64=True),
  ),
  "tiny": dict(
    victim=victim_presets["tiny"],
    search=dict(num_restarts=2, steps=20, chunk_steps=10),
    evaluation=NO_SCORES,
  ),
  "paper": dict(PAPER, victim=dict(PAPER_VICTIM, dataset="cifar10")),
  # The attacker's own scores of 100,000 candidates: left out, never measured at this scale.
  "paper_mnist5k": dict(PAPER, victim=dict(PAPER_VICTIM, dataset="mnist5k"), evaluation=NO_SCORES),
}


def get_config(preset: str = "finetune") -> ml_collections.ConfigDict:
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  return reconstruct_config(**PRESETS[preset])
