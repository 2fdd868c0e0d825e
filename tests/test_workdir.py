"""recon_jax.io.workdir: atomic writes with the usual file modes, paths, resumability."""

import json
import os
import re
import stat

import numpy as np
import pytest

from recon_jax.errors import ConfigError
from recon_jax.io import checkpoint
from recon_jax.io import workdir as wd


def _mode(path):
  return stat.S_IMODE(os.stat(path).st_mode)


def test_written_files_are_readable_by_the_group_like_the_figures(tmp_path):
  old = os.umask(0o022)
  try:
    wd.write_json(str(tmp_path), "metrics.json", {"a": 1})
    wd.write_npz(str(tmp_path), "arrays.npz", x=np.zeros(2))
    wd.write_text(str(tmp_path), "table.tsv", "a\n")
    checkpoint.save(str(tmp_path / "victim.msgpack"), {"w": np.ones(2)}, {})
    for name in ("metrics.json", "arrays.npz", "table.tsv", "victim.msgpack"):
      assert _mode(tmp_path / name) == 0o644, name
    os.umask(0o077)  # the umask is respected
    checkpoint.atomic_write_bytes(str(tmp_path / "private.txt"), b"x")
    assert _mode(tmp_path / "private.txt") == 0o600
    os.chmod(tmp_path / "metrics.json", 0o640)  # a rewrite keeps the file's mode
    wd.write_json(str(tmp_path), "metrics.json", {"a": 2})
    assert _mode(tmp_path / "metrics.json") == 0o640
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"a": 2}
  finally:
    os.umask(old)
  assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_expand():
  assert wd.expand("") == ""
  assert wd.expand("~/x") == os.path.join(os.path.expanduser("~"), "x")


def test_prepare_refuses_a_non_empty_workdir_unless_overwrite(tmp_path):
  (tmp_path / "old.txt").write_text("keep")
  with pytest.raises(ConfigError, match="not empty") as e:
    wd.prepare(str(tmp_path))
  assert e.value.argument == "workdir"
  assert wd.prepare(str(tmp_path), overwrite=True) == str(tmp_path)
  assert (tmp_path / "old.txt").read_text() == "keep"


def test_check_resumable_names_the_settings_that_differ(tmp_path):
  cfg = {"seed": 0, "steps": 10, "use_cache": True}
  wd.write_config(str(tmp_path), cfg)
  with pytest.raises(ConfigError, match="nothing to resume"):
    wd.check_resumable(cfg, str(tmp_path), "state.msgpack")
  (tmp_path / "state.msgpack").write_bytes(b"x")
  wd.check_resumable(dict(cfg, use_cache=False), str(tmp_path), "state.msgpack")  # not compared
  with pytest.raises(ConfigError, match="differs .* in seed") as e:
    wd.check_resumable(dict(cfg, seed=1), str(tmp_path), "state.msgpack")
  assert e.value.argument == "resume"


def _files(folder):
  return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_config_json_of_names_from_before_0_2_0_is_refused_untouched(tmp_path):
  """A workdir written before the settings moved into sections (``checkpoint``, the
  ``foreign`` section, ``steps`` at the top) resumed under the names now; 0.2.0 refuses it in
  one line naming the CHANGELOG's table, and leaves every file as it was."""
  now = {"seed": 0, "threat": {"model": "m.pt", "stride": 2}, "search": {"steps": 5}}
  before = {"seed": 0, "checkpoint": "m.pt", "foreign": {"stride": 2}, "steps": 5}
  for cfg, stored in [(now, before), ({"base": now}, {"base": before})]:  # a harness's too
    (tmp_path / "config.json").write_text(json.dumps({"config": stored, "environment": {}}))
    (tmp_path / "state.msgpack").write_bytes(b"x")
    files = _files(tmp_path)
    with pytest.raises(ConfigError) as e:
      wd.check_resumable(cfg, str(tmp_path), "state.msgpack")
    says = str(e.value)
    assert "\n" not in says and e.value.argument == "resume"
    prefix = "base." if "base" in cfg else ""
    assert says.startswith(
      f"resume: {tmp_path / 'config.json'} holds settings this version does not have "
      f"({prefix}checkpoint, {prefix}foreign.stride, {prefix}steps): it was written before "
      "0.2.0, whose names it uses (see CHANGELOG.md, 0.2.0, 'Names that moved before 0.2.0')"
    ), says
    assert _files(tmp_path) == files
  # a config.json of today records the version that wrote it, and names only today's settings
  wd.write_config(str(tmp_path), now)
  wd.check_resumable(now, str(tmp_path), "state.msgpack")
  stored = json.loads((tmp_path / "config.json").read_text())
  assert "recon_jax" in stored["environment"]["versions"]
  stored["config"]["gone"] = 1  # a setting a later version dropped: not called pre-0.2.0
  (tmp_path / "config.json").write_text(json.dumps(stored))
  with pytest.raises(ConfigError, match=r"\(gone\): it was written by recon_jax "):
    wd.check_resumable(now, str(tmp_path), "state.msgpack")


def test_a_resume_is_refused_on_another_studys_workdir(tmp_path):
  cfg = {"seed": 0, "steps": 10}
  wd.write_config(str(tmp_path), cfg, study="toy_2d")
  (tmp_path / "state.msgpack").write_bytes(b"x")
  wd.check_resumable(cfg, str(tmp_path), "state.msgpack", "toy_2d")
  with pytest.raises(ConfigError, match="toy_2d run, not a reconstruct run"):
    wd.check_resumable(cfg, str(tmp_path), "state.msgpack", "reconstruct")
  wd.write_config(str(tmp_path), cfg)  # an older config.json names no study: it passes
  wd.check_resumable(cfg, str(tmp_path), "state.msgpack", "reconstruct")


