"""Ctrl-C and SIGTERM heard in every phase, with a line that is true about what can be resumed.

The message is tested in-process (what ``--resume`` would accept decides it); the signals
themselves through real processes (slow tier): a binary started with SIGINT ignored (as a
shell without job control starts one in the background), stopped while its first chunk
compiles; a stop before the first save, then the command the message gives; a stop after
a save, then ``--resume``, which must end with the metrics of an uninterrupted run; and a
stop inside one long linear program, which takes no signal until it returns.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types

import pytest

from recon_jax import cli
from recon_jax.core import signals
from recon_jax.io import workdir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
  "--config=experiments/configs/reconstruct.py:tiny",
  "--config.search.steps=2000",
  "--config.search.chunk_steps=10",
]
# Within this many seconds of a signal the process must be gone (the bound).
STOP_S = 10.0


@pytest.fixture
def opened(monkeypatch):
  monkeypatch.setattr(workdir, "OPENED", {})  # this test's runs only


def test_the_line_promises_a_resume_only_where_one_would_be_accepted(tmp_path, opened):
  path = tmp_path / "run"
  cfg = {"seed": 0, "steps": 10}
  # Stopped before its workdir was opened: nothing of this run was written.
  line = cli.stop_message(signal.SIGINT, str(path))
  assert (
    line
    == f"interrupted before anything was written to {path}; run the same command to start again"
  )
  workdir.open_run(cfg, str(path), "state.msgpack", resume=False, overwrite=False, study="s")
  # Opened, nothing written but the lock: the same command starts again.
  line = cli.stop_message(signal.SIGTERM, str(path))
  assert line.startswith("terminated (SIGTERM); nothing was saved in")
  assert (
    line.endswith("; run the same command to start again") and "--resume" not in line.split(";")[-1]
  )
  # config.json written, no state yet: the same command would be refused; --overwrite works.
  workdir.write_config(str(path), cfg, study="s")
  line = cli.stop_message(signal.SIGTERM, str(path))
  assert line.endswith("run the same command with --overwrite to start again"), line
  with pytest.raises(workdir.ConfigError, match="nothing to resume"):
    workdir.check_resumable(cfg, str(path), "state.msgpack", "s")
  # A state saved: --resume is what continues, and a resume accepts it.
  (path / "state.msgpack").write_bytes(b"state")
  workdir.check_resumable(cfg, str(path), "state.msgpack", "s")
  line = cli.stop_message(signal.SIGINT, str(path))
  assert line == (
    f"interrupted; run the same command with --resume to continue from the state saved in {path}"
  )
  # A program without --resume never promises one.
  line = cli.stop_message(signal.SIGINT, str(path), resumable=False)
  assert "--resume" not in line and line.endswith("--overwrite to start again"), line
  assert cli.stop_message(signal.SIGINT, None) == "interrupted"


def test_a_folder_only_locked_is_resumable_once_it_holds_its_config(tmp_path, opened):
  path = str(tmp_path)
  workdir.lock(path)  # a harness that opens its folder itself (the reproduction driver)
  assert workdir.saved(path) is False
  workdir.write_json(path, "config.json", {"config": {}})
  assert workdir.saved(path) is True
  assert workdir.saved(str(tmp_path / "elsewhere")) is None


def test_the_signals_own_exception_dropped_by_a_gc_callback_prints_nothing(monkeypatch):
  """Python drops an exception raised in a garbage-collector callback and prints it with a
  traceback; once the signal is recorded (the watchdog then ends the process), the binary's
  hook drops that one silently and passes every other exception to the hook before it."""
  seen = []
  hook = signals._quiet(seen.append)
  dropped = types.SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt())
  other = types.SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"))
  monkeypatch.setattr(signals._State, "received", None)
  hook(dropped)  # no signal received: a KeyboardInterrupt of the program's own
  monkeypatch.setattr(signals._State, "received", signal.SIGINT)
  hook(dropped)
  hook(other)
  assert seen == [dropped, other]


def _env(cache):
  env = dict(os.environ, RECON_JAX_CACHE=str(cache), JAX_PLATFORMS="cpu", MPLBACKEND="Agg")
  return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")])))


def _start(args, cache, log):
  """A process started with SIGINT ignored, as ``cmd &`` in a script starts one: Python then
  installs no Ctrl-C handler of its own, and only the binary's own handling hears it."""
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    return subprocess.Popen(
      [sys.executable, *args],
      cwd=ROOT,
      env=_env(cache),
      stdout=subprocess.DEVNULL,
      stderr=log,
      text=True,
    )
  finally:
    signal.signal(signal.SIGINT, previous)


