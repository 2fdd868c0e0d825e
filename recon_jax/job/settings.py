"""The main job's settings, shipped with the library: defaults and what each one means.

:class:`JobConfig` declares them, typed, each with its default and meaning; it is what
the library reads.  :func:`reconstruct_config` is the same settings as an
``ml_collections.ConfigDict`` (what a binary's flags override; ``JobConfig(**config)``
turns it into the type); :data:`HELP` says what every setting means (the binaries'
``--help`` shows it).  The binaries' config files (``experiments/configs/``) only add
presets on top.  The sections every attack shares (:class:`Threat`, :class:`Search`,
:class:`Evaluation`, :class:`Runtime`) are declared in :mod:`recon_jax.job.sections`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping

import ml_collections
from ml_collections import config_dict

from recon_jax.core import rules
from recon_jax.core.rules import Rule, setting
from recon_jax.errors import ConfigError
from recon_jax.job.sections import Evaluation, Runtime, Search, Threat, _refuse_unknown
from recon_jax.victims.recipe import HELP as VICTIM_HELP
from recon_jax.victims.recipe import OPTIONAL as _OPTIONAL
from recon_jax.victims.recipe import VictimConfig

# The attack for a model fine-tuned from weights the attacker knows (theta_0, the threat's
# known_init): theta* - theta_0
# fitted with the gradients taken halfway between them, the candidates as coefficients in
# the span of the first layer's change with its directions weighted by (s_j/s_1)^-0.5,
# 3n candidates, Adam with the surrogate's sharpness annealed to 200, lambda_min from 0.
# Chosen on paired tuning draws of the 10 + 10 faces victim (draws 10-14, none of the draws
# reported) by the largest gain in strict pooled: 15.4 -> 17.0 of 20 (paired +1.6 [0.9, 2.3])
# and the attacker's pick 13.6 -> 14.8; no lever carries it alone (the weighting helps the
# images training weighted least, whose directions an unweighted residual hardly sees), and
# more restarts, candidates or a wider lambda_min moved nothing further.
KNOWN_INIT_ATTACK = {
  "linearize": 0.5,
  "kkt.subspace": True,
  "kkt.span_whiten": 0.5,
  "search.m_per_sample": 3,
  "search.optimizer": "adam",
  "search.lr_x": "1e-2:3e-1:log",
  "search.lr_lam": "3e-3:1e-1:log",
  "search.lam_min": "0:0.3:lin",
  "search.anneal_alpha": 200.0,
}
# The search the cone hands over to on a network of two or more hidden layers: those
# settings with 4 restarts of 2000 steps, a sixth of the job's default budget, because a step
# costs several times one hidden layer's there, every restart starts from the images the cone
# read and only the rest is left to find: on tuning draws of two hidden layers of 1024 it read
# 16-19 of 20 in 2-3 minutes, as many as 16 x 4000 in a quarter of the time; on one hidden
# layer the default budget reads about one image more, so it keeps it.
DEEP_HANDOVER_SEARCH = {**KNOWN_INIT_ATTACK, "search.num_restarts": 4, "search.steps": 2000}


def _attack_names():
  from recon_jax import attacks

  return tuple(sorted(attacks.specs()))


_B, _P = Rule("bool"), Rule("path")


def _attack_sections() -> dict:
  """``{attack name: its options class}`` of the registered attacks that have options: each
  a section of the job named after its attack (``kkt.subspace``)."""
  from recon_jax import attacks

  return {
    name: spec.options
    for name, spec in sorted(attacks.specs().items())
    if dataclasses.fields(spec.options)
  }


def _attack_meaning() -> str:
  """``attack``'s meaning: the registered attacks' names (each a module of recon_jax.attacks)."""
  from recon_jax import attacks

  return " | ".join(sorted(attacks.specs())) + " (each a module of recon_jax.attacks)"


# The attacks' own options (recon_jax.attacks.*.SPEC.options), declared with their attack:
# each attack's a section of the job under its name (``--config.kkt.split_every``).
ATTACK_SECTIONS = _attack_sections()
# The main job's sections beside its victim: {name: class} (each a config of its own), the
# attacks' options among them.
SECTIONS = {
  "threat": Threat,
  "search": Search,
  "evaluation": Evaluation,
  "runtime": Runtime,
  **ATTACK_SECTIONS,
}


@dataclasses.dataclass(frozen=True)
class _JobSettings:
  """The main job's settings, typed: every setting, its default and its meaning.

  The settings every attack shares are declared by section (:mod:`recon_jax.job.sections`)
  and, for the few at the top, here; each attack's own options
  are declared with it (its spec's ``options``, e.g. :class:`recon_jax.attacks.kkt.KKTOptions`)
  and held as a section under the attack's name (``kkt.subspace``; :data:`ATTACK_SECTIONS`).
  A binary parses its flags into an ``ml_collections.ConfigDict``
  (:func:`reconstruct_config`) and hands the library ``JobConfig(**config)``; the
  library reads this and nothing else.  ``victim`` and every section may be given as a
  mapping, and a section's setting by its dotted name (``"search.steps"``); unset ranges (``lr_x``...) are ``VALUE`` or ``LO:HI[:log|lin]``.
  Each setting is checked against its rule when the config is built (and again by
  ``dataclasses.replace``): a :class:`~recon_jax.errors.ConfigError` naming the first
  that breaks its type or range (:func:`check_types`), raised on the line that built it.
  Settings in combination (a feature that is off, a victim the attack cannot run on, the
  files) are checked by :func:`recon_jax.job.planning.prepare`.
  """

  victim: VictimConfig = dataclasses.field(default_factory=VictimConfig)
  threat: Threat = dataclasses.field(default_factory=Threat)
  search: Search = dataclasses.field(default_factory=Search)
  evaluation: Evaluation = dataclasses.field(default_factory=Evaluation)
  runtime: Runtime = dataclasses.field(default_factory=Runtime)
  data_dir: str = setting("", "folder with MNIST/CIFAR files (never downloaded)", _P)
  attack: str = setting("kkt", _attack_meaning(), Rule("str", choices=_attack_names))
  problem: str = setting(
    "auto",
    "auto (from victim.loss) | binary | multiclass | general",
    Rule("str", choices=lambda: ("auto", "binary", "multiclass", "general")),
  )
  linearize: float = setting(
    1.0,
    "known_init: gradients taken at theta_0 + linearize (theta* - theta_0) (1: theta*)",
    Rule("float", low=0, high=1, feature="known_init"),
  )
  w_prior: float = setting(
    1.0, "weight of the pixel-box prior (>= 0)", Rule("float", low=0, high=1e6)
  )
  clip_to_box: bool = setting(
    True,
    "the attack's final candidates clipped to the pixel box the attacker knows before they "
    "are written and scored (False: as the attack left them)",
    _B,
  )
  normalize: str = setting(
    "mean",
    "mean (1/m, the reference code) | sum (the paper's eq. 6)",
    Rule("str", choices=("mean", "sum")),
  )
  use_cache: bool = setting(
    True,
    "cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)",
    Rule("bool", feature="trains"),
  )

  def __post_init__(self):
    v = self.victim
    if not isinstance(v, VictimConfig):
      v = dict(_section(v, "victim", "VictimConfig"))
      widths = v.get("widths")
      if (
        widths is not None and hasattr(widths, "__iter__") and not isinstance(widths, (str, bytes))
      ):
        v["widths"] = tuple(widths)
      _refuse_unknown(VictimConfig, v, "victim.")
      object.__setattr__(self, "victim", VictimConfig(**v))
    for name, cls in SECTIONS.items():
      if not isinstance(getattr(self, name), cls):
        entries = _entries(getattr(self, name), name)
        _refuse_unknown(cls, entries, f"{name}.")
        object.__setattr__(self, name, cls(**entries))
    check_types(self)

  @classmethod
  def of(cls, config) -> "_JobSettings":
    """``config`` (a JobConfig, a ConfigDict or a dict of settings) as a JobConfig.

    Raises ConfigError naming a setting it does not know.
    """
    return config if isinstance(config, cls) else cls(**dict(config))

  def replace(self, **changes) -> "_JobSettings":
    """A copy with ``changes``: a dotted name (``"victim.lr"``, ``"search.steps"``) changes
    that setting of this config's section, and one setting given two values is refused
    (:func:`into_sections`)."""
    return dataclasses.replace(self, **into_sections(changes, base=self))

  def to_dict(self) -> dict:
    """The settings as nested plain values (config.json's ``config``)."""
    return dataclasses.asdict(self)


def nested(changes: Mapping) -> dict:
  """``changes`` with each dotted name (``"search.steps": 200``) as a section of its own
  (``{"search": {"steps": 200}}``), merged with the section where both are given: the form
  a ConfigDict takes (an efficacy variant, a preset)."""
  out: dict = {}
  for key, value in changes.items():
    *path, leaf = key.split(".")
    node = out
    for part in path:
      node = node.setdefault(part, {})
    if isinstance(value, Mapping):
      node[leaf] = {**node.get(leaf, {}), **nested(value)}
    else:
      node[leaf] = value
  return out


def value_of(cfg: JobConfig, name: str):
  """The setting ``name`` of ``cfg``, a dotted name for a section's (``search.steps``)."""
  return functools.reduce(getattr, name.split("."), cfg)


def _reading_dotted_names(init):
  """``init`` taking a section's setting by its dotted name (:func:`into_sections`), and
  refusing an unknown name in one line naming it, not a TypeError."""

  @functools.wraps(init)
  def __init__(self, *args, **given):
    given = into_sections(given)
    _refuse_unknown(type(self), given)
    init(self, *args, **given)

  return __init__


def refuse_clashes(attack_sections: Mapping) -> None:
  """Raises ValueError where an attack with options is named as a setting of the job (its
  section would hide that setting)."""
  clashes = sorted(set(_JobSettings.__dataclass_fields__) & set(attack_sections))
  if clashes:
    raise ValueError(f"attacks {clashes} are named as settings of the job.")


refuse_clashes(ATTACK_SECTIONS)
# The sections a dotted name may name a setting of (``"search.steps"``, ``"victim.lr"``).
_DOTTED = (*SECTIONS, "victim")
# The job's settings with each attack's options as a section of its own (a field per
# registered attack that has options), made from the registry so an attack stays one module.
JobConfig = dataclasses.make_dataclass(
  "JobConfig",
  [(name, cls, dataclasses.field(default_factory=cls)) for name, cls in ATTACK_SECTIONS.items()],
  bases=(_JobSettings,),
  frozen=True,
)
JobConfig.__module__, JobConfig.__doc__ = __name__, _JobSettings.__doc__
JobConfig.__init__ = _reading_dotted_names(JobConfig.__init__)


def _whole(name: str, section) -> bool:
  """Whether the mapping ``section`` holds every setting of the job's section ``name`` (as a
  ConfigDict of :func:`reconstruct_config` does): a base, as the section's object is."""
  cls = {**SECTIONS, "victim": VictimConfig}.get(name)
  return cls is not None and {f.name for f in dataclasses.fields(cls)} <= set(section.keys())


def _is_mapping(value) -> bool:
  """A mapping of settings (a dict, a ConfigDict), not a section's object."""
  return hasattr(value, "keys") and hasattr(value, "__getitem__") and not isinstance(value, type)


def _section(value, name: str, typename: str):
  """A section's settings as a mapping; ConfigError naming the section otherwise."""
  if _is_mapping(value):
    return value
  raise ConfigError(
    f"{name} must be a {typename} or a mapping of its settings, got {value!r}.", name
  )


def _entries(section, name: str) -> dict:
  """A section (its class, or a mapping of its settings) as a dict of its settings."""
  if dataclasses.is_dataclass(section) and not isinstance(section, type):
    return dataclasses.asdict(section)
  typename = {**{k: c.__name__ for k, c in SECTIONS.items()}, "victim": "VictimConfig"}
  return dict(_section(section, name, typename.get(name, "Threat")))


def into_sections(given, base=None) -> dict:
  """``given`` (settings of the main job by name) with each dotted name of a section's
  setting (``"runtime.x64"``, ``"victim.lr"``) moved into its section.

  A section given in part (a mapping of some of its settings) holds the user's own values: a
  dotted name that gives one of them another value is refused naming both (ConfigError).  A
  section given whole, as its object (what ``dataclasses.replace`` passes) or a mapping of
  all its settings (a ConfigDict of :func:`reconstruct_config`), is the base those names
  change; without the section, ``base``'s (a JobConfig: :meth:`JobConfig.replace`) or the
  defaults are.
  """
  given = dict(given)
  own = {k: v for k, v in given.items() if _is_mapping(v) and not _whole(k, v)}  # the user's
  dotted = [k for k in given if "." in k and k.partition(".")[0] in _DOTTED]
  for key, value in [(k, given.pop(k)) for k in dotted]:
    section, _, leaf = key.partition(".")
    if section in own and leaf in own[section] and not rules.same(own[section][leaf], value):
      held = f"{section}={{{leaf!r}: {own[section][leaf]!r}}}"
      _refuse_twice(key, held, f"{key}={value!r}")
    held = given.get(section, getattr(base, section, None) if base is not None else {})
    given[section] = {**_entries(held if held is not None else {}, section), leaf: value}
  return given


def _refuse_twice(name: str, first: str, second: str) -> None:
  """ConfigError: the setting ``name`` given two values, as ``first`` and as ``second``
  (``search={'steps': 7}``; ``search.steps=5``)."""
  raise ConfigError(
    f"{second} and {first} are the same setting, given two values; give it once.", name, ()
  )


# What every setting of the main job may hold, read off its declarations (each field's
# ``setting(default, meaning, rule)``; the attacks' options are inherited fields with their
# own); the features a rule names are decided in recon_jax.job.planning.features.
RULES = rules.rules_of(JobConfig)


# The threat section's settings (``threat.model``...).
THREAT_RULES = rules.rules_of(Threat)


def check_types(cfg: JobConfig) -> None:
  """Every setting of ``cfg`` checked against its rule (:data:`RULES`): its type (a bool is
  True or False, a number is not a string), its range (finite, within float32 and the
  setting's meaning), each section's against its own rules (:data:`SECTIONS`) and the
  victim section's against :data:`recon_jax.victims.recipe.RULES`; ConfigError naming the
  first that breaks it (``victim.lr``).  :class:`JobConfig` runs it when it is built."""
  rules.check_declared(cfg, JobConfig)
  for name, cls in SECTIONS.items():
    rules.check_declared(getattr(cfg, name), cls, f"{name}.")
  rules.check_declared(cfg.victim, VictimConfig, "victim.")


def _rows(cls, prefix: str = ""):
  """``(dotted name, default, meaning)`` of ``cls``'s settings, its sections' inside."""
  for f in dataclasses.fields(cls):
    if f.name == "victim":
      continue
    if "help" in f.metadata:
      yield prefix + f.name, f.default, f.metadata["help"]
    else:
      yield from _rows(f.type if isinstance(f.type, type) else globals()[f.type], f"{f.name}.")


# (name, default, meaning) of every setting of the main job but its victim section.
SETTINGS = tuple(_rows(JobConfig))
# The type of each setting that defaults to None (a ConfigDict placeholder of that type).
_UNSET = {
  **rules.unset_types(JobConfig),
  **{f"{name}.{k}": t for name, cls in SECTIONS.items() for k, t in rules.unset_types(cls).items()},
}

HELP = {
  **{f"victim.{k}": v for k, v in VICTIM_HELP.items()},
  **{name: text for name, _, text in SETTINGS},
}


def victim_section(**overrides) -> ml_collections.ConfigDict:
  """:class:`VictimConfig`'s defaults as a ConfigDict (optional fields as typed placeholders).

  Raises:
    KeyError: naming overrides that are not victim settings.
  """
  c = ml_collections.ConfigDict()
  for f in dataclasses.fields(VictimConfig):
    value = overrides.pop(f.name, f.default)
    if f.name in _OPTIONAL:
      c[f.name] = config_dict.placeholder(_OPTIONAL[f.name])
      c[f.name] = value
    else:
      c[f.name] = tuple(value) if f.name == "widths" else value
  if overrides:
    raise KeyError(f"unknown victim settings {sorted(overrides)}")
  return c


def reconstruct_config(victim=None, **overrides) -> ml_collections.ConfigDict:
  """The main job's config: every setting at its default, then ``victim`` and ``overrides``.

  ``victim`` is a dict of victim settings; ``overrides`` are top-level settings and
  sections (``threat`` a dict, or a section's setting by its dotted name, ``"search.steps"``).
  Raises KeyError naming an unknown setting.
  """
  c = ml_collections.ConfigDict()
  c.victim = victim_section(**dict(victim or {}))
  for name, default, _ in SETTINGS:
    section, _, leaf = name.rpartition(".")
    if section and section not in c:
      c[section] = ml_collections.ConfigDict()
    node = c[section] if section else c
    if name in _UNSET:  # a typed placeholder of its own per config, then the default
      node[leaf] = config_dict.placeholder(_UNSET[name])
    node[leaf] = default
  overrides = into_sections(overrides)
  unknown = sorted(set(overrides) - {n.partition(".")[0] for n, _, _ in SETTINGS})
  if unknown:
    raise KeyError(f"unknown settings {unknown}")
  c.update(overrides)  # a section's entries over its defaults (the others stay)
  return c
