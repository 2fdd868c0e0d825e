"""Everything a job can fail on before any work: settings, files' headers, memory.

:func:`prepare` (a reconstruction) and :func:`prepare_training` (a victim) read the
config, expand its paths, and raise an error naming the first setting (or file) that
cannot run; nothing is written or trained here.  Each attack adds its own checks
through its spec (:mod:`recon_jax.attacks`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional, Tuple

import jax
import numpy as np

from recon_jax import attacks, data, inits, loop, losses, optim
from recon_jax.errors import ConfigError
from recon_jax.studies.job import (
  RANGE_NAMES,
  Plan,
  _num_classes,
  candidate_labels,
  is_foreign,
  num_candidates,
  plan,
  resolve_problem,
  victim_config,
)
from recon_jax.studies.settings import JobConfig
from recon_jax.victims import models, train, victim
from recon_jax.workdir import expand


def _is_int(v) -> bool:
  return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def _is_num(v) -> bool:
  return not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))


def _finite(v) -> bool:
  return _is_num(v) and bool(np.isfinite(v))


ARCHS = ("mlp", "affine", "one_hidden", "cnn")


ACTIVATIONS = ("relu", "gelu", "softplus", "tanh", "identity", "surrogate_relu")


ADAPTIVE = ("none", "loss", "grad")


def _victim_problem(v: victim.VictimConfig) -> Optional[Tuple[str, str]]:
  """``(field, message)`` for the first field of ``v`` no victim can be built or trained with."""
  ints = {"n_per_class": 1, "epochs": 1, "wd_epochs": 0, "data_seed": 0, "seed": 0}
  if not isinstance(v.dataset, str) or v.dataset.strip().lower() not in data.DATASETS:
    return "dataset", f"{v.dataset!r} is unknown; valid: {', '.join(data.DATASETS)}."
  if v.task not in data.TASKS:
    return "task", f"must be one of {', '.join(data.TASKS)}, got {v.task!r}."
  if v.task == "multiclass" and v.loss != "ce":
    return "task", f"multiclass needs loss=ce (the labels follow the loss), got {v.loss!r}."
  for name, low in ints.items():
    value = getattr(v, name)
    if not _is_int(value) or value < low:
      return name, f"must be an integer >= {low}, got {value!r}."
  if v.arch not in ARCHS:
    return "arch", f"must be one of {', '.join(ARCHS)}, got {v.arch!r}."
  widths = v.widths
  if isinstance(widths, (str, bytes)) or not all(_is_int(w) and w >= 1 for w in widths):
    return "widths", f"must be integers >= 1, got {widths!r}."
  if v.arch in ("mlp", "cnn") and not len(widths):
    return "widths", f"arch={v.arch} needs at least one width."
  if v.bias not in models.BIAS_MODES:
    return "bias", f"must be one of {', '.join(models.BIAS_MODES)}, got {v.bias!r}."
  if v.init not in models.INIT_SCHEMES:
    return "init", f"must be one of {', '.join(models.INIT_SCHEMES)}, got {v.init!r}."
  for name in ("init_std", "first_layer_std"):
    value = getattr(v, name)
    if value is not None and not (_finite(value) and value > 0):
      return name, f"must be a finite number > 0 (or unset), got {value!r}."
  if v.init == "normal" and v.init_std is None:
    return "init_std", "must be set (> 0) for init=normal."
  if not (_finite(v.init_gain) and v.init_gain > 0):
    return "init_gain", f"must be a finite number > 0, got {v.init_gain!r}."
  if v.activation not in ACTIVATIONS:
    return "activation", f"must be one of {', '.join(ACTIVATIONS)}, got {v.activation!r}."
  if v.loss not in losses.LOSSES:
    return "loss", f"must be one of {', '.join(losses.LOSSES)}, got {v.loss!r}."
  if not (_finite(v.lr) and v.lr > 0):
    return "lr", f"must be a finite number > 0, got {v.lr!r}."
  for name in ("weight_decay", "wd", "loss_threshold"):
    value = getattr(v, name)
    if not (_finite(value) and value >= 0):
      return name, f"must be a finite number >= 0, got {value!r}."
  if not (_finite(v.converge_tol) and v.converge_tol >= 0):
    return "converge_tol", f"must be a finite number >= 0 (0: off), got {v.converge_tol!r}."
  if not _is_int(v.converge_maxiter) or v.converge_maxiter < 1:
    return "converge_maxiter", f"must be an integer >= 1, got {v.converge_maxiter!r}."
  if v.converge_tol > 0 and v.loss != "mse" and victim.final_weight_decay(v) <= 0:
    return "converge_tol", (
      f"needs weight decay in the last training phase (weight_decay, or wd with wd_epochs): "
      f"with loss={v.loss} and none the training energy has no stationary point."
    )
  if not (_finite(v.momentum) and 0 <= v.momentum < 1):
    return "momentum", f"must be in [0, 1), got {v.momentum!r}."
  if v.adaptive not in ADAPTIVE:
    return "adaptive", f"must be one of {', '.join(ADAPTIVE)}, got {v.adaptive!r}."
  if v.optimizer not in train.OPTIMIZERS:
    return "optimizer", f"must be one of {', '.join(train.OPTIMIZERS)}, got {v.optimizer!r}."
  if v.optimizer == "adam" and v.momentum:
    return "momentum", "is a setting of optimizer=sgd; Adam keeps its own moments (leave it 0)."
  if v.n_part_per_class is not None and not (
    _is_int(v.n_part_per_class) and v.n_part_per_class >= 0
  ):
    return "n_part_per_class", f"must be an integer >= 0 (or unset), got {v.n_part_per_class!r}."
  if not _is_int(v.pretrain_epochs) or v.pretrain_epochs < 0:
    return "pretrain_epochs", f"must be an integer >= 0 (0: none), got {v.pretrain_epochs!r}."
  if v.batch_size is not None and not (_is_int(v.batch_size) and v.batch_size >= 1):
    return "batch_size", f"must be an integer >= 1 (or unset: full batch), got {v.batch_size!r}."
  if not isinstance(v.subtract_mean, (bool, np.bool_)):
    return "subtract_mean", f"must be True or False, got {v.subtract_mean!r}."
  return None


def validate_victim(v: victim.VictimConfig, checkpoint: str = "") -> None:
  """Raises an error naming the first field of ``v`` that no victim can be built or trained with.

  A :class:`ConfigError` naming ``victim.<field>`` for the user's own settings;
  with ``checkpoint`` (the file the settings were read from) a
  :class:`~recon_jax.checkpoint.CheckpointError` naming that file: its
  metadata is at fault, not a setting.
  """
  found = _victim_problem(v)
  if found is None:
    return
  field, message = found
  if checkpoint:
    from recon_jax.checkpoint import CheckpointError

    raise CheckpointError(f"{checkpoint}: corrupt victim metadata: {field} {message}")
  raise ConfigError(f"victim.{field} {message}", argument=f"victim.{field}")


# PRNGKey takes a seed of at most 32 bits without losing it.
MAX_SEED = 2**32 - 1

# Shapes of one input of every dataset (what load_dataset returns), for estimates made
# before any data is read.


def available_memory() -> Optional[int]:
  """Bytes of memory this machine can give a new allocation now (None: unknown)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  try:
    return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
  except (OSError, ValueError, AttributeError):
    return None