def _stop_when(proc, log_path, ready, signum, timeout=240):
  """Sends ``signum`` once ``ready()`` holds; returns (exit code, seconds to exit, stderr)."""
  deadline = time.time() + timeout
  while not ready():
    assert proc.poll() is None, log_path.read_text()[-3000:]
    assert time.time() < deadline, "never ready: " + log_path.read_text()[-2000:]
    time.sleep(0.02)
  sent = time.time()
  proc.send_signal(signum)
  try:
    proc.wait(timeout=60)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    pytest.fail("no exit 60 s after the signal: " + log_path.read_text()[-2000:])
  return proc.returncode, time.time() - sent, log_path.read_text()


def _last_line(err):
  lines = err.strip().splitlines()
  assert "Fatal Python error" not in err and "Traceback" not in err, err[-3000:]
  return lines[-1]


@pytest.mark.slow
def test_ctrl_c_while_the_first_chunk_compiles_then_the_command_it_gives(tmp_path):
  cache, work = tmp_path / "cache", tmp_path / "w"
  log_path = tmp_path / "stderr"
  with open(log_path, "w") as log:
    proc = _start(["-m", "experiments.reconstruct", *TINY, f"--workdir={work}"], cache, log)
    code, took, err = _stop_when(
      proc, log_path, lambda: "(the first chunk compiles)" in log_path.read_text(), signal.SIGINT
    )
  line = _last_line(err)
  assert code == 130 and took < STOP_S, (code, took, err[-2000:])
  # Nothing was saved yet: no resume is promised, and the command given works.
  assert not (work / "state.msgpack").exists()
  assert line == (
    f"interrupted; nothing was saved in {work} that --resume could continue; run the same "
    "command with --overwrite to start again"
  )
  again = subprocess.run(
    [sys.executable, "-m", "experiments.reconstruct", *TINY, f"--workdir={work}", "--overwrite"],
    cwd=ROOT,
    env=_env(cache),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert again.returncode == 0, again.stderr[-3000:]
  assert (work / "metrics.json").exists()


@pytest.mark.parametrize(
  "delay",
  [0.5, pytest.param(2.0, marks=pytest.mark.slow)],
  ids=["at_0.5s", "at_2s"],
)
@pytest.mark.parametrize(
  "signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_while_the_binary_loads_ends_it_in_one_line(tmp_path, delay, signum, code):
  """The first seconds of a binary are its imports (JAX, the library): a signal there was
  lost (SIGINT inherited ignored: the run went on to its end), a traceback from an import
  (Ctrl-C), or exit 143 without a word (SIGTERM).  It now ends the binary with its code and
  one line, and nothing is written."""
  work = tmp_path / "w"
  log_path = tmp_path / "stderr"
  args = ["-m", "experiments.reconstruct", "--config=experiments/configs/reconstruct.py:tiny"]
  with open(log_path, "w") as log:
    proc = _start([*args, f"--workdir={work}"], tmp_path / "cache", log)
    started = time.time()
    got, took, err = _stop_when(proc, log_path, lambda: time.time() - started >= delay, signum)
  assert got == code and took < STOP_S, (got, took, err[-2000:])
  how = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
  line = _last_line(err)
  in_run = (  # an idle machine is past its imports by 2 s, in the run: its lines are true too
    f"{how}; run the same command with --resume to continue from the state saved in {work}",
    f"{how}; nothing was saved in {work} that --resume could continue; run the same command "
    "with --overwrite to start again",
  )
  if delay > 1 and line in in_run:  # the state file exists exactly where the line says so
    assert (line == in_run[0]) == (work / "state.msgpack").exists(), line
    return
  # Still loading (the imports take seconds), or just past them on a fast machine: either
  # line is true, and nothing of the run was written.
  assert line in (
    signals.before_start(signum),
    f"{how} before anything was written to {work}; run the same command to start again",
  ), err[-2000:]
  assert not work.exists() or not os.listdir(work)


def test_the_line_of_a_binary_stopped_while_it_loads_is_the_librarys():
  """The binaries' own handler of their first seconds knows only the standard library; its
  line is the one the library prints for a stop before the run started."""
  import experiments

  for signum in (signal.SIGINT, signal.SIGTERM):
    assert experiments.before_start_line(signum) == signals.before_start(signum)
  assert signals.before_start(signal.SIGINT) == (
    "interrupted before the run started; nothing was written; run the same command to start again"
  )


# What may differ: timings, and where the victim came from (the first run trained it, the
# later ones read it from the cache).
TIMINGS = ("timing", "cost_s", "victim_source")


def _without_timings(metrics):
  flat = workdir.flatten(metrics)
  return {k: v for k, v in flat.items() if not any(t in k.split(".") for t in TIMINGS)}


@pytest.mark.slow
def test_sigterm_after_a_save_then_resume_ends_as_an_uninterrupted_run(tmp_path):
  cache = tmp_path / "cache"
  full, work = tmp_path / "full", tmp_path / "w"
  subprocess.run(
    [sys.executable, "-m", "experiments.reconstruct", *TINY, f"--workdir={full}"],
    cwd=ROOT,
    env=_env(cache),
    capture_output=True,
    check=True,
    timeout=300,
  )
  log_path = tmp_path / "stderr"
  args = [
    "-m",
    "experiments.reconstruct",
    *TINY,
    "--config.runtime.save_every=1",
    f"--workdir={work}",
  ]
  with open(log_path, "w") as log:
    proc = _start(args, cache, log)
    code, took, err = _stop_when(
      proc, log_path, lambda: (work / "state.msgpack").exists(), signal.SIGTERM
    )
  assert code == 143 and took < STOP_S, (code, took, err[-2000:])
  assert _last_line(err) == (
    f"terminated (SIGTERM); run the same command with --resume to continue from the state "
    f"saved in {work}"
  )
  assert not (work / "metrics.json").exists()  # stopped mid-way
  res = subprocess.run(
    [sys.executable, *args, "--resume"],
    cwd=ROOT,
    env=_env(cache),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert res.returncode == 0 and "resuming from" in res.stderr, res.stderr[-3000:]
  a = json.loads((full / "metrics.json").read_text())
  b = json.loads((work / "metrics.json").read_text())
  assert _without_timings(a) == _without_timings(b)


LONG_CALL = """
import numpy as np
from absl import logging
from scipy.optimize import linprog

from recon_jax import cli


def main(cfg):
  del cfg
  rng = np.random.default_rng(0)
  a = rng.standard_normal((1200, 1500))  # minutes of HiGHS, which takes no signal
  logging.info("the linear program starts")
  linprog(rng.standard_normal(1500), A_eq=a, b_eq=a @ rng.random(1500), bounds=(0, 1))
  print("the linear program ended")


if __name__ == "__main__":
  cli.run(main, "experiments/configs/reconstruct.py", "tiny")
"""


@pytest.mark.slow
@pytest.mark.parametrize(
  "signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_inside_one_long_linear_program_stops_the_binary(tmp_path, signum, code):
  script = tmp_path / "long_call.py"
  script.write_text(textwrap.dedent(LONG_CALL))
  log_path = tmp_path / "stderr"
  with open(log_path, "w") as log:
    proc = _start([str(script), f"--workdir={tmp_path / 'w'}"], tmp_path / "cache", log)

    def ready():  # inside the program: Python's handler waits for it to return.  Three
      # seconds after the line, since scipy's own Python checks run before HiGHS does (on a
      # loaded machine they outlasted one second, and the signal was heard in them at once)
      if "the linear program starts" not in log_path.read_text():
        return False
      time.sleep(3)
      return True

    got, took, err = _stop_when(proc, log_path, ready, signum)
  how = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
  assert got == code and signals.GRACE_S <= took < STOP_S, (got, took, err[-2000:])
  assert _last_line(err) == (
    f"{how} before anything was written to {tmp_path / 'w'}; run the same command to start again"
  )
