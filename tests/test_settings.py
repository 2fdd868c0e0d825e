"""The main job's settings ship with the library: defaults, meanings, overrides."""

import pytest

from experiments.configs import efficacy as efficacy_configs
from experiments.configs import reconstruct as reconstruct_configs
import recon_jax as rj
from recon_jax import workdir
from recon_jax.studies import settings


def test_the_binary_default_is_the_library_config():
  assert rj.reconstruct_config().to_dict() == reconstruct_configs.get_config().to_dict()


def test_every_setting_says_what_it_is():
  names = set(workdir.flatten(rj.reconstruct_config().to_dict()))
  assert names == set(settings.HELP)
  assert all(text.strip() for text in settings.HELP.values())
  base = {f"base.{k}" for k in names}
  assert base <= set(efficacy_configs.HELP)


def test_overrides_and_unknown_names():
  c = rj.reconstruct_config(steps=7, victim={"n_per_class": 3}, foreign={"stride": 2})
  assert (c.steps, c.victim.n_per_class, c.foreign.stride, c.foreign.padding) == (7, 3, 2, 0)
  with pytest.raises(KeyError, match="stepz"):
    rj.reconstruct_config(stepz=7)
  with pytest.raises(KeyError, match="widthz"):
    rj.reconstruct_config(victim={"widthz": (8,)})


def test_configs_do_not_share_their_unset_fields():
  a, b = rj.reconstruct_config(), rj.reconstruct_config()
  a.ssim_threshold = 0.5
  a.victim.batch_size = 4
  assert b.ssim_threshold is None and b.victim.batch_size is None