def state_memory(cfg: JobConfig, v: victim.VictimConfig) -> Tuple[int, str]:
  """Bytes of the attack's batched restart state, and how they were counted.

  R x m x prod(input_shape) x (arrays per candidate: x, gradient, optimiser
  slots) x bytes per number: a lower bound of what the run needs.
  """
  task = "multiclass" if v.loss == "ce" else "binary"
  n = int(v.n_per_class) * data.dataset.num_classes(v.dataset.strip().lower(), task)
  m = num_candidates(cfg, n)
  d = int(np.prod(data.INPUT_SHAPES[v.dataset.strip().lower()]))
  arrays = attacks.get(cfg.attack).state_arrays(cfg)
  nbytes = 8 if (cfg.x64 or jax.config.jax_enable_x64) else 4
  r = int(cfg.num_restarts)
  how = (
    f"{r} restarts x {m} candidates x {d} inputs x {arrays} arrays "
    f"({cfg.optimizer}) x {nbytes} bytes"
  )
  return r * m * d * arrays * nbytes, how


def check_memory(cfg: JobConfig, v: victim.VictimConfig) -> None:
  """Refuses a sweep whose restart state cannot fit: the limit or this machine's memory."""
  if v.dataset.strip().lower() not in data.INPUT_SHAPES:
    return
  need, how = state_memory(cfg, v)
  limit_gb = float(cfg.max_memory_gb or 0.0)
  if limit_gb > 0:
    limit, what = int(limit_gb * 2**30), "max_memory_gb limit"
  else:
    limit, what = available_memory(), "memory available on this machine"
  if limit is not None and need > limit:
    raise ConfigError(
      f"num_restarts={cfg.num_restarts} needs at least {need / 2**30:.1f} GiB for the "
      f"restarts' state ({how}), more than the {limit / 2**30:.1f} GiB {what}; use fewer "
      "restarts (or candidates m), or split the sweep over several runs (seed).",
      argument="num_restarts",
    )


