"""recon_jax.cli: error lines, exit codes, help text, flag checks."""

import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import configs
from experiments.configs import reconstruct as recon_configs
from experiments.configs import victim as victim_configs
from recon_jax import cli
from recon_jax.data import DataError
from recon_jax.engine import sweep
from recon_jax.errors import ConfigError
from recon_jax.io import checkpoint
from recon_jax.io.workdir import flatten
from recon_jax.victims.descent import TrainError

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _line(e, cfg):
  return cli.error_line(e, cfg)


@pytest.mark.parametrize(
  "error, want",
  [
    # the library's name first: replaced by the setting's
    (
      ConfigError("lr_x must be > 0, got -0.1."),
      "error: --config.search.lr_x must be > 0, got -0.1.",
    ),
    (
      ConfigError("lr must be a finite number > 0, got 0.0."),
      "error: --config.victim.lr must be a finite number > 0, got 0.0.",
    ),
    (
      ConfigError("m=15 must be a positive multiple of the 10 classes."),
      "error: --config.search.m=15 must be a positive multiple of the 10 classes.",
    ),
    (
      ConfigError("lr_x: expected VALUE or LO:HI[:log|lin], got 'fast'."),
      "error: --config.search.lr_x: expected VALUE or LO:HI[:log|lin], got 'fast'.",
    ),
    (
      ConfigError("victim.init must be one of ...", "victim.init"),
      "error: --config.victim.init must be one of ...",
    ),
    (
      DataError("data_dir /x: no such directory", "data_dir"),
      "error: --config.data_dir /x: no such directory",
    ),
    # a name that is not the message's first word: put in front
    (
      ConfigError("the range is empty", argument="alpha"),
      "error: --config.search.alpha: the range is empty",
    ),
    # the shortest setting wins, then the first in order: the search's seed, not the victim's
    (
      ConfigError("seed must be an integer >= 0, got -1."),
      "error: --config.search.seed must be an integer >= 0, got -1.",
    ),
    (
      ConfigError("data_seed must be an integer >= 0", "victim.data_seed"),
      "error: --config.victim.data_seed must be an integer >= 0",
    ),
    # no setting of that name: the message as it is (a file, a run)
    (
      checkpoint.CheckpointError("/x/v.msgpack: checkpoint file not found."),
      "error: /x/v.msgpack: checkpoint file not found.",
    ),
    (
      TrainError("training diverged (non-finite loss) in steps 0-10"),
      "error: training diverged (non-finite loss) in steps 0-10",
    ),
    (ConfigError(""), "error: ConfigError"),
  ],
)
def test_error_line_names_the_setting(error, want):
  assert _line(error, recon_configs.get_config("tiny")) == want


def test_error_line_without_a_config_or_with_something_else():
  e = ConfigError("lr must be > 0")
  assert _line(e, None) == "error: lr must be > 0"
  assert _line(e, True) == "error: lr must be > 0"  # a caller passing verbose by position
  assert _line(ConfigError("first line\nsecond"), None) == "error: first line"


def test_train_victim_config_maps_the_victim_names():
  cfg = victim_configs.get_config("tiny")
  assert _line(ConfigError("seed must be >= 0"), cfg) == (
    "error: --config.victim.seed must be >= 0"
  )
  assert _line(ConfigError("epochs must be > 0"), cfg) == (
    "error: --config.victim.epochs must be > 0"
  )


@pytest.mark.parametrize(
  "raised, code, start",
  [
    (ConfigError("steps must be > 0"), 1, "error: --config.search.steps must be > 0"),
    (cli.UserError("--workdir x is not empty"), 1, "error: --workdir x is not empty"),
    (cli.RunFailed("every restart diverged (2 of 2)"), 2, "error: every restart diverged"),
    (KeyboardInterrupt(), 130, "interrupted"),
  ],
)
def test_main_guard_exit_codes_and_one_line(capsys, raised, code, start):
  def fn():
    raise raised

  with pytest.raises(SystemExit) as e:
    cli.main_guard(fn, recon_configs.get_config("tiny"))
  assert e.value.code == code
  err = capsys.readouterr().err
  assert err.startswith(start) and err.count("\n") == 1, err


