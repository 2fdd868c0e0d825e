"""The library's own error types: every bad argument, file or run it reports is one of these.

Binaries report an :class:`Error` in one line and exit non-zero; any other
exception is a bug and keeps its traceback.  An error names the settings it is
about as data (``argument``, ``mentions``), so a program can spell them as its
user set them (:meth:`Error.named`, e.g. as command-line flags).
"""

from __future__ import annotations

from typing import Callable, Optional

_OPEN, _CLOSE = "(`'\"", ".,;:)`'\""


def _split(word: str) -> tuple[str, str, str]:
  """``word`` as (opening punctuation, the word, closing punctuation)."""
  core = word.lstrip(_OPEN)
  lead = word[: len(word) - len(core)]
  core = core.rstrip(_CLOSE)
  return lead, core, word[len(lead) + len(core) :]


def _path(flag: str) -> str:
  """``--config.victim.lr`` -> ``victim.lr``."""
  return flag.lstrip("-").removeprefix("config.")


def _is_name(text: str) -> bool:
  return bool(text) and all(part.isidentifier() for part in text.split("."))


def settings_in(message: str) -> tuple[str, ...]:
  """The words of ``message`` that name a setting with its value, ``NAME=VALUE``."""
  words = (_split(w)[1] for w in message.split())
  return tuple(w for w in words if "=" in w and _is_name(w.split("=", 1)[0]))


def spelled(text: str, spell: Callable[[str, Optional[str]], Optional[str]]) -> str:
  """``text`` (the library's words for a reader: a verdict's reasons, a warning) with each
  word that names a setting, ``NAME=VALUE`` or a dotted ``NAME`` (``threat.theta0``),
  spelled ``spell(name, value)`` (value None: the name alone; a None result keeps the
  library's word, as for any other word)."""
  words = text.split(" ")
  for i, word in enumerate(words):
    lead, core, trail = _split(word)
    name, eq, value = core.partition("=")
    if _is_name(name) and (eq or "." in name):
      words[i] = lead + (spell(name, value if eq else None) or core) + trail
  return " ".join(words)


class Error(Exception):
  """Base of every error recon_jax raises on purpose.

  ``argument``: the library's name of the setting at fault (``lr``, ``victim.lr``), None
  when a file or a run is; ``mentions``: the words of the message that name other settings
  (``overwrite=True``, ``workdir``), as the message writes them; a raise-site that does not
  give them has its message's ``NAME=VALUE`` words taken.
  """

  argument: Optional[str] = None
  _mentions: Optional[tuple] = None

  @property
  def mentions(self) -> tuple[str, ...]:
    """As given, else the message's ``NAME=VALUE`` words (:func:`settings_in`)."""
    return self._mentions if self._mentions is not None else settings_in(str(self))

  @mentions.setter
  def mentions(self, words) -> None:
    self._mentions = tuple(words)

  def named(self, spell: Callable[[str, Optional[str]], Optional[str]]) -> str:
    """The message's first line with its settings spelled ``spell(name, value)`` (value
    None: the name alone; a None result keeps the library's word).

    The argument replaces the message's first word where that names it (``lr must be``,
    ``victim.lr: ...``, ``m=15 ...``); otherwise it is put in front (``SPELLED: message``).
    """
    text = str(self).strip()
    words = (text.splitlines()[0] if text else type(self).__name__).split(" ")
    argument = self.argument
    own = spell(argument, None) if argument else None
    mentions = self.mentions
    for i, word in enumerate(words):
      lead, core, trail = _split(word)
      name, eq, value = core.partition("=")
      if i == 0 and own and not lead and (eq or trail[:1] in ("", ":", ",", ";", "'")):
        if name in (argument, argument.rsplit(".", 1)[-1], _path(own)) or argument.endswith(
          "." + name
        ):
          words[0], own = own + eq + value + trail, None
          continue
      if core in mentions:
        words[i] = lead + (spell(name, value if eq else None) or core) + trail
    line = " ".join(words)
    return f"{own}: {line}" if own and not line.startswith(own) else line


class ConfigError(Error, ValueError):
  """An argument the library cannot run with.

  ``argument`` is the library's name for it (the first word of the message when not
  given); ``mentions`` the words naming other settings (see :class:`Error`), so a binary
  can name its own settings instead.
  """

  def __init__(
    self, message: str, argument: Optional[str] = None, mentions: Optional[tuple] = None
  ):
    super().__init__(message)
    if argument is None:  # the message's first word, up to what cannot be in a name
      first = message.lstrip("`'\"")
      n = next((i for i, c in enumerate(first) if not (c.isalnum() or c in "_.")), len(first))
      argument = first[:n] if first[:n] and not first[0].isdigit() else None
    self.argument = argument
    if mentions is not None:
      self.mentions = mentions


class ResultFileError(ConfigError):
  """A finished run's file that cannot be read as its result (not JSON, not the object it
  should be, a number it needs missing or of another type): one line, ``FILE: what is
  wrong``, naming no setting."""

  def __init__(self, path: str, what: str):
    super().__init__(f"{path}: {what}", mentions=())
    self.argument = None
    self.path = path


class RunFailed(Error, RuntimeError):
  """The run finished and wrote its results, but they are a failure (a binary exits with 2)."""

  exit_code = 2
