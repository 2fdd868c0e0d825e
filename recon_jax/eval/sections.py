"""Sections of a JSON report declared as frozen dataclasses, read typed and written back.

A section's field says which key of its dict it is with :func:`key`: a nested dict is a
section (``section=``), a list of dicts a tuple of rows (``rows=``), a dict keyed by a
dynamic name ``{name: section}`` (``named=``), and a section's open part (``open=True``)
holds the keys it does not declare.  :func:`read` parses a dict into its section once
(leniently for a reader, strictly for the job: a key not declared, or a value not of its
declared shape, raises :class:`Undeclared` naming its full path); :func:`write` is its
inverse: the same keys, values and nesting, in the same order.  A section states which of
its keys it holds (:attr:`Section.held`), so a key that was absent stays absent and one
that held null stays null, and the job's stages state theirs as they build them
(:meth:`Section.stating`, :meth:`Section.with_`, :meth:`Section.joined`).

The declarations of metrics.json are :mod:`recon_jax.eval.metrics_json`'s.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import json
import numbers
import typing
from typing import Any, Mapping, Optional, Tuple, Union

_ABSENT = object()
WHERE = "recon_jax.eval.metrics_json"


class Undeclared(ValueError):
  """A key of the job's metrics that this module does not declare, or a value not of its
  declared shape (a section that is not a dict, rows that are not a list of dicts): the
  report would hold a number no reader knows of.  Declare it (:func:`key`)."""


def key(
  name: Optional[str] = None,
  *,
  default=None,
  section=None,
  rows=None,
  named=None,
  optional=False,
  open=False,
):
  """A field read from key ``name`` of its section's dict (default: the field's own name).

  ``section``: a dataclass read from the dict found there (an empty one where it is absent;
  with ``optional``, None); ``rows``: a tuple of that dataclass, one per item of the list
  found there; ``named``: ``{name: that dataclass}`` of the dict found there; ``open``: the
  section's open part, ``{key: value}`` of the keys no other field declares (at most one a
  section).  ``default``: the value where the key is absent (a key that holds None reads as
  None).
  """
  if section is not None:
    default = None if optional else dataclasses.MISSING
    factory = dataclasses.MISSING if optional else section
  elif rows is not None:
    default, factory = dataclasses.MISSING, tuple
  elif named is not None or open:
    default, factory = dataclasses.MISSING, dict
  else:
    factory = dataclasses.MISSING
  return dataclasses.field(
    default=default,
    default_factory=factory,
    metadata={
      "key": name,
      "section": section,
      "rows": rows,
      "named": named,
      "optional": optional,
      "open": open,
    },
  )


@dataclasses.dataclass(frozen=True)
class Section:
  """Base of every section of metrics.json.  ``held``: the keys it states, in order, the
  keys metrics.json writes of it (JSON tells an absent key from one that holds null, so a
  section says which of its keys it holds); None: every key it declares (a section built
  directly).  Equality and repr leave it out: two sections are equal where their values
  are.  A section read from a dict (:func:`read`) holds that dict's keys; one built by a
  stage states its own (:meth:`stating`, :meth:`with_`, :meth:`joined`)."""

  held: Optional[Tuple[str, ...]] = dataclasses.field(
    default=None, compare=False, repr=False, kw_only=True
  )

  @classmethod
  def of(cls, d):
    """``d`` (a dict of this section, or an instance already) read typed, leniently."""
    return d if isinstance(d, cls) else read(cls, d)

  @classmethod
  def stating(cls, **values):
    """The section that states these fields (by attribute), in this order, and no other."""
    return cls(**values, held=tuple(_key_of(cls, name) for name in values))

  def with_(self, **values):
    """A copy with these fields (by attribute) set and stated: a key it held stays in its
    place, one it did not is stated after the others, in the order given."""
    held = self.keys()
    more = tuple(k for k in (_key_of(type(self), name) for name in values) if k not in held)
    return dataclasses.replace(self, **values, held=held + more)

  @classmethod
  def joined(cls, *parts):
    """One section of what each of ``parts`` (of this class) states: a key stated by two
    takes the later one's value in the earlier one's place, as ``{**a, **b}`` of their
    dicts does."""
    keys, rest = _declared(cls)
    values, held, extra = {}, [], {}
    for part in parts:
      for k in part.keys():
        f = keys.get(k)
        if f is None:
          extra[k] = getattr(part, rest.name)[k]
        else:
          values[f.name] = getattr(part, f.name)
        if k not in held:
          held.append(k)
    if rest is not None:
      values[rest.name] = extra
    return cls(**values, held=tuple(held))

  def keys(self) -> Tuple[str, ...]:
    """The keys this section states, in the order written (:attr:`held`)."""
    if self.held is not None:
      return self.held
    keys, rest = _declared(type(self))
    return (*keys, *({} if rest is None else getattr(self, rest.name)))

  def to_dict(self) -> dict:
    """The dict of this section (:func:`write`), metrics.json's text of it."""
    return write(self)


