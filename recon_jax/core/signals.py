"""Ctrl-C (SIGINT) and SIGTERM heard at every moment of a binary's process.

Three things kept a signal from stopping a run, each at its root here:

* A process started in the background by a shell without job control (``cmd &`` in a
  script, a test harness) inherits SIGINT *ignored*, and Python then never installs its
  Ctrl-C handler: the run went on to its end.  :func:`install` handles SIGINT whatever the
  process inherited.
* Python runs a handler in the main thread between two bytecodes, so a handler waits for
  the C call the main thread is in: a linear program (HiGHS releases the GIL but takes
  no signal) or an XLA call can run for minutes.  :func:`install` also starts a watchdog
  thread, woken by the signal itself (``signal.set_wakeup_fd``, written by the C-level
  handler at once): when the process has not ended :data:`GRACE_S` seconds after the
  signal, the watchdog ends it, with the same line and exit code.
* jax's compile returns on a signal and leaves its compiler threads running; an
  interpreter that then shuts down normally crashes in its teardown (exit 139, "Fatal
  Python error").  :func:`exit_now` ends the process without the teardown, after the
  exit handlers (``atexit``: the workdir's lock) and with both streams flushed.

A signal whose exception lands where Python cannot raise it (a garbage-collector callback)
would print a traceback and be dropped; it is dropped silently instead (:func:`_quiet`), and
the watchdog ends the process.

A binary hears both from its first line on: its own handler, standard library only, ends
it in one line while it loads (``experiments.starting``), and :func:`install` takes over
once its flags are defined.

The process's own code sees the signal as before: :class:`KeyboardInterrupt` (SIGINT) or
:class:`Terminated` (SIGTERM) raised in the main thread, once.  Only the binaries install
this (:func:`recon_jax.cli.run_main`); a library user's process keeps its own handlers.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

# How long the watchdog lets the main thread end the process itself after a signal: the
# main thread answers at once unless it is inside one long C call.
GRACE_S = 3.0
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
EXIT_HANDLERS_S = 2.0  # the longest the exit handlers (the workdir's lock) may take then


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised in the main thread so that it ends a run as Ctrl-C does (one line)."""


class _State:
  installed = False
  received: Optional[int] = None  # the first SIGINT/SIGTERM received
  received_at = 0.0
  describe: Optional[Callable[[int], str]] = None
  exiting = threading.Lock()  # held by whichever thread ends the process


def before_start(signum: int) -> str:
  """The line of a binary stopped by ``signum`` before its run started (its settings read at
  most, no workdir opened): the binaries' own handler of their first seconds, installed
  before JAX loads (``experiments.starting``), prints the same."""
  how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
  return f"{how} before the run started; nothing was written; run the same command to start again"


def installed() -> bool:
  """Whether :func:`install` ran in this process (a binary's)."""
  return _State.installed


def received() -> Optional[int]:
  """The first SIGINT or SIGTERM this process received since :func:`install` (None: none)."""
  return _State.received


def _handler(signum, frame):
  del frame
  if _State.received is not None:  # the process is stopping already: once is enough
    return
  _State.received, _State.received_at = signum, time.time()
  raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _quiet(previous: Callable) -> Callable:
  """A ``sys.unraisablehook`` that drops the signal's own exception where Python cannot raise
  it (a garbage-collector callback, jax's among them, prints it as "Exception ignored" with a
  traceback) and passes every other to ``previous``.  The signal is recorded already, and the
  watchdog ends the process :data:`GRACE_S` seconds later with its one line."""

  def hook(unraisable) -> None:
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _State.received is not None:
      return
    previous(unraisable)

  return hook


def exit_now(code: int, line: str) -> None:
  """Prints ``line`` on stderr and ends the process with ``code``: the exit handlers run
  (``atexit``), the streams are flushed, and the interpreter's teardown is skipped (it
  crashes while jax's compiler threads still run).  A second caller (the main thread and
  the watchdog at once) waits for the first to end the process."""
  if not _State.exiting.acquire(blocking=False):
    while True:
      time.sleep(60)
  try:
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    # the exit handlers, in a thread of their own: one that waits on what the main
    # thread holds must not keep the process alive
    handlers = threading.Thread(target=atexit._run_exitfuncs, daemon=True)
    handlers.start()
    handlers.join(EXIT_HANDLERS_S)
    sys.stderr.flush()
  finally:
    os._exit(code)


def _watch(fd: int, grace_s: float) -> None:
  while True:
    try:
      data = os.read(fd, 64)
    except InterruptedError:
      continue
    except OSError:
      return
    got = [s for s in data if s in EXIT_CODES]
    if not got:
      continue
    signum = _State.received or got[0]
    deadline = time.time() + grace_s
    while time.time() < deadline:
      time.sleep(0.05)
    line = _State.describe(signum) if _State.describe else "interrupted"
    exit_now(EXIT_CODES[signum], line)


def install(describe: Callable[[int], str], grace_s: float = GRACE_S) -> None:
  """Makes SIGINT and SIGTERM stop this process at any moment (main thread only).

  Each raises its exception in the main thread (:class:`KeyboardInterrupt`,
  :class:`Terminated`), SIGINT even when the process was started with it ignored; if the
  process still runs ``grace_s`` seconds later (the main thread inside a long C call), a
  watchdog thread prints ``describe(signum)`` and ends it with exit code 130 (SIGINT) or
  143 (SIGTERM), as :func:`exit_now` does.
  """
  _State.describe = describe
  if _State.installed:
    return
  for signum in EXIT_CODES:
    signal.signal(signum, _handler)
  sys.unraisablehook = _quiet(sys.unraisablehook)
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  threading.Thread(
    target=_watch, args=(read_fd, grace_s), name="stop-watchdog", daemon=True
  ).start()
  _State.installed = True
