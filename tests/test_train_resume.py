"""train_victim saving every chunk, killed by SIGKILL mid-way and resumed, ends with bitwise the
victim of a run that never saved."""

import os
import signal
import subprocess
import sys
import time

from conftest import cli_config
from flax import serialization
import numpy as np
import pytest

from experiments import train_victim
from experiments.configs import victim as configs
from recon_jax.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Many short chunks, a state file after each, and a weight-decay phase so the
# resume may land in either phase.
FLAGS = [
  "--config=experiments/configs/victim.py:digits",
  "--config.victim.n_per_class=3",
  "--config.victim.widths=16,16",
  "--config.victim.epochs=60000",
  "--config.victim.wd_epochs=20000",
  "--config.victim.wd=0.01",
  "--config.chunk_epochs=200",
  "--config.save_every=1",
]


def _env():
  env = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  return env


def _cmd(workdir, *extra):
  return [sys.executable, "-m", "experiments.train_victim", *FLAGS, f"--workdir={workdir}", *extra]


def _params(workdir):
  with open(os.path.join(workdir, "victim.msgpack"), "rb") as f:
    blob = serialization.msgpack_restore(f.read())
  return blob["params"]


def _flat(tree, prefix=""):
  if isinstance(tree, dict):
    out = {}
    for k, v in tree.items():
      out.update(_flat(v, f"{prefix}/{k}"))
    return out
  return {prefix: np.asarray(tree)}


@pytest.mark.slow
def test_kill_and_resume_train_victim(tmp_path):
  full = subprocess.run(
    _cmd(tmp_path / "full", "--config.save_every=0"),
    cwd=ROOT,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert full.returncode == 0, full.stderr[-2000:]
  work = tmp_path / "killed"
  state = work / "train_state.msgpack"
  proc = subprocess.Popen(
    _cmd(work), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
  )
  try:
    deadline = time.time() + 240
    while not state.exists():
      assert proc.poll() is None, "the run ended before writing train_state.msgpack"
      assert time.time() < deadline
      time.sleep(0.02)
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
  finally:
    proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert not (work / "victim.msgpack").exists()
  # Without --resume the workdir is refused and the state kept.
  cfg = cli_config(configs, FLAGS)
  with pytest.raises(ConfigError, match="not empty"):
    train_victim.job(cfg, str(work))
  assert state.exists()
  resumed = subprocess.run(
    _cmd(work, "--resume", "--config.save_every=0"),
    cwd=ROOT,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert "resuming phase" in resumed.stderr  # it continued, it did not start over
  a, b = _flat(_params(tmp_path / "full")), _flat(_params(work))
  assert sorted(a) == sorted(b)
  for k in a:
    assert np.array_equal(a[k], b[k]), k
