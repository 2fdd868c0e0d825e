"""What the binaries and the report say to a user (Hardening V, items 4 and 7): each line
names what the user gave, in the user's own words, and says what is true of the run."""

import numpy as np
import pytest

from experiments.configs import reconstruct as recon_configs
from recon_jax.errors import ConfigError
from recon_jax.job import planning


def _config(preset, settings):
  cfg = recon_configs.get_config(preset)
  for key, value in settings.items():
    *parents, name = key.split(".")
    target = cfg
    for part in parents:
      target = target[part]
    target[name] = value
  return cfg


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
  """A 64-256-1 safetensors model of the digits' 8x8 inputs (the tiny preset says 32, 32)."""
  from safetensors.numpy import save_file

  rng = np.random.default_rng(0)
  path = tmp_path_factory.mktemp("model") / "model.safetensors"
  model = {
    "fc1.weight": rng.normal(size=(256, 64)).astype(np.float32) / 8,
    "fc1.bias": np.zeros(256, np.float32),
    "fc2.weight": rng.normal(size=(1, 256)).astype(np.float32) / 16,
    "fc2.bias": np.zeros(1, np.float32),
  }
  save_file(model, str(path))
  return path


def test_a_presets_widths_give_way_to_an_imported_model(wide_model):
  """The tiny preset's 32, 32 are not the user's: the file's 256 are used; widths the user
  set are still refused."""
  given = {"threat.model": str(wide_model), "attack": "kkt"}
  cfg = _config("tiny", given)
  plan = planning.prepare(cfg, {}, given)
  assert plan.source.imported.module.widths == (256,)
  mine = dict(given, **{"victim.widths": (32, 32)})
  with pytest.raises(ConfigError, match="victim.widths=32,32 contradicts"):
    planning.prepare(_config("tiny", mine), {"widths": (32, 32)}, mine)
