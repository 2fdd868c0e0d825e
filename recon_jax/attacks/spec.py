"""What an attack module tells the main job about itself: the spec every attack registers.

An attack is an objective plus its state (:class:`recon_jax.types.Attack`); to run in the
main job it also says how to build itself, which settings it refuses, which per-restart
hyperparameters it reads and how much memory a restart's state takes.  Its options are a
frozen dataclass of its own (:func:`recon_jax.core.rules.setting` fields: default, meaning
and rule), which the main job's settings (:class:`recon_jax.job.settings.JobConfig`) take
in as flat settings (``--config.NAME``).  Each attack module registers one :class:`AttackSpec` with
:func:`register`; the package (:mod:`recon_jax.attacks`) imports every module in it, so
a new attack, options and contract-test case included, is one new module.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

from recon_jax.core import rules
from recon_jax.engine import sweep
from recon_jax.errors import ConfigError
from recon_jax.types import RESTART_SCORES

# A field of an attack's options: its default, its meaning (``--help``) and what it may hold
# (its rule, checked with the job's other settings), declared once as every setting is.
option = rules.setting


@dataclasses.dataclass(frozen=True)
class NoOptions:
  """The options of an attack that has none of its own."""


rules_of = rules.rules_of  # {name: Rule} of an options class's fields


def check_rules(values, options: type) -> None:
  """Every option of ``options`` as ``values`` (its instance, or any object with those
  attributes) sets it, against its rule: ConfigError naming the first that breaks it."""
  rules.check_declared(values, options)


class Common(NamedTuple):
  """The job's settings that are not an attack's own but that attacks may read."""

  optimizer: str  # 'sgd' (momentum 0.9) or 'adam': the candidates' optimiser
  w_prior: float  # weight of the pixel-box prior
  normalize: str  # 'mean' (1/m) or 'sum'
  m: int  # candidates per restart (0: m_per_sample x n)
  m_per_sample: int
  steps: int  # optimisation steps per restart (before any refinement)
  anneal_alpha: float  # > 0: the surrogate's sharpness annealed to this
  known_init: bool  # the attacker knows theta_0: the target's reference is theta* - theta_0
  linearize: float  # with known_init: the target's params are theta_0 + this (theta* - theta_0)
  seed: int  # the job's seed

  @classmethod
  def of(cls, job) -> "Common":
    """These settings of a job (a JobConfig: each read where it lives, its sections')."""
    search, known_init = job.search, job.threat.known_init
    on_search = ("optimizer", "m", "m_per_sample", "steps", "anneal_alpha", "seed")
    shared = {name: getattr(search, name) for name in on_search}
    return cls(
      **shared,
      w_prior=job.w_prior,
      normalize=job.normalize,
      known_init=known_init,
      linearize=job.linearize,
    )


class Setup(NamedTuple):
  """What the pipeline knows when it checks and builds an attack (beyond its options).

  At check time (before any data is read or victim trained) only ``problem``,
  ``victim``, ``foreign`` and ``common`` are set; at build time all of them.
  """

  problem: str  # 'binary', 'multiclass' or 'general'
  victim: Any  # the VictimConfig (architecture, activation, loss, weight decay)
  foreign: bool = False  # a PyTorch/safetensors victim (ReLU, no recipe known)
  apply_fn: Optional[Callable] = None
  num_outputs: int = 1
  input_shape: Tuple[int, ...] = ()
  n: int = 0  # training-set size
  target: Any = None  # the Target (theta*, labels, box, reference)
  common: Optional[Common] = None  # the job's shared settings (None: an attack checked alone)
  # Images the attacker holds that are not training images ([N, *input_shape], minus the
  # data mean): the public pool, else the held-out images (a direct attack may start there).
  public: Any = None
  # What the attacker holds (recon_jax.attacker.view.AttackerView), built once by the job;
  # input_shape, n, target and public above are its (a hand-over's target: its own labels).
  view: Any = None


class Example(NamedTuple):
  """A tiny run the contract test (``tests/test_attack_contract.py``) makes of an attack:
  a softplus MLP on 4 points of 6 inputs, 2 restarts."""

  # the job's settings changed from the tiny preset (a section's by its dotted name)
  settings: Mapping = types.MappingProxyType({})
  steps: int = 20  # steps of the run (halved for the resume check)
  slow: bool = False  # its programs take long to compile: run in the slow tier only


class AttackSpec(NamedTuple):
  """An attack as the main job sees it.

  Attributes:
    name: the ``attack`` setting that selects it.
    build: ``(options, setup) -> Attack``.
    check: ``(options, setup) -> None``; raises :class:`ConfigError` naming the first
      setting this attack cannot run with (``setup`` as at check time).  What one
      option may hold on its own is its rule's to say (checked before).
    options: its options, a frozen dataclass of :func:`option` fields; the main job's
      settings hold them as flat settings of the same names, refused away from their
      defaults when another attack is selected (they would change nothing).
    hparams: the per-restart hyperparameters it reads: the job's shared ranges it uses,
      then its options of rule kind ``range`` (drawn per restart the same way).
    paper_ranges: what ``sweep=paper`` draws the shared ranges from.
    state_arrays: ``(options, common) -> int``: arrays of candidate size a restart keeps
      (memory).
    direct: for an attack without a search (``weights``, ``cone``): ``(setup, options) ->
      (candidates [1, k, *input_shape], labels [k] or None)``, read off the target directly
      (labels: the candidates' own, which the identifiability check then scores them with),
      optionally followed by a dict of what it read of theta* first (the report's
      ``regime``; a ``cannot`` entry says in one sentence why the attack cannot test the
      model, which the verdict then names); None for the rest.
    rerunnable: ``options -> bool``: whether steps can be re-run from perturbed
      candidates (the attacker-side stability score does).
    first_order: ``options -> bool``: whether it searches with the first-order optimiser
      (``optimizer``, ``lr_x``; else a solver of its own).
    assumes_stationary: ``options -> bool``: whether it takes theta* to be exactly
      stationary (recorded with the run's metrics).
    features: ``options -> {feature: (what turns it on, on?)}``: the features its
      options' rules name (``split_eps`` belongs to ``split``).
    fits_equations: it fits theta*'s stationarity equations, so ``known_init`` (fitting
      theta* - theta_0 instead) applies to it.
    reads_init: it reads theta_0 itself (``known_init`` required).
    hands_over: ``options -> float``: for a direct attack whose reading may fall short (a
      ``short`` entry in what it read of theta*, saying why), the minutes the KKT search in
      the change's span may be estimated to take for the job to run it after it, from its
      candidates (:mod:`recon_jax.job.pipeline`; 0: never).
    always_hands_over: ``(problem, hidden_layers) -> bool``: for a direct attack that hands
      over, whether every reading of such a victim falls short, whatever it read (the cone:
      under squared error, or past one hidden layer): the job's estimate then counts the
      search in its total.
    reread: for a direct attack that hands over, ``(setup, options, candidates [S,
      *input_shape]) -> images [F, *input_shape]``: what it reads of theta* again from the
      search's candidates (the lowest-loss restart's), scored beside them; None: nothing.
    doc: one line saying what it is (its module's docstring says the rest).
    examples: the runs the contract test makes of it (() for an attack without a search).
    reconstructs: False for ``none``: no candidate is sought, and the job runs only the
      membership tests read off the weights (a membership-only audit).
  """

  name: str
  build: Callable
  check: Callable
  options: type = NoOptions
  hparams: Tuple[str, ...] = ("lr_x", "sigma_x")
  paper_ranges: Mapping = types.MappingProxyType(sweep.PAPER_RANGES)
  state_arrays: Callable = lambda options, common: 3
  direct: Optional[Callable] = None
  rerunnable: Callable = lambda options: True
  first_order: Callable = lambda options: True
  assumes_stationary: Callable = lambda options: False
  features: Callable = lambda options: {}
  fits_equations: bool = False
  reads_init: bool = False
  hands_over: Callable = lambda options: 0.0
  always_hands_over: Callable = lambda problem, hidden_layers: False
  reread: Optional[Callable] = None
  doc: str = ""
  examples: Tuple[Example, ...] = (Example(),)
  reconstructs: bool = True

  @property
  def settings(self) -> Tuple[str, ...]:
    """The names of its options (the job holds them under the attack's name:
    ``kkt.subspace``)."""
    return tuple(f.name for f in dataclasses.fields(self.options))

  @property
  def ranges(self) -> Tuple[str, ...]:
    """Its own options drawn per restart (rule kind ``range``)."""
    return tuple(n for n, r in rules_of(self.options).items() if r.kind == "range")

  def options_of(self, job):
    """Its options as ``job`` (a JobConfig, or a ConfigDict of its settings) sets them:
    the section of the job named after the attack (none: an attack without options)."""
    if not self.settings:
      return self.options()
    section = getattr(job, self.name)
    return section if isinstance(section, self.options) else self.options(**dict(section))


_REGISTRY: dict = {}


def register(spec: AttackSpec) -> AttackSpec:
  """Adds ``spec`` to the registry (its module calls this at import)."""
  if spec.name in _REGISTRY and _REGISTRY[spec.name] is not spec:
    raise ValueError(f"two attacks register the name {spec.name!r}.")
  missing = [n for n in spec.ranges if n not in spec.hparams]
  if missing:
    raise ValueError(f"attack {spec.name!r}: its range options {missing} are not in hparams.")
  # a restart's row in metrics.json holds its scores and its draw side by side
  taken = [n for n in spec.hparams if n in RESTART_SCORES]
  if taken:
    raise ValueError(
      f"attack {spec.name!r}: its hyperparameters {taken} are named as a restart's scores "
      "in metrics.json's per_restart rows; name them otherwise."
    )
  _REGISTRY[spec.name] = spec
  return spec


def registry() -> dict:
  """``{name: AttackSpec}`` of the modules imported so far (see :func:`recon_jax.attacks.specs`)."""
  return dict(_REGISTRY)


def no_check(options, setup: Setup) -> None:
  del options, setup


def require(condition: bool, message: str, setting: str, mentions=None) -> None:
  """Raises ConfigError(message, setting, mentions) unless ``condition``."""
  if not condition:
    raise ConfigError(message, setting, mentions)
