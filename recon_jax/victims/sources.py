"""A victim's files read once, and the :class:`Victim` an attack runs on made from them.

A job reads its victim's files once, before any work: :func:`open_checkpoint` (a recon_jax
checkpoint, whose recipe the rest of the job is checked against) and :func:`read` (the
images, a PyTorch or safetensors model, theta_0) give a :class:`Source`, and
:func:`victim_of` turns it into a :class:`Victim` (its parameters, ``apply_fn``, training
summary and theta_0) without reading a file again: an imported model
(:mod:`recon_jax.victims.foreign`), a checkpoint's parameters, or the recipe's victim from
the cache or trained now (:mod:`recon_jax.victims.trained`).  :func:`load_or_train_victim`
and :func:`import_victim` do both for a caller with its images in hand;
:mod:`recon_jax.victims.targets` turns the parameters into what the attacker sees.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data
from recon_jax.core import losses
from recon_jax.data import user
from recon_jax.errors import ConfigError
from recon_jax.eval import membership
from recon_jax.io import checkpoint as ckpt
from recon_jax.types import float_dtype
from recon_jax.victims import cache, foreign, models, recipe, state_dicts, targets, trained
from recon_jax.victims.recipe import VictimConfig


class Victim(NamedTuple):
  """A victim ready to attack: theta*, how to apply it, and where it came from (trained
  here, the cache, a checkpoint or an imported model; :func:`victim_of` makes one)."""

  params: Any  # theta* (flax variable dict)
  apply_fn: Callable  # apply_fn(params, x, act=None) -> [n, C]
  num_outputs: int  # C, the width of the output layer
  summary: dict  # training summary (loss, errors, margins, ...)
  source: str  # 'trained', 'cache' or the checkpoint path
  init: Any = None  # theta_0, where its training started (None: unknown)


def read_init(path: str, template, *, input_shape=None, input_layout="nchw", stride=1, padding=0):
  """theta_0 from a file: a recon_jax checkpoint (its parameters), a PyTorch state dict
  or a safetensors file (mapped as :func:`import_victim` maps the model), checked
  against the victim's parameters ``template``: the same layers and shapes, finite values.

  Raises:
    CheckpointError naming ``path``.
  """
  where = f"{path} (the initial parameters)"
  state_dicts.require_file(path, "initial parameters")
  if state_dicts.detect_format(path) == "msgpack":
    params, _ = ckpt.load(path)
  else:
    params = foreign.load_foreign(
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


class Stored(NamedTuple):
  """A recon_jax checkpoint read once (:func:`open_checkpoint`)."""

  path: str
  params: Any  # theta*, as stored
  meta: dict  # its metadata (recipe, data fingerprint, training summary)
  init: Any  # theta_0 stored with it, not yet checked (None: none stored)
  recipe: VictimConfig  # the recipe it was trained with


def open_checkpoint(path: str, requested: Optional[dict] = None) -> Stored:
  """A recon_jax checkpoint read once, its recipe checked (CheckpointError naming the file).

  ``requested``: victim settings the caller set explicitly (``{field: value}``); each must
  agree with the recipe the checkpoint was trained with (ConfigError naming
  ``victim.<field>``), which is the one used.
  """
  params, meta, init = ckpt.read(path)
  stored = trained.recipe_of(meta, path)
  for field, value in (requested or {}).items():
    want = tuple(value) if field == "widths" else value
    if getattr(stored, field) != want:
      raise ConfigError(
        f"victim.{field}={value} contradicts the checkpoint {path}, "
        f"which was trained with {field}={getattr(stored, field)}.",
        argument=f"victim.{field}",
      )
  recipe.validate(stored, path)
  return Stored(path, params, meta, init, stored)


def resolve(
  checkpoint: str, settings: VictimConfig, requested: Optional[dict] = None, given=()
) -> Tuple[VictimConfig, bool, Optional[Stored]]:
  """A job's victim before its files are read: ``(recipe, foreign, stored)``.

  A recon_jax ``checkpoint`` is read once (``stored``, :func:`open_checkpoint`: its own
  recipe is the one used, and ``requested`` must agree with it).  Otherwise the recipe is
  the ``settings`` (widths as integers), checked; with a PyTorch or safetensors
  ``checkpoint`` (``foreign``), used as it is, ``given`` (the victim fields the user set)
  may not say how to build or train it (:func:`recon_jax.victims.recipe.check_imported`).
  """
  is_foreign = bool(checkpoint) and state_dicts.is_foreign(checkpoint)
  if checkpoint and not is_foreign:
    stored = open_checkpoint(checkpoint, requested)
    return stored.recipe, False, stored
  v = recipe.of_settings(settings)
  recipe.validate(v)
  if is_foreign:
    recipe.check_imported(v, checkpoint, given)
  return v, is_foreign, None


class Imports(NamedTuple):
  """How a PyTorch or safetensors model's tensors are read
  (:func:`recon_jax.victims.foreign.from_state_dict`)."""

  input_layout: str = "nchw"
  stride: Any = 1
  padding: Any = 0
  data_mean: str = ""  # a .npy of the per-pixel mean the model was trained with ("": none)


class UserImages(NamedTuple):
  """A user's own images of an imported model (the formats of :mod:`recon_jax.data.user`)."""

  train: str  # its training images ("": none, a blind attack)
  heldout: str  # held-out images of the same distribution
  binary: bool  # labels as two classes
  size: str = ""  # 'HxW' to resize to ("": the files' own size)


