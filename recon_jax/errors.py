"""The library's own error types: every bad argument, file or run it reports is one of these.

Binaries report an :class:`Error` in one line and exit non-zero; any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from typing import Optional


class Error(Exception):
  """Base of every error recon_jax raises on purpose."""


class ConfigError(Error, ValueError):
  """An argument the library cannot run with.

  ``argument`` is the library's name for it (the first word of the message
  when not given), so a binary can name its own setting instead.
  """

  def __init__(self, message: str, argument: Optional[str] = None):
    super().__init__(message)
    if argument is None:
      match = re.match(r"[`'\"]?([A-Za-z_][A-Za-z0-9_.]*)", message)
      argument = match.group(1) if match else None
    self.argument = argument


class RunFailed(Error, RuntimeError):
  """The run finished and wrote its results, but they are a failure (a binary exits with 2)."""

  exit_code = 2
