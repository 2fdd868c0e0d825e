"""Audit the model you have, on the data you have: the main job's settings for a threat model
(:class:`~recon_jax.job.settings.Threat`: a model file, the images it was trained on,
held-out images of the same distribution and, where known, the weights its training started
from).

The audit's settings are the threat section's, at its top, and the model's training
``loss``; :func:`audit_job` turns them into a :class:`~recon_jax.job.settings.JobConfig`:
with theta_0 (``theta0``) the attack of a model fine-tuned from known weights
(:data:`~recon_jax.job.settings.KNOWN_INIT_ATTACK`; candidates in the first layer's span
where that layer is dense; or the job's own ``attack``, e.g. ``cone``), without it Haim et
al.'s attack on theta* alone.  The run is the main job's, so its workdir, verdict and report
are the same; an error names the threat's setting (``threat.model``), which the audit's
flags spell as its own (``--config.model``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from recon_jax import attacks
from recon_jax.core import rules
from recon_jax.errors import ConfigError
from recon_jax.job.settings import KNOWN_INIT_ATTACK, JobConfig, Threat
from recon_jax.victims import foreign

# Candidates per restart of a blind attack (no training images, so no n to scale with).
BLIND_CANDIDATES = 40
# The audit's setting beside the threat's: how the model was trained (the job's victim.loss).
LOSSES = ("logistic", "ce")
HELP = {
  **rules.meanings_of(Threat),
  "loss": "how it was trained: logistic (one output) | ce (one output per class)",
}
# Listed first by the audit's --help: the files a user gives (the job's settings follow).
FIRST = ("model", "train", "heldout", "theta0", "loss")
# Not listed by the audit's --help: the main job's settings that do not apply to an imported
# model.
NOT_LISTED = ("job.data_dir", "job.use_cache")


def threat_of(settings: Mapping) -> Threat:
  """The threat section of the audit's ``settings`` (its top level)."""
  return Threat(
    **{f.name: settings[f.name] for f in dataclasses.fields(Threat) if f.name in settings}
  )


def audit_job(
  threat: Threat, loss: str = "logistic", base: Optional[JobConfig] = None
) -> JobConfig:
  """The main job's settings for ``threat`` and a model trained with ``loss`` (``base``: the
  job's other settings, e.g. the restarts).  Without ``threat.train`` a blind attack:
  ``BLIND_CANDIDATES`` candidates unless ``base.search.m`` says; with ``threat.theta0`` the attacker
  knows theta_0.

  Raises ConfigError naming the threat's setting that is missing (``theta0`` for an attack
  that reads theta_0: in the audit known_init follows from it); the files themselves are
  read and checked when the job is planned (:func:`recon_jax.job.planning.prepare`).
  """
  if not threat.model:
    raise ConfigError(
      "threat.model: give the model file to audit (.pt, .pth or .safetensors).", "threat.model"
    )
  if not threat.heldout:
    raise ConfigError(
      "threat.heldout: give held-out images of the same distribution: they are the baseline "
      "that tells a reconstruction from a look-alike (and, without train, the inputs' size).",
      "threat.heldout",
    )
  rules.check_value("victim.loss", loss, rules.Rule("str", choices=LOSSES))
  base = base or JobConfig()
  if attacks.get(base.attack).reads_init and not threat.theta0:  # known_init follows theta0
    raise ConfigError(
      f"threat.theta0: attack={base.attack} reads theta* - theta_0: give the weights the "
      "model's training started from.",
      "threat.theta0",
      (f"attack={base.attack}",),
    )
  if not threat.train and not base.search.m:
    base = base.replace(**{"search.m": BLIND_CANDIDATES})
  if threat.theta0:
    threat = dataclasses.replace(threat, known_init=True)
  settings = dict(threat=threat, victim=dataclasses.replace(base.victim, loss=loss))
  if threat.known_init and base.attack == "kkt":  # the known-init search (kkt's settings)
    settings.update(KNOWN_INIT_ATTACK, **{"kkt.subspace": _dense_first_layer(threat.model)})
  return base.replace(**settings)


def _dense_first_layer(path: str) -> bool:
  """Whether the model's first layer is dense (its candidates can live in the span)."""
  return foreign.first_layer_input(path)[0] == "dense"