class Source(NamedTuple):
  """A victim's files read and checked once (:func:`read`): what :func:`victim_of` needs."""

  recipe: VictimConfig  # the victim's recipe (a checkpoint's own)
  dataset: data.Dataset  # the images, in the model's input space
  path: str = ""  # the weights' file ("": trained here, or cached)
  stored: Optional[Stored] = None  # a recon_jax checkpoint
  imported: Optional[foreign.Imported] = None  # a PyTorch or safetensors model, mapped
  init: Any = None  # theta_0 from its own file, checked against the victim's layers
  heldout_removed: Optional[str] = None  # which held-out images were left out, and why


def read(
  cfg: VictimConfig,
  *,
  path: str = "",
  stored: Optional[Stored] = None,
  init_path: str = "",
  data_dir: Optional[str] = None,
  imports: Optional[Imports] = None,
  images: Optional[UserImages] = None,
  dataset: Optional[data.Dataset] = None,
  allow_data_mismatch: bool = False,
  widths: Optional[tuple] = None,
) -> Source:
  """Every file of the victim ``cfg`` read once and checked as the run uses it: its data
  (``data_dir``, or the user's ``images``; ``dataset``: images in hand), its weights (a
  recon_jax checkpoint ``stored``, or a PyTorch / safetensors ``path``, read with
  ``imports``; ``widths``: the hidden widths the user asked for, which such a model must
  have) and theta_0 (``init_path``: a file in either format).  Nothing is trained.

  Raises:
    CheckpointError, DataError naming the file; ConfigError naming the argument
    (``input_layout``, ``stride``, ``padding``, ``data_mean``, ``victim.loss``).
  """
  if path and stored is None:
    imports = imports or Imports()
    return _read_imported(cfg, path, init_path, data_dir, imports, images, dataset, widths)
  ds = trained.load_data(cfg, data_dir) if dataset is None else dataset
  if stored is None:
    init = read_init(init_path, trained.param_shapes(cfg, ds)) if init_path else None
    return Source(cfg, ds, init=init)
  kept = None if init_path else stored.init  # theta_0 stored with it, unless another is given
  init = trained.check_stored(
    stored.path, stored.params, stored.meta, kept, cfg, ds, allow_data_mismatch
  )
  if init_path:
    init = read_init(init_path, stored.params)
  apply_fn = trained.build(cfg, ds)[1]
  check_outputs(apply_fn, stored.params, ds, stored.path)
  if init_path:
    check_outputs(apply_fn, init, ds, f"{init_path} (the initial parameters)")
  return Source(cfg, ds, stored.path, stored, init=init)


def _read_imported(cfg, path, init_path, data_dir, imports, images, dataset, widths) -> Source:
  """:func:`read` of a PyTorch or safetensors model: the file read once, its first layer
  fitting the user's images, the images shifted by its training mean, its hidden layers
  ``widths`` wide (None: any)."""
  fmt, sd = state_dicts.read(path)
  if dataset is not None:
    ds = dataset
  elif images is not None:
    first = foreign.first_layer_of(sd, path)
    size = user.parse_size(images.size)
    ds = user.user_dataset(
      images.train or None,
      images.heldout,
      binary=images.binary,
      first_layer=first,
      size=size,
      first_outputs=foreign.first_layer_outputs(sd, path),
      model=path,
    )
  else:  # pixels in: the model's own training mean (or none) is subtracted below
    ds = trained.load_data(dataclasses.replace(cfg, subtract_mean=False), data_dir)
  if imports.data_mean:
    ds = shift_dataset(ds, foreign.load_data_mean(imports.data_mean, ds.x_train.shape[1:]))
  layout = dict(input_layout=imports.input_layout, stride=imports.stride, padding=imports.padding)
  shape = ds.x_train.shape[1:]
  imp = foreign.from_state_dict(sd, input_shape=shape, source=path, format=fmt, **layout)
  found = getattr(imp.module, "widths", None)
  if widths is not None and found is not None and tuple(widths) != tuple(found):
    raise ConfigError(
      f"victim.widths={','.join(map(str, widths))} contradicts the imported model "
      f"{path}, whose hidden widths are {','.join(map(str, found))} (an imported "
      "model is used as it is; leave victim.widths out).",
      "victim.widths",
      (f"victim.widths={','.join(map(str, widths))}", "victim.widths"),
    )
  out = models.make_apply_fn(imp.module)(imp.params, np.zeros((1, *shape), np.float32))
  want = losses.num_outputs(cfg.loss, ds.num_classes)
  if out.shape[1] != want:
    raise ConfigError(
      f"victim.loss={cfg.loss!r} needs {want} output(s); {path} has {out.shape[1]}.",
      argument="victim.loss",
    )
  init = read_init(init_path, imp.params, input_shape=shape, **layout) if init_path else None
  apply_fn = models.make_apply_fn(imp.module)
  check_outputs(apply_fn, imp.params, ds, path)
  if init is not None:
    check_outputs(apply_fn, init, ds, f"{init_path} (the initial parameters)")
  removed = None
  if images is not None and images.train and images.heldout:
    refuse_copies(ds, images.heldout)
    ds, removed = drop_degenerate(ds, images.heldout)
  return Source(cfg, ds, path, imported=imp, init=init, heldout_removed=removed)