def test_main_guard_lets_bugs_through():
  with pytest.raises(ZeroDivisionError):
    cli.main_guard(lambda: 1 / 0, None)


def test_help_text_lists_every_setting_with_its_default_and_the_presets():
  text = cli.help_text(
    configs.path("reconstruct"),
    "lfw",
    argv=["prog", "--config=" + configs.path("reconstruct") + ":tiny"],
    doc="The binary.",
  )
  assert text.startswith("The binary.")
  for preset in recon_configs.PRESETS:
    assert preset in text
  flat = flatten(recon_configs.get_config("tiny").to_dict())
  for key in flat:
    assert f"  {key} = " in text, key
  assert "num_restarts = 2" in text and "victim.epochs = 400" in text  # the tiny preset's
  assert "restarts R, batched in one compiled program" in text  # the config file's comment
  assert "victim.lr = 0.05" in text and "gradient-descent learning rate" in text
  assert "victim.msgpack, a PyTorch state dict" in text  # a comment continued on a second line
  assert all(
    len(line) <= 100 for line in text.splitlines() if "usage" not in line and "Presets" not in line
  ), max(text.splitlines(), key=len)


def test_unknown_setting_and_preset_are_refused_with_a_hint():
  path = configs.path("reconstruct")
  with pytest.raises(
    cli.UserError,
    match=r"--config.stepz: no such setting; did you mean "
    r"--config.search.steps",
  ):
    cli.check_overrides(["prog", "--config.stepz=3"], path, "tiny")
  cli.check_overrides(["prog", "--config.victim.lr=0.1", "--noconfig.runtime.x64"], path, "tiny")
  with pytest.raises(
    cli.UserError, match="unknown preset 'huge'; choose from finetune, finetune_kkt, lfw"
  ):
    cli.load_config(path, "huge")
  with pytest.raises(cli.UserError, match="no such config file"):
    cli.load_config("/nowhere/config.py", None)


def test_a_broken_config_file_is_one_line(tmp_path):
  (tmp_path / "syntax.py").write_text("def get_config(:\n")
  with pytest.raises(cli.UserError, match=r"syntax.py, line 1: invalid syntax"):
    cli.load_config(str(tmp_path / "syntax.py"), None)
  (tmp_path / "number.py").write_text("def get_config():\n  return 3\n")
  with pytest.raises(cli.UserError, match="must return an ml_collections.ConfigDict, not int"):
    cli.load_config(str(tmp_path / "number.py"), None)
  (tmp_path / "empty.py").write_text("x = 1\n")
  with pytest.raises(cli.UserError, match="has no get_config"):
    cli.load_config(str(tmp_path / "empty.py"), None)


def test_flag_messages_are_one_clean_line():
  from absl import flags

  e = flags.IllegalFlagValueError(
    "flag --config.x64=maybe: ('Non-boolean argument to boolean flag', 'maybe')"
  )
  assert cli._flag_message(e) == "--config.x64=maybe: expected true or false"


def test_sweep_refuses_non_finite_ranges():
  for text in ("nan", "inf", "-inf", "0.1:inf", "nan:1", "1:nan:lin"):
    with pytest.raises(ConfigError, match="finite") as e:
      sweep.parse_range("alpha", text, "lin")
    assert e.value.argument == "alpha"
  with pytest.raises(ConfigError, match="finite"):
    sweep.random_search(0, 2, {"lr_x": (0.1, float("inf"), "lin")})
  with pytest.raises(ConfigError, match="float32"):
    sweep.random_search(0, 2, {"lr_x": (-1e308, 1e308, "lin")})
  with pytest.raises(ConfigError, match="refine_alpha"):
    sweep.refine({"alpha": np.ones(2)}, float("nan"), 0.1)
  assert sweep.parse_range("lr_x", "0.1:0.5", "log") == (0.1, 0.5, "log")


