"""A victim's recipe: the data, architecture and training of a model to attack, what each
setting means, and which recipes can be built or trained (one place for all three).

One :class:`VictimConfig` says everything needed to rebuild a victim; its hash keys
the victim cache (:mod:`recon_jax.victims.cache`).  Each field is checked against its rule
where the recipe is built (:class:`FieldError`, naming ``victim.<field>``); :func:`validate`
refuses, before any work and in one line naming the field, what no victim can be built or
trained with across fields; the main job, the toy, the init study and ``train_victim``
share it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from recon_jax import data
from recon_jax.core import losses, rules
from recon_jax.core.rules import INT32_MAX, MAX_ITERATIONS, Rule, setting
from recon_jax.core.rules import problem as rule_problem
from recon_jax.core.rules import same as _same
from recon_jax.errors import ConfigError
from recon_jax.io.checkpoint import CheckpointError
from recon_jax.victims import descent, models

ARCHS = ("mlp", "affine", "one_hidden", "cnn")


ACTIVATIONS = ("relu", "gelu", "softplus", "tanh", "identity", "surrogate_relu")


ADAPTIVE = ("none", "loss", "grad")


_STD = Rule("float", low=0, high=1e6, low_open=True, optional=True)


class FieldError(ConfigError):
  """A recipe's field that breaks its own rule, refused where the recipe is built: named
  ``victim.<field>`` (``field`` and ``problem`` say which and why, so a config that holds
  the field under another name can say that name instead: :func:`check_named`)."""

  def __init__(self, field: str, problem: str):
    super().__init__(f"victim.{field} {problem}", argument=f"victim.{field}")
    self.field, self.problem = field, problem


@dataclasses.dataclass(frozen=True)
class VictimConfig:
  """Data, architecture and training recipe of a victim model."""

  dataset: str = setting(
    "lfw",
    "digits | lfw | mnist5k (embedded) | mnist | cifar10 | cifar100 (files in data_dir)",
    Rule("str"),
  )
  # Unset, the task follows the loss (task_of); set, it must agree with the loss, which is
  # what decides the labels and the outputs.
  task: Optional[str] = setting(
    None,
    "binary | multiclass; unset: the loss's (ce is multiclass, logistic and mse binary)",
    Rule("str", choices=data.TASKS, optional=True),
  )
  n_per_class: int = setting(
    10, "training images per class (the n the attack must find)", Rule("int", low=1, high=10**6)
  )
  # Size of the disjoint public pool (the partition) per class: None, the dataset's default
  # (n_per_class, capped to what remains); set it to keep held-out images at large n.
  n_part_per_class: Optional[int] = setting(
    None,
    "public pool (partition) images per class (unset: the dataset's default)",
    Rule("int", low=0, high=10**6, optional=True),
    added=True,
  )
  subtract_mean: bool = setting(
    True, "train on images minus their mean (as Haim et al.)", Rule("bool")
  )
  data_seed: int = setting(0, "seed of the training-image draw", Rule("int", low=0, high=2**32 - 1))
  arch: str = setting("mlp", "mlp | affine | one_hidden | cnn", Rule("str", choices=ARCHS))
  widths: Sequence[int] = setting(
    (256, 256), "hidden widths (cnn: channels), e.g. 256,256", Rule("ints", low=1, high=10**6)
  )
  bias: str = setting(
    "first", "biases in first | all | none of the layers", Rule("str", choices=models.BIAS_MODES)
  )
  init: str = setting(
    "normal",
    "weight init: normal | kaiming | uniform | torch",
    Rule("str", choices=models.INIT_SCHEMES),
  )
  init_std: Optional[float] = setting(
    0.003, "std of init=normal (or He's std override); unset: the scheme's", _STD
  )
  first_layer_std: Optional[float] = setting(
    1e-4, "std of the first layer's weights (unset: as init)", _STD
  )
  init_gain: float = setting(
    1.0, "multiplies the init scale", Rule("float", low=0, high=1e6, low_open=True)
  )
  activation: str = setting(
    "relu", "relu | gelu | softplus | tanh | identity", Rule("str", choices=ACTIVATIONS)
  )
  loss: str = setting(
    "logistic",
    "logistic (binary) | ce (multiclass) | mse (regression)",
    Rule("str", choices=losses.LOSSES),
  )
  lr: float = setting(
    0.05, "gradient-descent learning rate (> 0)", Rule("float", low=0, low_open=True)
  )
  epochs: int = setting(10_000, "full-batch GD steps", Rule("int", low=1, high=INT32_MAX))
  weight_decay: float = setting(
    0.0, "L2 weight decay of the training energy (>= 0)", Rule("float", low=0, high=1e6)
  )
  # Optional second phase (e.g. a short weight-decay phase that pulls theta*
  # towards the KKT direction); 0 epochs disables it.
  wd_epochs: int = setting(
    0,
    "steps of an optional second phase with weight decay wd (0: off)",
    Rule("int", low=0, high=INT32_MAX, note="0: off"),
  )
  wd: float = setting(
    0.0,
    "weight decay of that second phase (>= 0)",
    Rule("float", low=0, high=1e6, feature="wd_phase"),
  )
  momentum: float = setting(
    0.0, "SGD momentum in [0, 1)", Rule("float", low=0, high=1, high_open=True, feature="sgd")
  )
  optimizer: str = setting(
    "sgd",
    "sgd (gradient descent, momentum if set) | adam",
    Rule("str", choices=descent.OPTIMIZERS),
    added=True,
  )  # sgd (gradient descent; momentum if set) | adam
  adaptive: str = setting(
    "none",
    "normalised GD: none | loss (lr / loss) | grad (lr / ||grad||)",
    Rule("str", choices=ADAPTIVE),
  )  # normalised GD: none | loss | grad (see descent.TrainConfig)
  batch_size: Optional[int] = setting(
    None, "minibatch size (unset: full batch)", Rule("int", low=1, high=INT32_MAX, optional=True)
  )
  loss_threshold: float = setting(
    0.0,
    "stop once the training loss is this low (0: run every epoch)",
    Rule("float", low=0, high=1e6),
  )
  seed: int = setting(
    0, "seed of the victim's initialisation and minibatches", Rule("int", low=0, high=2**32 - 1)
  )
  # Optional last phase: L-BFGS on the weight-decay-regularised energy until
  # ||grad E|| <= converge_tol * ||theta|| (a stationary point, where the training
  # set solves the stationarity equations exactly); 0 disables it.
  converge_tol: float = setting(
    0.0,
    "last phase: L-BFGS to ||grad E|| <= this x ||theta|| (0: off; needs wd)",
    Rule("float", low=0, high=1, high_open=True, note="0: off"),
    added=True,
  )
  converge_maxiter: int = setting(
    5000,
    "L-BFGS iteration cap of that phase",
    Rule("int", low=1, high=MAX_ITERATIONS, feature="converge"),
    added=True,
  )
  # theta_0, where training starts: the initialisation (0), or that initialisation first
  # trained this many epochs on the dataset's disjoint public pool (a pretrained model
  # fine-tuned on the private training set).
  pretrain_epochs: int = setting(
    0,
    "theta_0: the init (0) or it pretrained this many epochs on a public pool",
    Rule("int", low=0, high=INT32_MAX, note="0: none"),
    added=True,
  )

  def __new__(cls, *args, **given):
    # a name that is no field: refused naming it as the job does (victim.foo), not a TypeError
    unknown = sorted(set(given) - set(cls.__dataclass_fields__))
    if unknown:
      more = f" (nor {', '.join('victim.' + u for u in unknown[1:])})" if unknown[1:] else ""
      raise FieldError(
        unknown[0], f"is not a setting{more}; the settings are the fields of VictimConfig."
      )
    return super().__new__(cls)

  def __post_init__(self):
    widths = self.widths
    if isinstance(widths, (list, range, np.ndarray)):  # a recipe is hashed: a tuple, as given
      object.__setattr__(
        self, "widths", tuple(widths.tolist() if hasattr(widths, "tolist") else widths)
      )
    # each field against its own rule where the recipe is built (what no victim can be built
    # with across fields, and settings of a feature that is off: validate)
    found = field_problem(self)
    if found is not None:
      raise FieldError(*found)

  def to_dict(self):
    d = dataclasses.asdict(self)
    d["widths"] = [int(w) for w in self.widths]
    return d

  def key(self) -> str:
    d = self.to_dict()
    if d["task"] is None:  # the task's former default: older victims keep their cache keys
      d["task"] = "binary"
    for name, default in ADDED_FIELDS.items():  # unset, they keep older victims' cache keys
      if d[name] == default:
        del d[name]
    blob = json.dumps(d, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# Read off VictimConfig's declarations (each field's ``setting(default, meaning, rule)``):
# what every field may hold and the feature it belongs to (``wd`` is the weight decay of the
# phase that ``wd_epochs > 0`` turns on, ``momentum`` a setting of optimizer=sgd,
# ``converge_maxiter`` of ``converge_tol > 0``), what it means, which may be unset (None) and
# with what type, and the fields added after victims were first cached (at their defaults
# they stay out of the cache key, see VictimConfig.key).
RULES = rules.rules_of(VictimConfig)
HELP = rules.meanings_of(VictimConfig)
OPTIONAL = rules.unset_types(VictimConfig)
ADDED_FIELDS = rules.added_defaults(VictimConfig)


def final_weight_decay(cfg: VictimConfig) -> float:
  """The weight decay of the victim's last training phase: what its theta* is stationary for."""
  return float(cfg.wd if cfg.wd_epochs > 0 else cfg.weight_decay)


