"""A line a person can see at least every :data:`PROGRESS_S` seconds, in every phase of a job.

The library logs a line wherever it can (a chunk of the search, a phase begun), but a
compiled program, a linear program or a victim's training can run for minutes between two
of them.  :func:`watch` runs, for the length of a job, a daemon thread that logs
``still <phase>: N s in it`` whenever :data:`PROGRESS_S` seconds pass without any line
of the library's log (absl logging); the job names its phases with :func:`phase`, and a
long loop says where it is with :func:`beat`, both without logging anything themselves.
Solvers that release the GIL (XLA's compiler and programs, scipy's HiGHS) let the thread
speak while they run.

  with progress.watch():
    progress.phase("the cone's linear programs")
    for i, start in enumerate(starts):
      progress.beat(f"start {i + 1} of {len(starts)}")
      ...
"""

from __future__ import annotations

import contextlib
import logging as py_logging
import threading
import time
from typing import Iterator, Optional

from absl import logging

PROGRESS_S = 25.0  # the longest a watched job goes without a line (README promises 30 s)

_lock = threading.Lock()
_state = {"phase": "working", "detail": "", "since": time.monotonic(), "last": time.monotonic()}
_watchers = [0]  # nested watch() calls share one thread


class _Seen(py_logging.Filter):
  """Notes the time of every line of the library's log (it filters nothing out)."""

  def filter(self, record) -> bool:
    _state["last"] = time.monotonic()
    return True


_SEEN = _Seen()


def phase(name: str) -> None:
  """The phase a job is in now (``still <name>`` in the watcher's lines); logs nothing."""
  now = time.monotonic()
  _state.update(phase=name, detail="", since=now)


def beat(detail: str) -> None:
  """Where a long phase is (``start 3 of 20``), said by the next watcher line; logs nothing."""
  _state["detail"] = detail


def line(now: Optional[float] = None) -> str:
  """The watcher's line for the phase as it stands."""
  now = time.monotonic() if now is None else now
  detail = f", {_state['detail']}" if _state["detail"] else ""
  return f"still {_state['phase']}{detail}: {now - _state['since']:.0f} s in it"


def _run(stop: threading.Event, every_s: float) -> None:
  while not stop.wait(min(1.0, every_s / 4)):
    if time.monotonic() - _state["last"] >= every_s:
      logging.info("%s", line())  # its own record resets the clock (_Seen)


@contextlib.contextmanager
def watch(every_s: float = PROGRESS_S) -> Iterator[None]:
  """While the block runs, a line at least every ``every_s`` seconds (see the module)."""
  logger = py_logging.getLogger("absl")
  with _lock:
    _watchers[0] += 1
    first = _watchers[0] == 1
    if first:
      logger.addFilter(_SEEN)
      _state.update(last=time.monotonic())
      stop = threading.Event()
      thread = threading.Thread(target=_run, args=(stop, every_s), daemon=True)
      thread.start()
  try:
    yield
  finally:
    with _lock:
      _watchers[0] -= 1
      if first:
        stop.set()
        logger.removeFilter(_SEEN)
    if first:
      thread.join(timeout=2.0)