def _key_of(cls, name: str) -> str:
  """The key of the field ``name`` of the section ``cls`` (not its open part)."""
  for k, f in _declared(cls)[0].items():
    if f.name == name:
      return k
  raise TypeError(f"{cls.__name__} declares no key for the field {name!r}")


@functools.lru_cache(maxsize=None)
def _declared(cls) -> Tuple[dict, Optional[dataclasses.Field]]:
  """``({key: field}, the open part's field or None)`` of the section ``cls``."""
  keys, rest = {}, None
  for f in dataclasses.fields(cls):
    if "key" not in f.metadata:
      continue  # held
    if f.metadata["open"]:
      rest = f
    else:
      keys[f.metadata["key"] or f.name] = f
  return keys, rest


def declared_keys(cls) -> Tuple[str, ...]:
  """The keys the section ``cls`` declares (not its open part's)."""
  return tuple(_declared(cls)[0])


def _mapping(value) -> Mapping:
  """``value`` where it is a dict, else an empty one (an absent or None section)."""
  return value if isinstance(value, Mapping) else {}


def _refuse(where: str, what: str):
  raise Undeclared(f"metrics.json key {where} {what} in {WHERE}")


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
  """``{field name: its declared type}`` of the section ``cls``."""
  return typing.get_type_hints(cls)


def fits(tp, value) -> bool:
  """Whether ``value``, read from JSON, is of the declared type ``tp``: None always is (an
  absent number, or one that was not finite); an integer is a whole number (``3.0`` too), a
  number any int or float but true or false, a list's items and an object's values each of
  theirs.  A type this module does not declare (``Any``) takes anything."""
  if value is None or tp is Any:
    return True
  origin, args = typing.get_origin(tp), typing.get_args(tp)
  if origin is Union:
    return any(fits(a, value) for a in args if a is not type(None))
  if tp is bool:
    return isinstance(value, bool) or (_whole(value) and value in (0, 1))
  if tp is int:
    return _whole(value)
  if tp is float:
    return _real(value)
  if tp is str:
    return isinstance(value, str)
  if origin in (collections.abc.Sequence, tuple, list):
    item = args[0] if args else Any
    return isinstance(value, (list, tuple)) and all(fits(item, v) for v in value)
  if origin is collections.abc.Mapping:
    item = args[1] if len(args) == 2 else Any
    return isinstance(value, Mapping) and all(
      isinstance(k, str) and fits(item, v) for k, v in value.items()
    )
  return True


