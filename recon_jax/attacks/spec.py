"""What an attack module tells the main job about itself: the spec every attack registers.

An attack is an objective plus its state (:class:`recon_jax.types.Attack`); to run in the
main job it also says how to build itself from a job config, which settings it refuses,
which per-restart hyperparameters it reads and how much memory a restart's state takes.
Each attack module registers one :class:`AttackSpec` with :func:`register`; the package
(:mod:`recon_jax.attacks`) imports every module in it, so a new attack is one new module
(plus, if it has options, their settings in the job config).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Tuple

from recon_jax.errors import ConfigError


class Setup(NamedTuple):
  """What the pipeline knows when it checks and builds an attack (beyond the job config).

  At check time (before any data is read or victim trained) only ``problem``,
  ``victim`` and ``foreign`` are set; at build time all of them.
  """

  problem: str  # 'binary', 'multiclass' or 'general'
  victim: Any  # the VictimConfig (architecture, activation, loss, weight decay)
  foreign: bool = False  # a PyTorch/safetensors victim (ReLU, no recipe known)
  apply_fn: Optional[Callable] = None
  num_outputs: int = 1
  input_shape: Tuple[int, ...] = ()
  n: int = 0  # training-set size
  target: Any = None  # the Target (theta*, labels, box, reference)


class AttackSpec(NamedTuple):
  """An attack as the main job sees it.

  Attributes:
    name: the ``attack`` setting that selects it.
    build: ``(cfg, setup) -> Attack``.
    check: ``(cfg, setup) -> None``; raises :class:`ConfigError` naming the first
      setting this attack cannot run with (``setup`` as at check time).
    hparams: the per-restart hyperparameters it reads (ranges of the sweep).
    state_arrays: ``cfg -> int``: arrays of candidate size a restart keeps (memory).
    direct: for an attack without a search (``weights``): ``(params, input_shape) ->
      [k, *input_shape]`` candidates, read off theta* directly; None for the rest.
    rerunnable: ``cfg -> bool``: whether steps can be re-run from perturbed candidates
      (the attacker-side stability score does).
    doc: one line for ``--help`` and errors.
    settings: the job settings only this attack reads; the main job refuses them away
      from their defaults when another attack is selected (they would change nothing).
  """

  name: str
  build: Callable
  check: Callable
  hparams: Tuple[str, ...] = ("lr_x", "sigma_x")
  state_arrays: Callable = lambda cfg: 3
  direct: Optional[Callable] = None
  rerunnable: Callable = lambda cfg: True
  doc: str = ""
  settings: Tuple[str, ...] = ()


_REGISTRY: dict = {}


def register(spec: AttackSpec) -> AttackSpec:
  """Adds ``spec`` to the registry (its module calls this at import)."""
  if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
    raise ValueError(f"two attacks register the name {spec.name!r}.")
  _REGISTRY[spec.name] = spec
  return spec


def registry() -> dict:
  """``{name: AttackSpec}`` of the modules imported so far (see :func:`recon_jax.attacks.specs`)."""
  return dict(_REGISTRY)


def no_check(cfg, setup: Setup) -> None:
  del cfg, setup


def require(condition: bool, message: str, setting: str) -> None:
  """Raises ConfigError(message, setting) unless ``condition``."""
  if not condition:
    raise ConfigError(message, setting)


def require_int(cfg, name: str, low: int = 1) -> int:
  """Setting ``name`` of ``cfg``, refused unless an integer >= ``low``."""
  value = getattr(cfg, name)
  require(
    isinstance(value, int) and not isinstance(value, bool) and value >= low,
    f"{name} must be an integer >= {low}, got {value!r}.",
    name,
  )
  return value
