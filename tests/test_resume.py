"""Resume and determinism of the main job, with real subprocesses (one killed by SIGKILL).

A run of ``experiments.reconstruct`` that saves after every chunk, killed mid-way
and resumed with ``--resume``, must end with exactly the arrays of an
uninterrupted run that never saved (bitwise, on CPU): saving, killing and
resuming change nothing, and the same config and seed give the same arrays.
"""

import json
import os
import signal
import subprocess
import sys
import time

from conftest import cli_config
from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from experiments import reconstruct
from experiments.configs import reconstruct as configs
from recon_jax import cli
from recon_jax.engine import loop, resume
from recon_jax.io import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Many short chunks, a state file after each: the kill lands between two saves.
FLAGS = [
  "--config=experiments/configs/reconstruct.py:tiny",
  "--config.search.steps=2000",
  "--config.search.chunk_steps=10",
  "--config.runtime.save_every=1",
]


def _env(cache):
  env = dict(os.environ, RECON_JAX_CACHE=str(cache), JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  return env


def _run(workdir, cache, *extra):
  proc = subprocess.run(
    [sys.executable, "-m", "experiments.reconstruct", *FLAGS, f"--workdir={workdir}", *extra],
    cwd=ROOT,
    env=_env(cache),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


def _arrays(workdir):
  with np.load(os.path.join(workdir, "reconstructions.npz")) as z:
    return {k: z[k] for k in z.files}


def _assert_same(a, b):
  assert sorted(a) == sorted(b)
  for k in a:
    assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
    assert np.array_equal(a[k], b[k], equal_nan=True), f"{k} differs"


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """An uninterrupted run that never saves its state (save_every=0)."""
  tmp = tmp_path_factory.mktemp("resume")
  cache = tmp / "cache"
  _run(
    tmp / "full", cache, "--config.runtime.save_every=0"
  )  # also trains and caches the tiny victim
  assert not (tmp / "full" / "state.msgpack").exists()
  return tmp, cache


@pytest.mark.slow
def test_kill_and_resume_is_bitwise_equal(uninterrupted):
  tmp, cache = uninterrupted
  work = tmp / "killed"
  state = work / "state.msgpack"
  proc = subprocess.Popen(
    [sys.executable, "-m", "experiments.reconstruct", *FLAGS, f"--workdir={work}"],
    cwd=ROOT,
    env=_env(cache),
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
  )
  try:
    deadline = time.time() + 240
    while not state.exists():
      assert proc.poll() is None, "the run ended before writing state.msgpack"
      assert time.time() < deadline, "no state.msgpack after 240 s"
      time.sleep(0.02)
    time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
  finally:
    proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert not (work / "reconstructions.npz").exists()
  blob = serialization.msgpack_restore(state.read_bytes())
  saved = json.loads(blob["meta"])["chunks"]
  killed_at = saved[-1]["step"]
  assert 0 < killed_at < 2000, f"the kill did not land mid-way (step {killed_at})"
  x_mid = np.asarray(blob["state"]["run"]["inner"]["x"])

  # Without --resume the non-empty workdir is refused (and the state is kept).
  cfg = cli_config(configs, FLAGS)
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: reconstruct.job(cfg, str(work)), cfg)
  assert e.value.code == 1 and state.exists()

  res = _run(work, cache, "--resume", "--config.runtime.save_every=0")  # need not save again
  assert f"resuming from {state} at step {killed_at}" in res.stderr
  full, resumed = _arrays(tmp / "full"), _arrays(work)
  _assert_same(full, resumed)
  # A run saved every chunk, killed and resumed equals one that never saved; the state
  # moved on after the kill, so equality is not a triviality.
  assert not np.array_equal(x_mid.reshape(full["candidates"].shape), full["candidates"])
  m_full = json.loads((tmp / "full" / "metrics.json").read_text())
  m_res = json.loads((work / "metrics.json").read_text())
  assert m_full["final_stat_rel"] == m_res["final_stat_rel"]


@pytest.mark.slow
def test_resume_refuses_other_config(uninterrupted, capsys):
  tmp, cache = uninterrupted
  (tmp / "full" / "state.msgpack").write_bytes(b"")  # a resume checks the config first
  cfg = cli_config(configs, FLAGS + ["--config.search.seed=5"])
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: reconstruct.job(cfg, str(tmp / "full"), resume=True), cfg)
  (tmp / "full" / "state.msgpack").unlink()
  line = capsys.readouterr().err.strip()
  assert e.value.code == 1 and line.startswith("error: --resume:") and "seed" in line, line
  assert "\n" not in line