def _is_int(v) -> bool:
  return not isinstance(v, bool) and isinstance(v, (int, np.integer))


def is_finite_number(v) -> bool:
  """A real number (not a bool) that is finite."""
  ok = not isinstance(v, bool) and isinstance(v, (int, float, np.integer, np.floating))
  return ok and bool(np.isfinite(v))


_finite = is_finite_number


# The fields that say how to build and train a victim: an imported model (a PyTorch or
# safetensors file) is used as it is, so they change nothing there.
TRAINING_FIELDS = (
  "arch",
  "widths",
  "bias",
  "init",
  "init_std",
  "first_layer_std",
  "init_gain",
  "activation",
  "lr",
  "epochs",
  "weight_decay",
  "wd_epochs",
  "wd",
  "momentum",
  "optimizer",
  "adaptive",
  "batch_size",
  "loss_threshold",
  "seed",
  "converge_tol",
  "converge_maxiter",
  "pretrain_epochs",
)


def features(v: VictimConfig) -> dict:
  """``{feature: (what turns it on, on?)}`` of the recipe ``v`` (see :data:`RULES`)."""
  return {
    "wd_phase": (
      "a second training phase (wd_epochs > 0)",
      _is_int(v.wd_epochs) and v.wd_epochs > 0,
    ),
    "sgd": ("optimizer=sgd (Adam keeps its own moments)", v.optimizer == "sgd"),
    "converge": (
      "the convergence phase (converge_tol > 0)",
      _finite(v.converge_tol) and v.converge_tol > 0,
    ),
  }