def prepare(cfg, requested_victim: Optional[dict] = None, explicit=()) -> Plan:
  """The job's settings (a :class:`JobConfig`, or a mapping of them), paths expanded and
  every setting checked: what can fail before any work.

  Nothing is written or trained here.  ``explicit``: the settings the user set
  (see :func:`validate`); ``requested_victim``: see :func:`victim_config`.  Returns the
  job's :class:`~recon_jax.studies.job.Plan`, which the run takes as it is (its
  ``config``: the settings with their paths expanded).
  """
  cfg = JobConfig.of(cfg)
  cfg = cfg.replace(
    data_dir=expand(cfg.data_dir),
    checkpoint=expand(cfg.checkpoint),
    foreign=dataclasses.replace(cfg.foreign, data_mean=expand(cfg.foreign.data_mean)),
  )
  return validate(cfg, explicit, requested_victim)


def resolve(job, requested_victim: Optional[dict] = None, explicit=()) -> Plan:
  """``job`` as a :class:`~recon_jax.studies.job.Plan`: a Plan taken as it is (resolved
  once, by the caller), settings resolved by :func:`prepare`."""
  return job if isinstance(job, Plan) else prepare(job, requested_victim, explicit)


def prepare_training(cfg) -> victim.VictimConfig:
  """The victim of a training run (``cfg.victim``, ``data_dir``, ``chunk_epochs``,
  ``save_every``), every setting checked and ``data_dir`` expanded; nothing is written."""
  cfg.data_dir = expand(cfg.data_dir)
  for name, low in (("chunk_epochs", 1), ("save_every", 0)):
    if not _is_int(cfg[name]) or cfg[name] < low:
      never = " (0: never)" if low == 0 else ""
      raise ConfigError(f"{name} must be an integer >= {low}{never}, got {cfg[name]!r}.", name)
  check_widths(cfg)
  vcfg = victim.VictimConfig(**{**cfg.victim, "widths": tuple(int(w) for w in cfg.victim.widths)})
  validate_victim(vcfg)
  check_data_dir(vcfg, cfg.data_dir)
  check_data_files(vcfg, cfg.data_dir)
  return vcfg


