"""What each setting may be: its type, its range and the feature it belongs to, declared once
in a table and checked the same way by the library's entry points and the binaries.

A :class:`Rule` says what one setting may hold: a bool (True or False, not ``"False"``),
an integer, a number (finite, within what float32 carries, and within the setting's own
range), a string (of given choices), a path, a range (``VALUE`` or ``LO:HI[:log|lin]``).
``feature`` names the feature the setting belongs to (``split_eps`` to ``split_every > 0``):
set away from its default while that feature is off, it would change nothing, and is
refused.  :func:`check_value` and :func:`check_all` raise a
:class:`~recon_jax.errors.ConfigError` whose ``argument`` is the setting's name.

Every setting of the library is declared once, with :func:`setting`: a dataclass field that
holds its default, its meaning and its rule.  A config class (the main job's, its sections,
a victim's recipe, an attack's options) is such fields and nothing else; its tables (rules,
meanings, the types of settings that may be unset, the fields added since a cache key was
first written) are read off it by :func:`rules_of`, :func:`meanings_of`,
:func:`unset_types`, :func:`added_defaults` and :func:`defaults_of`; :func:`check_declared` checks
a config against them, and :func:`undeclared` names a field that lacks one of them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from recon_jax.errors import ConfigError

# The largest float32: a setting beyond it overflows to inf in the run's arrays.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Integers the run counts with (steps, seeds, iterations) are int32 in JAX's loops.
INT32_MAX = 2**31 - 1
# An iteration cap beyond this is a run that cannot end in a user's lifetime (a typo).
MAX_ITERATIONS = 1_000_000
# An inner solve runs inside one compiled step: beyond this a step outlasts a user's Ctrl-C.
MAX_INNER_ITERATIONS = 10_000

KINDS = ("bool", "int", "float", "str", "path", "range", "ints")


class Rule(NamedTuple):
  """What one setting may hold.

  Attributes:
    kind: ``bool`` | ``int`` | ``float`` | ``str`` | ``path`` (a string, '' unset) |
      ``range`` (``VALUE`` or ``LO:HI[:log|lin]``, or a number) | ``ints`` (a list of ints).
    low, high: the bounds of an int or float (and of each of ``ints``), inclusive unless
      ``low_open``/``high_open``; a float's ``high`` defaults to float32's largest.
    choices: the values a ``str`` may take (or a function returning them).
    optional: None (unset) is allowed.
    feature: the feature the setting belongs to (a key of the caller's feature table); away
      from its default while the feature is off, the setting is refused.
    explicit_only: refuse the setting under an off feature only when the user set it
      (presets may carry it for the feature's sake).
    note: what a special value means, shown in the refusal (``0: off``).
  """

  kind: str
  low: Optional[float] = None
  high: Optional[float] = None
  low_open: bool = False
  high_open: bool = False
  choices: Union[Tuple, Callable, None] = None
  optional: bool = False
  feature: Optional[str] = None
  explicit_only: bool = False
  note: str = ""


def is_int(v) -> bool:
  return not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, np.integer))


def is_number(v) -> bool:
  return not isinstance(v, (bool, np.bool_)) and isinstance(
    v, (int, float, np.integer, np.floating)
  )


def _num(x) -> str:
  """A bound as a user reads it: integers in full (4294967295), others as %g."""
  if float(x).is_integer() and abs(x) < 1e16:
    return str(int(x))
  return f"{x:g}"


def _bounds_text(rule: Rule, kind: str) -> str:
  lo, hi = rule.low, rule.high
  if kind == "float" and hi is None:
    hi = FLOAT32_MAX
  parts = []
  if lo is not None and hi is not None:
    left = "(" if rule.low_open else "["
    right = ")" if rule.high_open else "]"
    parts.append(f"in {left}{_num(lo)}, {_num(hi)}{right}")
  elif lo is not None:
    parts.append(f"{'>' if rule.low_open else '>='} {_num(lo)}")
  elif hi is not None:
    parts.append(f"{'<' if rule.high_open else '<='} {_num(hi)}")
  return " ".join(parts)


def _in_bounds(v: float, rule: Rule, kind: str) -> bool:
  hi = rule.high if rule.high is not None else (FLOAT32_MAX if kind == "float" else None)
  if rule.low is not None and (v <= rule.low if rule.low_open else v < rule.low):
    return False
  if hi is not None and (v >= hi if rule.high_open else v > hi):
    return False
  return True


def problem(value: Any, rule: Rule) -> Optional[str]:
  """What is wrong with ``value`` under ``rule`` (``must be ...``), or None."""
  if value is None and rule.optional:
    return None
  note = f" ({rule.note})" if rule.note else ""
  unset = " (or unset)" if rule.optional else ""
  kind = rule.kind
  if kind == "bool":
    if not isinstance(value, (bool, np.bool_)):
      return (
        f"must be True or False, got {value!r}{' (a string)' if isinstance(value, str) else ''}."
      )
    return None
  if kind == "int":
    bounds = _bounds_text(rule, kind)
    if not is_int(value) or not _in_bounds(int(value), rule, kind):
      return f"must be an integer {bounds}{note}{unset}, got {value!r}."
    return None
  if kind == "float":
    bounds = _bounds_text(rule, kind)
    ok = is_number(value) and math.isfinite(float(value))
    if not ok or not _in_bounds(float(value), rule, kind):
      return f"must be a finite number {bounds}{note}{unset}, got {value!r}."
    return None
  if kind in ("str", "path"):
    if not isinstance(value, str):
      what = "a path (a string)" if kind == "path" else "a string"
      return f"must be {what}, got {value!r}."
    choices = rule.choices() if callable(rule.choices) else rule.choices
    if choices and value not in choices:
      return f"must be one of {', '.join(map(str, choices))}, got {value!r}."
    return None
  if kind == "range":
    if isinstance(value, str) or (is_number(value) and math.isfinite(float(value))):
      if is_number(value) and abs(float(value)) > FLOAT32_MAX:
        return f"must fit in float32 (|x| <= {FLOAT32_MAX:.3g}), got {value!r}."
      return None
    return f"must be VALUE or LO:HI[:log|lin] (a string or a finite number), got {value!r}."
  if kind == "ints":
    bad = isinstance(value, (str, bytes)) or not hasattr(value, "__iter__")
    if bad or not all(is_int(w) and _in_bounds(int(w), rule, "int") for w in value):
      bounds = _bounds_text(rule, "int")
      return f"must be a list of integers {bounds}, e.g. 256,256, got {value!r}."
    return None
  raise ValueError(f"unknown rule kind {kind!r}")


def check_value(name: str, value: Any, rule: Rule) -> None:
  """Raises ConfigError naming ``name`` when ``value`` breaks ``rule``."""
  found = problem(value, rule)
  if found:
    raise ConfigError(f"{name} {found}", name)


def same(a, b) -> bool:
  """Whether a setting's value equals its default (lists and tuples alike)."""
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
  if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
    both = isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_))
    return both and bool(a) == bool(b)
  try:
    return bool(a == b)
  except (TypeError, ValueError):  # an array compared with a number
    return False


