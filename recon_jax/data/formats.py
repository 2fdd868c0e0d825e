"""Byte-level file formats: MNIST IDX (plain or gzip) and CIFAR-10/100 (binary and python).

Readers validate everything they are given and raise :class:`DataError`
naming the file. They never hold more than the data they return plus a small
buffer: an IDX file is read (and a ``.gz`` one inflated) incrementally, only
up to the size its header announces, so a gzip bomb or a corrupt header is
refused after a few kilobytes of work instead of exhausting memory.

Writers (:func:`write_idx`, :func:`write_cifar10_bin`) produce the official
formats, for test fixtures and conversions.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib

import numpy as np

from recon_jax.data import safe_pickle
from recon_jax.data.common import DataError

IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801
CIFAR_IMAGE_BYTES = 32 * 32 * 3

# No IDX file may announce more data than this (EMNIST ByClass, the largest
# known, holds 0.55 GB); larger claims come from corrupt headers.
MAX_IDX_BYTES = 1 << 32
# Deflate cannot compress better than 1032:1, so a gzip file of n bytes
# inflates to at most this many bytes per input byte (plus a little slack).
_DEFLATE_MAX_RATIO = 1032
_DEFLATE_SLACK = 1 << 16
_CHUNK = 1 << 20  # Bytes read (or inflated) per step.

_READ_ERRORS = (OSError, EOFError, zlib.error)


# --------------------------------------------------------------------------
# Writers (fixtures, conversions).
# --------------------------------------------------------------------------


def write_idx(path, array) -> None:
  """Writes a uint8 array as an IDX file (MNIST format).

  The magic number is ``0x000008NN`` with ``NN`` the number of dimensions,
  so images ``[N, H, W]`` get ``0x00000803`` and labels ``[N]`` get
  ``0x00000801``. The file is gzip-compressed if ``path`` ends in ``.gz``.

  Args:
    path: Destination file.
    array: uint8 array with 1 to 255 dimensions.

  Raises:
    DataError: If the array is not uint8 or has no dimensions.
  """
  array = np.asarray(array)
  if array.dtype != np.uint8:
    raise DataError(f"write_idx: expected a uint8 array, got {array.dtype}")
  if not 1 <= array.ndim <= 255:
    raise DataError(f"write_idx: expected 1 to 255 dimensions, got {array.ndim}")
  header = bytes([0, 0, 0x08, array.ndim])
  header += np.asarray(array.shape, dtype=">u4").tobytes()
  payload = header + np.ascontiguousarray(array).tobytes()
  path = os.fspath(path)
  if path.endswith(".gz"):
    payload = gzip.compress(payload, mtime=0)
  with open(path, "wb") as f:
    f.write(payload)


def write_cifar10_bin(path, images, labels) -> None:
  """Writes images in the CIFAR-10 binary format.

  Each record is one label byte followed by 3072 image bytes: the 32x32 red
  plane, then green, then blue, each row-major.

  Args:
    path: Destination file (e.g. ``data_batch_1.bin``).
    images: ``[N, 32, 32, 3]`` uint8 array (channels last).
    labels: ``[N]`` integer labels in ``[0, 255]``.

  Raises:
    DataError: On wrong shapes or dtypes.
  """
  images = np.asarray(images)
  labels = np.asarray(labels)
  if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (32, 32, 3):
    raise DataError(
      "write_cifar10_bin: expected uint8 images of shape [N, 32, 32, 3], got "
      f"{images.dtype} {images.shape}"
    )
  if labels.shape != (images.shape[0],):
    raise DataError(
      f"write_cifar10_bin: expected {images.shape[0]} labels, got shape {labels.shape}"
    )
  if labels.size and (labels.min() < 0 or labels.max() > 255):
    raise DataError("write_cifar10_bin: labels must lie in [0, 255]")
  planes = images.transpose(0, 3, 1, 2).reshape(images.shape[0], -1)
  records = np.concatenate([labels.astype(np.uint8)[:, None], planes], axis=1)
  with open(os.fspath(path), "wb") as f:
    f.write(np.ascontiguousarray(records).tobytes())


# --------------------------------------------------------------------------
# IDX.
# --------------------------------------------------------------------------


def _open(path: str):
  """``path`` opened for binary reading, inflating on the fly if it ends in ``.gz``."""
  if path.endswith(".gz"):
    return gzip.open(path, "rb")
  return open(path, "rb")  # pylint: disable=consider-using-with


def _read_up_to(f, n: int) -> bytes:
  """Up to ``n`` bytes from ``f``; fewer only at the end of the stream."""
  parts, got = [], 0
  while got < n:
    part = f.read(min(n - got, _CHUNK))
    if not part:
      break
    parts.append(part)
    got += len(part)
  return b"".join(parts)


def _fill(f, out: np.ndarray) -> int:
  """Reads into the 1-D uint8 ``out`` chunk by chunk; returns the bytes read."""
  view = memoryview(out)
  got = 0
  while got < len(view):
    n = f.readinto(view[got : got + _CHUNK])
    if not n:
      break
    got += n
  return got


def _dims_text(dims) -> str:
  return "x".join(str(d) for d in dims)


def read_idx(path: str, magic: int, what: str) -> np.ndarray:
  """Reads a uint8 IDX file (plain, or gzip if ``path`` ends in ``.gz``).

  Args:
    path: The file.
    magic: Expected magic number: :data:`IDX_IMAGES_MAGIC` or
      :data:`IDX_LABELS_MAGIC` (its low byte is the number of dimensions).
    what: ``'image'`` or ``'label'``, for messages.

  Returns:
    A read-only uint8 array shaped as the header says.

  Raises:
    DataError: Naming ``path`` if the file cannot be read or inflated, has
      another magic number, announces a zero dimension or more than
      :data:`MAX_IDX_BYTES` (or more than its compressed size can hold), or
      holds less or more data than its header announces.
  """
  ndim = magic & 0xFF
  header_len = 4 + 4 * ndim
  gz = path.endswith(".gz")
  try:
    with _open(path) as f:
      size = os.fstat(f.fileno()).st_size
      head = _read_up_to(f, 4)
      if len(head) == 4:
        got_magic = int.from_bytes(head, "big")
        if got_magic != magic:
          raise DataError(
            f"{path}: bad IDX magic 0x{got_magic:08x}, expected 0x{magic:08x} "
            f"({what}s, uint8, {ndim}-D)"
          )
        head += _read_up_to(f, header_len - 4)
      if len(head) < header_len:
        raise DataError(
          f"{path}: truncated IDX file, expected a {header_len}-byte header, got {len(head)} bytes"
        )
      dims = tuple(int(d) for d in np.frombuffer(head, ">u4", ndim, offset=4))
      expected = math.prod(dims)
      _check_announced(path, dims, expected, what, gz, size, header_len)
      out = np.empty(expected, np.uint8)
      got = _fill(f, out)
      if got < expected:
        raise DataError(
          f"{path}: truncated IDX file, expected {expected} bytes of {what} data, got {got}"
        )
      if f.read(1):
        raise DataError(
          f"{path}: inflates to more than the {header_len + expected} bytes its "
          f"IDX header announces ({_dims_text(dims)} {what} bytes); a corrupt "
          "file or a gzip bomb"
        )
  except _READ_ERRORS as e:
    raise DataError(f"{path}: cannot read file ({e})") from None
  out = out.reshape(dims)
  out.flags.writeable = False
  return out


def _check_announced(path, dims, expected, what, gz, size, header_len) -> None:
  """Refuses, before reading any data, a header no genuine file can have."""
  if expected == 0:
    raise DataError(
      f"{path}: IDX header announces {what} dimensions {_dims_text(dims)}; every "
      "dimension must be >= 1 (empty or corrupt file)"
    )
  if expected > MAX_IDX_BYTES:
    raise DataError(
      f"{path}: IDX header announces {what} dimensions {_dims_text(dims)}, i.e. "
      f"{expected} bytes, more than the {MAX_IDX_BYTES}-byte limit (corrupt header)"
    )
  if gz:
    most = _DEFLATE_MAX_RATIO * size + _DEFLATE_SLACK
    if header_len + expected > most:
      raise DataError(
        f"{path}: IDX header announces {what} dimensions {_dims_text(dims)}, i.e. "
        f"{expected} bytes, more than a {size}-byte gzip file can hold (corrupt "
        "header or truncated file)"
      )
    return
  got = size - header_len
  if got < expected:
    raise DataError(
      f"{path}: truncated IDX file, expected {expected} bytes of {what} data, got {got}"
    )
  if got > expected:
    raise DataError(
      f"{path}: corrupted IDX file, expected {expected} bytes of {what} data, "
      f"got {got} (trailing bytes)"
    )


# --------------------------------------------------------------------------
# CIFAR.
# --------------------------------------------------------------------------


def cifar_pixels(flat: np.ndarray) -> np.ndarray:
  """Channel-major uint8 ``[N, 3072]`` -> uint8 ``[N, 32, 32, 3]``."""
  return flat.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def read_cifar_bin(path: str, label_bytes: int, label_max: int):
  """Reads a CIFAR binary file: per record ``label_bytes`` label bytes, then 3072 pixels.

  CIFAR-10 records have one label byte; CIFAR-100 records have the coarse
  label (0..19), then the fine one. The last label byte is returned.

  Returns:
    ``(images, labels)``: uint8 ``[N, 32, 32, 3]`` and int64 ``[N]``.

  Raises:
    DataError: Naming ``path`` on a size that is not a whole number of
      records or a label out of range.
  """
  rec = label_bytes + CIFAR_IMAGE_BYTES
  try:
    with open(path, "rb") as f:
      size = os.fstat(f.fileno()).st_size
      if size == 0 or size % rec:
        raise DataError(
          f"{path}: size {size} bytes is not a positive multiple of the {rec}-byte CIFAR record "
          f"({label_bytes} label byte(s) + 3072 pixel bytes)"
        )
      records = np.empty(size, np.uint8)
      got = _fill(f, records)
  except _READ_ERRORS as e:
    raise DataError(f"{path}: cannot read file ({e})") from None
  if got != size:
    raise DataError(f"{path}: file shrank while being read ({got} of {size} bytes)")
  records = records.reshape(-1, rec)
  labels = records[:, label_bytes - 1].astype(np.int64)  # Last label byte.
  if label_bytes > 1:
    coarse = records[:, 0]
    if coarse.max() > 19:
      raise DataError(f"{path}: coarse label {int(coarse.max())} out of range 0..19")
  if labels.max() > label_max:
    raise DataError(f"{path}: label {int(labels.max())} out of range 0..{label_max}")
  return cifar_pixels(records[:, label_bytes:]), labels


def _dict_get(d: dict, key: str):
  if key.encode() in d:
    return d[key.encode()]
  return d.get(key)


def read_cifar_py(path: str, label_key: str, label_max: int):
  """Reads a batch of the CIFAR python version (a pickled dict), safely.

  Args:
    path: The batch file.
    label_key: ``'labels'`` (CIFAR-10) or ``'fine_labels'`` (CIFAR-100).
    label_max: Largest valid label.

  Returns:
    ``(images, labels)``: uint8 ``[N, 32, 32, 3]`` and int64 ``[N]``.

  Raises:
    DataError: Naming ``path`` if it is not such a dict or the pickle
      refers to anything beyond numpy arrays and plain containers.
  """
  d = safe_pickle.load(path)
  if not isinstance(d, dict):
    raise DataError(f"{path}: expected a pickled dict, got {type(d).__name__}")
  data, labels = _dict_get(d, "data"), _dict_get(d, label_key)
  if data is None or labels is None:
    raise DataError(f"{path}: pickled dict lacks the data/{label_key} entries")
  data = np.asarray(data)
  if data.ndim != 2 or data.shape[1] != CIFAR_IMAGE_BYTES or data.dtype != np.uint8:
    raise DataError(f"{path}: expected data as uint8 [N, 3072], got {data.dtype} {data.shape}")
  try:
    labels = np.asarray(labels, dtype=np.int64)
  except (TypeError, ValueError, OverflowError):
    raise DataError(f"{path}: {label_key} are not integers") from None
  if labels.shape != (data.shape[0],):
    raise DataError(f"{path}: {labels.size} {label_key} for {data.shape[0]} images")
  if labels.size and (labels.min() < 0 or labels.max() > label_max):
    raise DataError(f"{path}: {label_key} out of range 0..{label_max}")
  return cifar_pixels(data), labels
