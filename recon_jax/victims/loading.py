"""A victim the attack can run on: trained (or read from the cache) or imported, and what
the attacker sees of it.

:func:`load_or_train_victim` and :func:`import_victim` give a :class:`Victim` (its
parameters, ``apply_fn`` and training summary); :func:`make_target` turns its
parameters into the attack's :class:`recon_jax.types.Target`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data, losses
from recon_jax.errors import ConfigError
from recon_jax.types import Target, float_dtype
from recon_jax.victims import cache, importers, models, victim


def cast_params(params, dtype=None):
  """``params`` with every leaf a ``dtype`` array (default :func:`float_dtype`)."""
  dtype = dtype or float_dtype()
  return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)


def make_target(
  params, labels, mean=None, *, box: Optional[Tuple[float, float]] = (0.0, 1.0), dtype=None
) -> Target:
  """What the attacker sees: theta*, the candidates' labels and the pixel box.

  Args:
    params: theta*.
    labels: [m] labels assumed for the candidates (see :func:`candidate_labels`).
    mean: the per-pixel mean subtracted from the training data (or None): the
      attack works in that shifted space, so the box moves with it.
    box: (lo, hi) pixel range of the data; None: no box (the 2-D toy).
    dtype: float dtype (default :func:`float_dtype`).
  """
  dtype = dtype or float_dtype()
  params = cast_params(params, dtype)
  labels = jnp.asarray(labels)
  if box is None:
    shape = np.shape(mean) if mean is not None else ()
    inf = jnp.full(shape, jnp.inf, dtype)
    return Target(params, labels, -inf, inf)
  lo, hi = box
  offset = np.zeros(()) if mean is None else np.asarray(mean)
  return Target(params, labels, jnp.asarray(lo - offset, dtype), jnp.asarray(hi - offset, dtype))


class Victim(NamedTuple):
  params: Any  # theta* (flax variable dict)
  apply_fn: Callable  # apply_fn(params, x, act=None) -> [n, C]
  num_outputs: int  # C, the width of the output layer
  summary: dict  # training summary (loss, errors, margins, ...)
  source: str  # 'trained', 'cache' or the checkpoint path


def shift_dataset(ds: data.Dataset, mean) -> data.Dataset:
  """``ds`` in the input space of a model trained on ``x - mean`` (pixels in, mean recorded).

  ``ds`` must hold plain pixels (loaded with ``subtract_mean=False``).
  """
  mean = np.asarray(mean, ds.x_train.dtype)
  if mean.shape != ds.x_train.shape[1:]:
    raise ConfigError(f"data_mean has shape {mean.shape}, the images {ds.x_train.shape[1:]}.")
  sub = lambda a: a - mean if len(a) else a
  return ds._replace(
    x_train=sub(ds.x_train), x_test=sub(ds.x_test), x_part=sub(ds.x_part), mean=mean
  )


def import_victim(
  path: str,
  cfg: victim.VictimConfig,
  ds: data.Dataset,
  *,
  input_layout: str = "nchw",
  stride=1,
  padding=0,
) -> Victim:
  """A PyTorch or safetensors victim: its weights mapped onto a flax network.

  The architecture is inferred from the tensors (see :mod:`recon_jax.victims.importers`);
  ``cfg.loss`` says how it was trained; its train error and margins on ``ds``
  are computed here, since the file carries no summary.
  """
  imp = importers.load_foreign(
    path,
    input_shape=ds.x_train.shape[1:],
    input_layout=input_layout,
    stride=stride,
    padding=padding,
  )
  apply_fn = models.make_apply_fn(imp.module)
  out = apply_fn(imp.params, jnp.asarray(ds.x_train, jnp.float32))
  want = losses.num_outputs(cfg.loss, ds.num_classes)
  if out.shape[1] != want:
    raise ConfigError(
      f"victim.loss={cfg.loss!r} needs {want} output(s); {path} has {out.shape[1]}.",
      argument="loss",
    )
  y = jnp.asarray(ds.y_train)
  margins = np.asarray(losses.margins(cfg.loss, out, y))
  summary = {
    "train_error": float(losses.error_rate(cfg.loss, out, y)),
    "loss": float(jnp.mean(losses.per_sample_loss(cfg.loss, out, y))),
    "margins": (margins[:, 0] if margins.ndim == 2 else margins).tolist(),
    "imported": {"format": imp.format, "arch": imp.arch},
  }
  return Victim(imp.params, apply_fn, int(out.shape[1]), summary, path)


def load_or_train_victim(
  cfg: victim.VictimConfig,
  ds: data.Dataset,
  *,
  checkpoint: str = "",
  use_cache: bool = True,
  allow_data_mismatch: bool = False,
) -> Victim:
  """theta* for ``cfg`` on ``ds``: from a recon_jax ``checkpoint``, the cache, or trained now.

  PyTorch and safetensors files go through :func:`import_victim`.
  """
  module, apply_fn = victim.build(cfg, ds)
  if checkpoint:
    params, _, meta = victim.load(checkpoint, cfg, ds)
    victim.check_data(checkpoint, meta, ds, allow_data_mismatch)
    summary, source = meta.get("summary", {}), checkpoint
  else:
    params, summary, _ = cache.get_or_train(cfg, ds, use_cache=use_cache)
    source = summary.pop("source")
  return Victim(params, apply_fn, victim.out_dim(cfg, ds), summary, source)