def test_a_workdir_in_use_is_refused_and_a_stale_lock_taken_over(tmp_path):
  import socket
  import subprocess

  host = socket.gethostname()
  lock = tmp_path / wd.LOCK
  live = subprocess.Popen(["sleep", "30"])
  try:
    lock.write_text(f"{live.pid} {host}")
    with pytest.raises(ConfigError, match=f"in use by process {live.pid}") as e:
      wd.open_run({}, str(tmp_path), "state.msgpack", resume=False, overwrite=True)
    assert e.value.argument == "workdir"
    assert lock.read_text() == f"{live.pid} {host}"  # untouched
  finally:
    live.kill()
    live.wait()
  lock.write_text(f"{live.pid} {host}")  # that process is gone: a stale lock
  wd.lock(str(tmp_path))
  assert lock.read_text() == f"{os.getpid()} {host}"
  wd.lock(str(tmp_path))  # this process again: fine
  lock.write_text(f"1 another-host-{host}")  # liveness unknown: refused
  with pytest.raises(ConfigError, match="on another-host"):
    wd.lock(str(tmp_path))
  lock.unlink()
  # The lock alone does not make a workdir "not empty".
  (tmp_path / wd.LOCK).write_text(f"{os.getpid()} {host}")
  assert wd.prepare(str(tmp_path)) == str(tmp_path)


@pytest.mark.slow
def test_the_library_run_opens_its_folder_as_the_binary_does(tmp_path):
  """run_reconstruction creates a missing folder, and refuses (one line, nothing written) a
  folder that is not empty, a path that is a file, or no path at all."""
  from experiments.configs import reconstruct as configs
  from recon_jax.job import planning, run
  from recon_jax.job.settings import JobConfig

  job = planning.prepare(JobConfig(**configs.get_config("tiny")).replace(attack="weights"))
  m = run.run_reconstruction(job, str(tmp_path / "new" / "folder"))
  assert (tmp_path / "new" / "folder" / "metrics.json").is_file() and m.verdict
  before = (tmp_path / "new" / "folder" / "metrics.json").read_bytes()
  with pytest.raises(ConfigError, match="not empty"):
    run.run_reconstruction(job, str(tmp_path / "new" / "folder"))
  assert (tmp_path / "new" / "folder" / "metrics.json").read_bytes() == before
  (tmp_path / "file").write_text("x")
  with pytest.raises(ConfigError, match="not a folder"):
    run.run_reconstruction(job, str(tmp_path / "file"))
  for bad in ("", None):
    with pytest.raises(ConfigError, match="workdir is required"):
      run.run_reconstruction(job, bad)


def test_the_library_run_takes_a_plan_and_says_so_otherwise(tmp_path):
  """run_reconstruction runs a job planned once (planning.prepare); settings given instead
  are refused in one line that says how to make a Plan, and nothing is written."""
  from recon_jax.job import run
  from recon_jax.job.settings import JobConfig

  with pytest.raises(ConfigError, match=r"plan must be a Plan \(recon_jax.job.planning.prepare"):
    run.run_reconstruction(JobConfig(), str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def moved_names() -> dict:
  """CHANGELOG.md's table of the names that moved before 0.2.0: ``{former: name now}``."""
  with open(os.path.join(os.path.dirname(__file__), "..", "CHANGELOG.md")) as f:
    text = f.read()
  table = text.split("### Names that moved before 0.2.0", 1)[1].split("\n### ", 1)[0]
  return dict(re.findall(r"^\| `([\w.]+)`[^|]* \| `([\w.]+)` \|$", table, re.M))


def _as_before_0_2_0(config: dict) -> dict:
  """A job's config.json ``config`` as the versions before 0.2.0 wrote it: each setting of
  :func:`moved_names` under its former name."""
  flat, out = wd.flatten(config), {}
  former = {now: old for old, now in moved_names().items()}
  for key, value in flat.items():
    name = former.get(key, key)
    head, _, leaf = name.partition(".")
    if leaf:
      out.setdefault(head, {})[leaf] = value
    else:
      out[name] = value
  return out


def test_changelog_lists_each_former_name_with_a_setting_of_today():
  import recon_jax as rj

  moved = moved_names()
  assert len(moved) == 57 and moved["checkpoint"] == "threat.model"
  flat = wd.flatten(rj.JobConfig().to_dict())
  for old, now in moved.items():
    assert now in flat and old not in flat, (old, now)


def test_the_binary_refuses_to_resume_a_workdir_from_before_0_2_0(tmp_path, capsys):
  """``--resume`` of a workdir whose config.json holds the former names: one line, exit 1,
  every file of the workdir as it was (it resumed under the names now)."""
  from experiments import reconstruct
  from experiments.configs import reconstruct as configs
  from recon_jax import cli
  from recon_jax.job.settings import JobConfig

  cfg = configs.get_config("tiny")
  stored = _as_before_0_2_0(JobConfig(**cfg).to_dict())
  assert stored["checkpoint"] == "" and stored["steps"] == 20 and "search" not in stored
  work = tmp_path / "w"
  work.mkdir()
  (work / "config.json").write_text(json.dumps({"config": stored, "study": "reconstruct"}))
  (work / "state.msgpack").write_bytes(b"state")
  files = _files(work)
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: reconstruct.job(cfg, str(work), resume=True), cfg)
  err = capsys.readouterr().err
  assert e.value.code == 1 and err.count("\n") == 1, err
  assert err.startswith(f"error: --resume: {work / 'config.json'} holds settings"), err
  assert "written before 0.2.0" in err and "CHANGELOG.md, 0.2.0, 'Names that moved" in err
  assert _files(work) == files
