"""Ctrl-C and SIGTERM at chunk boundaries: a long loop of compiled chunks stops between them.

A signal's handler runs at whatever Python line the main thread is on; in a tight loop of
compiled chunks that is often inside JAX's dispatch, and an exception raised there can
leave the process unable to exit.  Inside :func:`between_chunks` the first SIGINT or
SIGTERM is only noted; :func:`check` (called by the loop after each chunk) then runs the
handler that was installed before (Ctrl-C: ``KeyboardInterrupt``), as does leaving the
block.  A second signal acts at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_pending: list = []  # the noted signal and its previous handler, while one waits
_before: dict = {}  # signal -> the handler installed before the outermost block


def _act(signum: int, handler) -> None:
  if callable(handler):
    handler(signum, None)
  elif handler == signal.SIG_DFL and signum == signal.SIGTERM:
    raise SystemExit(128 + signum)
  elif signum == signal.SIGINT and handler != signal.SIG_IGN:
    raise KeyboardInterrupt


def check() -> None:
  """Acts on a signal noted since the last check (the handler installed before runs)."""
  if _pending:
    signum, handler = _pending.pop()
    _act(signum, handler)


def _note(signum, frame) -> None:
  del frame
  if _pending:  # a second one: at once
    _pending.clear()
    _act(signum, _before.get(signum, signal.SIG_DFL))
  _pending.append((signum, _before.get(signum, signal.SIG_DFL)))


@contextlib.contextmanager
def between_chunks():
  """Within, SIGINT and SIGTERM wait for :func:`check` (or the block's end); nested blocks
  share the outermost's handlers.  Outside the main thread it changes nothing."""
  if threading.current_thread() is not threading.main_thread() or _before:
    yield
    return
  for s in _SIGNALS:
    _before[s] = signal.getsignal(s)
    signal.signal(s, _note)
  try:
    yield
  finally:
    for s, h in _before.items():
      signal.signal(s, h)
    _before.clear()
    check()
