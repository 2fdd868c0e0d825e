"""A typed config refuses a wrong setting where it is built, not when it runs: JobConfig and
its sections check every field against its rule (recon_jax/job/settings.py:RULES), on
construction and on every dataclasses.replace; presets and flag overrides build as before."""

import dataclasses

import pytest

from experiments.configs import audit as audit_configs
from experiments.configs import reconstruct as configs
import recon_jax as rj
from recon_jax import cli
from recon_jax.errors import ConfigError
from recon_jax.job import settings
from recon_jax.job.settings import JobConfig, Threat


@pytest.mark.parametrize(
  "settings, name, says",
  [
    (dict(runtime={"x64": "False"}), "runtime.x64", "must be True or False, got 'False'"),
    (dict(threat={"allow_data_mismatch": "no"}), "threat.allow_data_mismatch", "got 'no'"),
    (dict(search={"num_restarts": -3}), "search.num_restarts", "must be an integer >= 1, got -3"),
    (dict(search={"steps": 2.5}), "search.steps", "must be an integer"),
    (dict(cone={"cone_starts": 2.5}), "cone.cone_starts", "got 2.5"),  # an attack's option
    (dict(victim={"lr": -1.0}), "victim.lr", "got -1.0"),
    (dict(threat={"stride": "2"}), "threat.stride", "got '2'"),
  ],
)
def test_a_wrong_setting_is_refused_where_the_config_is_built(settings, name, says):
  with pytest.raises(ConfigError) as e:
    JobConfig(**settings)
  assert e.value.argument == name and says in str(e.value), str(e.value)


def test_replace_checks_the_changed_field_again():
  job = JobConfig(search={"steps": 7})
  with pytest.raises(ConfigError, match="search.num_restarts must be an integer >= 1, got 0"):
    job.replace(**{"search.num_restarts": 0})
  with pytest.raises(ConfigError, match="runtime.x64 must be True or False"):
    dataclasses.replace(job, **{"runtime.x64": 1})
  with pytest.raises(ConfigError, match="threat.padding"):
    Threat(padding=-1)
  changed = job.replace(**{"search.num_restarts": 3})
  assert changed.search.num_restarts == 3 and changed.search.steps == 7


@pytest.mark.parametrize("preset", list(configs.PRESETS))
def test_every_preset_builds_and_takes_field_by_field_overrides(preset):
  job = JobConfig(**configs.get_config(preset))
  assert job.replace(**{"search.seed": 5, "search.num_restarts": 2}).search.seed == 5
  assert settings.check_types(job) is None  # the one check, run when a JobConfig is built


@pytest.mark.parametrize("preset", list(audit_configs.PRESETS))
def test_the_audit_presets_build(preset):
  assert JobConfig(**audit_configs.get_config(preset).job).search.num_restarts >= 1


def test_a_binary_names_the_flag_of_a_setting_refused_when_built(tmp_path, capsys):
  """A flag override reaches JobConfig through the binary's job: one line naming the flag,
  nothing written."""
  from experiments import reconstruct

  cfg = configs.get_config("tiny")
  cfg.search.num_restarts = -3
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: reconstruct.job(cfg, str(tmp_path / "w")), cfg)
  assert e.value.code == 1
  assert capsys.readouterr().err == (
    "error: --config.search.num_restarts must be an integer >= 1, got -3.\n"
  )
  assert not (tmp_path / "w").exists()


def test_the_library_entry_point_refuses_before_running():
  with pytest.raises(ConfigError, match="runtime.x64 must be True or False"):
    rj.reconstruct(dict(configs.get_config("tiny"), **{"runtime.x64": "False"}))


@pytest.mark.parametrize(
  "flag, line",
  [
    (
      "--config.cone.cone_starts=2.5",
      "--config.cone.cone_starts=2.5: expected an integer, got '2.5'",
    ),
    (
      "--config.search.num_restarts=abc",
      "--config.search.num_restarts=abc: expected an integer, got 'abc'",
    ),
    (
      "--config.search.refine_alpha=abc",
      "--config.search.refine_alpha=abc: expected a number, got 'abc'",
    ),
  ],
)
def test_a_flag_value_of_the_wrong_type_says_what_the_setting_expects(flag, line):
  """The flag parse as the binaries run it (cli.define_flags' dry run), its message as shown."""
  from absl import flags

  from experiments import configs as config_files

  path = config_files.path("reconstruct")
  argv = ["reconstruct", f"--config={path}:tiny", flag]
  fv = flags.FlagValues()
  cli._define(path, path, "tiny", True, "w", fv, argv)
  with pytest.raises(Exception) as e:
    fv(argv, known_only=True)
  assert cli._flag_message(e.value) == line
