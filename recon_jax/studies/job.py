"""A reconstruction job's config read into its pieces: the problem, the candidates' labels,
the victim's recipe, the sweep's hyperparameters and stages.

Pure functions of the job's typed settings (:class:`recon_jax.studies.settings.JobConfig`),
shared by the checks made before any work (:mod:`recon_jax.studies.checks`) and the run itself
(:mod:`recon_jax.studies.pipeline`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import numpy as np

from recon_jax import attacks, data, losses, sweep
from recon_jax.errors import ConfigError
from recon_jax.studies.settings import JobConfig
from recon_jax.victims import readers, victim

RANGE_NAMES = ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")


def candidate_labels(problem: str, m: int, num_classes: int = 2) -> np.ndarray:
  """Balanced labels of the ``m`` candidates: m/2 per sign (binary), m/C per class."""
  if problem == "binary":
    if m < 2 or m % 2:
      raise ConfigError(
        argument="m", message=f"m must be even and >= 2 for a binary victim, got {m}."
      )
    return np.concatenate([np.ones(m // 2), -np.ones(m // 2)]).astype(np.float32)
  if problem == "multiclass":
    if m < num_classes or m % num_classes:
      raise ConfigError(
        argument="m", message=f"m={m} must be a positive multiple of the {num_classes} classes."
      )
    return np.repeat(np.arange(num_classes), m // num_classes).astype(np.int32)
  if problem == "general":
    return np.zeros(m, np.float32)
  raise ConfigError(
    argument="problem", message=f"problem must be one of {losses.PROBLEMS}, got {problem!r}."
  )


def resolve_problem(problem: str, loss: str) -> str:
  """``problem``, or the one the victim's training loss implies when it is 'auto'."""
  if problem == "auto":
    return losses.problem_for_loss(loss)
  if problem not in losses.PROBLEMS:
    raise ConfigError(
      argument="problem",
      message=f"problem must be auto or one of {losses.PROBLEMS}, got {problem!r}.",
    )
  return problem


def is_foreign(path: str) -> bool:
  """True for a PyTorch or safetensors file, False for recon_jax's own checkpoint."""
  return readers.detect_format(path) != "msgpack"


def victim_config(cfg: JobConfig, requested: Optional[dict] = None) -> victim.VictimConfig:
  """The victim of a job: its ``victim`` settings, or the checkpoint's own.

  A recon_jax checkpoint carries the config it was trained with (architecture
  and data provenance), and that is the one used; ``requested`` (victim
  settings the user set explicitly, ``{field: value}``) must agree with it.
  """
  if not cfg.checkpoint or is_foreign(cfg.checkpoint):
    return dataclasses.replace(cfg.victim, widths=tuple(int(w) for w in cfg.victim.widths))
  _, stored, _ = victim.load(cfg.checkpoint)
  for field, value in (requested or {}).items():
    want = tuple(value) if field == "widths" else value
    if getattr(stored, field) != want:
      raise ConfigError(
        f"victim.{field}={value} contradicts the checkpoint {cfg.checkpoint}, "
        f"which was trained with {field}={getattr(stored, field)}.",
        argument=f"victim.{field}",
      )
  return stored


def _num_classes(v: victim.VictimConfig) -> int:
  """The number of classes of ``v``'s data (as :func:`recon_jax.victims.victim.load_data` draws it)."""
  return data.dataset.num_classes(
    v.dataset.strip().lower(), "multiclass" if v.loss == "ce" else "binary"
  )


def num_candidates(cfg: JobConfig, n: int) -> int:
  """m, the candidates per restart: the ``m`` setting, or ``m_per_sample`` x n (0: unset)."""
  return int(cfg.m) or int(cfg.m_per_sample) * int(n)


def total_steps(cfg: JobConfig) -> int:
  return int(cfg.steps) + int(cfg.refine_steps)


def hparams_for(cfg: JobConfig) -> dict:
  """The per-restart hyperparameters of a job: paper ranges or the config's ranges."""
  if cfg.sweep == "paper":
    ranges = dict(sweep.INVERSION_RANGES if cfg.attack == "inversion" else sweep.PAPER_RANGES)
  elif cfg.sweep == "random":
    ranges = {name: sweep.parse_range(name, getattr(cfg, name), "log") for name in RANGE_NAMES}
  else:
    raise ConfigError(
      argument="sweep", message=f"sweep must be random or paper, got {cfg.sweep!r}."
    )
  hp = sweep.random_search(cfg.seed, cfg.num_restarts, ranges)
  sweep.check_hparams(hp)
  return hp


def stages_for(cfg: JobConfig, hp: dict) -> list:
  """The run's stages: the sweep (alpha fixed, or annealed), then the optional refinement."""
  if cfg.anneal_alpha:
    main = sweep.anneal(hp, cfg.steps, cfg.anneal_alpha, cfg.anneal_stages)
  else:
    main = [(cfg.steps, hp)]
  tail = sweep.stages(main[-1][1], 1, cfg.refine_steps, cfg.refine_alpha, cfg.refine_lr_scale)
  return main + tail[1:]


class Plan(NamedTuple):
  """A job resolved once, before any work: what the run reads instead of deriving it
  again from the settings (:func:`recon_jax.studies.checks.prepare` returns it checked)."""

  config: JobConfig  # the settings, paths expanded (config.json's "config")
  victim: victim.VictimConfig  # the config's victim section, or the checkpoint's own recipe
  problem: str  # 'binary', 'multiclass' or 'general'
  foreign: bool  # a PyTorch or safetensors checkpoint
  hparams: dict  # per-restart hyperparameters ({} for an attack without a search)
  stages: list  # [(steps, hparams)] of the sweep ([] likewise)


def plan(cfg: JobConfig, vcfg: victim.VictimConfig) -> Plan:
  """The :class:`Plan` of the job ``cfg`` with its victim ``vcfg`` (:func:`victim_config`).
  Not checked here: :func:`recon_jax.studies.checks.validate` calls it last."""
  foreign = bool(cfg.checkpoint) and is_foreign(cfg.checkpoint)
  hp, stages = {}, []
  if attacks.get(cfg.attack).direct is None:
    hp = hparams_for(cfg)
    stages = stages_for(cfg, hp)
  return Plan(cfg, vcfg, resolve_problem(cfg.problem, vcfg.loss), foreign, hp, stages)