def validate(cfg, explicit=(), requested_victim: Optional[dict] = None) -> Plan:
  """Raises an error naming the first setting of ``cfg`` (a :class:`JobConfig`, or a
  mapping of settings) that cannot run, before any work; returns the job's
  :class:`~recon_jax.studies.job.Plan` (``requested_victim``: see :func:`victim_config`).

  :class:`ConfigError` names the setting (its ``argument``); a recon_jax
  checkpoint is read (not its data) and its own faults are
  :class:`~recon_jax.checkpoint.CheckpointError` naming the file.  ``explicit``:
  the names of the settings the user set; with ``sweep=paper`` none of the
  ranges may be among them (the paper's ranges would silently replace it).
  """
  cfg = JobConfig.of(cfg)
  named = [n for n in RANGE_NAMES if n in explicit]
  if cfg.sweep == "paper" and named:
    raise ConfigError(
      f"sweep=paper draws {', '.join(RANGE_NAMES)} from Haim et al.'s ranges (App. B), "
      f"which replace {named[0]}={getattr(cfg, named[0])!r}; drop that setting or use "
      "sweep=random.",
      "sweep",
    )
  if not _is_int(cfg.save_every) or cfg.save_every < 0:
    raise ConfigError(f"save_every must be >= 0 (0: never), got {cfg.save_every}.", "save_every")
  spec = attacks.get(cfg.attack)
  for name in ("num_restarts", "steps", "chunk_steps"):
    value = getattr(cfg, name)
    if not _is_int(value) or value <= 0:
      raise ConfigError(f"{name} must be an integer > 0, got {value!r}.", name)
  if not _is_int(cfg.refine_steps) or cfg.refine_steps < 0:
    raise ConfigError(
      f"refine_steps must be an integer >= 0, got {cfg.refine_steps!r}.", "refine_steps"
    )
  if cfg.refine_steps and "alpha" not in spec.hparams:
    raise ConfigError(
      f"refine_steps sharpens the surrogate alpha, which attack={cfg.attack} does not use.",
      "refine_steps",
    )
  if not _is_int(cfg.m) or cfg.m < 0:
    raise ConfigError(f"m must be >= 0 (0: m_per_sample x n), got {cfg.m}.", "m")
  if not _is_int(cfg.m_per_sample) or cfg.m_per_sample < 1:
    raise ConfigError(
      f"m_per_sample must be an integer >= 1, got {cfg.m_per_sample!r}.", "m_per_sample"
    )
  if not _is_int(cfg.seed) or not 0 <= cfg.seed <= MAX_SEED:
    raise ConfigError(f"seed must be an integer in [0, {MAX_SEED}], got {cfg.seed!r}.", "seed")
  cap = cfg.identify_stability_candidates
  if not _is_int(cap) or cap < 0:
    raise ConfigError(
      f"identify_stability_candidates must be an integer >= 0 (0: no stability score), "
      f"got {cap!r}.",
      "identify_stability_candidates",
    )
  if cfg.foreign.data_mean and not (cfg.checkpoint and is_foreign(cfg.checkpoint)):
    raise ConfigError(
      "foreign.data_mean is the training mean of a PyTorch or safetensors checkpoint; "
      "without such a checkpoint it would be ignored (a recon_jax victim records its own).",
      "foreign.data_mean",
    )
  checkpoint = cfg.checkpoint or ""
  check_widths(cfg)
  vcfg = victim_config(cfg, requested_victim)
  own = bool(checkpoint) and not is_foreign(checkpoint)
  validate_victim(vcfg, checkpoint if own else "")
  if own:
    check_checkpoint_shapes(checkpoint, vcfg)
  problem = resolve_problem(cfg.problem, vcfg.loss)
  if spec.direct is None:
    if problem == "multiclass" and vcfg.loss != "ce":
      raise ConfigError(
        f"problem=multiclass needs a victim trained with loss=ce (one output "
        f"per class); this victim was trained with loss={vcfg.loss}.",
        "problem",
      )
    if problem == "binary" and vcfg.loss == "ce":
      raise ConfigError(
        "problem=binary needs a one-output victim; this one was trained with "
        "loss=ce (use problem=multiclass or general).",
        "problem",
      )
    if cfg.m:
      candidate_labels(problem, int(cfg.m), _num_classes(vcfg))  # m even, or a multiple of C
  foreign = bool(checkpoint) and not own
  spec.check(cfg, attacks.Setup(problem, vcfg, foreign))
  check_unread_settings(cfg, spec)
  check_known_init(cfg, foreign)
  if foreign:
    check_foreign(cfg, vcfg)
  elif cfg.init_checkpoint:
    check_init_file(cfg, vcfg)
  if cfg.batching not in loop.BATCHINGS:
    raise ConfigError(
      f"batching must be one of {loop.BATCHINGS}, got {cfg.batching!r}.", "batching"
    )
  if cfg.init not in inits.INIT_SCHEMES:
    raise ConfigError(f"init must be one of {inits.INIT_SCHEMES}, got {cfg.init!r}.", "init")
  if cfg.optimizer not in optim.OPTIMIZERS:
    raise ConfigError(
      f"optimizer must be one of {optim.OPTIMIZERS}, got {cfg.optimizer!r}.", "optimizer"
    )
  if cfg.normalize not in ("mean", "sum"):
    raise ConfigError(f"normalize must be mean or sum, got {cfg.normalize!r}.", "normalize")
  for name in ("w_lam", "w_prior"):
    value = getattr(cfg, name)
    if not (_finite(value) and value >= 0):
      raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}.", name)
  thr = cfg.ssim_threshold
  if thr is not None and not (_finite(thr) and 0 < thr <= 1):
    raise ConfigError(
      f"ssim_threshold must be in (0, 1] (SSIM is at most 1), got {thr!r}.", "ssim_threshold"
    )
  check_data_dir(vcfg, cfg.data_dir)
  check_data_files(vcfg, cfg.data_dir)
  limit = cfg.max_memory_gb
  if not (_finite(limit) and limit >= 0):
    raise ConfigError(
      f"max_memory_gb must be a finite number >= 0 (0: this machine's memory), got {limit!r}.",
      "max_memory_gb",
    )
  if spec.direct is None:
    check_memory(cfg, vcfg)  # first: the sweep's draws below are R long
  return plan(cfg, vcfg)  # bad ranges or refine_* fail here, before training


