"""train_victim's config; its victim section (``recon_jax.victims.victim.VictimConfig``) is shared.

Presets (``--config=experiments/configs/victim.py:PRESET``):
  lfw     10 faces + 10 non-faces of scikit-image's LFW subset, 625-256-256-1 MLP,
          10000 epochs of full-batch GD from a small init (the default)
  digits  25 + 25 scikit-learn digits (even vs odd), 64-256-256-1 MLP
  tiny    3 + 3 digits, 64-32-32-1 MLP with He init, 400 epochs (seconds)

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits
"""

import dataclasses

import ml_collections
from ml_collections import config_dict

from recon_jax.victims import victim

_OPTIONAL = {"init_std": float, "first_layer_std": float, "batch_size": int}

# What each victim setting means (shown by --help as victim.NAME).
HELP = {
  "dataset": "digits | lfw (embedded) | mnist | cifar10 | cifar100 (files in data_dir)",
  "task": "binary | multiclass (the labels follow loss: ce is multiclass)",
  "n_per_class": "training images per class (the n the attack must find)",
  "subtract_mean": "train on images minus their mean (as Haim et al.)",
  "data_seed": "seed of the training-image draw",
  "arch": "mlp | affine | one_hidden | cnn",
  "widths": "hidden widths (cnn: channels), e.g. 256,256",
  "bias": "biases in first | all | none of the layers",
  "init": "weight init: normal | kaiming | uniform | torch",
  "init_std": "std of init=normal (or He's std override); unset: the scheme's",
  "first_layer_std": "std of the first layer's weights (unset: as init)",
  "init_gain": "multiplies the init scale",
  "activation": "relu | gelu | softplus | tanh | identity",
  "loss": "logistic (binary) | ce (multiclass) | mse (regression)",
  "lr": "gradient-descent learning rate (> 0)",
  "epochs": "full-batch GD steps",
  "weight_decay": "L2 weight decay of the training energy (>= 0)",
  "wd_epochs": "steps of an optional second phase with weight decay wd (0: off)",
  "wd": "weight decay of that second phase (>= 0)",
  "momentum": "SGD momentum in [0, 1)",
  "adaptive": "normalised GD: none | loss (lr / loss) | grad (lr / ||grad||)",
  "batch_size": "minibatch size (unset: full batch)",
  "loss_threshold": "stop once the training loss is this low (0: run every epoch)",
  "seed": "seed of the victim's initialisation and minibatches",
  "converge_tol": "last phase: L-BFGS to ||grad E|| <= this x ||theta|| (0: off; needs wd)",
  "converge_maxiter": "L-BFGS iteration cap of that phase",
}


def victim_section(**overrides) -> ml_collections.ConfigDict:
  """VictimConfig's defaults as a ConfigDict (optional fields as typed placeholders)."""
  c = ml_collections.ConfigDict()
  for f in dataclasses.fields(victim.VictimConfig):
    value = overrides.pop(f.name, f.default)
    if f.name in _OPTIONAL:
      c[f.name] = config_dict.placeholder(_OPTIONAL[f.name])
      c[f.name] = value
    else:
      c[f.name] = tuple(value) if f.name == "widths" else value
  if overrides:
    raise KeyError(f"unknown victim settings {sorted(overrides)}")
  return c


PRESETS = {
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
