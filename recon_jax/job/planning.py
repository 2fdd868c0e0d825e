"""A reconstruction job resolved before any work: its settings read into a :class:`Plan` and
everything it can fail on checked (settings, files' headers, memory).

:func:`prepare` reads a reconstruction's settings, expands their paths, and raises an error
naming the first setting (or file) that cannot run; nothing is written or trained here (a
victim's training is checked by :func:`recon_jax.victims.training_run.prepare_training`).
Each attack adds its own checks through its spec (:mod:`recon_jax.attacks`).  The run
itself (:mod:`recon_jax.job.pipeline`) takes the Plan as it is.
"""

from __future__ import annotations

import dataclasses
import os
from typing import NamedTuple, Optional, Tuple

from absl import logging
import jax
import numpy as np

from recon_jax import attacks, data
from recon_jax.core import losses, rules
from recon_jax.engine import sweep
from recon_jax.errors import ConfigError
from recon_jax.io.workdir import expand
from recon_jax.job import settings
from recon_jax.job.settings import RULES, JobConfig
from recon_jax.victims import recipe, sources, state_dicts
from recon_jax.victims.training_run import check_data_dir

RANGE_NAMES = sweep.RANGE_NAMES


def candidate_labels(problem: str, m: int, num_classes: int = 2) -> np.ndarray:
  """Balanced labels of the ``m`` candidates: m/2 per sign (binary), m/C per class."""
  if problem == "binary":
    if m < 2 or m % 2:
      raise ConfigError(
        argument="search.m", message=f"m must be even and >= 2 for a binary victim, got {m}."
      )
    return np.concatenate([np.ones(m // 2), -np.ones(m // 2)]).astype(np.float32)
  if problem == "multiclass":
    if m < num_classes or m % num_classes:
      raise ConfigError(
        argument="search.m",
        message=f"m={m} must be a positive multiple of the {num_classes} classes.",
      )
    return np.repeat(np.arange(num_classes), m // num_classes).astype(np.int32)
  if problem == "general":
    return np.zeros(m, np.float32)
  raise ConfigError(
    argument="problem", message=f"problem must be one of {losses.PROBLEMS}, got {problem!r}."
  )


def resolve_problem(problem: str, loss: str) -> str:
  """``problem``, or the one the victim's training loss implies when it is 'auto'."""
  if problem == "auto":
    return losses.problem_for_loss(loss)
  if problem not in losses.PROBLEMS:
    raise ConfigError(
      argument="problem",
      message=f"problem must be auto or one of {losses.PROBLEMS}, got {problem!r}.",
    )
  return problem


def victim_config(cfg: JobConfig, requested: Optional[dict] = None) -> recipe.VictimConfig:
  """The victim of a job: its ``victim`` settings, or the checkpoint's own.

  A recon_jax checkpoint carries the config it was trained with (architecture
  and data provenance), and that is the one used; ``requested`` (victim
  settings the user set explicitly, ``{field: value}``) must agree with it.
  """
  model = cfg.threat.model
  if not model or state_dicts.is_foreign(model):
    return recipe.of_settings(cfg.victim)
  return sources.open_checkpoint(model, requested).recipe


def _num_classes(v: recipe.VictimConfig) -> int:
  """The number of classes of ``v``'s data (as :func:`recon_jax.victims.trained.load_data`
  draws it)."""
  return data.dataset.num_classes(
    v.dataset.strip().lower(), "multiclass" if v.loss == "ce" else "binary"
  )


def num_candidates(cfg: JobConfig, n: int, multiple: int = 1) -> int:
  """m, the candidates per restart: the ``m`` setting, or ``m_per_sample`` x n (0: unset)
  rounded up to a ``multiple`` (2 for a binary victim's balanced labels, C for C classes),
  so that a training set of any size can be attacked."""
  if int(cfg.search.m):
    return int(cfg.search.m)
  k = max(int(multiple), 1)
  return -(-int(cfg.search.m_per_sample) * int(n) // k) * k


def labels_of(cfg: JobConfig, problem: str, ds: data.Dataset) -> np.ndarray:
  """The labels of a job's candidates on ``ds``: m of them (:func:`num_candidates`, rounded
  up to a multiple of the classes), balanced (:func:`candidate_labels`)."""
  groups = {"binary": 2, "multiclass": ds.num_classes}.get(problem, 1)
  return candidate_labels(problem, num_candidates(cfg, len(ds.x_train), groups), ds.num_classes)


def sweep_settings(cfg: JobConfig, spec: attacks.AttackSpec) -> dict:
  """A job's sweep as :func:`recon_jax.engine.sweep.plan` draws it: the shared ranges (its
  attack ``spec``'s paper ranges, or the settings' :data:`~recon_jax.engine.sweep.RANGE_NAMES`)
  and the attack's own range options (:attr:`AttackSpec.ranges`), as the settings give them;
  the seed, the restarts, and the steps with their refinement and annealing."""
  if cfg.search.sweep == "paper":
    ranges = dict(spec.paper_ranges)
  elif cfg.search.sweep == "random":
    ranges = {name: getattr(cfg.search, name) for name in RANGE_NAMES}
  else:
    raise ConfigError(
      argument="search.sweep", message=f"sweep must be random or paper, got {cfg.search.sweep!r}."
    )
  opts = spec.options_of(cfg)
  ranges.update({name: getattr(opts, name) for name in spec.ranges})
  return dict(
    ranges=ranges,
    seed=cfg.search.seed,
    num_restarts=cfg.search.num_restarts,
    steps=cfg.search.steps,
    refine_steps=cfg.search.refine_steps,
    refine_alpha=cfg.search.refine_alpha,
    refine_lr_scale=cfg.search.refine_lr_scale,
    anneal_alpha=cfg.search.anneal_alpha,
    anneal_stages=cfg.search.anneal_stages,
  )


def sweep_for(cfg: JobConfig, spec: attacks.AttackSpec) -> Tuple[dict, list]:
  """The per-restart hyperparameters of a job and its stages (:func:`sweep_settings` drawn
  by :func:`recon_jax.engine.sweep.plan`)."""
  return sweep.plan(**sweep_settings(cfg, spec))


def hparams_for(cfg: JobConfig, spec: attacks.AttackSpec) -> dict:
  """The per-restart hyperparameters of a job (:func:`sweep_for`)."""
  return sweep_for(cfg, spec)[0]


class Plan(NamedTuple):
  """A job resolved once, before any work: what the run reads instead of deriving it
  again from the settings (:func:`recon_jax.job.planning.prepare` returns it checked)."""

  config: JobConfig  # the settings, paths expanded (config.json's "config")
  spec: attacks.AttackSpec  # the attack the settings name (its registered spec)
  victim: recipe.VictimConfig  # the config's victim section, or the checkpoint's own recipe
  problem: str  # 'binary', 'multiclass' or 'general'
  foreign: bool  # a PyTorch or safetensors checkpoint
  hparams: dict  # per-restart hyperparameters ({} for an attack without a search)
  stages: list  # [(steps, hparams)] of the sweep ([] likewise)
  source: Optional[sources.Source] = None  # the victim's files (data, weights, theta_0), read once
  labels: Optional[np.ndarray] = None  # the candidates' labels on the source's data (m of them)
  setup: Optional[attacks.Setup] = None  # what the attack was checked with; the run completes it
  then: Optional["Plan"] = None  # the search a direct attack hands over to (:func:`handover`)

  @property
  def options(self):
    """The attack's own options, as its section of the settings holds them."""
    return self.spec.options_of(self.config)


# ----------------------------------------------------------------------------- checks


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


def state_memory(cfg: JobConfig, v: recipe.VictimConfig, spec) -> Tuple[int, str]:
  """Bytes of the attack's batched restart state, and how they were counted.

  R x m x prod(input_shape) x (arrays per candidate: x, gradient, optimiser
  slots) x bytes per number: a lower bound of what the run needs.
  """
  task = "multiclass" if v.loss == "ce" else "binary"
  n = int(v.n_per_class) * data.dataset.num_classes(v.dataset.strip().lower(), task)
  m = num_candidates(cfg, n)
  d = int(np.prod(data.INPUT_SHAPES[v.dataset.strip().lower()]))
  arrays = spec.state_arrays(spec.options_of(cfg), attacks.Common.of(cfg))
  nbytes = 8 if (cfg.runtime.x64 or jax.config.jax_enable_x64) else 4
  r = int(cfg.search.num_restarts)
  how = (
    f"{r} restarts x {m} candidates x {d} inputs x {arrays} arrays "
    f"({cfg.search.optimizer}) x {nbytes} bytes"
  )
  return r * m * d * arrays * nbytes, how


def size_text(nbytes: float, other: Optional[float] = None) -> str:
  """``nbytes`` as a size that reads true: in the largest binary unit it holds at least one
  of (bytes, KiB, MiB, GiB, TiB), with four significant digits (0.5 MiB, not 0.0 GiB); in
  bytes where it would read as ``other`` does (two sizes compared)."""

  def text(n: float) -> str:
    for unit in ("TiB", "GiB", "MiB", "KiB"):
      scale = 2 ** {"TiB": 40, "GiB": 30, "MiB": 20, "KiB": 10}[unit]
      if abs(n) >= scale:
        return f"{n / scale:.4g} {unit}"
    return f"{int(n)} bytes"

  shown = text(nbytes)
  if other is not None and text(other) == shown and int(other) != int(nbytes):
    return f"{int(nbytes):,} bytes"
  return shown


def check_memory(cfg: JobConfig, v: recipe.VictimConfig, spec) -> None:
  """Refuses a sweep whose restart state cannot fit: the limit or this machine's memory."""
  if v.dataset.strip().lower() not in data.INPUT_SHAPES:
    return
  need, how = state_memory(cfg, v, spec)
  limit_gb = float(cfg.runtime.max_memory_gb or 0.0)
  if limit_gb > 0:
    limit = int(limit_gb * 2**30)
    what = lambda size: f"the {size} that runtime.max_memory_gb={limit_gb:g} allows"
  else:
    limit = available_memory()
    what = lambda size: f"the {size} of memory available on this machine"
  if limit is not None and need > limit:
    raise ConfigError(
      f"num_restarts={cfg.search.num_restarts} needs at least {size_text(need, limit)} for "
      f"the restarts' state ({how}), more than {what(size_text(limit, need))}; use fewer "
      "restarts (or candidates m), or split the sweep over several runs (seed).",
      argument="search.num_restarts",
    )


def prepare(cfg, requested_victim: Optional[dict] = None, explicit=()) -> Plan:
  """The job's settings (a :class:`JobConfig`, or a mapping of them), paths expanded and
  every setting checked: what can fail before any work.

  Nothing is written or trained here.  ``explicit``: the names of the settings the user
  set (with ``sweep=paper`` none of the ranges may be among them; none given: not known,
  and a victim.widths other than the default counts as set); ``requested_victim``:
  see :func:`victim_config`.  Returns the job's :class:`~recon_jax.job.planning.Plan`,
  which the run takes as it is (its ``config``: the settings with their paths expanded).
  """
  cfg = JobConfig.of(cfg)  # each setting's type and range checked where it is built
  t = cfg.threat
  files = dict(
    model=t.model, theta0=t.theta0, train=t.train, heldout=t.heldout, data_mean=t.data_mean
  )
  cfg = cfg.replace(
    data_dir=expand(cfg.data_dir),
    threat=dataclasses.replace(t, **{name: expand(path) for name, path in files.items()}),
  )
  return _plan(cfg, explicit, requested_victim)


def resolve(job, requested_victim: Optional[dict] = None, explicit=()) -> Plan:
  """``job`` as a :class:`~recon_jax.job.planning.Plan`: a Plan taken as it is (resolved
  once, by the caller), settings resolved by :func:`prepare`."""
  return job if isinstance(job, Plan) else prepare(job, requested_victim, explicit)


def _plan(cfg: JobConfig, explicit, requested_victim: Optional[dict]) -> Plan:
  """Raises an error naming the first setting of ``cfg`` (its types checked, its paths
  expanded) that cannot run, before any work; returns the job's
  :class:`~recon_jax.job.planning.Plan` (``requested_victim``: see :func:`victim_config`).

  :class:`ConfigError` names the setting (its ``argument``); a recon_jax
  checkpoint is read (not its data) and its own faults are
  :class:`~recon_jax.io.checkpoint.CheckpointError` naming the file.  ``explicit``:
  the names of the settings the user set; with ``sweep=paper`` none of the
  ranges may be among them (the paper's ranges would silently replace it); none given: not
  known.
  """
  told = bool(explicit)
  named = [n for n in RANGE_NAMES if f"search.{n}" in explicit]
  if cfg.search.sweep == "paper" and named:
    raise ConfigError(
      f"sweep=paper draws {', '.join(RANGE_NAMES)} from Haim et al.'s ranges (App. B), "
      f"which replace {named[0]}={getattr(cfg.search, named[0])!r}; drop that setting or use "
      "sweep=random.",
      "search.sweep",
    )
  spec = attacks.get(cfg.attack)
  if cfg.search.refine_steps and "alpha" not in spec.hparams:
    raise ConfigError(
      f"refine_steps sharpens the surrogate alpha, which attack={cfg.attack} does not use.",
      "search.refine_steps",
    )
  given = set(requested_victim or ()) | {
    k[len("victim.") :] for k in explicit if k.startswith("victim.")
  }
  threat = cfg.threat
  vcfg, foreign, stored = sources.resolve(threat.model, cfg.victim, requested_victim, given)
  own = stored is not None
  if threat.data_mean and not foreign:
    raise ConfigError(
      "threat.data_mean is the training mean of a PyTorch or safetensors model; without such "
      "a model it would be ignored (a recon_jax victim records its own).",
      "threat.data_mean",
    )
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
    if cfg.search.m:
      candidate_labels(problem, int(cfg.search.m), _num_classes(vcfg))  # m even, or a multiple of C
  setup = attacks.Setup(problem, vcfg, foreign, common=attacks.Common.of(cfg))
  check_attack(spec, cfg, setup)
  check_unread_settings(cfg, spec)
  check_features(cfg, spec, foreign, own, explicit)
  check_known_init(cfg, foreign)
  if cfg.search.init == "mix":  # its weights l1, l2 are drawn by the init study alone
    raise ConfigError(
      "init=mix: its mixing weights (Runkel et al. eq. 10) are the init study's axes "
      "(recon_jax.studies.init_study); a reconstruction starts from gaussian, uniform, "
      "ground_truth or partition.",
      "search.init",
    )
  if threat.train or threat.heldout:
    check_user_data(cfg, foreign)
  check_data_dir(vcfg, cfg.data_dir)
  drawn = sweep_settings(cfg, spec) if spec.direct is None else None
  if drawn:
    check_memory(cfg, vcfg, spec)  # first: the sweep's draws below are R long
  source = read_source(cfg, vcfg, stored, foreign, problem, given if told else None)
  check_change(cfg, source)
  hp, stages = sweep.plan(**drawn) if drawn else ({}, [])  # bad ranges or refine_* fail here
  labels = labels_of(cfg, problem, source.dataset)
  plan = Plan(cfg, spec, vcfg, problem, foreign, hp, stages, source, labels, setup)
  return plan._replace(then=handover(plan, explicit))


def handover(plan: Plan, explicit=()) -> Optional[Plan]:
  """The search a direct attack hands over to where its reading falls short
  (:attr:`AttackSpec.hands_over`): the KKT search in the span of the first layer's change
  with the ``finetune_kkt`` preset's settings (:data:`recon_jax.job.settings.KNOWN_INIT_ATTACK`;
  for two or more hidden layers a smaller budget,
  :data:`~recon_jax.job.settings.DEEP_HANDOVER_SEARCH`) where the job left a setting at its
  default (and ``explicit``, the settings the user set, does not name it), the job's own
  otherwise; None where the attack does not hand over, or where that search cannot run on
  this victim or its restarts would not fit in memory (the run then reports the direct
  attack alone)."""
  spec, cfg = plan.spec, plan.config
  if spec.direct is None or spec.hands_over(spec.options_of(cfg)) <= 0:
    return None
  default = JobConfig()
  deep = len(_hidden_widths(plan)) >= 2
  preset = settings.DEEP_HANDOVER_SEARCH if deep else settings.KNOWN_INIT_ATTACK
  changes = {  # the preset's settings where the job left the default, the job's own elsewhere
    k: v
    for k, v in preset.items()
    if settings.value_of(cfg, k) == settings.value_of(default, k) and k not in explicit
  }
  then_cfg = cfg.replace(attack="kkt", **changes)
  then_spec = attacks.get("kkt")
  setup = plan.setup._replace(common=attacks.Common.of(then_cfg))
  try:
    check_attack(then_spec, then_cfg, setup)
    check_memory(then_cfg, plan.victim, then_spec)
  except ConfigError as e:
    if e.argument in explicit:  # the user's own setting of that search cannot run here
      raise
    logging.info("no hand-over to the KKT search: %s", e)
    return None
  hp, stages = sweep.plan(**sweep_settings(then_cfg, then_spec))
  labels = labels_of(then_cfg, plan.problem, plan.source.dataset)
  return plan._replace(
    config=then_cfg, spec=then_spec, hparams=hp, stages=stages, labels=labels, setup=setup
  )


def _hidden_widths(plan: Plan) -> tuple:
  """The hidden widths of the plan's victim: an imported model's own layers (its recipe's
  ``widths`` are the settings' default, not its layout), else the recipe's."""
  imported = plan.source.imported if plan.source is not None else None
  if imported is not None:
    return tuple(getattr(imported.module, "widths", None) or ())
  return tuple(plan.victim.widths)


def features(cfg: JobConfig, spec, foreign: bool, own: bool) -> dict:
  """``{feature: (what turns it on, on?)}``: the features of the job ``cfg`` that its
  settings' rules (:data:`recon_jax.job.settings.RULES`) name, the attacks' own
  (:attr:`AttackSpec.features`) included."""
  fitting = sorted(
    n for n, s in attacks.specs().items() if s.fits_equations or s.reads_init or not s.reconstructs
  )
  searched = spec.direct is None
  first_order = searched and spec.first_order(spec.options_of(cfg))
  # a direct attack that hands over runs the KKT search's restarts and steps after it
  restarts = searched or spec.hands_over(spec.options_of(cfg)) > 0
  attack = f"attack={cfg.attack}"
  why = "has no search" if not searched else "solves with its own solver here"
  out = {
    "search": (f"a search ({attack} reads its candidates off theta*)", restarts),
    "first_order": (f"a first-order search ({attack} {why})", first_order),
    "lr_lam": (
      f"learnt multipliers ({attack} has none here)",
      first_order and "lr_lam" in spec.hparams,
    ),
    "alpha": (f"the surrogate ReLU's sharpness ({attack} has none)", "alpha" in spec.hparams),
    "lam_min": (f"the multipliers' floor ({attack} has none)", "lam_min" in spec.hparams),
    "refine": ("the refinement stage (refine_steps > 0)", cfg.search.refine_steps > 0),
    "anneal": ("annealing (anneal_alpha > 0)", cfg.search.anneal_alpha > 0),
    "known_init": (
      "threat.known_init=True (the attacker knows theta_0)",
      bool(cfg.threat.known_init),
    ),
    "known_init_attack": (
      f"the attacks that read theta* - theta_0 ({', '.join(fitting)}; not {attack})",
      spec.fits_equations or spec.reads_init or not spec.reconstructs,
    ),
    "identify": ("evaluation.identify=True", bool(cfg.evaluation.identify)),
    "foreign": ("a PyTorch or safetensors model", foreign),
    "user_data": (
      "threat.train or threat.heldout (your own images)",
      bool(cfg.threat.train or cfg.threat.heldout),
    ),
    "own_checkpoint": ("a recon_jax checkpoint given as threat.model", own),
    "trains": ("a victim trained here (no threat.model)", not cfg.threat.model),
  }
  for other in attacks.specs().values():  # the features of the attacks' options
    out.update(other.features(other.options_of(cfg)))
  return out


def check_features(cfg: JobConfig, spec, foreign: bool, own: bool, explicit=()) -> None:
  """Refuses a setting away from its default whose feature is off (``split_eps`` without
  ``split_every``, ``steps`` under attack=weights): it would change nothing.  A rule marked
  ``explicit_only`` (presets carry such settings) is refused only when the user set it."""
  on = features(cfg, spec, foreign, own)
  defaults = {f.name: f.default for f in dataclasses.fields(JobConfig)}
  values = {name: getattr(cfg, name) for name in RULES}
  rules.check_features(values, RULES, defaults, on, explicit)
  for name, cls in settings.SECTIONS.items():
    section = getattr(cfg, name)
    table = rules.rules_of(cls)
    values = {leaf: getattr(section, leaf) for leaf in table}
    rules.check_features(values, table, rules.defaults_of(cls), on, explicit, f"{name}.")


def check_attack(spec, cfg: JobConfig, setup) -> None:
  """The attack's own checks of its options on ``setup`` (:attr:`AttackSpec.check`); an
  option it names is named as the job holds it, under the attack (``kkt.w_tv``)."""
  try:
    spec.check(spec.options_of(cfg), setup)
  except ConfigError as e:
    if e.argument in spec.settings:
      e.argument = f"{spec.name}.{e.argument}"
    raise


def check_unread_settings(cfg: JobConfig, spec) -> None:
  """Refuses a setting that only another attack reads, away from its default: it would
  change nothing, and a run that silently ignores it misleads.  A direct attack that hands
  over (:attr:`AttackSpec.hands_over`) reads the KKT search's settings too: its search
  (:func:`handover`) runs with them."""
  read = {spec.name}
  if spec.direct is not None and spec.hands_over(spec.options_of(cfg)) > 0:
    read.add("kkt")
  for other, cls in settings.ATTACK_SECTIONS.items():
    if other in read:
      continue
    given, defaults = getattr(cfg, other), cls()
    for name in rules.rules_of(cls):
      if getattr(given, name) != getattr(defaults, name):
        raise ConfigError(
          f"{other}.{name} is a setting of attack={other}; attack={spec.name} does not read "
          f"it (leave it at {getattr(defaults, name)!r}).",
          f"{other}.{name}",
        )


def check_user_data(cfg: JobConfig, foreign: bool) -> None:
  """Refuses ``threat.train`` / ``threat.heldout`` (the user's own images) where they cannot
  run: without an imported model, one without the other, a blind attack without ``m``."""
  if not foreign:
    raise ConfigError(
      "threat.train is the training set of a model you give as threat.model (a PyTorch or "
      "safetensors file); a recon_jax victim records its own data.",
      "threat.train",
    )
  if not cfg.threat.heldout:
    raise ConfigError(
      "threat.heldout is needed with threat.train: held-out images of the same distribution, "
      "the baseline that tells a reconstruction from a look-alike (and, for a blind attack "
      "without threat.train, the size and channels of the model's inputs).",
      "threat.heldout",
    )
  if not cfg.threat.train:  # a blind attack: nothing to compare with, so m says how many
    if not cfg.search.m:
      raise ConfigError(
        "m: without training images (a blind attack) give the number of candidates to search.",
        "search.m",
      )
    if cfg.search.init in ("ground_truth", "partition", "mix"):
      raise ConfigError(
        f"init={cfg.search.init} needs images a blind attack does not have.", "search.init"
      )


def read_source(
  cfg: JobConfig, v: recipe.VictimConfig, stored, foreign: bool, problem: str, given=None
) -> sources.Source:
  """The victim's files read once, as the run uses them (:func:`recon_jax.victims.sources.read`):
  its data, its weights (``stored``: the recon_jax checkpoint read already) and theta_0.
  Errors name the file, or the setting (``threat.*`` for how an imported model is read, and
  held-out images that are copies of training images).  An imported model's hidden widths
  must be victim.widths only where the user set them (``given``: the victim's fields the
  user set; None: not known, widths other than the default counted as set): a preset's
  architecture gives way to the file's."""
  t = cfg.threat
  images = None
  if t.train or t.heldout:
    images = sources.UserImages(t.train, t.heldout, problem != "multiclass", t.image_size)
  asked = tuple(cfg.victim.widths)  # an imported model is used as it is: no others
  if given is None:
    given = () if asked == tuple(recipe.VictimConfig().widths) else ("widths",)
  imports = sources.Imports(t.input_layout, t.stride, t.padding, t.data_mean)
  try:
    return sources.read(
      v,
      path=t.model if foreign else "",
      stored=stored,
      init_path=t.theta0,
      data_dir=cfg.data_dir or None,
      imports=imports,
      images=images,
      allow_data_mismatch=t.allow_data_mismatch,
      widths=asked if "widths" in given else None,
    )
  except ConfigError as e:
    if e.argument in ("input_layout", "stride", "padding", "data_mean", "heldout"):
      e.argument = f"threat.{e.argument}"
    raise


def check_known_init(cfg: JobConfig, foreign: bool) -> None:
  """Refuses the known-theta_0 settings where they cannot run (without ``known_init`` they
  are refused by :func:`check_features`: their rules name the feature; theta_0's file is
  read, and checked, with the victim's, :func:`read_source`)."""
  t = cfg.threat
  if t.known_init and foreign and not t.theta0:
    raise ConfigError(
      f"threat.known_init needs theta_0 of the imported model {t.model}: pass the weights its "
      "training started from as threat.theta0 (same format).",
      "threat.theta0",
    )


def check_change(cfg: JobConfig, source: sources.Source) -> None:
  """Refuses a known theta_0 whose first layer is the model's own: the change theta* -
  theta_0 every known-theta_0 attack reads is zero there (the file given as theta_0 is the
  model itself, or its copy), so there is nothing to read, whatever the attack's settings.
  Checked where both are files (a victim trained here is not yet there)."""
  t = cfg.threat
  star = source.imported if source.imported is not None else source.stored
  if not t.known_init or source.init is None or star is None:
    return
  try:
    k1, k0 = (attacks.span.first_layer_kernel(p) for p in (star.params, source.init))
  except ConfigError:
    return  # no dense first layer: the attack's own checks say so
  if k1.shape == k0.shape and not np.any(k1 - k0):
    raise ConfigError(
      f"threat.theta0={t.theta0} has the model's own first layer, so the change theta* - "
      "theta_0 the attack reads is zero: give the weights training started from.",
      "threat.theta0",
    )
