"""What every binary shares: its flags, its workdir, its files, and how it reports errors.

A binary defines ``--config`` (an ml_collections config file with presets,
``--config=experiments/configs/NAME.py:PRESET``, every field overridable as
``--config.FIELD=VALUE``), ``--workdir``, ``--overwrite``, ``--resume`` and
``--verbose``.  Library errors name the library's arguments; :func:`main_guard`
turns them into one line naming the user's setting.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import platform
import sys
import traceback
from typing import Any, Callable, Optional

import numpy as np
from absl import flags
from ml_collections import config_flags

from recon_jax import checkpoint
from recon_jax.errors import Error

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
FLAGS = flags.FLAGS


class UserError(Error, ValueError):
  """A bad setting, file or workdir, found by a binary: one line, exit code 1."""


def define_flags(config_name: str, preset: Optional[str] = None, *, resume: bool = True,
                 workdir: Optional[str] = None) -> None:
  """The flags of a binary whose config file is ``experiments/configs/<config_name>.py``."""
  path = os.path.join(CONFIG_DIR, f"{config_name}.py")
  default = f"{path}:{preset}" if preset else path
  config_flags.DEFINE_config_file(
      "config", default, f"Config file and preset (see {path}); override any field as "
      "--config.FIELD=VALUE, e.g. --config.victim.n_per_class=25.", lock_config=True)
  flags.DEFINE_string("workdir", workdir or f"workdirs/{config_name}", "Output folder "
                      "(must be empty unless --overwrite or --resume).")
  flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
  if resume:
    flags.DEFINE_bool("resume", False, "Continue the run saved in --workdir (same config).")
  flags.DEFINE_bool("verbose", False, "Show tracebacks of errors.")


def overrides(flag_values, prefix: str = "") -> dict:
  """The ``--config.X=V`` settings given on the command line under ``prefix``, as {X: V}."""
  over = config_flags.get_override_values(flag_values["config"])
  flat = _flatten(over) if isinstance(over, dict) else {}
  return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix)}


def setting_name(cfg, argument: Optional[str]) -> Optional[str]:
  """The ``--config.`` path of the setting a library argument came from, if any."""
  if not argument or cfg is None:
    return None
  flat = _flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
  hits = [k for k in flat if k == argument or k.endswith("." + argument)]
  return f"--config.{sorted(hits, key=len)[0]}" if hits else None


def _flatten(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def main_guard(fn: Callable[[], Any], cfg=None, verbose: bool = False) -> None:
  """Runs ``fn``; the project's errors become one line on stderr and exit code 1.

  Anything else is a bug and keeps its traceback.  Ctrl-C prints where to
  resume and exits with 130.
  """
  try:
    fn()
  except Error as e:
    if verbose:
      traceback.print_exc()
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    name = setting_name(cfg, getattr(e, "argument", None))
    print(f"error: {name}: {msg}" if name else f"error: {msg}", file=sys.stderr)
    sys.exit(1)
  except KeyboardInterrupt:
    workdir = getattr(FLAGS, "workdir", None) if "workdir" in FLAGS else None
    hint = (f"; continue with the same command and --resume (state in {workdir})"
            if workdir and "resume" in FLAGS else "")
    print(f"interrupted{hint}", file=sys.stderr)
    sys.exit(130)


def expand(path: str) -> str:
  """``~`` and environment variables expanded; '' stays ''."""
  return os.path.expandvars(os.path.expanduser(path)) if path else path


def prepare_workdir(workdir: str, overwrite: bool) -> str:
  """Creates ``workdir``; refuses a non-empty one unless ``overwrite``."""
  if not workdir:
    raise UserError("--workdir is required.")
  workdir = os.path.abspath(expand(workdir))
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise UserError(f"--workdir {workdir} exists and is not a folder.")
  if os.path.isdir(workdir) and os.listdir(workdir) and not overwrite:
    raise UserError(f"--workdir {workdir} is not empty; pass --overwrite to replace its results.")
  try:
    os.makedirs(workdir, exist_ok=True)
    probe = os.path.join(workdir, ".write-test")
    with open(probe, "w") as f:
      f.write("ok")
    os.unlink(probe)
  except OSError as e:
    raise UserError(f"--workdir {workdir} is not writable ({e.strerror}).") from None
  return workdir


def inside(workdir: str, name: str) -> str:
  """Path of ``name`` inside ``workdir``; refuses anything that would escape it."""
  path = os.path.abspath(os.path.join(workdir, name))
  if os.path.commonpath([path, os.path.abspath(workdir)]) != os.path.abspath(workdir):
    raise UserError(f"refusing to write {name!r} outside the workdir.")
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


def _main_process() -> bool:
  from recon_jax import distributed
  return distributed.is_main_process()


def write_json(workdir: str, name: str, obj: Any) -> str:
  """Atomic JSON write (on process 0 only in a multi-host run)."""
  path = inside(workdir, name)
  if _main_process():
    checkpoint.atomic_write_text(path, json.dumps(jsonable(obj), indent=2, sort_keys=True,
                                                  allow_nan=False))
  return path


def write_npz(workdir: str, name: str, **arrays) -> str:
  """Atomic compressed npz write (process 0 only)."""
  path = inside(workdir, name)
  if _main_process():
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    checkpoint.atomic_write_bytes(path, buf.getvalue())
  return path


def write_text(workdir: str, name: str, text: str) -> str:
  path = inside(workdir, name)
  if _main_process():
    checkpoint.atomic_write_text(path, text)
  return path


def environment() -> dict:
  """Versions, devices and precision: written into every config.json."""
  import importlib.metadata as md
  import jax
  vers = {}
  for pkg in ("jax", "jaxlib", "jaxopt", "flax", "optax", "dm-pix", "numpy", "ml_collections"):
    try:
      vers[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
      vers[pkg] = None
  return {"versions": vers, "python": platform.python_version(),
          "devices": [str(d) for d in jax.devices()],
          "device_kind": jax.devices()[0].device_kind, "backend": jax.default_backend(),
          "x64": bool(jax.config.jax_enable_x64),
          "matmul_precision": str(jax.config.jax_default_matmul_precision), "argv": sys.argv}


def configure_precision(x64: bool, matmul_precision: str = "default") -> None:
  import jax
  if matmul_precision not in ("default", "high", "highest"):
    raise UserError(f"--config.matmul_precision must be default, high or highest, got "
                    f"{matmul_precision!r}.")
  jax.config.update("jax_enable_x64", bool(x64))
  if matmul_precision != "default":
    jax.config.update("jax_default_matmul_precision", matmul_precision)


# Settings that cannot change a run's results: a resume may differ in them.
NOT_COMPARED = ("use_cache", "save_every", "distributed", "verbose")


def _same(v):
  return "" if v is None else v  # an unset path was null in older config.json files


def check_resumable(cfg, workdir: str, state_file: str) -> None:
  """Refuses a resume unless ``workdir`` holds ``state_file`` and a config.json of ``cfg``.

  Settings a config.json written by an older version lacks count as their
  defaults (so an older run still resumes).
  """
  workdir = os.path.abspath(expand(workdir))
  if not os.path.isdir(workdir):
    raise UserError(f"--resume: --workdir {workdir} does not exist; nothing to resume.")
  state_path, cfg_path = inside(workdir, state_file), inside(workdir, "config.json")
  if not os.path.isfile(state_path):
    raise UserError(f"--resume: {state_path} not found; nothing to resume (run without "
                    "--resume).")
  try:
    with open(cfg_path) as f:
      stored = json.load(f)["config"]
  except FileNotFoundError:
    raise UserError(f"--resume: {cfg_path} not found.") from None
  except (OSError, ValueError, KeyError, TypeError):
    raise UserError(f"--resume: {cfg_path} is unreadable or corrupt.") from None
  want = _flatten(json.loads(json.dumps(jsonable(cfg))))
  have = _flatten(stored) if isinstance(stored, dict) else {}
  diff = [k for k in sorted(want) if k in have and k.split(".")[-1] not in NOT_COMPARED
          and _same(want[k]) != _same(have[k])]
  if diff:
    raise UserError(f"--resume: the configuration differs from {cfg_path} in "
                    f"{', '.join(diff[:5])}; resume with the same settings.")
