"""Shared plumbing of the experiment binaries: workdirs, config/metrics files, errors."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import traceback
from typing import Any, Callable

import numpy as np

from recon_jax import checkpoint

USER_ERRORS = (ValueError, FileNotFoundError, PermissionError, KeyError)


class UserError(ValueError):
  """A bad flag, file or workdir: reported in one line, exit code 1."""


def prepare_workdir(workdir: str, overwrite: bool) -> str:
  """Creates ``workdir``; refuses a non-empty one unless ``overwrite``."""
  if not workdir:
    raise UserError("--workdir is required.")
  workdir = os.path.abspath(workdir)
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


def _jsonable(obj: Any):
  if dataclasses.is_dataclass(obj):
    return _jsonable(dataclasses.asdict(obj))
  if isinstance(obj, dict):
    return {str(k): _jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_jsonable(v) for v in obj]
  if isinstance(obj, np.ndarray):
    return _jsonable(obj.tolist())
  if isinstance(obj, (np.floating, float)):
    v = float(obj)
    return v if np.isfinite(v) else None
  if isinstance(obj, (np.integer,)):
    return int(obj)
  if isinstance(obj, (np.bool_,)):
    return bool(obj)
  return obj


def _main_process() -> bool:
  from recon_jax import distributed
  return distributed.is_main_process()


def write_json(workdir: str, name: str, obj: Any) -> str:
  """Atomic JSON write (on process 0 only in a multi-host run)."""
  path = inside(workdir, name)
  if not _main_process():
    return path
  checkpoint.atomic_write_text(path, json.dumps(_jsonable(obj), indent=2, sort_keys=True,
                                                allow_nan=False))
  return path


def write_npz(workdir: str, name: str, **arrays) -> str:
  import io
  path = inside(workdir, name)
  if not _main_process():
    return path
  buf = io.BytesIO()
  np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
  checkpoint.atomic_write_bytes(path, buf.getvalue())
  return path


def environment() -> dict:
  """Versions, devices and precision: written into every config.json."""
  import importlib.metadata as md
  import jax
  vers = {}
  for pkg in ("jax", "jaxlib", "jaxopt", "flax", "optax", "dm-pix", "numpy"):
    try:
      vers[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
      vers[pkg] = None
  return {"versions": vers, "python": platform.python_version(),
          "devices": [str(d) for d in jax.devices()],
          "device_kind": jax.devices()[0].device_kind, "backend": jax.default_backend(),
          "x64": bool(jax.config.jax_enable_x64),
          "matmul_precision": str(jax.config.jax_default_matmul_precision),
          "argv": sys.argv}


def main_guard(fn: Callable[[], Any], verbose: bool = False) -> None:
  """Runs ``fn``; user errors become one line on stderr and exit code 1."""
  from recon_jax import data as _data
  try:
    fn()
  except (UserError, _data.DataError, checkpoint.CheckpointError, *USER_ERRORS) as e:
    if verbose:
      traceback.print_exc()
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def configure_precision(x64: bool, matmul_precision: str = "default") -> None:
  import jax
  jax.config.update("jax_enable_x64", bool(x64))
  if matmul_precision not in ("default", "high", "highest"):
    raise UserError(f"--matmul_precision must be default, high or highest, got "
                    f"{matmul_precision!r}.")
  if matmul_precision != "default":
    jax.config.update("jax_default_matmul_precision", matmul_precision)
