"""The victim cache: a trained victim is kept on disk under a key of its recipe and data.

``RECON_JAX_CACHE`` (default ``~/.cache/recon_jax``) holds one msgpack checkpoint per
recipe, data fingerprint and precision; a file that fails to load is ignored with a
warning and replaced, a cache that cannot be written only warns.
"""

from __future__ import annotations

import hashlib
import json
import os

from absl import logging
import jax
import jax.numpy as jnp

from recon_jax import data
from recon_jax.io import checkpoint
from recon_jax.types import float_dtype
from recon_jax.victims import recipe, trained


def cache_dir() -> str:
  return os.environ.get(
    "RECON_JAX_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "recon_jax")
  )


def _cache_path(stem: str) -> str:
  """The cache file of ``stem`` for the current precision (float32 and float64 kept apart)."""
  prec = "f64" if float_dtype() == jnp.float64 else "f32"
  return os.path.join(cache_dir(), f"{stem}-{prec}.msgpack")


def _through_cache(path: str, load_fn, train_fn, save_fn, use_cache: bool):
  """``(value, from_cache)``: ``load_fn(path)`` if a usable file is cached, else ``train_fn()``.

  A file that fails to load (CheckpointError) is ignored with a warning and
  replaced; a cache that cannot be written only warns.
  """
  if use_cache and os.path.isfile(path):
    try:
      value = load_fn(path)
      logging.info("victim loaded from cache %s", path)
      return value, True
    except checkpoint.CheckpointError as e:
      logging.warning("ignoring unusable cached victim: %s", e)
  logging.info("training the victim (not cached%s)", f" at {path}" if use_cache else "")
  value = train_fn()
  if use_cache:
    try:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      save_fn(path, value)
    except OSError as e:
      logging.warning("could not cache the victim at %s: %s", path, e)
  return value, False


def get_or_train(cfg: recipe.VictimConfig, ds: data.Dataset, *, use_cache: bool = True):
  """Loads the cached victim for ``cfg`` or trains and caches it (theta_0 with it).

  Returns:
    ``(params, summary, cache_path or None, init)``; ``summary['source']`` says
    whether the parameters came from the cache or were trained now; ``init`` is
    theta_0 (re-created from the recipe for a file cached before theta_0 was kept).
  """
  path = _cache_path(f"victim-{cfg.dataset}-{cfg.key()}-{data.fingerprint(ds)}")

  def load_fn(p):  # the cached file read once: parameters, metadata and theta_0
    params, meta, init = checkpoint.read(p)
    init = trained.check_stored(p, params, meta, init, cfg, ds)
    if init is None:
      init = trained.initial_params(cfg, ds, jax.tree_util.tree_leaves(params)[0].dtype)
    return params, meta["summary"], init

  def train_fn():
    fitted = trained.fit(cfg, ds)
    return fitted.params, fitted.summary, fitted.init

  (params, summary, init), hit = _through_cache(
    path,
    load_fn,
    train_fn,
    lambda p, v: trained.save(p, cfg, ds, v[0], v[1], init=v[2]),
    use_cache,
  )
  params, init = (jax.tree_util.tree_map(jnp.asarray, t) for t in (params, init))
  source = "cache" if hit else "trained"
  return params, dict(summary, source=source), path if use_cache else None, init


def cached_params(kind: str, spec: dict, template, train_fn, *, use_cache: bool = True):
  """Parameters trained outside :func:`fit`, from the victim cache or trained now and cached.

  For victims whose recipe is not a :class:`VictimConfig`, e.g. trained to
  convergence with L-BFGS (:func:`recon_jax.implicit.train_to_convergence`).

  Args:
    kind: file-name prefix in :func:`cache_dir`.
    spec: JSON-able description of everything that determines the parameters
      (data fingerprint, architecture, initialisation, recipe); its hash keys
      the cache, and a cached file must carry the same ``spec``.
    template: parameters of the right structure and dtype (e.g. the initial ones).
    train_fn: ``() -> (params, summary)``, run on a cache miss; ``summary`` JSON-able.
    use_cache: read and write the cache (else always train, write nothing).

  Returns:
    ``(params, summary, cache path or None)``; cached parameters come back
    bit for bit as trained, cast to the template's dtypes.
  """
  spec = json.loads(json.dumps(spec, sort_keys=True))
  digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
  path = _cache_path(f"{kind}-{digest}")

  def load_fn(p):
    params, meta = checkpoint.load(p)
    checkpoint.check_matches(params, template, p)
    if meta.get("spec") != spec:
      raise checkpoint.CheckpointError(f"{p}: cached for another recipe.")
    params = jax.tree_util.tree_map(
      lambda t, a: jnp.asarray(a, jnp.asarray(t).dtype), template, params
    )
    return params, meta.get("summary", {})

  def save_fn(p, value):
    checkpoint.save(p, value[0], {"spec": spec, "summary": value[1]})

  (params, summary), _ = _through_cache(path, load_fn, train_fn, save_fn, use_cache)
  return params, summary, path if use_cache else None
