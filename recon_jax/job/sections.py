"""The sections of the main job's settings that every attack shares, by stage: what the
attacker knows (:class:`Threat`), how the candidates are searched for (:class:`Search`), how
they are scored (:class:`Evaluation`) and how the run uses the machine (:class:`Runtime`).

Each is a frozen dataclass of ``setting(default, meaning, rule)`` fields that checks itself
where it is built; :mod:`recon_jax.job.settings` holds them in :class:`JobConfig` beside the
victim's recipe and each attack's options, and builds the job's tables from them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from recon_jax.core import rules
from recon_jax.core.rules import INT32_MAX, Rule, setting
from recon_jax.errors import ConfigError


def _choices(module: str, name: str):
  """The valid values of a setting, read from the module that defines them when checked."""

  def get():
    import importlib

    return tuple(getattr(importlib.import_module(module), name))

  return get


_B, _P = Rule("bool"), Rule("path")


def _refuse_unknown(cls, given, prefix: str = "") -> None:
  """Raises ConfigError naming the first of ``given``'s names that ``cls`` has no field for."""
  unknown = sorted(set(given) - {f.name for f in dataclasses.fields(cls)})
  if unknown:
    more = f" (nor {', '.join(prefix + u for u in unknown[1:])})" if unknown[1:] else ""
    raise ConfigError(
      f"{prefix + unknown[0]} is not a setting{more}; the settings are the fields of "
      f"{cls.__name__}.",
      prefix + unknown[0],
    )


class _Section:
  """A section of the main job's settings: a name it has no field for, or a value that
  breaks a field's rule, is refused where the section is built, named as the job names it
  (``prefix``)."""

  prefix = ""

  def __new__(cls, *args, **given):
    _refuse_unknown(cls, given, cls.prefix)
    return super().__new__(cls)

  def __post_init__(self):
    rules.check_declared(self, type(self), self.prefix)


@dataclasses.dataclass(frozen=True)
class Threat(_Section):
  """What the attacker knows (the main job's ``threat`` section): the model (theta*, a file,
  or '' for the victim trained here), theta_0 and where it comes from, the images the model
  was trained on and held-out ones, and how a PyTorch or safetensors model reads its input.
  The audit's settings are these, at its top."""

  prefix = "threat."  # where the job holds it (its errors' names)

  model: str = setting(
    "",
    "attack this model instead of training one: recon_jax's victim.msgpack, a PyTorch state "
    "dict (.pt/.pth) or safetensors, weights [out, in]",
    _P,
  )
  known_init: bool = setting(
    False,
    "the attacker knows theta_0, the weights training started from (a public checkpoint or "
    "seed), and fits theta* - theta_0",
    Rule("bool", feature="known_init_attack"),
  )
  theta0: str = setting(
    "",
    "known_init: theta_0 from this file (the model's formats; '' the victim's own: stored "
    "with it, or re-created from its recipe); not init, where the search's candidates start",
    Rule("path", feature="known_init"),
  )
  train: str = setting(
    "",
    "the model's own training images: an ImageFolder folder (one subfolder per class), an "
    ".npz (x, y) or MNIST/CIFAR files ('' the victim's dataset draw)",
    _P,
  )
  heldout: str = setting(
    "",
    "held-out images of the same distribution, same formats (needed with train)",
    _P,
  )
  image_size: str = setting(
    "",
    "HxW: resize the train/heldout images to this ('' as they are)",
    Rule("str", feature="user_data"),
  )
  allow_data_mismatch: bool = setting(
    False,
    "attack a recon_jax model trained on other images (warns)",
    Rule("bool", feature="own_checkpoint"),
  )
  data_mean: str = setting(
    "",
    ".npy per-pixel mean a PyTorch/safetensors model was trained with ('' none)",
    Rule("path", feature="foreign"),
  )
  input_layout: str = setting(
    "nchw",
    "how a PyTorch/safetensors model flattened conv features (PyTorch: nchw)",
    Rule("str", choices=("nchw", "nhwc"), feature="foreign"),
  )
  stride: int = setting(
    1,
    "a PyTorch/safetensors model's conv stride (PyTorch's default)",
    Rule("int", low=1, high=1024, feature="foreign"),
  )
  padding: int = setting(
    0,
    "a PyTorch/safetensors model's conv padding (PyTorch's default)",
    Rule("int", low=0, high=1024, feature="foreign"),
  )


