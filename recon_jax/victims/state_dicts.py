"""Reading a foreign checkpoint file into a flat state dict of numpy arrays.

safetensors files are read without torch; PyTorch files (zip or legacy) with
``torch.load(..., weights_only=True)``, which refuses pickles that would run code.  The
format is sniffed from the file's first bytes, not its name, and a malformed or
truncated file is one line naming it.  :mod:`recon_jax.victims.foreign` maps the
state dict onto a network.
"""

from __future__ import annotations

import os
import re
import struct
import sys
from typing import Mapping
import zipfile

import numpy as np

from recon_jax.io.checkpoint import CheckpointError

# Keys under which training scripts commonly nest the model's state dict.
NESTED_KEYS = ("state_dict", "model_state_dict", "model", "net", "network", "module")


# safetensors refuses headers above 100 MB; so do we when sniffing.
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


# --------------------------------------------------------------------------
# Reading files.
# --------------------------------------------------------------------------
def require_file(path: str, what: str = "checkpoint") -> None:
  """CheckpointError naming ``path`` unless it is a file: a folder is told as a folder (the
  model's file itself is wanted), anything else as not found (``what``: which file)."""
  if os.path.isdir(path):
    raise CheckpointError(
      f"{path}: a folder; the {what} must be a file (.safetensors, .pt/.pth or recon_jax's "
      "victim.msgpack), not the folder holding it."
    )
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: {what} file not found.")


def _head(path: str, n: int = 64) -> tuple[bytes, int]:
  """First ``n`` bytes and the size of ``path``; CheckpointError if unreadable."""
  require_file(path)
  try:
    with open(path, "rb") as f:
      head = f.read(n)
    return head, os.path.getsize(path)
  except OSError as e:
    raise CheckpointError(f"{path}: cannot read the file ({e.strerror}).") from None


def one_line(e: BaseException, limit: int = 200) -> str:
  """An exception's message squeezed onto one short line."""
  text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(e)).split()) or type(e).__name__
  return text if len(text) <= limit else text[: limit - 3] + "..."


def detect_format(path: str) -> str:
  """Tells a checkpoint's format from its content, never from its extension.

  Returns:
    'msgpack' (a recon_jax checkpoint: a msgpack map with string keys),
    'safetensors' (8-byte little-endian header length, then a JSON header) or
    'torch' (a PyTorch >= 1.6 zip archive holding ``data.pkl``, or a legacy
    pickle-based ``torch.save`` file).

  Raises:
    CheckpointError naming the file for anything else (images, text, empty or
    random files, zip archives that are not PyTorch checkpoints).
  """
  head, size = _head(path)
  if size == 0:
    raise CheckpointError(f"{path}: empty file, not a checkpoint.")
  if head[:4] == b"PK\x03\x04":
    try:
      with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
      raise CheckpointError(
        f"{path}: malformed or truncated zip archive ({one_line(e)})."
      ) from None
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
      return "torch"
    raise CheckpointError(f"{path}: a zip archive without data.pkl, not a PyTorch checkpoint.")
  # Pickle protocol 2..5 opens with PROTO (0x80) then the protocol number;
  # legacy torch.save files are such pickles.
  if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
    return "torch"
  if len(head) >= 9 and head[8:9] == b"{":
    (n,) = struct.unpack("<Q", head[:8])
    if 0 < n <= _MAX_SAFETENSORS_HEADER:
      return "safetensors"  # a header longer than the file is caught when read
  # recon_jax checkpoints: a msgpack map (fixmap or map16/32) whose first key
  # is a string (fixstr or str8/16/32).
  if len(head) >= 2:
    is_map = 0x81 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF)
    key_at = {0xDE: 3, 0xDF: 5}.get(head[0], 1)
    if (
      is_map
      and len(head) > key_at
      and (0xA0 <= head[key_at] <= 0xBF or head[key_at] in (0xD9, 0xDA, 0xDB))
    ):
      return "msgpack"
  raise CheckpointError(
    f"{path}: not a recognised checkpoint (expected safetensors, a PyTorch file "
    f"or a recon_jax msgpack checkpoint)."
  )


def is_foreign(path: str) -> bool:
  """True for a PyTorch or safetensors file, False for recon_jax's own checkpoint."""
  return detect_format(path) != "msgpack"


def _is_tensor(v) -> bool:
  torch = sys.modules.get("torch")
  return torch is not None and isinstance(v, torch.Tensor)


def _tensor_entries(obj) -> dict:
  """The tensor-valued entries of a dict (non-tensor entries are ignored)."""
  return {k: v for k, v in obj.items() if isinstance(k, str) and _is_tensor(v)}


