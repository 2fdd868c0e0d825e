"""A watched job says something at least every few seconds, and only when it is silent."""

import logging as py_logging
import time

from absl import logging
import pytest

from recon_jax.core import progress


@pytest.fixture
def lines():
  """The messages of the library's log while a test runs (absl at INFO)."""
  seen = []

  class Keep(py_logging.Handler):
    def emit(self, record):
      seen.append(record.getMessage())

  handler, logger = Keep(), py_logging.getLogger("absl")
  before = logging.get_verbosity()
  logging.set_verbosity(logging.INFO)
  logger.addHandler(handler)
  yield seen
  logger.removeHandler(handler)
  logging.set_verbosity(before)


def test_a_silent_phase_is_named_every_interval(lines):
  with progress.watch(every_s=0.2):
    progress.phase("solving a linear program")
    progress.beat("start 3 of 20")
    time.sleep(0.75)
  said = [x for x in lines if x.startswith("still solving a linear program, start 3 of 20")]
  assert 2 <= len(said) <= 4, lines
  n = len(lines)
  time.sleep(0.4)
  assert len(lines) == n  # the watcher stops with the block


def test_a_phase_that_logs_on_its_own_gets_no_extra_lines(lines):
  with progress.watch(every_s=0.3):
    progress.phase("searching")
    for _ in range(10):
      logging.info("chunk done")
      time.sleep(0.1)
  assert not [x for x in lines if x.startswith("still")], lines
