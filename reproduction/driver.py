"""The papers' experiments at one scale: runs of the binaries, the claims judged, RESULTS.md.

A run is one or more processes of a binary (efficacy over draws; the toy or the init
study once per seed), each with its own precision, so one run's x64 or compiler
settings never leak into the next.  Their metrics are read typed
(:mod:`reproduction.run_results`), every claim is judged by its criterion over the
draws (:func:`reproduction.claims.claims`), and RESULTS.md and results.json are
rewritten after each section, so an interrupted reproduction still has a report.

The binaries are started, never imported: :class:`Programs` says how.  A run that
fails is FAILED in its section, and the others go on.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from typing import NamedTuple

from absl import logging

from recon_jax import cli
from recon_jax.errors import ConfigError, ResultFileError
from recon_jax.io import workdir
from recon_jax.job import run as job_run
from recon_jax.studies import efficacy, efficacy_results
from reproduction import claims, results_md, run_results

# The file in a run's folder from which its binary's resume continues an interrupted run.
STATE = {"efficacy": "config.json", "toy_2d": job_run.STATE_FILE, "init_study": "config.json"}
RUN_FLAGS = ("--workdir", "--resume", "--overwrite")  # where, not what: a run's identity lacks them


class Programs(NamedTuple):
  """How to start the binary ``NAME``: ``python -m module.format(NAME)`` in ``cwd``,
  its config file and preset ``config.format(NAME, PRESET)``."""

  module: str
  config: str
  cwd: str


class Failed(Exception):
  """A run's process exited with an error (the message: its one-line error)."""


def _value(v) -> str:
  if isinstance(v, bool):
    return str(v).lower()
  return ",".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def jobs(cfg, name: str, programs: Programs) -> list:
  """``[(folder, args)]`` of the run ``name``: one efficacy process, or one per seed."""
  r = cfg.runs[name]
  pre, over = "base." if r.binary == "efficacy" else "", workdir.flatten(r.overrides.to_dict())
  if cfg.data_dir and r.binary != "toy_2d":
    over["data_dir"] = cfg.data_dir
  args = [f"--config={programs.config.format(r.binary, r.preset)}"]
  args += [f"--config.{pre}{k}={_value(v)}" for k, v in over.items()]
  if r.binary == "efficacy":
    return [(name, args + [f"--draws={r.draws or cfg.draws}", f"--first_draw={cfg.first_draw}"])]
  return [(f"{name}/seed_{s}", args + [f"--config.seed={s}"]) for s in range(r.draws or cfg.seeds)]


def launch(programs: Programs, binary: str, folder: str, args: list, log: str, resume: bool):
  """Runs one process into ``folder``, its output appended to ``log``.

  With ``resume``, one that was interrupted with the same arguments continues (its
  binary's ``--resume``); whether one finished before is :func:`finished`'s to say.
  Raises :class:`Failed` with the process's error line.
  """
  mode = []
  if os.path.isdir(folder) and os.listdir(folder):
    keep = resume and _same(folder, args) and os.path.isfile(os.path.join(folder, STATE[binary]))
    mode = ["--resume" if keep else "--overwrite"]
  cmd = [sys.executable, "-m", programs.module.format(binary)] + args
  cmd += [f"--workdir={folder}"] + mode
  logging.info("reproduce: %s", " ".join(cmd[1:]))
  with open(log, "a") as fh:
    fh.write("$ " + " ".join(cmd[1:]) + "\n")
    fh.flush()
    env = dict(os.environ, MPLBACKEND="Agg")
    rc = subprocess.run(cmd, cwd=programs.cwd, stdout=fh, stderr=subprocess.STDOUT, env=env)
  if rc.returncode:
    with open(log) as fh:
      lines = [line.strip() for line in fh if line.strip()]
    err = [line for line in lines if line.startswith("error:")] or lines[-1:]
    code = rc.returncode
    raise Failed(f"{f'killed by signal {-code}' if code < 0 else f'exit code {code}'}: {err[-1]}")


def _same(folder: str, args: list) -> bool:
  """Whether the process run in ``folder`` (its config.json) was run with ``args``."""
  config = workdir.read_json(folder, "config.json")
  env = config.get("environment", {}) if isinstance(config, dict) else {}
  return isinstance(env, dict) and args == [
    a for a in env.get("argv", [])[1:] if not a.startswith(RUN_FLAGS)
  ]


def finished(binary: str, folder: str, args: list):
  """What the claims read of the process that finished before in ``folder`` with ``args``
  (:func:`_condensed`, typed), or None where it must run: it ran with other arguments, did not
  finish (no metrics.json), or its metrics.json (or an efficacy run's config.json) cannot be
  read as a result, said in one warning line naming the file."""
  if not (os.path.isfile(os.path.join(folder, "metrics.json")) and _same(folder, args)):
    return None
  try:
    return _condensed(binary, folder)
  except ResultFileError as e:
    logging.warning("reproduce: %s; running it again", e)
    return None