def check_unread_settings(cfg: JobConfig, spec) -> None:
  """Refuses a setting that only another attack reads, away from its default: it would
  change nothing, and a run that silently ignores it misleads."""
  defaults = {f.name: f.default for f in dataclasses.fields(JobConfig)}
  for other in attacks.specs().values():
    for name in other.settings:
      if name in spec.settings:
        continue
      if getattr(cfg, name) != defaults[name]:
        raise ConfigError(
          f"{name} is a setting of attack={other.name}; attack={spec.name} does not read it "
          f"(leave it at {defaults[name]!r}).",
          name,
        )


def check_known_init(cfg: JobConfig, foreign: bool) -> None:
  """Refuses the known-theta_0 settings where they cannot run or would change nothing."""
  s = cfg.linearize
  if not (_finite(s) and 0 <= s <= 1):
    raise ConfigError(
      f"linearize must be a number in [0, 1] (a point between theta_0 and theta*), got {s!r}.",
      "linearize",
    )
  if not isinstance(cfg.known_init, (bool, np.bool_)):
    raise ConfigError(f"known_init must be True or False, got {cfg.known_init!r}.", "known_init")
  if not cfg.known_init:
    for name, unset in (("linearize", 1.0), ("init_checkpoint", "")):
      if getattr(cfg, name) != unset:
        raise ConfigError(
          f"{name} is a setting of known_init=True (the attacker knows theta_0); without it "
          f"it would change nothing (leave it at {unset!r}).",
          name,
        )
  elif foreign and not cfg.init_checkpoint:
    raise ConfigError(
      f"known_init needs theta_0 of the imported model {cfg.checkpoint}: pass the weights its "
      "training started from as init_checkpoint (same format).",
      "init_checkpoint",
    )
  if cfg.init_checkpoint and not os.path.isfile(cfg.init_checkpoint):
    from recon_jax.checkpoint import CheckpointError

    raise CheckpointError(f"{cfg.init_checkpoint}: initial-parameters file not found.")


def check_init_file(cfg: JobConfig, v: victim.VictimConfig) -> None:
  """Reads ``init_checkpoint`` as the run will and matches it to the victim's network
  (layers, shapes, finite values): CheckpointError naming the file, before any work."""
  from recon_jax.victims import loading

  name = v.dataset.strip().lower()
  if name not in data.INPUT_SHAPES:
    return
  shapes_only = data.Dataset(
    **{**dict.fromkeys(data.Dataset._fields), "num_classes": _num_classes(v)}
  )
  module, _ = victim.build(v, shapes_only)
  template = jax.eval_shape(
    lambda: models.init_params(module, jax.random.PRNGKey(0), data.INPUT_SHAPES[name])
  )
  loading.read_init(cfg.init_checkpoint, template)


