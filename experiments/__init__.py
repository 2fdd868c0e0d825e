"""The binaries: ``python -m experiments.NAME``, each a main over :mod:`recon_jax.cli`.

Only the standard library is imported here, so that a signal in the seconds JAX takes to
load already ends a binary in one line (:mod:`recon_jax.core.signals` takes over later).
"""

import os
import signal
import sys

_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # as recon_jax.core.signals exits


def before_start_line(signum: int) -> str:
  """What a binary stopped before its run started prints (signals.before_start's words)."""
  how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
  return f"{how} before the run started; nothing was written; run the same command to start again"


def _stop_early(signum, frame) -> None:
  del frame
  try:
    sys.stderr.write(before_start_line(signum) + "\n")
    sys.stderr.flush()
  finally:
    os._exit(_CODES[signum])  # nothing of the run exists yet: no workdir, no lock


def starting(name: str) -> None:
  """Binary ``name``'s first line: SIGINT (even where started ignored, as ``cmd &`` does) and
  SIGTERM end it in one line from here on; at a terminal it says it is starting.  A no-op
  where the module is only imported (a test)."""
  if not sys.argv or not sys.argv[0].endswith(f"{name}.py"):
    return
  for signum in _CODES:
    signal.signal(signum, _stop_early)
  if sys.stderr.isatty() and "--help" not in sys.argv:
    print(f"{name}: starting (loading JAX; every setting is checked first)", file=sys.stderr)