def _condensed(binary: str, folder: str):
  """What the claims read of a finished process's folder, typed (:mod:`.run_results`; None:
  no metrics.json).

  Raises :class:`~recon_jax.errors.ResultFileError` (one line naming the file) where the
  run's metrics.json, or an efficacy run's config.json, cannot be read as what the claims
  read.  A draw's report that cannot be read is a gap in the picks, said in one warning line.
  """
  path = os.path.join(folder, "metrics.json")
  m = efficacy_results.read_object(path)
  if m is None:
    return None
  if binary == "toy_2d":
    return run_results.toy_of(m, path)
  if binary != "efficacy":
    return run_results.init_study_of(m, path)
  results = efficacy_results.results_of(m, path, has="default")
  # + the data set, and per draw whether the attacker's pick was the truly best restart
  config = os.path.join(folder, "config.json")
  dataset = _dataset(efficacy_results.read_object(config), config)
  picks = []
  for d in results.draws:
    sub = os.path.join(folder, "default", f"draw_{d}")
    try:
      draw = efficacy.read_draw(sub)
    except ResultFileError as e:
      logging.warning("reproduce: %s; that draw's pick is a gap", e)
      continue
    if draw is None:
      logging.warning("reproduce: %s: missing; that draw's pick is a gap", sub)
      continue
    if draw.problems:
      logging.warning("reproduce: %s: %s; read as gaps", draw.path, "; ".join(draw.problems))
    picks.append(draw.selection)
  return run_results.harness_of(results, dataset, picks)


def _dataset(config, path: str) -> str:
  """The data set of the harness whose config.json (read from ``path``) is ``config``."""
  value = config
  for k in ("config", "base", "victim", "dataset"):
    value = value.get(k) if isinstance(value, dict) else None
  if not isinstance(value, str):
    what = "is missing" if config is None else "has no config.base.victim.dataset"
    raise ResultFileError(path, f"{what}: the harness's data set is not known")
  return value