def check_widths(cfg) -> None:
  """Refuses a ``victim.widths`` setting that is not a list of integers >= 1 (e.g. ``64,abc``)."""
  widths = cfg.victim.widths
  if isinstance(widths, (str, bytes)) or not all(_is_int(w) and w >= 1 for w in widths):
    raise ConfigError(
      f"victim.widths must be integers >= 1, e.g. 256,256, got {widths!r}.", "victim.widths"
    )


def check_checkpoint_shapes(path: str, v: victim.VictimConfig) -> None:
  """Refuses a recon_jax checkpoint whose parameters do not fit the network its metadata names.

  Checked from shapes alone (no data is read): CheckpointError naming the file
  and the first parameter that differs.
  """
  from recon_jax import checkpoint as ckpt

  name = v.dataset.strip().lower()
  if name not in data.INPUT_SHAPES:
    return
  params, _ = ckpt.load(path)
  shapes_only = data.Dataset(
    **{**dict.fromkeys(data.Dataset._fields), "num_classes": _num_classes(v)}
  )  # all victim.build reads
  module, _ = victim.build(v, shapes_only)
  template = jax.eval_shape(
    lambda: models.init_params(module, jax.random.PRNGKey(0), data.INPUT_SHAPES[name])
  )
  ckpt.check_matches(params, template, path)


def check_data_dir(v: victim.VictimConfig, data_dir: Optional[str]) -> None:
  """Refuses a file dataset (mnist, cifar10, cifar100) without an existing ``data_dir``.

  Only the folder is checked (cheap); its files are read, and checked, with the data.
  """
  name = v.dataset.strip().lower() if isinstance(v.dataset, str) else v.dataset
  if name in data.FILE_DATASETS:
    data.files.require_dir(name, data_dir or None, data.dataset.SOURCES[name].files)


def check_foreign(cfg: JobConfig, v: victim.VictimConfig) -> None:
  """Reads a PyTorch or safetensors victim, and its ``foreign.data_mean``, as the run will:
  a file the run cannot use is refused here, before the workdir is touched.

  Errors name the file (CheckpointError) or the ``foreign.*`` setting (ConfigError).
  """
  from recon_jax.victims import importers

  name = v.dataset.strip().lower()
  shape = data.INPUT_SHAPES.get(name)
  opts = cfg.foreign
  try:
    imp = importers.load_foreign(
      cfg.checkpoint,
      input_shape=shape,
      input_layout=opts.input_layout,
      stride=opts.stride,
      padding=opts.padding,
    )
    if opts.data_mean and shape is not None and len(shape) == 3:
      importers.load_data_mean(opts.data_mean, shape)
  except ConfigError as e:
    if e.argument in ("input_layout", "stride", "padding", "data_mean"):
      e.argument = f"foreign.{e.argument}"
    raise
  if shape is None:
    return
  out = models.make_apply_fn(imp.module)(imp.params, np.zeros((1, *shape), np.float32))
  want = losses.num_outputs(v.loss, _num_classes(v))
  if out.shape[1] != want:
    raise ConfigError(
      f"victim.loss={v.loss!r} needs {want} output(s); {cfg.checkpoint} has {out.shape[1]}.",
      "victim.loss",
    )
  if cfg.init_checkpoint:
    from recon_jax.victims import loading

    loading.read_init(
      cfg.init_checkpoint,
      imp.params,
      input_shape=shape,
      input_layout=opts.input_layout,
      stride=opts.stride,
      padding=opts.padding,
    )


def check_data_files(v: victim.VictimConfig, data_dir: Optional[str]) -> None:
  """Reads a file dataset (MNIST, CIFAR) as the run will, so that a truncated, corrupt or
  foreign file is refused before the workdir is touched (the error names the file)."""
  name = v.dataset.strip().lower() if isinstance(v.dataset, str) else v.dataset
  if name in data.FILE_DATASETS:
    victim.load_data(v, data_dir or None)
