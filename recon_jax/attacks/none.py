"""No reconstruction: the audit of membership alone (``attack=none``).

The job trains or loads the victim, then scores every given image by the membership tests
read off the weights (:mod:`recon_jax.eval.weight_tests`: the fit of theta*, or of the
change theta* - theta_0 with a known start, by every given image's margin gradient, beside
the loss and confidence baselines), and concludes on them alone.  Nothing is searched and
no image is reconstructed, so it takes seconds where an attack takes minutes.
"""

from __future__ import annotations

import numpy as np

from recon_jax.attacks.spec import AttackSpec, no_check, register


def no_candidates(setup, options):
  """Zero candidates ``[1, 0, *input_shape]`` and their zero labels."""
  del options
  return np.zeros((1, 0, *setup.input_shape), np.float32), np.zeros((0,), np.int32)


SPEC = register(
  AttackSpec(
    name="none",
    build=lambda options, setup: None,
    check=no_check,
    hparams=(),
    state_arrays=lambda options, common: 0,
    direct=no_candidates,
    doc="no reconstruction: only the membership tests read off the weights (seconds)",
    examples=(),  # nothing to run: the contract is for searches
    reconstructs=False,
  )
)