def task_of(v: VictimConfig) -> str:
  """The task of recipe ``v``: ``binary`` (one output: labels +-1) or ``multiclass`` (one
  output per class), its ``task`` where set, else its loss's (ce: multiclass)."""
  return v.task or ("multiclass" if v.loss == "ce" else "binary")


def field_problem(v: VictimConfig) -> Optional[Tuple[str, str]]:
  """``(field, message)`` for the first field of ``v`` that breaks its own rule, or None (a
  dataset's name is only a string here: a caller may train on images of its own); a task
  set against the loss too (the loss decides the labels and the outputs)."""
  for name, rule in RULES.items():
    found = rule_problem(getattr(v, name), rule)
    if found:
      return name, found
  if v.task is not None and v.task != ("multiclass" if v.loss == "ce" else "binary"):
    trains = "one output per class (multiclass)" if v.loss == "ce" else "one output (binary)"
    return "task", (
      f"is {v.task}, but victim.loss={v.loss} trains {trains}; the task follows the loss: "
      "leave it unset, or set the loss that trains it."
    )
  return None


def problem(v: VictimConfig, settings: bool = True) -> Optional[Tuple[str, str]]:
  """``(field, message)`` for the first field of ``v`` no victim can be built or trained with.

  ``settings``: ``v`` is the user's own settings (not a checkpoint's record), so a field of
  a feature that is off (``wd`` without ``wd_epochs``) is refused too: it would change nothing.
  """
  if not isinstance(v.dataset, str) or v.dataset.strip().lower() not in data.DATASETS:
    return "dataset", f"{v.dataset!r} is unknown; valid: {', '.join(data.DATASETS)}."
  found = field_problem(v)
  if found is not None:
    return found
  if v.arch in ("mlp", "cnn") and not len(v.widths):
    return "widths", f"arch={v.arch} needs at least one width."
  if v.init == "normal" and v.init_std is None:
    return "init_std", "must be set (> 0) for init=normal."
  if v.converge_tol > 0 and v.loss != "mse" and final_weight_decay(v) <= 0:
    return "converge_tol", (
      f"needs weight decay in the last training phase (weight_decay, or wd with wd_epochs): "
      f"with loss={v.loss} and none the training energy has no stationary point."
    )
  if v.optimizer == "adam" and v.momentum:
    return "momentum", "is a setting of optimizer=sgd; Adam keeps its own moments (leave it 0)."
  if settings:
    defaults = {f.name: f.default for f in dataclasses.fields(VictimConfig)}
    on = features(v)
    for name, rule in RULES.items():
      if rule.feature and not on[rule.feature][1] and not _same(getattr(v, name), defaults[name]):
        return name, (
          f"is a setting of {on[rule.feature][0]}, which is off here: it would be ignored "
          f"(leave it at {defaults[name]!r})."
        )
  return None


