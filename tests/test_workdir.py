"""recon_jax.io.workdir: atomic writes with the usual file modes, paths, resumability."""

import json
import os
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


def test_a_config_json_of_former_setting_names_resumes_under_the_names_now(tmp_path):
  """A workdir written before a setting moved (``checkpoint`` -> ``threat.model``) resumes
  under the same settings and is refused under others, the setting named as it is now."""
  renamed = {"checkpoint": "threat.model", "foreign.stride": "threat.stride"}
  wd.write_config(str(tmp_path), {"seed": 0, "checkpoint": "m.pt", "foreign": {"stride": 2}})
  (tmp_path / "state.msgpack").write_bytes(b"x")
  now = {"seed": 0, "threat": {"model": "m.pt", "stride": 2}}
  wd.check_resumable(now, str(tmp_path), "state.msgpack", renamed=renamed)
  with pytest.raises(ConfigError, match="differs .* in threat.model"):
    wd.check_resumable(
      {"seed": 0, "threat": {"model": "other.pt", "stride": 2}},
      str(tmp_path),
      "state.msgpack",
      renamed=renamed,
    )
  nested = {"base": now}  # a harness's config holds the job under a section
  wd.write_config(str(tmp_path), {"base": {"seed": 0, "checkpoint": "m.pt"}})
  with pytest.raises(ConfigError, match="in base.threat.model"):
    wd.check_resumable(
      {"base": {"seed": 0, "threat": {"model": "x.pt"}}},
      str(tmp_path),
      "state.msgpack",
      renamed={f"base.{k}": f"base.{v}" for k, v in renamed.items()},
    )
  wd.check_resumable(nested, str(tmp_path), "state.msgpack", renamed=renamed)


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