def test_a_nested_setting_is_named_by_the_errors_argument_not_by_its_message():
  from experiments.configs import efficacy as efficacy_configs

  eff = efficacy_configs.get_config("tiny")
  # the message need not name the setting: the argument (data) says which it is
  e = ConfigError("must be a finite number >= 0, got -1.", "variants.tv.kkt.w_tv")
  want = "error: --config.variants.tv.kkt.w_tv: must be a finite number >= 0, got -1."
  assert _line(e, eff) == want
  e = ConfigError("w_tv must be >= 0, got -1.", "variants.tv.kkt.w_tv")
  assert _line(e, eff) == "error: --config.variants.tv.kkt.w_tv must be >= 0, got -1."
  e = ConfigError("must be > 0", "victim.lr")
  assert _line(e, recon_configs.get_config("tiny")) == "error: --config.victim.lr: must be > 0"
  assert cli.flag_of(eff, "base.victim.lr") == "--config.base.victim.lr"
  assert cli.flag_of(eff, "variants.tv.kkt.w_tv") == "--config.variants.tv.kkt.w_tv"


@pytest.mark.parametrize(
  "config, argv",
  [
    ("reconstruct", ["--config.checkpoint=m.pt"]),
    ("reconstruct", ["--noconfig.known_init"]),
    ("reconstruct", ["--config.foreign.stride", "2"]),
    ("reconstruct", ["--config.steps=3", "--config.search.steps=3"]),
    ("reconstruct", ["--config.subspace=True"]),
    ("audit", ["--config.job.checkpoint=m.pt"]),
    ("audit", ["--config.init=t.pt"]),
    ("audit", ["--config.train_data=t/"]),
    ("efficacy", ["--config.base.num_restarts=2"]),
  ],
)
def test_a_flag_from_before_0_2_0_is_refused_as_any_unknown_setting(config, argv):
  """Before 0.2.0 these were rewritten as the name now (``--config.checkpoint`` as
  ``--config.threat.model``) with a notice; the refusal points at CHANGELOG.md's table."""
  preset = "default" if config == "audit" else "tiny"
  name = argv[0].split("=")[0].replace("--noconfig.", "--config.")
  with pytest.raises(cli.UserError) as e:
    cli.check_overrides(["prog", *argv], configs.path(config), preset)
  assert str(e.value).startswith(f"{name}: no such setting"), str(e.value)
  assert str(e.value).endswith(
    "(--help lists them all; CHANGELOG.md, 0.2.0, lists the names that moved)"
  )
  assert "\n" not in str(e.value)


def test_the_audit_names_the_threat_settings_by_its_own_flags():
  """The audit holds the job's threat section and the victim's loss at its top: an error
  naming ``threat.heldout`` or ``victim.loss`` is spelled as the flag the user typed."""
  from experiments.configs import audit as audit_configs

  cfg = audit_configs.get_config()
  e = ConfigError("threat.heldout: give held-out images.", "threat.heldout")
  assert _line(e, cfg) == "error: --config.heldout: give held-out images."
  e = ConfigError("victim.loss='ce' needs 2 output(s).", "victim.loss")
  assert _line(e, cfg) == "error: --config.loss='ce' needs 2 output(s)."
  recon = recon_configs.get_config("tiny")
  assert _line(e, recon) == "error: --config.victim.loss='ce' needs 2 output(s)."
  assert cli.flag_of(recon, "threat.heldout") == "--config.threat.heldout"


def test_settings_a_message_mentions_are_data_and_nothing_else_is_renamed():
  cfg = recon_configs.get_config("tiny")
  e = ConfigError(
    "workdir /x is not empty; overwrite=True replaces it.", "workdir", ("overwrite=True",)
  )
  assert _line(e, cfg) == "error: --workdir /x is not empty; --overwrite replaces it."
  e = ConfigError("resume: workdir /x does not exist; nothing to resume.", "resume", ("workdir",))
  assert _line(e, cfg) == "error: --resume: --workdir /x does not exist; nothing to resume."
  # given mentions are all there is: a NAME=VALUE word the error does not list stays as it is
  e = ConfigError("steps must be > 0 when seed=1.", "steps", mentions=())
  assert _line(e, cfg) == "error: --config.search.steps must be > 0 when seed=1."
  e = ConfigError("steps must be > 0 when seed=1.", "steps", mentions=("seed=1",))
  assert _line(e, cfg) == "error: --config.search.steps must be > 0 when --config.search.seed=1."
  # a message that does not list its mentions: its NAME=VALUE words are taken as mentions
  assert ConfigError("set derivative=surrogate or leave it.").mentions == ("derivative=surrogate",)