def _git(cwd: str, *args: str) -> str:
  """``git args`` in ``cwd``: its output, or None where git fails or is missing."""
  try:
    with subprocess.Popen(
      ["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as p:
      out, _ = p.communicate()
  except OSError:
    return None
  return None if p.returncode else out.strip()


def commit_of(cwd: str) -> str:
  """The checkout's commit (``+ changes`` where tracked files differ from it), or 'unknown'."""
  head = _git(cwd, "rev-parse", "--short=12", "HEAD")
  if not head:
    return "unknown"
  return head + (" + changes" if _git(cwd, "status", "--porcelain", "--untracked-files=no") else "")


def ledger(path: str, name: str) -> dict:
  """What ran of the run ``name`` and when, kept across resumed sessions
  (``logs/<name>.json``): ``{args, wall_s, sessions: [{date, commit, wall_s}]}``."""
  try:
    with open(os.path.join(path, "logs", f"{name}.json")) as fh:
      got = json.load(fh)
  except (OSError, ValueError):
    return {}
  return got if isinstance(got, dict) and isinstance(got.get("wall_s"), (int, float)) else {}


def _record(path: str, name: str, args: list, wall_s: float, commit: str) -> dict:
  """Adds ``wall_s`` seconds run at ``commit`` today to the run's :func:`ledger` (started
  afresh where its arguments changed); returns it."""
  old = ledger(path, name)
  old = old if old.get("args") == args else {}
  session = dict(date=time.strftime("%Y-%m-%d"), commit=commit, wall_s=round(wall_s, 1))
  new = dict(
    args=args,
    wall_s=round(old.get("wall_s", 0.0) + wall_s, 1),
    sessions=list(old.get("sessions", [])) + [session],
  )
  workdir.write_json(os.path.join(path, "logs"), f"{name}.json", new)
  return new


def run_one(
  cfg, path: str, name: str, programs: Programs, resume: bool = False, announce=None
) -> dict:
  """The run ``name``'s processes -> ``{binary, commands, status, results, wall_s, ran}``.

  ``announce()`` is called once before its first process starts (not for a run whose
  processes all finished before).

  ``wall_s`` is the time its processes took over every session that ran them (its
  :func:`ledger`); ``ran``: those sessions, each ``{date, commit, wall_s}`` (none known for
  a run finished before the ledger was kept).
  """
  r, t0 = cfg.runs[name], time.time()
  out = {"binary": r.binary, "commands": [], "results": [], "status": "ok"}
  os.makedirs(os.path.join(path, "logs"), exist_ok=True)
  todo = jobs(cfg, name, programs)
  launched = False
  for rel, args in todo:
    folder = os.path.join(path, rel)
    out["commands"].append(
      " ".join([f"python -m {programs.module.format(r.binary)}"] + args + [f"--workdir={folder}"])
    )
    m = finished(r.binary, folder, args) if resume else None
    if m is not None:  # finished before, and its results read: not run again
      out["results"].append(m)
      continue
    if not launched and announce is not None:
      announce()
    launched = True
    try:
      launch(programs, r.binary, folder, args, os.path.join(path, "logs", f"{name}.log"), resume)
    except Failed as e:
      out["status"] = f"FAILED ({e}; log: logs/{name}.log)"
      break
    try:
      m = _condensed(r.binary, folder)
    except ResultFileError as e:
      out["status"] = f"FAILED ({e})"
      break
    if m is None:
      out["status"] = f"FAILED ({rel}/metrics.json unreadable after the run)"
      break
    out["results"].append(m)
  if launched:
    every = [a for _, a in todo]
    kept = _record(path, name, every, time.time() - t0, commit_of(programs.cwd))
  else:  # every process finished before: what its ledger says, if it has one
    kept = ledger(path, name)
  out["wall_s"], out["ran"] = kept.get("wall_s", 0.0), kept.get("sessions", [])
  return out


def run(cfg, path: str, sections, *, programs: Programs, resume: bool = False, command: str = ""):
  """Runs the ``sections``' runs (each once) into ``path``; writes RESULTS.md, results.json.

  ``command``: the command line that made this reproduction (shown in RESULTS.md).
  Returns results.json's dict.
  """
  t0, results, seen, path = time.time(), {}, {}, os.path.abspath(path)
  command = command or (
    f"python -m {programs.module.format('reproduce')} "
    f"--config={programs.config.format('reproduce', cfg.scale)} --workdir={path}"
  )
  out = {}
  key_of = lambda name: json.dumps(  # noqa: E731
    [cfg.runs[name].binary] + [a for _, a in jobs(cfg, name, programs)]
  )
  total_runs = len({key_of(n) for sec in sections for n in cfg.sections[sec]})
  written = commit_of(programs.cwd)
  spent = []  # the seconds of each run finished so far, over every session it took
  for i, sec in enumerate(sections):
    for name in (n for n in cfg.sections[sec] if n not in results):
      key = key_of(name)
      if key in seen:  # the same run under two names runs once
        results[name] = dict(results[seen[key]], alias=seen[key])
        continue
      line = progress(len(spent) + 1, total_runs, name, spent)
      say = functools.partial(print, line, file=sys.stderr, flush=True)
      seen[key], results[name] = name, run_one(cfg, path, name, programs, resume, say)
      spent.append(results[name]["wall_s"])
      logging.info(
        "reproduce: %s %s (%.0f s)", name, results[name]["status"], results[name]["wall_s"]
      )
    done = sections[: i + 1]
    rows = claims.claims(claims.CLAIMS, results, done, cfg.confidence)
    total, more = time.time() - t0, i + 1 < len(sections)
    report = results_md.report(
      cfg, path, results, rows, done, claims.SECTIONS, total, command, more, written
    )
    workdir.write_text(path, "RESULTS.md", report)
    out = dict(scale=cfg.scale, command=command, sections=done, claims=rows, total_s=total)
    out.update(config=cfg, runs=results)
    workdir.write_json(path, "results.json", out)
  return out


def progress(i: int, total: int, name: str, spent: list) -> str:
  """``reproduce: run i of N (name); minutes so far, and the rest estimated at their pace``.

  ``spent``: the seconds each finished run took (its ledger's, over every session it took; 0
  where unknown), so that a resumed reproduction estimates from earlier sessions' runs too."""
  known = [s for s in spent if s > 0]  # a run reused without its ledger: seconds unknown
  elapsed = sum(known)
  line = f"reproduce: run {i} of {total} ({name}); {elapsed / 60:.0f} min so far"
  if known:
    rest = elapsed / len(known) * (total - i + 1)
    line += f", about {rest / 60:.0f} min to go at the pace so far"
  return line


def sections_to_run(cfg, only: str = "") -> list:
  """The sections to run (``only``, comma-separated; empty: all), in report order.

  A bad section, a run whose binary is unknown, or a ``data_dir`` without the
  files that the runs' settings name (``dataset`` mnist, cifar10, cifar100) are
  refused before any work.  Sets ``cfg.data_dir`` to its absolute path
  (the runs' processes start elsewhere).
  """
  for name, low in (("draws", 1), ("seeds", 1), ("first_draw", 0)):
    value = cfg.get(name, low)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1000:
      raise ConfigError(f"{name} must be an integer in [{low}, 1000], got {value!r}.", name)
  if not 0 < cfg.get("confidence", 0.95) < 1:
    raise ConfigError(f"confidence must be in (0, 1), got {cfg.confidence!r}.", "confidence")
  named = [s.strip() for s in (only or "").split(",")]
  if only and not any(named):
    raise ConfigError(f"only names no section ({only!r}); leave it out to run them all.", "only")
  want = [s for s in named if s] or list(cfg.sections)
  for s in want:
    if s not in claims.SECTIONS or s not in cfg.sections:
      choices = ", ".join(x for x in claims.SECTIONS if x in cfg.sections)
      raise ConfigError(f"only: no section {s!r}; choose from {choices}.", "only")
  names = sorted({n for s in want for n in cfg.sections[s]})
  for n in names:
    if n not in cfg.runs or cfg.runs[n].binary not in STATE:
      raise ConfigError(
        f"runs.{n}: missing, or its binary is not one of {', '.join(STATE)}.", f"runs.{n}"
      )
  need = {
    v
    for n in names
    for k, v in workdir.flatten(cfg.runs[n].overrides.to_dict()).items()
    if k.endswith("dataset") and v in ("mnist", "cifar10", "cifar100")
  }
  if need:
    folder = os.path.abspath(workdir.expand(cfg.data_dir)) if cfg.data_dir else ""
    if not os.path.isdir(folder):
      raise ConfigError(
        f"data_dir: the {cfg.scale} scale reads {' and '.join(sorted(need))} from it; "
        f"got {cfg.data_dir!r}.",
        "data_dir",
      )
    cfg.data_dir = folder
  return [s for s in claims.SECTIONS if s in want]


def check_settings(cfg, sections, programs: Programs) -> None:
  """Refuses, before any work, a run of the ``sections`` that sets a setting its binary's
  config lacks (one line naming the run and the setting)."""
  for name in sorted({n for s in sections for n in cfg.sections[s]}):
    args = jobs(cfg, name, programs)[0][1]
    path, preset = args[0].removeprefix("--config=").split(":", 1)
    try:
      cli.check_overrides(args[1:], os.path.join(programs.cwd, path), preset)
    except cli.UserError as e:
      raise ConfigError(f"runs.{name}: {e}", f"runs.{name}", ()) from None


def open_run(cfg, path: str, *, resume: bool = False, overwrite: bool = False) -> str:
  """reproduce's workdir, created and locked; returns its absolute path.

  With ``resume`` it must hold a reproduce run of the same settings (or, from an older
  version, its results.json), but for runs that have nothing in it yet (say, one that failed
  on a setting since corrected): those run with ``cfg``'s settings, and config.json is
  rewritten, the former kept in logs/.  A new run's config.json is written.
  """
  changed = []
  if resume:
    folder = workdir.expand(path)
    if not os.path.isdir(folder):
      raise ConfigError(f"resume: workdir {path} does not exist.", "resume", ("workdir",))
    if os.path.isfile(os.path.join(folder, "config.json")):  # the same settings
      changed = _check_resumable(cfg, folder)
    elif not os.path.isfile(os.path.join(folder, "results.json")):  # (older runs: results only)
      raise ConfigError(f"resume: workdir {path} holds no reproduce run.", "resume", ("workdir",))
  folder = workdir.prepare(path, overwrite or resume)
  workdir.lock(folder)
  if changed:
    former = f"config-{time.strftime('%Y%m%d-%H%M%S')}.json"
    os.makedirs(os.path.join(folder, "logs"), exist_ok=True)
    os.replace(os.path.join(folder, "config.json"), os.path.join(folder, "logs", former))
    logging.warning(
      "reproduce: resume: runs %s changed since the reproduction began and have not run: they "
      "run with the settings of now (config.json rewritten; the former in logs/%s)",
      ", ".join(changed),
      former,
    )
  if changed or not resume:
    workdir.write_config(folder, cfg, study="reproduce")
  return folder


def _check_resumable(cfg, folder: str) -> list:
  """:func:`workdir.check_resumable` of reproduce's config.json in ``folder``, but for the
  runs with nothing in ``folder``; returns those of them whose settings changed."""
  try:
    with open(os.path.join(folder, "config.json")) as fh:
      before = json.load(fh)["config"]["runs"]
  except (OSError, ValueError, KeyError, TypeError):
    before = {}  # check_resumable says what is wrong with the file
  before = (
    {k: v for k, v in before.items() if isinstance(v, dict)} if isinstance(before, dict) else {}
  )
  want = workdir.jsonable(cfg)
  now = json.loads(json.dumps(want["runs"]))
  fresh = [n for n in now if n in before and not workdir.holds_results(os.path.join(folder, n))]
  changed = [n for n in fresh if workdir.flatten(now[n]) != workdir.flatten(before[n])]
  for n in changed:  # compared as they were: they start afresh
    want["runs"][n] = before[n]
  workdir.check_resumable(want, folder, "config.json", "reproduce")
  return changed