def check_all(
  values: Mapping[str, Any],
  rules: Mapping[str, Rule],
  prefix: str = "",
) -> None:
  """Every value of ``values`` checked against its rule (names ``prefix + name``)."""
  for name, rule in rules.items():
    if name in values:
      check_value(prefix + name, values[name], rule)


def check_features(
  values: Mapping[str, Any],
  rules: Mapping[str, Rule],
  defaults: Mapping[str, Any],
  features: Mapping[str, Tuple[str, bool]],
  explicit=(),
  prefix: str = "",
) -> None:
  """Refuses a setting away from its default whose feature is off.

  ``features``: ``{feature: (what turns it on, on?)}``; ``explicit``: the settings the
  user set (an ``explicit_only`` rule is only refused for those).
  """
  for name, rule in rules.items():
    if rule.feature is None or name not in values:
      continue
    what, on = features[rule.feature]
    if on:
      continue
    full = prefix + name
    if rule.explicit_only and full not in explicit:
      continue
    if not same(values[name], defaults[name]):
      raise ConfigError(
        f"{full} is a setting of {what}, which is off here: it would be ignored "
        f"(leave it at {defaults[name]!r}).",
        full,
      )


# --------------------------------------------------------------------------
# Settings declared once: a field with its default, meaning and rule.
# --------------------------------------------------------------------------
_UNSET_TYPE = {"int": int, "float": float, "str": str, "path": str, "range": str}


def setting(default, meaning: str, rule: Rule, *, added: bool = False):
  """One setting of a config dataclass: its ``default``, its ``meaning`` (what ``--help``
  says), its ``rule`` (what it may hold; ``rule.optional`` for one that may be unset, None),
  ``added``: declared after a cache key was first written from this class, so that at its
  default it stays out of the key (older victims keep theirs)."""
  if isinstance(default, (list, dict, set)):
    raise ValueError(f"a setting's default must be immutable, got {default!r}.")
  return dataclasses.field(
    default=default,
    metadata={"help": meaning, "rule": rule, "added": added},
  )


def _declared(cls) -> tuple:
  return tuple(f for f in dataclasses.fields(cls) if "rule" in f.metadata)


def rules_of(cls) -> dict:
  """``{name: Rule}`` of the settings ``cls`` declares (its sections' are their own)."""
  return {f.name: f.metadata["rule"] for f in _declared(cls)}


def meanings_of(cls) -> dict:
  """``{name: meaning}`` of the settings ``cls`` declares."""
  return {f.name: f.metadata["help"] for f in _declared(cls)}


def unset_types(cls) -> dict:
  """``{name: type}`` of the settings of ``cls`` that may be unset (None): a ConfigDict holds
  them as typed placeholders."""
  return {
    f.name: _UNSET_TYPE[f.metadata["rule"].kind]
    for f in _declared(cls)
    if f.metadata["rule"].optional
  }


def added_defaults(cls) -> dict:
  """``{name: default}`` of the settings of ``cls`` declared ``added``."""
  return {f.name: f.default for f in _declared(cls) if f.metadata["added"]}


def defaults_of(cls) -> dict:
  """``{name: default}`` of the settings ``cls`` declares, in declaration order."""
  return {f.name: f.default for f in _declared(cls)}


def check_declared(values, cls, prefix: str = "") -> None:
  """Every setting ``cls`` declares, as ``values`` (a mapping or an object with those
  attributes) sets it, against its rule: ConfigError naming the first that breaks it."""
  get = values.__getitem__ if hasattr(values, "keys") else lambda n: getattr(values, n)
  table = rules_of(cls)
  check_all({name: get(name) for name in table}, table, prefix)


def undeclared(cls, sections=()) -> list:
  """The fields of ``cls`` (but its ``sections``, configs of their own) that lack a rule or a
  meaning: each setting is declared with :func:`setting`."""
  return [
    f.name
    for f in dataclasses.fields(cls)
    if f.name not in sections
    and not (isinstance(f.metadata.get("rule"), Rule) and str(f.metadata.get("help", "")).strip())
  ]