@pytest.mark.parametrize(
  "binary, args, want",
  [
    (
      "efficacy",
      ["--config=experiments/configs/efficacy.py:tiny", "--config.variants.tv.kkt.w_tv=-1"],
      "error: --config.variants.tv.kkt.w_tv must be",
    ),
  ],
)
# reconstruct's case (--config.victim.lr) runs in-process in test_bad_input
# (victim_lr_zero_reconstruct, the same job path), and its binary in a subprocess there.
def test_the_binaries_name_a_nested_setting_in_one_line_and_exit_1(tmp_path, binary, args, want):
  extra = ["--variants=tv", "--draws=1"] if binary == "efficacy" else []
  work = tmp_path / "w"
  cmd = [sys.executable, "-m", f"experiments.{binary}", *args, *extra, f"--workdir={work}"]
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
  assert p.returncode == 1, p.stderr[-2000:]
  assert p.stderr.startswith(want) and p.stderr.count("\n") == 1, p.stderr[-2000:]
  assert not work.exists()


MY_CONFIG = '''"""My study's settings."""
import ml_collections

PRESETS = ("default", "big")


def get_config(preset="default"):
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}")
  c = ml_collections.ConfigDict()
  c.steps = 10 if preset == "default" else 1000  # optimisation steps
  c.opt = ml_collections.ConfigDict({"beta": 0.9})
  return c
'''

MY_SCRIPT = '''"""My own study, on the library's command line."""
import os

from recon_jax import cli
from recon_jax.errors import ConfigError


def main(cfg):
  if not 0 < cfg.opt.beta < 1:
    raise ConfigError(f"must be in (0, 1), got {cfg.opt.beta}.", "opt.beta")
  print("steps", cfg.steps)


if __name__ == "__main__":
  cli.run(main, os.path.join(os.path.dirname(__file__), "my_config.py"), "default")
'''


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_a_users_own_script_gets_the_flags_help_and_one_line_errors(tmp_path):
  (tmp_path / "my_config.py").write_text(MY_CONFIG)
  (tmp_path / "my_study.py").write_text(MY_SCRIPT)
  env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

  def run(*args):
    cmd = [sys.executable, str(tmp_path / "my_study.py"), *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

  p = run("--help")
  assert p.returncode == 0 and "steps = 10" in p.stdout and "optimisation steps" in p.stdout
  assert "opt.beta = 0.9" in p.stdout and "--workdir" in p.stdout, p.stdout
  p = run("--config.steps=3")
  assert p.returncode == 0 and p.stdout.strip() == "steps 3", p.stderr[-2000:]
  p = run("--config.opt.beta=2")
  assert p.returncode == 1 and p.stderr == "error: --config.opt.beta: must be in (0, 1), got 2.0.\n"
  p = run("--config.opt.betta=0.5")
  assert p.returncode == 1 and p.stderr.startswith("error: --config.opt.betta: no such setting")
  assert p.stderr.count("\n") == 1


@pytest.mark.slow  # a subprocess: the slow tier
def test_a_former_flag_is_refused_by_the_binary_in_one_line(tmp_path):
  """``--config.checkpoint`` (``--config.threat.model`` since before 0.2.0) ran the binary
  with a notice; now it is one line, exit code 1, and no workdir."""
  work = tmp_path / "w"
  cmd = [sys.executable, "-m", "experiments.reconstruct"]
  cmd += ["--config=experiments/configs/reconstruct.py:tiny", f"--workdir={work}"]
  cmd += [f"--config.checkpoint={tmp_path}/absent.msgpack"]
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  p = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
  lines = p.stderr.splitlines()
  assert p.returncode == 1 and len(lines) == 1, p.stderr[-2000:]
  assert lines[0].startswith("error: --config.checkpoint: no such setting"), lines
  assert not work.exists()