def _real(value) -> bool:
  """A number a float holds (not true or false, not an integer past a float's range)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    return False
  try:
    float(value)
  except OverflowError:
    return False
  return True


def _whole(value) -> bool:
  if isinstance(value, bool):
    return False
  if isinstance(value, numbers.Integral):
    return _real(value)
  return isinstance(value, float) and value.is_integer()


def _what(tp, many: bool = False) -> str:
  """The declared type ``tp`` in words (``many``: of a list's items)."""
  origin, args = typing.get_origin(tp), typing.get_args(tp)
  if origin is Union:
    return " or ".join(_what(a, many) for a in args if a is not type(None))
  one = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
  more = {bool: "true or false", int: "whole numbers", float: "numbers", str: "strings"}
  if tp in one:
    return (more if many else one)[tp]
  if origin in (collections.abc.Sequence, tuple, list):
    item = args[0] if args else Any
    lists = "lists" if many else "a list"
    return lists + ("" if item is Any else f" of {_what(item, True)}")
  if origin is collections.abc.Mapping:
    return "objects" if many else "an object"
  return str(tp)


def shown(value) -> str:
  """``value`` as JSON, cut short (to say what a file held)."""
  try:
    text = json.dumps(value)
  except (TypeError, ValueError):
    text = repr(value)
  return text if len(text) <= 40 else text[:37] + "..."


def read(
  cls,
  d: Optional[Mapping],
  *,
  strict: bool = False,
  where: str = "",
  problems: Optional[list] = None,
):
  """An instance of the section ``cls`` (a :class:`Section` of :func:`key` fields) read from
  ``d``, recording which keys ``d`` held.  Lenient by default (:meth:`Metrics.from_metrics`);
  ``strict``: every key of ``d`` declared and every value of its declared shape, else
  :class:`Undeclared` naming the key's full path (``where``: this section's).  ``problems``
  (a list, lenient): a value not of its field's declared type (a count that is a string, a
  section that is a list) reads as absent, and ``PATH holds VALUE, not TYPE`` is appended to
  it; None in place of a value is never one (it reads as absent)."""
  if strict and not isinstance(d, Mapping):
    _refuse(where, f"holds {type(d).__name__}, not the section {cls.__name__} declared")
  d = _mapping(d)
  keys, rest = _declared(cls)
  check = problems is not None and not strict
  values, wrong = {}, set()

  def bad(name: str, at: str, raw, what: str) -> None:
    problems.append(f"{at} holds {shown(raw)}, not {what}")
    wrong.add(name)

  for name, f in keys.items():
    raw = d.get(name, _ABSENT)
    if raw is _ABSENT:
      continue  # the field's default
    meta, at = f.metadata, f"{where}.{name}" if where else name
    if meta["section"] is not None:
      if strict and raw is None and meta["optional"]:
        values[f.name] = None
      elif strict:
        values[f.name] = read(meta["section"], raw, strict=True, where=at)
      elif check and raw is not None and not isinstance(raw, Mapping):
        bad(name, at, raw, "an object")
      else:
        empty = not raw or not isinstance(raw, Mapping)
        values[f.name] = (
          None
          if empty and meta["optional"]
          else read(meta["section"], raw, where=at, problems=problems)
        )
    elif meta["rows"] is not None:
      if strict and not isinstance(raw, (list, tuple)):
        _refuse(at, f"holds {type(raw).__name__}, not the rows of {meta['rows'].__name__}")
      if check and raw is not None and not isinstance(raw, (list, tuple)):
        bad(name, at, raw, "a list of objects")
        continue
      rows = raw if isinstance(raw, (list, tuple)) else ()
      if check:
        for i, r in enumerate(rows):
          if r is not None and not isinstance(r, Mapping):
            problems.append(f"{at}[{i}] holds {shown(r)}, not an object")
      values[f.name] = tuple(
        read(meta["rows"], r, strict=strict, where=f"{at}[{i}]", problems=problems)
        for i, r in enumerate(rows)
      )
    elif meta["named"] is not None:
      if strict and not isinstance(raw, Mapping):
        _refuse(at, f"holds {type(raw).__name__}, not {{name: {meta['named'].__name__}}}")
      if check and raw is not None and not isinstance(raw, Mapping):
        bad(name, at, raw, "an object")
        continue
      named = _mapping(raw)
      if check:
        for k, v in named.items():
          if v is not None and not isinstance(v, Mapping):
            problems.append(f"{at}.{k} holds {shown(v)}, not an object")
      values[f.name] = {
        k: read(meta["named"], v, strict=strict, where=f"{at}.{k}", problems=problems)
        for k, v in named.items()
      }
    elif check and not fits(_hints(cls)[f.name], raw):
      bad(name, at, raw, _what(_hints(cls)[f.name]))
    else:
      values[f.name] = raw
  others = [k for k in d if k not in keys]
  if rest is not None:
    values[rest.name] = {k: d[k] for k in others}
  elif strict and others:
    _refuse(f"{where}.{others[0]}" if where else others[0], "is not declared")
  held = tuple(k for k in d if (k in keys or rest is not None) and k not in wrong)
  return cls(**values, held=held)


def write(section: Section) -> dict:
  """The dict of ``section``, the inverse of :func:`read`: the keys it was read with, in
  their order (every declared key where it was built directly), each value as it was read;
  subsections, rows and named sections written the same way."""
  keys, rest = _declared(type(section))
  extra = {} if rest is None else getattr(section, rest.name)
  out = {}
  for name in section.keys():
    f = keys.get(name)
    if f is None:
      out[name] = extra[name]
      continue
    value, meta = getattr(section, f.name), f.metadata
    if meta["section"] is not None:
      out[name] = None if value is None else write(value)
    elif meta["rows"] is not None:
      out[name] = [write(row) for row in value]
    elif meta["named"] is not None:
      out[name] = {k: write(v) for k, v in value.items()}
    else:
      out[name] = value
  return out