def _unwrap_state_dict(obj, path: str, depth: int = 0) -> dict:
  """Finds the state dict in what ``torch.load`` returned.

  The first of :data:`NESTED_KEYS` whose value is a dict holding tensors is
  unwrapped (``{'state_dict': ..., 'epoch': 3, 'best_acc': tensor(0.9)}``,
  ``{'model': ...}``); otherwise a dict's own tensor values are the state
  dict.  Non-tensor values are dropped.
  """
  if isinstance(obj, Mapping):
    if depth < 3:
      for key in NESTED_KEYS:
        if isinstance(obj.get(key), Mapping):
          found = _unwrap_state_dict(obj[key], path, depth + 1)
          if found:
            return found
    tensors = _tensor_entries(obj)
    if tensors:
      return tensors
  if depth:
    return {}
  raise CheckpointError(
    f"{path}: the PyTorch file holds no state dict of tensors (found "
    f"{type(obj).__name__}; save model.state_dict())."
  )


def _torch_to_numpy(t) -> np.ndarray:
  import torch  # only reached when torch imported fine

  t = t.detach().cpu()
  if t.dtype in (torch.bfloat16, torch.float16):
    t = t.float()  # numpy has no bfloat16; float16 -> float32 is exact
  return t.numpy().copy()


def _read_torch(path: str) -> dict:
  try:
    import torch
  except (ImportError, OSError) as e:  # OSError: a torch whose shared libraries fail to load
    raise CheckpointError(
      f"{path}: a PyTorch checkpoint, but torch cannot be imported ({one_line(e, 80)}); "
      f'run pip install -e ".[torch]" to read it.'
    ) from None
  import pickle

  try:
    obj = torch.load(path, map_location="cpu", weights_only=True)
  except pickle.UnpicklingError as e:
    # weights_only refuses any global outside its allow-list, i.e. any pickle
    # that would construct arbitrary objects or call functions.
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\.?$)", str(e), re.M)
    if found is None and "weights only" not in str(e).lower():
      raise CheckpointError(
        f"{path}: malformed or truncated PyTorch file (UnpicklingError: {one_line(e, 160)})."
      ) from None
    reason = one_line(found.group(1) if found else e, 160)
    raise CheckpointError(
      f"{path}: refused by torch.load(weights_only=True): the pickle holds more than "
      f"tensors (code to run, objects to build, or corrupt data); save model.state_dict() "
      f"instead ({reason})."
    ) from None
  except Exception as e:  # torch raises RuntimeError/EOFError/... on corrupt files
    raise CheckpointError(
      f"{path}: malformed or truncated PyTorch file ({type(e).__name__}: {one_line(e, 160)})."
    ) from None
  tensors = _unwrap_state_dict(obj, path)
  return {k: _torch_to_numpy(v) for k, v in tensors.items()}


def _read_safetensors(path: str) -> dict:
  from safetensors.numpy import load_file

  try:
    return dict(load_file(path))
  except Exception as e:  # SafetensorError, or a numpy error on unknown dtypes
    raise CheckpointError(
      f"{path}: malformed or truncated safetensors file ({one_line(e, 160)})."
    ) from None


def read_state_dict(path: str) -> dict[str, np.ndarray]:
  """Reads a safetensors or PyTorch file into ``{name: numpy array}``.

  safetensors files need no torch.  PyTorch files are read with
  ``torch.load(path, map_location='cpu', weights_only=True)`` (so a pickle
  that tries to run code is refused), a state dict nested under
  'state_dict', 'model', ... is unwrapped and non-tensor entries are dropped;
  bfloat16/float16 tensors come back as float32.

  Raises:
    CheckpointError (one line naming the file) for recon_jax msgpack files
    (use :func:`recon_jax.io.checkpoint.load`), unknown, malformed, truncated or
    refused files, files without tensors, and torch files when torch is not
    installed.
  """
  return read(path)[1]


def read(path: str) -> tuple[str, dict]:
  """``(format, state dict)`` of a file; see :func:`read_state_dict`."""
  fmt = detect_format(path)
  if fmt == "msgpack":
    raise CheckpointError(
      f"{path}: a recon_jax msgpack checkpoint; load it with "
      f"recon_jax.io.checkpoint.load, not the importer."
    )
  sd = _read_safetensors(path) if fmt == "safetensors" else _read_torch(path)
  if not sd:
    raise CheckpointError(f"{path}: the checkpoint holds no tensors.")
  return fmt, sd