def of_settings(v: VictimConfig) -> VictimConfig:
  """The victim that settings describe: ``v`` with its widths as integers (a flag gives text)."""
  return dataclasses.replace(v, widths=tuple(int(w) for w in v.widths))


def check_imported(v: VictimConfig, path: str, given=()) -> None:
  """Refuses victim settings ``v`` that the imported model ``path`` (a PyTorch or safetensors
  file) would ignore: how to build or train a victim (``given``: the fields the user set), and
  an activation other than ReLU (the importer maps ReLU networks only).  ``widths`` is matched
  against the model's own layers when the model is read (:func:`recon_jax.victims.sources.read`)."""
  if v.activation != "relu":
    raise ConfigError(
      f"victim.activation={v.activation} describes a victim to train; the imported "
      f"model {path} is read as a ReLU network (other activations cannot be "
      "expressed; leave it at 'relu').",
      "victim.activation",
    )
  for name in TRAINING_FIELDS:
    if name in given and name != "widths":
      raise ConfigError(
        f"victim.{name} says how to build or train a victim; the imported model "
        f"{path} is used as it is, so it would be ignored (leave it out).",
        f"victim.{name}",
      )


def check_named(make: Callable[[], VictimConfig], names) -> VictimConfig:
  """The recipe ``make()`` builds from another config's settings, refused in one line naming
  that config's setting: ``names[field]`` (the field itself where absent).  Only what no
  victim can be built or trained with is refused (those settings hold no fields of features
  that are off)."""
  try:
    v = make()
    found = problem(v, settings=False)
  except FieldError as e:
    found = e.field, e.problem
  if found:
    field, message = found
    name = names.get(field, field)
    raise ConfigError(f"{name} {message}", argument=name)
  return v


def validate(v: VictimConfig, checkpoint: str = "") -> None:
  """Raises an error naming the first field of ``v`` that no victim can be built or trained with.

  A :class:`ConfigError` naming ``victim.<field>`` for the user's own settings;
  with ``checkpoint`` (the file the settings were read from) a
  :class:`~recon_jax.io.checkpoint.CheckpointError` naming that file: its
  metadata is at fault, not a setting.
  """
  found = problem(v, settings=not checkpoint)
  if found is None:
    return
  field, message = found
  if checkpoint:
    raise CheckpointError(f"{checkpoint}: corrupt victim metadata: {field} {message}")
  raise ConfigError(f"victim.{field} {message}", argument=f"victim.{field}")