# A held-out image this flat (standard deviation of its pixels, on the 0-1 scale) carries no
# image: a blank.  One grey level of an 8-bit image.
FLAT = 1.0 / 255


def drop_degenerate(ds: data.Dataset, heldout: str):
  """``(ds, why)``: the held-out images less the blank ones (pixels within :data:`FLAT` of
  constant) and the copies of an earlier held-out image (root-mean-square difference of at
  most 2 grey levels; the first copy kept), with one sentence saying how many went from
  ``heldout`` and why (None: none).  Copies and blanks make the held-out set smaller than it
  looks and its scores one block of ties: a membership test's rates and p-value would count
  one image many times."""
  x = np.asarray(ds.x_test)
  if not len(x):
    return ds, None
  flat = x.reshape(len(x), -1).std(axis=1) <= FLAT
  copy = np.zeros(len(x), bool)
  for i, j in membership.near_duplicates(x, x, rms=2.0 / 255):
    if i < j and not flat[i]:
      copy[j] = True
  copy &= ~flat
  gone = flat | copy
  if not gone.any():
    return ds, None
  said = [f"{int(flat.sum())} blank" if flat.any() else "", f"{int(copy.sum())} copies of another"]
  why = " and ".join(w for w in said if w and not w.startswith("0 "))
  keep = ~gone
  ds = ds._replace(x_test=ds.x_test[keep], y_test=ds.y_test[keep])
  return ds, (
    f"heldout: {int(gone.sum())} of the {len(x)} images of {heldout} were left out ({why} "
    f"held-out image): they would count one image many times in the membership tests and "
    f"the held-out baseline; {int(keep.sum())} remain"
  )


def refuse_copies(ds: data.Dataset, heldout: str) -> None:
  """Refuses held-out images that are copies of training images (root-mean-square pixel
  difference of at most 2 grey levels): the baseline and the membership test need images
  the model never saw, and a copy would make a leak look like chance.  ConfigError naming
  ``heldout``."""
  pairs = membership.near_duplicates(ds.x_train, ds.x_test, rms=2.0 / 255)
  if pairs:
    shown = ", ".join(f"held-out #{j} = training #{i}" for i, j in pairs[:3])
    more = f" and {len(pairs) - 3} more" if len(pairs) > 3 else ""
    copies = len({j for _, j in pairs})
    raise ConfigError(
      f"heldout: {copies} of its {len(ds.x_test)} images are copies of training images "
      f"({shown}{more}, in the order the files are read): held-out images must be images "
      f"the model never saw; remove them from {heldout}.",
      "heldout",
    )


# The images a model's outputs are checked on (:func:`check_outputs`): the first of each split.
OUTPUT_CHECK_IMAGES = 256


