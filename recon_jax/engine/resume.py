"""Resumable runs: a full run state saved atomically as msgpack, no pickle.

A resume file is a flax msgpack blob of ``{'format', 'state', 'meta'}``:
``state`` is the state dict (:func:`flax.serialization.to_state_dict`) of any
pytree of arrays -- e.g. ``{'run': RestartState [R] (attack state incl. the
optimiser state, loss, divergence flags, step), 'keys': [R] PRNG keys,
'hparams': {name: [R]}}`` -- and ``meta`` a JSON string (config, chunk
history, ...).  Loading restores the pytree against a *template* of the same
structure (so NamedTuples such as ``RestartState`` or optax states come back as
themselves) after checking every leaf's name, shape and dtype; any mismatch,
truncation or foreign file is a :class:`~recon_jax.io.checkpoint.CheckpointError`
with a one-line message.

Writes reuse :func:`recon_jax.io.checkpoint.atomic_write_bytes` (temp file in the
same folder, fsync, rename), so a run killed while saving leaves either the
previous or the new state file, never half of one.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import time
from typing import Any, Callable, Optional, Tuple

from absl import logging
from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.io.checkpoint import CheckpointError, atomic_write_bytes, read_blob

FORMAT = "recon_jax.resume.v1"
# The part of a state file that holds what a direct attack's host-side programs gave
# (:class:`Memo`), carried by the search's saves after it and left out of what it restores.
MEMO = "memo"
# A memo is saved at its first entry, then at most this often (seconds): at n = 500 one of
# the cone's facet programs takes a minute, and the file grows to megabytes.
MEMO_EVERY_S = 30.0


def _host(tree: Any) -> Any:
  """State dict of ``tree`` with every leaf a host numpy copy (typed keys unwrapped)."""

  def to_np(a):
    if isinstance(a, jax.Array) and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a = jax.random.key_data(a)
    return np.array(a, copy=True)  # a copy: the device buffer may be donated next chunk

  return jax.tree_util.tree_map(to_np, serialization.to_state_dict(tree))


def to_bytes(tree: Any, meta: dict) -> bytes:
  blob = {
    "format": FORMAT,
    "state": _host(tree),
    "meta": json.dumps(meta, sort_keys=True, allow_nan=False),
  }
  return serialization.msgpack_serialize(blob)


def save(path: str, tree: Any, meta: dict) -> None:
  """Saves a pytree of arrays and a JSON-able ``meta`` dict to ``path`` atomically."""
  blob = to_bytes(tree, meta)
  atomic_write_bytes(path, blob)


def _signature(state_dict: Any) -> dict:
  return {
    jax.tree_util.keystr(p): (
      tuple(np.shape(v)),
      np.dtype(getattr(v, "dtype", None) or np.asarray(v).dtype).name,
    )
    for p, v in jax.tree_util.tree_leaves_with_path(state_dict)
  }


def from_bytes(data: bytes, template: Any, path: str = "state file") -> Tuple[Any, dict]:
  blob, meta = read_blob(data, path, FORMAT, "state file")
  if isinstance(blob.get("state"), dict):  # a direct attack's memo is not the search's
    blob["state"] = {k: v for k, v in blob["state"].items() if k != MEMO}
  got = _signature(blob.get("state"))
  want = _signature(_host_template(template))
  missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
  if missing or extra:
    raise CheckpointError(
      f"{path}: state does not match this run: missing {missing[:3]}, unexpected {extra[:3]}."
    )
  for name, (shape, dtype) in want.items():
    if got[name] != (shape, dtype):
      raise CheckpointError(
        f"{path}: state does not match this run at {name}: file has "
        f"{got[name][1]}{list(got[name][0])}, the run needs "
        f"{dtype}{list(shape)}."
      )
  try:
    tree = serialization.from_state_dict(template, blob["state"])
  except (KeyError, ValueError, TypeError) as e:
    raise CheckpointError(f"{path}: state does not match this run ({e}).") from None
  return tree, meta


def _host_template(template: Any) -> Any:
  """State dict of the template without copying (shapes/dtypes only are read)."""

  def sig(a):
    if hasattr(a, "dtype") and jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a = jax.random.key_data(a)
    return jax.ShapeDtypeStruct(np.shape(a), np.dtype(a.dtype))

  return jax.tree_util.tree_map(sig, serialization.to_state_dict(template))


def load(path: str, template: Any) -> Tuple[Any, dict]:
  """Loads ``(tree, meta)`` saved by :func:`save`; the tree is restored against ``template``.

  ``template`` may hold arrays or ``jax.ShapeDtypeStruct`` leaves (e.g. from
  :func:`jax.eval_shape`).  Leaves come back as numpy arrays.

  Raises:
    CheckpointError: file missing, truncated, not a state file, or a leaf
      whose name, shape or dtype differs from the template (one-line message).
  """
  if not os.path.isfile(path):
    raise CheckpointError(f"{path}: state file not found.")
  with open(path, "rb") as f:
    data = f.read()
  return from_bytes(data, template, path)


def nonfinite_leaves(tree: Any) -> list:
  """Names of float leaves holding NaN/Inf (a diverged restart's *loss* may be inf)."""
  out = []
  for p, v in jax.tree_util.tree_leaves_with_path(serialization.to_state_dict(tree)):
    v = np.asarray(v)
    if np.issubdtype(v.dtype, np.inexact) and not np.all(np.isfinite(v)):
      out.append(jax.tree_util.keystr(p))
  return out


def run_tree(state: Any, keys, hparams: dict) -> dict:
  """What a resumable sweep saves: the batched loop state, its PRNG keys and hyperparameters."""
  return {"run": state, "keys": keys, "hparams": {k: jnp.asarray(v) for k, v in hparams.items()}}


def chunk_record(rec: dict) -> dict:
  """JSON form of one chunk's record: the step and every per-restart metric (None: non-finite)."""
  out = {"step": int(rec["step"])}
  for k, v in rec.items():
    if k in ("step", "time_s"):
      continue
    v = np.asarray(v)
    if v.dtype == bool:
      out[k] = [bool(b) for b in v.ravel()]
    else:
      out[k] = [float(f) if np.isfinite(f) else None for f in v.astype(np.float64).ravel()]
  return out


class Saver:
  """Saves a running sweep to ``path`` every ``every`` chunks (and at its end).

  The file (:func:`save`) holds the batched state, the PRNG keys,
  the first stage's hyperparameters and ``meta`` plus the JSON records of
  every chunk so far (``chunks``), so a resumed run reports the whole run.
  :func:`restore` reads it back.
  """

  def __init__(
    self,
    path: str,
    every: int = 1,
    meta: Optional[dict] = None,
    chunks: Optional[list] = None,
    carried: Optional[dict] = None,
  ):
    if every < 0:
      raise ConfigError(f"every must be >= 0 (0: never), got {every}.")
    self.path, self.every, self.meta = path, every, dict(meta or {})
    self.chunks = list(chunks or [])
    self.carried = carried  # a direct attack's memo entries (:class:`Memo`), kept in the file

  def save(self, state, keys, hparams) -> None:
    tree = run_tree(state, keys, hparams)
    if self.carried:
      tree = {**tree, MEMO: self.carried}
    save(self.path, tree, {**self.meta, "chunks": self.chunks})


def restore(path: str, template: Any, keys, hparams: dict):
  """``(state, chunk records, meta)`` of a sweep saved by :class:`Saver`, validated against
  ``template`` (:func:`run_tree` of the state the sweep's own init gives, e.g. under
  ``jax.eval_shape``): a state of another size, architecture or dtype is refused; so are
  other PRNG keys or hyperparameters (the resumed run would not be the run that was
  started) and NaN/Inf in the attack state.  Raises CheckpointError with a one-line reason.
  """
  tree, meta = load(path, template)
  if not np.array_equal(np.asarray(tree["keys"]), np.asarray(keys)) or any(
    not np.array_equal(np.asarray(tree["hparams"][k]), np.asarray(v)) for k, v in hparams.items()
  ):
    raise CheckpointError(
      f"{path} was written with other PRNG keys or hyperparameters than this configuration gives."
    )
  bad = nonfinite_leaves(tree["run"].inner)
  if bad:
    raise CheckpointError(f"{path} holds NaN/Inf in {bad[0]}.")
  state = jax.tree_util.tree_map(lambda t, a: jnp.asarray(a, t.dtype), template["run"], tree["run"])
  logging.info("resuming from %s at step %d", path, int(np.max(np.asarray(state.step))))
  return state, list(meta.get("chunks", [])), meta


def parts(path: str) -> frozenset:
  """The top-level parts of the state file ``path`` (``run``, ... of a search's, :data:`MEMO`);
  empty where there is no readable state file."""
  try:
    with open(path, "rb") as f:
      blob, _ = read_blob(f.read(), path, FORMAT, "state file")
  except (OSError, CheckpointError):
    return frozenset()
  state = blob.get("state")
  return frozenset(state) if isinstance(state, dict) else frozenset()


class Memo:
  """What a run's host-side programs gave (a direct attack's: the cone's facet programs and
  decodings), each by a digest of its inputs, saved as it goes into the run's state file
  (``path``; None: never), so that a resumed run replays them instead of solving them again:
  the same draws then reach the same programs, and the run gives the candidates it would have
  given uninterrupted.  ``entries``: what a run saved before (:func:`load_memo`)."""

  def __init__(self, path=None, meta=None, entries=None, every_s: float = MEMO_EVERY_S):
    self.path, self.meta, self.every_s = path, dict(meta or {}), float(every_s)
    self.entries = dict(entries or {})
    self.hits, self.solved, self._saved_at, self._dirty = 0, 0, None, False

  def get(self, kind: str, inputs: tuple, compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The array ``compute()`` gave for ``inputs`` (arrays and numbers) of program ``kind``,
    computed (and saved, :data:`MEMO_EVERY_S`) only where no run gave it before."""
    h = hashlib.sha256(kind.encode())
    for a in inputs:
      a = np.ascontiguousarray(a)
      h.update(f"{a.dtype.str}{a.shape}".encode())
      h.update(a.tobytes())
    key = h.hexdigest()
    if key in self.entries:
      self.hits += 1
      return np.array(self.entries[key], copy=True)
    value = np.asarray(compute(), np.float64)
    self.entries[key] = value
    self.solved, self._dirty = self.solved + 1, True
    now = time.monotonic()
    if self._saved_at is None or now - self._saved_at >= self.every_s:
      self.save()
    return np.array(value, copy=True)

  def save(self) -> None:
    """Writes the entries to the state file now (atomic; nothing where there is no path)."""
    if self.path and self._dirty:
      save(self.path, {MEMO: self.entries}, self.meta)
      self._saved_at, self._dirty = time.monotonic(), False


def load_memo(path: str) -> dict:
  """The memo entries (:class:`Memo`) a run saved in the state file ``path`` ({} where none)."""
  try:
    with open(path, "rb") as f:
      blob, _ = read_blob(f.read(), path, FORMAT, "state file")
  except (OSError, CheckpointError):
    return {}
  state = blob.get("state")
  memo = state.get(MEMO) if isinstance(state, dict) else None
  if not isinstance(memo, dict):
    return {}
  return {str(k): np.asarray(v, np.float64) for k, v in memo.items()}


_MEMO: contextvars.ContextVar = contextvars.ContextVar("recon_jax_memo", default=None)


@contextlib.contextmanager
def memo_of(state_file, every_s: Optional[float] = None):
  """The :class:`Memo` of a direct attack run with ``state_file`` (an
  :class:`~recon_jax.io.workdir.StateFile`; None, or ``every`` 0: kept in memory only, never
  saved), loaded from it where the run resumes, current while the block runs
  (:func:`remembered`), saved every ``every_s`` seconds (None: :data:`MEMO_EVERY_S`) and
  when the block ends, also where a signal or an error ends it."""
  path = state_file.path if state_file is not None and state_file.every else None
  entries = load_memo(state_file.path) if state_file is not None and state_file.resume else {}
  meta = (state_file.meta if state_file is not None else None) or {}
  memo = Memo(path, meta, entries, MEMO_EVERY_S if every_s is None else every_s)
  if entries:
    logging.info("resuming: %d programs of the direct attack saved before", len(entries))
  token = _MEMO.set(memo)
  try:
    yield memo
  finally:
    _MEMO.reset(token)
    memo.save()


def remembered(kind: str, inputs: tuple, compute: Callable[[], np.ndarray]) -> np.ndarray:
  """``compute()``, through the current :class:`Memo` where a run has one (:func:`memo_of`)."""
  memo = _MEMO.get()
  return np.asarray(compute(), np.float64) if memo is None else memo.get(kind, inputs, compute)