@pytest.mark.slow
def test_config_json_records_the_environment(uninterrupted):
  tmp, _ = uninterrupted
  cfg = json.loads((tmp / "full" / "config.json").read_text())
  env = cfg["environment"]
  for pkg in ("jax", "jaxlib", "jaxopt", "flax", "optax"):
    assert env["versions"][pkg], pkg
  assert env["device_kind"] and env["x64"] is False
  assert cfg["config"]["search"]["seed"] == 0 and cfg["config"]["search"]["steps"] == 2000


# ---------------------------------------------------------------------------
# recon_jax.engine.resume in-process


def _state():
  opt = optax.adam(1.0)
  x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
  inner = (x, opt.init(x))
  return {
    "run": loop.RestartState(
      inner, jnp.float32(0.5), jnp.asarray(True), jnp.int32(7), jnp.int32(40)
    ),
    "keys": jax.random.split(jax.random.PRNGKey(3), 2),
    "hparams": {"lr_x": jnp.asarray([0.1, 0.2], jnp.float32)},
  }


def test_roundtrip_keeps_namedtuples_and_dtypes(tmp_path):
  st = _state()
  path = str(tmp_path / "s.msgpack")
  resume.save(path, st, {"step": 40})
  got, meta = resume.load(path, jax.eval_shape(lambda: st))
  assert meta == {"step": 40}
  assert isinstance(got["run"], loop.RestartState)
  assert type(got["run"].inner[1][0]) is type(st["run"].inner[1][0])  # ScaleByAdamState
  for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(st)):
    assert np.asarray(a).dtype == np.asarray(b).dtype
    assert np.array_equal(a, b)
  assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp")] == []


def test_load_rejects_bad_files(tmp_path):
  st = _state()
  path = tmp_path / "s.msgpack"
  resume.save(str(path), st, {})
  data = path.read_bytes()
  path.write_bytes(data[: len(data) // 2])
  with pytest.raises(checkpoint.CheckpointError, match="truncated"):
    resume.load(str(path), st)
  path.write_bytes(os.urandom(300))
  with pytest.raises(checkpoint.CheckpointError, match="not a recon_jax state file"):
    resume.load(str(path), st)
  other = dict(st, hparams={"lr_x": jnp.zeros(3, jnp.float32)})
  resume.save(str(path), other, {})
  with pytest.raises(checkpoint.CheckpointError, match=r"lr_x.*float32\[3\].*float32\[2\]"):
    resume.load(str(path), st)
  resume.save(str(path), dict(st, hparams={"lr_x": jnp.zeros(2, jnp.int32)}), {})
  with pytest.raises(checkpoint.CheckpointError, match="int32"):
    resume.load(str(path), st)
  with pytest.raises(checkpoint.CheckpointError, match="not found"):
    resume.load(str(tmp_path / "missing"), st)
  # A victim checkpoint is not a state file.
  checkpoint.save(str(path), {"w": np.ones(2)}, {})
  with pytest.raises(checkpoint.CheckpointError, match="format tag"):
    resume.load(str(path), st)


def test_a_search_after_a_direct_attack_keeps_its_memo_and_restores_past_it(tmp_path):
  """The search's saves carry the direct attack's memo (what the cone solved), and what the
  search restores leaves it out: a resume in the search replays the cone, then continues."""
  st = _state()
  path = str(tmp_path / "s.msgpack")
  memo = resume.Memo(path, {"config": {}}, every_s=0)
  got = memo.get("kind", (np.arange(3.0),), lambda: np.ones(2))
  assert np.array_equal(got, np.ones(2)) and resume.parts(path) == {resume.MEMO}
  again = memo.get("kind", (np.arange(3.0),), lambda: np.zeros(2))  # not computed again
  assert np.array_equal(again, np.ones(2)) and memo.hits == 1 and memo.solved == 1
  saver = resume.Saver(path, 1, {"config": {}}, carried=memo.entries)
  saver.save(st["run"], st["keys"], st["hparams"])
  assert resume.parts(path) == {"run", "keys", "hparams", resume.MEMO}
  restored, _ = resume.load(path, jax.eval_shape(lambda: st))
  assert set(restored) == {"run", "keys", "hparams"}
  kept = resume.load_memo(path)
  assert list(kept) == list(memo.entries) and np.array_equal(next(iter(kept.values())), np.ones(2))