@dataclasses.dataclass(frozen=True)
class Search(_Section):
  """How the candidates are searched for (the main job's ``search`` section): the restarts
  and their steps, the candidates and where they start, the hyperparameters' ranges (one
  draw per restart), the refinement and annealing stages, the seed, the batching."""

  prefix = "search."  # where the job holds it (its errors' names)

  seed: int = setting(
    0,
    "seed of the hyperparameter draws and starting points",
    Rule("int", low=0, high=2**32 - 1),
  )
  num_restarts: int = setting(
    16,
    "restarts R, batched in one compiled program",
    Rule("int", low=1, feature="search", explicit_only=True),
  )
  steps: int = setting(
    4000,
    "optimisation steps per restart",
    Rule("int", low=1, high=INT32_MAX, feature="search", explicit_only=True),
  )
  chunk_steps: int = setting(
    1000,
    "steps per compiled chunk, between progress lines and saves",
    Rule("int", low=1, high=INT32_MAX, feature="search", explicit_only=True),
  )
  m: int = setting(
    0,
    "candidates per restart (0: m_per_sample x n)",
    Rule("int", low=0, high=INT32_MAX, note="0: m_per_sample x n"),
  )
  m_per_sample: int = setting(
    2,
    "candidates per training sample when m = 0 (Haim et al.: 2)",
    Rule("int", low=1, high=INT32_MAX, feature="search", explicit_only=True),
  )
  init: str = setting(
    "gaussian",
    "x-init: gaussian | uniform | ground_truth | partition (mix: the init study only)",
    Rule(
      "str",
      choices=_choices("recon_jax.engine.inits", "INIT_SCHEMES"),
      feature="search",
      explicit_only=True,
    ),
  )
  sweep: str = setting(
    "random",
    "random (the ranges below) | paper (Haim et al. App. B ranges)",
    Rule("str", choices=("random", "paper"), feature="search", explicit_only=True),
  )
  lr_x: str = setting(
    "0.03:0.6:log",
    "candidates' learning rate (range: one draw per restart)",
    Rule("range", feature="first_order"),
  )
  lr_lam: str = setting(
    "1e-4:1e-2:log",
    "multipliers' (lambda) learning rate",
    Rule("range", feature="lr_lam"),
  )
  sigma_x: str = setting(
    "1e-4:1e-2:log",
    "std of the candidates' Gaussian starting points",
    Rule("range", feature="search"),
  )
  alpha: str = setting("10:40:lin", "surrogate ReLU sharpness", Rule("range", feature="alpha"))
  lam_min: str = setting(
    "0.2:0.7:lin",
    "lambda below this is penalised (the KKT lambda >= 0 term)",
    Rule("range", feature="lam_min"),
  )
  optimizer: str = setting(
    "sgd",
    "sgd (momentum 0.9) | adam",
    Rule("str", choices=_choices("recon_jax.optim", "OPTIMIZERS"), feature="first_order"),
  )
  refine_steps: int = setting(
    0,
    "a sharp-alpha refinement stage after `steps` (0: off)",
    Rule("int", low=0, high=INT32_MAX, note="0: off"),
  )
  refine_alpha: float = setting(
    200.0,
    "the refinement stage's alpha (sharper: closer to ReLU)",
    Rule("float", low=0, high=1e6, low_open=True, feature="refine"),
  )
  refine_lr_scale: float = setting(
    0.1,
    "the refinement stage's learning rates, times this",
    Rule("float", low=0, high=1e3, low_open=True, feature="refine"),
  )
  anneal_alpha: float = setting(
    0.0,
    "> 0: alpha rises geometrically to this over `steps` (0: fixed)",
    Rule("float", low=0, high=1e6, note="0: fixed", feature="alpha"),
  )
  anneal_stages: int = setting(
    8,
    "how many steps of that rise (each a stage of steps/anneal_stages)",
    Rule("int", low=2, high=INT32_MAX, feature="anneal", explicit_only=True),
  )
  batching: str = setting(
    "auto",
    "auto (map on CPU, vmap on GPU/TPU) | vmap | map",
    Rule("str", choices=_choices("recon_jax.engine.loop", "BATCHINGS")),
  )


@dataclasses.dataclass(frozen=True)
class Evaluation(_Section):
  """How the candidates are scored (the main job's ``evaluation`` section)."""

  prefix = "evaluation."  # where the job holds it (its errors' names)

  identify: bool = setting(
    True,
    "attacker-side scores: which candidates would an attacker trust?",
    _B,
  )
  identify_stability_candidates: int = setting(
    64,
    "candidates re-run for the stability score (0: none)",
    Rule("int", low=0, high=INT32_MAX, note="0: no stability score", feature="identify"),
  )
  ssim_threshold: Optional[float] = setting(
    None,
    "strict recovery; default by image size",
    Rule("float", low=0, high=1, low_open=True, optional=True),
  )


@dataclasses.dataclass(frozen=True)
class Runtime(_Section):
  """How the run uses this machine: precision, memory, saves, hosts (the main job's
  ``runtime`` section)."""

  prefix = "runtime."  # where the job holds it (its errors' names)

  x64: bool = setting(False, "float64 everywhere (slower; for the stationarity floor)", _B)
  matmul_precision: str = setting(
    "default",
    "default | high | highest",
    Rule("str", choices=_choices("recon_jax.engine.precision", "MATMUL_PRECISIONS")),
  )
  max_memory_gb: float = setting(
    0.0,
    "refuse a sweep whose restart state needs more (0: free memory)",
    Rule("float", low=0, high=1e9, note="0: this machine's memory"),
  )
  save_every: int = setting(
    1,
    "save state.msgpack every N chunks (0: never)",
    Rule("int", low=0, high=INT32_MAX, note="0: never"),
  )
  distributed: bool = setting(
    False,
    "jax.distributed.initialize() first (multi-host sweeps)",
    _B,
  )