def check_outputs(apply_fn, params, ds: data.Dataset, path: str) -> None:
  """Refuses weights whose outputs are not finite in the run's precision on the images in
  hand (the first :data:`OUTPUT_CHECK_IMAGES` training and held-out images; a zero image
  when there are none): weights that large overflow every restart of an attack, which
  would run to its end and then report that all diverged.

  Raises:
    CheckpointError naming ``path``.
  """
  dtype = float_dtype()
  held = ds.x_test[:OUTPUT_CHECK_IMAGES] if len(ds.x_test) else ds.x_test
  x = np.concatenate([np.asarray(ds.x_train[:OUTPUT_CHECK_IMAGES]), np.asarray(held)])
  if not len(x):
    x = np.zeros((1, *ds.x_train.shape[1:]))
  p = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), params)
  out = np.asarray(apply_fn(p, jnp.asarray(x, dtype)))
  bad = ~np.all(np.isfinite(out.reshape(len(x), -1)), axis=1)
  if not bad.any():
    return
  big = max(
    float(np.max(np.abs(np.asarray(a)), initial=0)) for a in jax.tree_util.tree_leaves(params)
  )
  more = "" if dtype == jnp.float64 else "; rescale them, or run in float64 (x64=True)"
  raise ckpt.CheckpointError(
    f"{path}: the model's outputs overflow {np.dtype(dtype).name} on {int(bad.sum())} of "
    f"{len(x)} images (weights up to {big:.3g} in magnitude): every restart of an attack "
    f"would diverge{more}."
  )


def victim_of(src: Source, *, use_cache: bool = True) -> Victim:
  """The :class:`Victim` of files read by :func:`read`, none read again: an imported model
  with its train error and margins on the images, a checkpoint's parameters, or (no
  weights given) the victim from the cache or trained now.  theta_0: the init file's, else
  the one stored with the victim, else re-created from its recipe."""
  cfg, ds = src.recipe, src.dataset
  if src.imported is not None:
    return _imported(src.imported, cfg, ds, src.path, src.init)
  if src.stored is not None:
    params = jax.tree_util.tree_map(jnp.asarray, src.stored.params)
    summary, source, init = src.stored.meta.get("summary", {}), src.path, src.init
  else:
    params, summary, _, cached_init = cache.get_or_train(cfg, ds, use_cache=use_cache)
    source = summary.pop("source")
    init = cached_init if src.init is None else src.init
  dtype = jax.tree_util.tree_leaves(params)[0].dtype
  if init is None:
    init = trained.initial_params(cfg, ds, dtype)
  _, apply_fn = trained.build(cfg, ds)
  return Victim(
    params, apply_fn, trained.out_dim(cfg, ds), summary, source, targets.cast_params(init, dtype)
  )


def _imported(imp: foreign.Imported, cfg, ds, path: str, init) -> Victim:
  """An imported model as a :class:`Victim`: how it does on its training images ``ds``
  (the file carries no summary)."""
  apply_fn = models.make_apply_fn(imp.module)
  summary = {"imported": {"format": imp.format, "arch": imp.arch}}
  if len(ds.x_train):  # how the model does on its training set (none given: a blind attack)
    out = apply_fn(imp.params, jnp.asarray(ds.x_train, jnp.float32))
    y = jnp.asarray(ds.y_train)
    margins = np.asarray(losses.margins(cfg.loss, out, y))
    summary.update(
      train_error=float(losses.error_rate(cfg.loss, out, y)),
      loss=float(jnp.mean(losses.per_sample_loss(cfg.loss, out, y))),
      margins=(margins[:, 0] if margins.ndim == 2 else margins).tolist(),
    )
  num_outputs = losses.num_outputs(cfg.loss, ds.num_classes)
  return Victim(imp.params, apply_fn, num_outputs, summary, path, init)


def import_victim(
  path: str,
  cfg: VictimConfig,
  ds: data.Dataset,
  *,
  input_layout: str = "nchw",
  stride=1,
  padding=0,
  init_path: str = "",
) -> Victim:
  """A PyTorch or safetensors victim: its weights mapped onto a flax network.

  The architecture is inferred from the tensors (see :mod:`recon_jax.victims.foreign`);
  ``cfg.loss`` says how it was trained; its train error and margins on ``ds``
  are computed here, since the file carries no summary.  ``init_path``: the weights
  its training started from (theta_0, same format and layout; :func:`read_init`).
  """
  imports = Imports(input_layout, stride, padding)
  return victim_of(read(cfg, path=path, init_path=init_path, imports=imports, dataset=ds))


def load_or_train_victim(
  cfg: VictimConfig,
  ds: data.Dataset,
  *,
  checkpoint: str = "",
  use_cache: bool = True,
  allow_data_mismatch: bool = False,
  init_checkpoint: str = "",
) -> Victim:
  """theta* for ``cfg`` on ``ds``: from a recon_jax ``checkpoint``, the cache, or trained
  now, with theta_0: from ``init_checkpoint`` when given, else the one stored with the
  victim, else re-created from its recipe (:func:`recon_jax.victims.trained.initial_params`).

  PyTorch and safetensors files go through :func:`import_victim`.
  """
  stored = open_checkpoint(checkpoint) if checkpoint else None
  src = read(
    cfg,
    stored=stored,
    init_path=init_checkpoint,
    dataset=ds,
    allow_data_mismatch=allow_data_mismatch,
  )
  return victim_of(src, use_cache=use_cache)
