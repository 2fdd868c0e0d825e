"""A run's folder: opening it safely, writing its files atomically, resuming it.

Every study writes the same kinds of file into its workdir: ``config.json`` (the
settings and the environment), ``metrics.json``, arrays (``.npz``), text and
figures, and while it runs a state file that a resume continues from.  Writes
are atomic (a crash never leaves half a file) and happen on process 0 only in a
multi-host run.  Errors name this module's arguments (``workdir``, ``overwrite``,
``resume``); a binary names its own flags instead.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import json
import os
import platform
import socket
import sys
from typing import Any, NamedTuple, Optional

import numpy as np

from recon_jax.core import distributed
from recon_jax.errors import ConfigError, Error, RunFailed
from recon_jax.io import checkpoint

# Settings that cannot change a run's results: a resume may differ in them.
NOT_COMPARED = ("use_cache", "save_every", "distributed", "verbose", "max_memory_gb")
# Settings whose default changed: {name: (former default, new default)}.  A config.json
# written before the change holds the former default; it resumes under the new one.
FORMER_DEFAULTS = {"task": ("binary", None)}
# Where a config.json of settings this version does not have, written before the version was
# recorded in it, finds the names of now (0.2.0 reads no former name).
BEFORE_0_2_0 = "CHANGELOG.md, 0.2.0, 'Names that moved before 0.2.0'"


def _renamed_default(key: str, want, have) -> bool:
  former = FORMER_DEFAULTS.get(key.split(".")[-1])
  return former is not None and have == former[0] and want == former[1]


def expand(path: str) -> str:
  """``~`` and environment variables expanded; '' stays ''."""
  return os.path.expandvars(os.path.expanduser(path)) if path else path


def prepare(workdir: str, overwrite: bool = False) -> str:
  """Creates ``workdir`` and returns its absolute path; refuses a non-empty one unless ``overwrite``."""
  if not workdir:
    raise ConfigError("workdir is required.")
  workdir = os.path.abspath(expand(workdir))
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ConfigError(f"workdir {workdir} exists and is not a folder.")
  if os.path.isdir(workdir) and set(os.listdir(workdir)) - {LOCK} and not overwrite:
    raise ConfigError(
      f"workdir {workdir} is not empty; overwrite=True replaces its results.",
      "workdir",
      ("overwrite=True",),
    )
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, ".write-test")
    with open(probe, "w") as f:
      f.write("ok")
    os.unlink(probe)
  except OSError as e:
    raise ConfigError(f"workdir {workdir} is not writable ({e.strerror}).") from None
  return workdir


def open_run(
  cfg,
  workdir: str,
  state_file: str,
  *,
  resume: bool,
  overwrite: bool,
  study: Optional[str] = None,
) -> str:
  """The workdir of a run about to start: checked resumable (``resume``: the same ``study``
  and settings, :func:`check_resumable`) or writable, then created and locked for this
  process (:func:`lock`)."""
  if resume:  # before prepare, which would create a missing folder
    check_resumable(cfg, workdir, state_file, study)
  path = prepare(workdir, overwrite or resume)
  lock(path)
  OPENED[path] = (cfg, state_file, study)
  return path


# The workdirs this process locked: {absolute path: (cfg, state file, study) of open_run,
# or None when it only locked the folder}.  What an interrupted run can resume (:func:`saved`).
OPENED: dict = {}


def saved(workdir: str) -> Optional[bool]:
  """Whether a resume of the run this process opened in ``workdir`` would be accepted
  (:func:`check_resumable` of what :func:`open_run` was given; a folder locked without
  open_run: whether it holds a config.json); None when this process did not open it
  (nothing of this run was written there).  What a binary interrupted says it can resume."""
  path = os.path.abspath(expand(workdir)) if workdir else ""
  if path not in OPENED:
    return None
  if OPENED[path] is None:
    return os.path.isfile(os.path.join(path, "config.json"))
  cfg, state_file, study = OPENED[path]
  try:
    check_resumable(cfg, path, state_file, study)
  except Error:
    return False
  return True


def holds_results(workdir: str) -> bool:
  """Whether ``workdir`` holds any file but its lock (a new run there needs overwrite)."""
  path = os.path.abspath(expand(workdir))
  return os.path.isdir(path) and bool(set(os.listdir(path)) - {LOCK})


LOCK = ".lock"  # in a workdir while a binary's process runs in it: "PID HOST"


def _alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, another user's
    return True
  return True


def lock(workdir: str) -> None:
  """Marks ``workdir`` as in use by this process until it exits; refuses one in use.

  A lock left by a process of this host that is gone (killed) is taken over; one
  held by a live process, or by a process of another host (its liveness cannot be
  checked from here), is refused in one line naming the lock file.  Only the main
  process of a multi-host run locks.
  """
  if not distributed.is_main_process():
    return
  path = os.path.join(os.path.abspath(workdir), LOCK)
  me = (os.getpid(), socket.gethostname())
  try:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
  except FileExistsError:
    try:
      with open(path) as f:
        pid_text, host = f.read().split(maxsplit=1)
      owner = (int(pid_text), host.strip())
    except (OSError, ValueError):
      owner = None  # unreadable: a lock being written, or debris; treated as stale
    if owner == me:
      return
    if owner is not None and (owner[1] != me[1] or _alive(owner[0])):
      where = f" on {owner[1]}" if owner[1] != me[1] else ""
      raise ConfigError(
        f"workdir {workdir} is in use by process {owner[0]}{where} ({path}); wait for it to "
        "finish, or delete that file if the process is gone.",
        argument="workdir",
      ) from None
    checkpoint.atomic_write_bytes(path, f"{me[0]} {me[1]}".encode())  # a stale lock: take it
  else:
    with os.fdopen(fd, "w") as f:
      f.write(f"{me[0]} {me[1]}")
  OPENED.setdefault(os.path.dirname(path), None)
  atexit.register(_unlock, path, me)


def _unlock(path: str, me) -> None:
  try:
    with open(path) as f:
      if f.read().split(maxsplit=1) == [str(me[0]), me[1]]:
        os.unlink(path)
  except (OSError, ValueError):
    pass


def remove(workdir: str, names) -> None:
  """Deletes the files ``names`` of ``workdir`` that exist (a run replacing an earlier one's)."""
  if not distributed.is_main_process():
    return
  for name in names:
    path = inside(workdir, name)
    if os.path.isfile(path):
      os.unlink(path)


def inside(workdir: str, name: str) -> str:
  """Path of ``name`` inside ``workdir``; refuses anything that would escape it."""
  path = os.path.abspath(os.path.join(workdir, name))
  if os.path.commonpath([path, os.path.abspath(workdir)]) != os.path.abspath(workdir):
    raise ConfigError(f"refusing to write {name!r} outside the workdir.", argument="workdir")
  return path


def jsonable(obj: Any):
  """``obj`` as JSON values: dataclasses and ConfigDicts as dicts, arrays as lists, NaN as None."""
  if hasattr(obj, "to_dict") and callable(obj.to_dict):
    return jsonable(obj.to_dict())
  if dataclasses.is_dataclass(obj):
    return jsonable(dataclasses.asdict(obj))
  if isinstance(obj, dict):
    return {str(k): jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return jsonable(obj.tolist())
  if isinstance(obj, (np.floating, float)):
    v = float(obj)
    return v if np.isfinite(v) else None
  if isinstance(obj, np.integer):
    return int(obj)
  if isinstance(obj, np.bool_):
    return bool(obj)
  return obj


def _write(workdir: str, name: str, data: bytes) -> str:
  path = inside(workdir, name)
  if distributed.is_main_process():
    checkpoint.atomic_write_bytes(path, data)
  return path


def write_json(workdir: str, name: str, obj: Any) -> str:
  """``obj`` (through :func:`jsonable`) as ``workdir/name``, atomically."""
  text = json.dumps(jsonable(obj), indent=2, sort_keys=True, allow_nan=False)
  return _write(workdir, name, text.encode())


def write_npz(workdir: str, name: str, **arrays) -> str:
  """``arrays`` as a compressed ``workdir/name``, atomically."""
  buf = io.BytesIO()
  np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
  return _write(workdir, name, buf.getvalue())


def write_text(workdir: str, name: str, text: str) -> str:
  return _write(workdir, name, text.encode())


@contextlib.contextmanager
def restored_on_refusal(workdir: str, *names: str):
  """Inside: a run that may still be refused (a library :class:`~recon_jax.errors.Error`
  other than :class:`~recon_jax.errors.RunFailed`, raised while it loads its victim or
  data).  A refusal puts ``names`` back as they were (removed if they were absent), so a
  refused run leaves its workdir as it found it."""
  before = {}
  for name in names:
    try:
      with open(os.path.join(workdir, name), "rb") as f:
        before[name] = f.read()
    except FileNotFoundError:
      before[name] = None
  try:
    yield
  except Error as e:
    if not isinstance(e, RunFailed):
      for name, data in before.items():
        if data is None:
          with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(workdir, name))
        else:
          _write(workdir, name, data)
    raise


def read_json(*path: str):
  """The JSON file ``os.path.join(*path)``, or None when it is missing or unreadable."""
  try:
    with open(os.path.join(*path)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def environment() -> dict:
  """Versions, devices and precision: written into every config.json."""
  import importlib.metadata as md

  import jax

  vers = {}
  for pkg in (
    "recon_jax",
    "jax",
    "jaxlib",
    "jaxopt",
    "flax",
    "optax",
    "dm-pix",
    "numpy",
    "ml_collections",
  ):
    try:
      vers[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
      vers[pkg] = None
  return {
    "versions": vers,
    "python": platform.python_version(),
    "devices": [str(d) for d in jax.devices()],
    "device_kind": jax.devices()[0].device_kind,
    "backend": jax.default_backend(),
    "x64": bool(jax.config.jax_enable_x64),
    "matmul_precision": str(jax.config.jax_default_matmul_precision),
    "argv": sys.argv,
  }


def write_config(workdir: str, cfg, *, study: Optional[str] = None, **extra) -> str:
  """config.json: ``{"config": cfg, "study": study, **extra, "environment": ...}`` (what a
  resume compares: the settings, and which study wrote them)."""
  head = {"config": cfg, **({"study": study} if study else {})}
  return write_json(workdir, "config.json", {**head, **extra, "environment": environment()})


class StateFile(NamedTuple):
  """Where a sweep saves its state: ``path``, every ``every`` chunks and at its end
  (0: never); ``resume``: continue from that file (it must exist and match);
  ``meta``: JSON-able data stored with the state; ``carried``: arrays a phase before the
  sweep saved in the file (a direct attack's memo), kept in each of its saves."""

  path: str
  every: int = 1
  resume: bool = False
  meta: Optional[dict] = None
  carried: Optional[dict] = None


def begin(
  cfg,
  workdir: str,
  state_file: str,
  *,
  resume: bool,
  study: str,
  every: int,
  checked: bool = False,
  **config_extra,
) -> StateFile:
  """A run starting in its opened ``workdir``: config.json written (``config_extra`` added),
  or checked against ``cfg`` when resuming (unless ``checked``: :func:`open_run` did).
  Returns where its sweep saves its state (``state_file``, every ``every`` chunks), with
  the config stored beside it."""
  if resume:
    if not checked:
      check_resumable(cfg, workdir, state_file, study)
  else:
    write_config(workdir, cfg, study=study, **config_extra)
  return StateFile(inside(workdir, state_file), every, resume, {"config": jsonable(cfg)})


def flatten(d: dict, prefix: str = "") -> dict:
  """``{"a": {"b": 1}}`` as ``{"a.b": 1}``."""
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def _same(v):
  return "" if v is None else v  # an unset path was null in older config.json files


def _refuse_unknown(unknown: list, cfg_path: str, environment) -> None:
  """ConfigError where the config.json ``cfg_path`` holds settings this version does not
  have (``unknown``): a name from before 0.2.0 where it records no recon_jax version
  (``environment``), else one the version that wrote it had."""
  if not unknown:
    return
  names = ", ".join(unknown[:5]) + (", ..." if unknown[5:] else "")
  versions = environment.get("versions") if isinstance(environment, dict) else None
  if isinstance(versions, dict) and "recon_jax" in versions:  # recorded since 0.2.0
    why = f"it was written by recon_jax {versions['recon_jax'] or '(not installed)'}"
  else:
    why = f"it was written before 0.2.0, whose names it uses (see {BEFORE_0_2_0})"
  raise ConfigError(
    f"resume: {cfg_path} holds settings this version does not have ({names}): {why}; "
    "start the run again in another workdir.",
    "resume",
  )


def check_resumable(
  cfg,
  workdir: str,
  state_file: str,
  study: Optional[str] = None,
) -> None:
  """Refuses a resume unless ``workdir`` holds ``state_file`` and a config.json of ``cfg``
  written by the same ``study`` (when given; a config.json that names none passes).

  Settings a config.json written by an older version lacks count as their defaults (so an
  older run still resumes); one that holds a setting this version does not have (a name
  from before 0.2.0, :data:`BEFORE_0_2_0`) is refused, nothing in the workdir touched;
  :data:`NOT_COMPARED` may differ.
  """
  workdir = os.path.abspath(expand(workdir))
  if not os.path.isdir(workdir):
    raise ConfigError(
      f"resume: workdir {workdir} does not exist; nothing to resume.", "resume", ("workdir",)
    )
  state_path, cfg_path = inside(workdir, state_file), inside(workdir, "config.json")
  if not os.path.isfile(state_path):
    raise ConfigError(
      f"resume: {state_path} not found; nothing to resume (start without resume=True).",
      "resume",
      ("resume=True",),
    )
  try:
    with open(cfg_path) as f:
      whole = json.load(f)
    stored, wrote = whole["config"], whole.get("study")
  except FileNotFoundError:
    raise ConfigError(f"resume: {cfg_path} not found.") from None
  except (OSError, ValueError, KeyError, TypeError):
    raise ConfigError(f"resume: {cfg_path} is unreadable or corrupt.") from None
  if study and wrote not in (None, study):
    raise ConfigError(
      f"resume: {cfg_path} is a {wrote} run, not a {study} run; resume it with its own binary."
    )
  want = flatten(json.loads(json.dumps(jsonable(cfg))))
  have = flatten(stored) if isinstance(stored, dict) else {}
  _refuse_unknown(sorted(set(have) - set(want)), cfg_path, whole.get("environment"))
  diff = [
    k
    for k in sorted(want)
    if k in have
    and k.split(".")[-1] not in NOT_COMPARED
    and _same(want[k]) != _same(have[k])
    and not _renamed_default(k, want[k], have[k])
  ]
  if diff:
    raise ConfigError(
      f"resume: the configuration differs from {cfg_path} in "
      f"{', '.join(diff[:5])}; resume with the same settings.",
      "resume",
      tuple(diff[:5]),  # named as settings: a binary spells them as its own flags
    )
