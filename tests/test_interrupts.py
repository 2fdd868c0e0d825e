"""Ctrl-C and SIGTERM inside a chunked loop wait for the chunk boundary (recon_jax.interrupts)."""

import os
import signal

import pytest

from recon_jax import interrupts


def test_ctrl_c_waits_for_check_and_the_handlers_come_back():
  before = signal.getsignal(signal.SIGINT)
  ran = []
  with pytest.raises(KeyboardInterrupt):
    with interrupts.between_chunks():
      os.kill(os.getpid(), signal.SIGINT)
      ran.append("after the signal")  # the chunk in flight finishes
      interrupts.check()
      ran.append("never")
  assert ran == ["after the signal"]
  assert signal.getsignal(signal.SIGINT) is before


def test_a_second_signal_acts_at_once_and_sigterm_runs_the_previous_handler():
  class Term(Exception):
    pass

  def on_term(signum, frame):
    raise Term()

  old = signal.signal(signal.SIGTERM, on_term)
  try:
    with pytest.raises(KeyboardInterrupt):
      with interrupts.between_chunks():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # raises here, before any check
    with pytest.raises(Term):
      with interrupts.between_chunks():
        os.kill(os.getpid(), signal.SIGTERM)
    # leaving the block acts on a noted signal, and nothing is left pending
    interrupts.check()
    assert signal.getsignal(signal.SIGTERM) is on_term
  finally:
    signal.signal(signal.SIGTERM, old)
