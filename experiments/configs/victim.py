"""train_victim's config; its victim section (``recon_jax.victims.recipe.VictimConfig``) is shared.

Presets (``--config=experiments/configs/victim.py:PRESET``):
  finetune  10 faces + 10 non-faces of scikit-image's LFW subset, one hidden layer of
          2048 ReLU units from a standard (He) initialisation, 2000 epochs of full-batch
          GD: a model that stays near weights an attacker can know (a published seed)
  lfw     the same data, 625-256-256-1 MLP, 10000 epochs of full-batch GD from a small
          init (Haim et al.'s setting)
  digits  25 + 25 scikit-learn digits (even vs odd), 64-256-256-1 MLP
  tiny    3 + 3 digits, 64-32-32-1 MLP with He init, 400 epochs (seconds)

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits
"""

import ml_collections

from recon_jax.job.settings import VICTIM_HELP, victim_section

HELP = {f"victim.{k}": v for k, v in VICTIM_HELP.items()}  # --help's text of each setting


PRESETS = {
  "finetune": dict(
    arch="mlp",
    widths=(2048,),
    bias="all",
    init="kaiming",
    init_std=None,
    first_layer_std=None,
    lr=0.01,
    epochs=2000,
  ),
  "lfw": dict(),
  "digits": dict(dataset="digits", n_per_class=25),
  # He init: the default small init leaves a 32-32 victim at chance after 400 epochs.
  "tiny": dict(
    dataset="digits",
    n_per_class=3,
    widths=(32, 32),
    epochs=400,
    init="kaiming",
    init_std=None,
    first_layer_std=None,
  ),
}


def get_config(preset: str = "lfw") -> ml_collections.ConfigDict:
  """train_victim's config: the victim, its data folder and the run's bookkeeping."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  c.victim = victim_section(**PRESETS[preset])
  c.data_dir = ""  # folder with MNIST/CIFAR files (never downloaded)
  c.x64 = False  # train in float64
  c.chunk_epochs = 2000  # epochs per compiled chunk, between logs and saves
  c.save_every = 1  # save train_state.msgpack every N chunks (0: never)
  return c
