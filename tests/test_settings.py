"""The main job's settings ship with the library: defaults, meanings, overrides."""

import pytest

from experiments.configs import efficacy as efficacy_configs
from experiments.configs import reconstruct as reconstruct_configs
import recon_jax as rj
from recon_jax import workdir
from recon_jax.errors import ConfigError
from recon_jax.job import planning, settings


def test_the_binary_default_is_the_library_config():
  # The library's defaults are Haim et al.'s setting, the binary's lfw preset; its default
  # preset is finetune (a model fine-tuned from known weights).
  assert rj.reconstruct_config().to_dict() == reconstruct_configs.get_config("lfw").to_dict()


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


def test_typed_settings_read_a_config_and_write_the_same_config_json(tmp_path):
  c = rj.reconstruct_config(
    steps=7, victim={"n_per_class": 3, "widths": [8, 4]}, foreign={"stride": 2}
  )
  job = rj.JobConfig(**c)
  assert (job.steps, job.victim.n_per_class, job.victim.widths) == (7, 3, (8, 4))
  assert (job.foreign.stride, job.foreign.padding, job.ssim_threshold) == (2, 0, None)
  assert rj.JobConfig().to_dict() == rj.reconstruct_config().to_dict()  # one home for defaults
  # config.json is unchanged, so a workdir written from the ConfigDict resumes under the type
  assert workdir.jsonable(job) == workdir.jsonable(c)
  workdir.write_config(str(tmp_path), c, study="reconstruct")
  (tmp_path / "state.msgpack").write_bytes(b"")
  workdir.check_resumable(job, str(tmp_path), "state.msgpack", "reconstruct")
  with pytest.raises(ConfigError, match="steps"):
    workdir.check_resumable(job.replace(steps=8), str(tmp_path), "state.msgpack", "reconstruct")


def test_typed_settings_refuse_unknown_names():
  assert rj.JobConfig.of(rj.JobConfig()) == rj.JobConfig()
  with pytest.raises(ConfigError, match="stepz") as e:
    rj.JobConfig.of({"steps": 1, "stepz": 7})
  assert e.value.argument == "stepz"
  with pytest.raises(ConfigError, match="widthz") as e:
    rj.JobConfig(victim={"widthz": (8,)})
  assert e.value.argument == "victim.widthz"
  with pytest.raises(ConfigError, match="foreign.strid") as e:
    rj.JobConfig(foreign={"strid": 2})
  assert e.value.argument == "foreign.strid"


def test_the_checks_take_the_typed_settings_and_expand_their_paths(monkeypatch, tmp_path):
  monkeypatch.setenv("HOME", str(tmp_path))
  job = rj.JobConfig(steps=7, data_dir="~/data", victim={"dataset": "digits", "n_per_class": 3})
  plan = planning.prepare(job)
  assert plan.config == job.replace(data_dir=f"{tmp_path}/data")
  assert (plan.problem, plan.foreign, plan.stages[0][0]) == ("binary", False, 7)
  assert planning.prepare(plan.config.to_dict()).config == plan.config  # a plain dict too
  with pytest.raises(ConfigError, match="steps"):
    planning.prepare(job.replace(steps=0))
