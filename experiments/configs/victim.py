"""The victim section shared by the configs (fields of ``recon_jax.victim.VictimConfig``).

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits
"""
import dataclasses

import ml_collections
from ml_collections import config_dict

from recon_jax import victim

_OPTIONAL = {"init_std": float, "first_layer_std": float, "batch_size": int}


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
    "tiny": dict(dataset="digits", n_per_class=3, widths=(32, 32), epochs=400),
}


def get_config(preset: str = "lfw") -> ml_collections.ConfigDict:
  """train_victim's config: the victim, its data folder and the run's bookkeeping."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  c.victim = victim_section(**PRESETS[preset])
  c.data_dir = ""          # folder with MNIST/CIFAR files (never downloaded)
  c.x64 = False            # train in float64
  c.chunk_epochs = 2000    # epochs per compiled chunk, between logs and saves
  c.save_every = 1         # save train_state.msgpack every N chunks (0: never)
  return c
