"""The binaries: ``python -m experiments.NAME``, each a main over :mod:`recon_jax.cli`.

Only the standard library is imported here: a binary calls :func:`starting` on its first
line, before it loads JAX and the library (seconds), so that a signal in those seconds
already ends it in one line (:mod:`recon_jax.core.signals` takes over once the flags are
defined).
"""

import os
import signal
import sys

# SIGINT (Ctrl-C) and SIGTERM: the exit codes recon_jax.core.signals gives them.
_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def before_start_line(signum: int) -> str:
  """What a binary stopped by ``signum`` before its run started prints: it read its
  settings at most, and wrote nothing (recon_jax.core.signals.before_start says the same)."""
  how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
  return f"{how} before the run started; nothing was written; run the same command to start again"


def _stop_early(signum, frame) -> None:
  """Ends the process at once: nothing of the run exists yet (no workdir, no lock)."""
  del frame
  try:
    sys.stderr.write(before_start_line(signum) + "\n")
    sys.stderr.flush()
  finally:
    os._exit(_CODES[signum])


def starting(name: str) -> None:
  """Binary ``name``'s first line: SIGINT and SIGTERM end it in one line from here on (SIGINT
  even when the process was started with it ignored, as ``cmd &`` in a script starts one),
  and at a terminal it says that it is starting, before JAX and the library load (seconds).
  Nothing happens where the binary's module is only imported (a test)."""
  if not sys.argv or not sys.argv[0].endswith(f"{name}.py"):
    return
  for signum in _CODES:
    signal.signal(signum, _stop_early)
  if sys.stderr.isatty() and "--help" not in sys.argv:
    print(f"{name}: starting (loading JAX; every setting is checked first)", file=sys.stderr)
