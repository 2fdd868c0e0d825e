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

from recon_jax import data
from recon_jax.core import losses
from recon_jax.errors import ConfigError
from recon_jax.types import Target, float_dtype
from recon_jax.victims import cache, importers, models, readers, victim


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
  from recon_jax.core import arguments

  arguments.finite_tree("params", params)
  arguments.array("labels", labels, ndim=1)
  if mean is not None:
    arguments.array("mean", mean)
  if box is not None:
    if not (isinstance(box, (tuple, list)) and len(box) == 2):
      raise ConfigError(f"box must be (lo, hi) or None, got {box!r}.", "box")
    lo, hi = (arguments.number("box", v) for v in box)
    if not lo < hi:
      raise ConfigError(f"box must be (lo, hi) with lo < hi, got {box!r}.", "box")
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
  init: Any = None  # theta_0, where its training started (None: unknown)


def known_init_target(target: Target, init, linearize: float = 1.0) -> Target:
  """The attacker's view of a model fine-tuned from weights it knows (theta_0 = ``init``).

  Training added ``theta* - theta_0``, a sum of the training samples' gradients along
  the way; that is the reference the KKT sum must reproduce (Loo et al. 2024).  The
  gradients are taken at ``theta_0 + linearize (theta* - theta_0)``: 1 at theta*
  (Haim et al.'s point), 0.5 halfway, where a model that moved little from theta_0
  is best described by one gradient per sample (on LFW fine-tuning victims the truth's
  residual is 5-10x lower there than at theta*).

  Raises:
    ConfigError: ``linearize`` outside [0, 1], or ``init`` of another structure.
  """
  if isinstance(linearize, bool) or not (np.isfinite(linearize) and 0 <= linearize <= 1):
    raise ConfigError(f"linearize must be in [0, 1], got {linearize!r}.", "linearize")
  params = target.params
  init = cast_params(init, jax.tree_util.tree_leaves(params)[0].dtype)
  if jax.tree_util.tree_structure(init) != jax.tree_util.tree_structure(params):
    raise ConfigError("init must have the structure of the victim's parameters.", "init")
  change = jax.tree_util.tree_map(jnp.subtract, params, init)
  at = jax.tree_util.tree_map(lambda a, d: a + linearize * d, init, change)
  return target._replace(params=at, reference=change)


def read_init(path: str, template, *, input_shape=None, input_layout="nchw", stride=1, padding=0):
  """theta_0 from a file: a recon_jax checkpoint (its parameters), a PyTorch state dict
  or a safetensors file (mapped as :func:`import_victim` maps the model), checked
  against the victim's parameters ``template``: the same layers and shapes, finite values.

  Raises:
    CheckpointError naming ``path``.
  """
  from recon_jax.io import checkpoint as ckpt

  where = f"{path} (the initial parameters)"
  if readers.detect_format(path) == "msgpack":
    params, _ = ckpt.load(path)
  else:
    params = importers.load_foreign(
      path, input_shape=input_shape, input_layout=input_layout, stride=stride, padding=padding
    ).params
  ckpt.check_matches(params, template, where)
  ckpt.check_values(params, where, allow_zero=True)
  return jax.tree_util.tree_map(lambda t, a: jnp.asarray(a, t.dtype), template, params)


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
  init_path: str = "",
) -> Victim:
  """A PyTorch or safetensors victim: its weights mapped onto a flax network.

  The architecture is inferred from the tensors (see :mod:`recon_jax.victims.importers`);
  ``cfg.loss`` says how it was trained; its train error and margins on ``ds``
  are computed here, since the file carries no summary.  ``init_path``: the weights
  its training started from (theta_0, same format and layout; :func:`read_init`).
  """
  imp = importers.load_foreign(
    path,
    input_shape=ds.x_train.shape[1:],
    input_layout=input_layout,
    stride=stride,
    padding=padding,
  )
  apply_fn = models.make_apply_fn(imp.module)
  probe = ds.x_train if len(ds.x_train) else np.zeros((1, *ds.x_train.shape[1:]), np.float32)
  out = apply_fn(imp.params, jnp.asarray(probe, jnp.float32))
  want = losses.num_outputs(cfg.loss, ds.num_classes)
  if out.shape[1] != want:
    raise ConfigError(
      f"victim.loss={cfg.loss!r} needs {want} output(s); {path} has {out.shape[1]}.",
      argument="loss",
    )
  summary = {"imported": {"format": imp.format, "arch": imp.arch}}
  if len(ds.x_train):  # how the model does on its training set (none given: a blind attack)
    y = jnp.asarray(ds.y_train)
    margins = np.asarray(losses.margins(cfg.loss, out, y))
    summary.update(
      train_error=float(losses.error_rate(cfg.loss, out, y)),
      loss=float(jnp.mean(losses.per_sample_loss(cfg.loss, out, y))),
      margins=(margins[:, 0] if margins.ndim == 2 else margins).tolist(),
    )
  init = None
  if init_path:
    init = read_init(
      init_path,
      imp.params,
      input_shape=ds.x_train.shape[1:],
      input_layout=input_layout,
      stride=stride,
      padding=padding,
    )
  return Victim(imp.params, apply_fn, int(out.shape[1]), summary, path, init)


def load_or_train_victim(
  cfg: victim.VictimConfig,
  ds: data.Dataset,
  *,
  checkpoint: str = "",
  use_cache: bool = True,
  allow_data_mismatch: bool = False,
  init_checkpoint: str = "",
) -> Victim:
  """theta* for ``cfg`` on ``ds``: from a recon_jax ``checkpoint``, the cache, or trained
  now, with theta_0: from ``init_checkpoint`` when given, else the one stored with the
  victim, else re-created from its recipe (:func:`recon_jax.victims.victim.initial_params`).

  PyTorch and safetensors files go through :func:`import_victim`.
  """
  from recon_jax.io import checkpoint as ckpt

  _, apply_fn = victim.build(cfg, ds)
  if checkpoint:
    params, _, meta = victim.load(checkpoint, cfg, ds)
    victim.check_data(checkpoint, meta, ds, allow_data_mismatch)
    summary, source = meta.get("summary", {}), checkpoint
    init = None if init_checkpoint else ckpt.load_init(checkpoint, params)
  else:
    params, summary, _, init = cache.get_or_train(cfg, ds, use_cache=use_cache)
    source = summary.pop("source")
  if init_checkpoint:
    init = read_init(init_checkpoint, params)
  dtype = jax.tree_util.tree_leaves(params)[0].dtype
  if init is None:
    init = victim.initial_params(cfg, ds, dtype)
  init = cast_params(init, dtype)
  return Victim(params, apply_fn, victim.out_dim(cfg, ds), summary, source, init)
