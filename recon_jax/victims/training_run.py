"""A victim trained in its workdir, as ``experiments.train_victim`` runs it.

:func:`prepare_training` checks the settings and the data files before anything is
written; :func:`run_training` writes config.json, trains resumably (the state file
:data:`TRAIN_STATE_FILE`, saved every ``save_every`` chunks) and writes the victim and its
report (:func:`write_training`); :func:`train_victim_job` is what the binary runs: the
precision set, the settings checked, the workdir opened
(:func:`recon_jax.io.workdir.open_run`), then the training.  The training itself is
:mod:`recon_jax.victims.trained`'s; a job that needs a victim without a workdir of its own
loads or trains it through the cache (:func:`recon_jax.victims.sources.load_or_train_victim`).
"""

from __future__ import annotations

from typing import Optional

from recon_jax import data
from recon_jax.core import rules
from recon_jax.engine import precision
from recon_jax.errors import ConfigError
from recon_jax.eval import verdict
from recon_jax.eval.metrics_json import Victim
from recon_jax.io import workdir
from recon_jax.victims import recipe, trained

TRAIN_STATE_FILE = "train_state.msgpack"  # a victim's resumable training in its workdir
# What a victim's training writes (write_training, and the last finite parameters).
TRAINING_RESULTS = (
  "victim.msgpack",
  "metrics.json",
  "history.json",
  "train_idx.npz",
  "victim_last_finite.msgpack",
  TRAIN_STATE_FILE,
)


def prepare_training(cfg) -> recipe.VictimConfig:
  """The victim of a training run (``cfg.victim``, ``data_dir``, ``chunk_epochs``,
  ``save_every``), every setting checked and ``data_dir`` expanded; nothing is written."""
  cfg.data_dir = workdir.expand(cfg.data_dir)
  for name, low in (("chunk_epochs", 1), ("save_every", 0)):
    if not rules.is_int(cfg[name]) or cfg[name] < low:
      never = " (0: never)" if low == 0 else ""
      raise ConfigError(f"{name} must be an integer >= {low}{never}, got {cfg[name]!r}.", name)
  check_widths(cfg)
  vcfg = recipe.VictimConfig(**{**cfg.victim, "widths": tuple(int(w) for w in cfg.victim.widths)})
  recipe.validate(vcfg)
  check_data_dir(vcfg, cfg.data_dir)
  check_data_files(vcfg, cfg.data_dir)
  return vcfg


def check_widths(cfg) -> None:
  """Refuses a ``victim.widths`` setting that is not a list of integers >= 1 (e.g. ``64,abc``)."""
  rules.check_value("victim.widths", cfg.victim.widths, recipe.RULES["widths"])


def check_data_dir(v: recipe.VictimConfig, data_dir: Optional[str]) -> None:
  """Refuses a file dataset (mnist, cifar10, cifar100) without an existing ``data_dir``.

  Only the folder is checked (cheap); its files are read, and checked, with the data.
  """
  name = v.dataset.strip().lower() if isinstance(v.dataset, str) else v.dataset
  if name in data.FILE_DATASETS:
    data.files.require_dir(name, data_dir or None, data.dataset.SOURCES[name].files)


def check_data_files(v: recipe.VictimConfig, data_dir: Optional[str]) -> None:
  """Reads a file dataset (MNIST, CIFAR) as the run will, so that a truncated, corrupt or
  foreign file is refused before the workdir is touched (the error names the file)."""
  name = v.dataset.strip().lower() if isinstance(v.dataset, str) else v.dataset
  if name in data.FILE_DATASETS:
    trained.load_data(v, data_dir or None)


def run_training(cfg, path: str, *, resume: bool = False) -> dict:
  """Trains ``cfg.victim`` in workdir ``path``: config.json, the resumable training, the report.

  A victim that did not learn its training set is still written; its metrics
  say so (``warning``).  Returns metrics.json's dict.
  """
  vcfg = prepare_training(cfg)
  if resume:
    workdir.check_resumable(cfg, path, TRAIN_STATE_FILE, "train_victim")
  ds = trained.load_data(vcfg, cfg.data_dir or None)
  if not resume:
    # A new run's config.json must not sit beside an earlier run's victim: its results go.
    workdir.remove(path, TRAINING_RESULTS)
    workdir.write_config(path, cfg, study="train_victim")
  params, history, summary, init = trained.fit_resumable(
    vcfg,
    ds,
    workdir.inside(path, TRAIN_STATE_FILE),
    chunk=cfg.chunk_epochs,
    save_every=cfg.save_every,
    resume=resume,
    last_finite_path=workdir.inside(path, "victim_last_finite.msgpack"),
  )
  return write_training(path, vcfg, ds, params, history, summary, init)


def write_training(path: str, vcfg, ds, params, history, summary, init=None) -> dict:
  """victim.msgpack (with theta_0, where its training started), metrics.json (with a
  ``warning`` if the victim did not learn its data), history.json and train_idx.npz of a
  trained victim; returns the metrics."""
  trained.save(workdir.inside(path, "victim.msgpack"), vcfg, ds, params, summary, init=init)
  metrics = {k: v for k, v in summary.items() if k != "outputs"}
  metrics["warning"] = verdict.victim_warning(Victim.of(summary), vcfg.loss, ds.num_classes)
  workdir.write_json(path, "metrics.json", metrics)
  workdir.write_json(path, "history.json", history)
  workdir.write_npz(path, "train_idx.npz", train_idx=ds.train_idx, mean=ds.mean)
  return metrics


def train_victim_job(cfg, path: str, *, resume=False, overwrite=False) -> tuple[str, dict]:
  """A victim's training (train_victim's config) into workdir ``path``; returns (the
  workdir's absolute path, metrics.json's dict).  Everything is checked before the workdir
  is created or touched."""
  precision.set_precision(cfg.x64)
  prepare_training(cfg)
  path = workdir.open_run(
    cfg, path, TRAIN_STATE_FILE, resume=resume, overwrite=overwrite, study="train_victim"
  )
  return path, run_training(cfg, path, resume=resume)
