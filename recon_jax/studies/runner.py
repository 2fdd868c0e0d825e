"""The studies run in their workdirs and their outcomes written there: the 2-D toy, the
efficacy harness over draws (and its leakage map), the initialisation study.  Each
``run_*`` runs a whole study resumably, so a binary, a notebook and a test produce the same
folder; each ``*_job`` is what a binary runs: the settings checked, the process's precision
set, the workdir opened (:func:`recon_jax.io.workdir.open_run`), then the study.  The main
job's own run is :mod:`recon_jax.job.run`; a victim's training in its workdir is
:mod:`recon_jax.victims.training_run`.
"""

from __future__ import annotations

import json
import os
import time

from absl import logging
import jax
import numpy as np

from recon_jax.engine import precision
from recon_jax.errors import ConfigError, ResultFileError
from recon_jax.eval.metrics_json import shown
from recon_jax.io import workdir
from recon_jax.job import planning
from recon_jax.job.run import STATE_FILE, run_reconstruction
from recon_jax.studies import (
  efficacy,
  efficacy_results,
  init_study,
  init_study_figures,
  init_study_settings,
  leakage_map,
  toy,
)


def run_toy(cfg, path: str, *, resume: bool = False) -> dict:
  """The 2-D toy (:func:`recon_jax.studies.toy.run`) in workdir ``path``, resumably; returns its metrics.

  The precision is the caller's (the toy needs float64 to reach the KKT direction).
  """
  toy.validate(cfg)
  state_file = workdir.begin(
    cfg,
    path,
    STATE_FILE,
    resume=resume,
    study="toy_2d",
    every=cfg.save_every,
    victim=toy.victim_config(cfg).to_dict(),
  )
  return write_toy(path, cfg, toy.run(cfg, state_file=state_file))


def write_toy(path: str, cfg, out) -> dict:
  """metrics.json, reconstructions.npz and toy_2d.png of :func:`recon_jax.studies.toy.run`'s result."""
  workdir.write_json(path, "metrics.json", out.metrics)
  workdir.write_npz(path, "reconstructions.npz", **out.arrays)
  a = out.arrays
  toy.toy_figure(
    workdir.inside(path, "toy_2d.png"),
    cfg,
    out.dataset,
    out.victim,
    out.metrics,
    a["x"],
    a["x0"],
    out.labels,
    a["after_filter"],
    a["kept"],
  )
  return out.metrics


MAX_DRAWS = 1000  # each draw is a whole reconstruction per variant


def check_efficacy(cfg, variants, draws: int, first_draw: int = 0) -> dict:
  """The reconstruction config of every variant, each checked (:func:`planning.prepare`), and
  the draws; raises ConfigError naming the setting.  Nothing is written."""
  variants = list(variants)
  if not variants:
    raise ConfigError("variants must name at least one variant of the config.", "variants")
  twice = sorted({v for v in variants if variants.count(v) > 1})
  if twice:
    raise ConfigError(
      f"variants names {twice[0]!r} twice: each variant runs once on every draw (and the "
      "first is the reference of the paired differences).",
      "variants",
    )
  efficacy.check_confidence(cfg.confidence)
  for name, value, low, high in (
    ("draws", draws, 1, MAX_DRAWS),
    ("first_draw", first_draw, 0, 2**31 - 1),
  ):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
      raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}.", name)
  if "map" in cfg:
    leakage_map.check(cfg.map, variants)
  configs = {v: efficacy.variant_config(cfg, v) for v in variants}
  for v, vcfg in configs.items():
    try:
      planning.prepare(vcfg)
    except ConfigError as e:  # name the setting where the user wrote it: the variant or the base
      e.argument = efficacy.setting_of(cfg, v, e.argument)
      raise
    if vcfg.runtime.x64 != cfg.base.runtime.x64:
      raise ConfigError(f"variant {v!r} changes x64: run float32 and float64 apart.", "variants")
  return configs


def check_variants_resumable(path: str, variants) -> None:
  """Refuses a resume of the harness in ``path`` unless its config.json ran the same
  variants, in the same order: a resume continues the finished variants' draws and never
  drops one (metrics.json and results.md would lose it).  Nothing is written."""
  stored = workdir.read_json(workdir.expand(path), "config.json")
  stored = stored if isinstance(stored, dict) else {}  # (check_resumable refuses the rest)
  before = stored.get("variants")
  if before is not None and not (
    isinstance(before, list) and all(isinstance(v, str) for v in before)
  ):
    file = os.path.join(workdir.expand(path), "config.json")
    raise ResultFileError(file, f"variants holds {shown(before)}, not a list of variants")
  if before is not None and list(before) != list(variants):
    raise ConfigError(
      f"variants={','.join(variants)} differs from the harness being resumed in {path}, "
      f"which ran variants={','.join(before)}; resume with the same variants, or run the "
      "others in another workdir (a resume never drops a finished variant).",
      "variants",
    )


def run_efficacy(
  cfg,
  path: str,
  variants,
  draws: int,
  first_draw: int = 0,
  *,
  resume=False,
  overwrite=False,
  configs=None,
) -> efficacy_results.Results:
  """Every variant of efficacy config ``cfg`` on draws ``first_draw .. first_draw + draws - 1``, into workdir ``path``.

  Each (variant, draw) is a reconstruction workdir ``path/VARIANT/draw_D``; with
  ``resume`` finished ones are read back and an interrupted one continues.
  Writes config.json, metrics.json (intervals, and paired differences against
  the first variant), results.md and efficacy.png; returns the metrics
  (:class:`~recon_jax.studies.efficacy_results.Results`).  Each run takes
  its own precision (:func:`run_reconstruction`; no variant changes ``x64``).  ``configs``:
  :func:`check_efficacy`'s result when the caller checked the settings already, as the
  binary does.  The workdir is opened as the main job's is
  (:func:`recon_jax.io.workdir.open_run`): created if missing, refused when not empty
  (unless ``overwrite``, or ``resume`` of the same settings and variants,
  :func:`check_variants_resumable`) or in use by a live process.
  """
  if configs is None:
    configs = check_efficacy(cfg, variants, draws, first_draw)
  if resume:
    check_variants_resumable(path, variants)
  path = workdir.open_run(
    cfg, path, "config.json", resume=resume, overwrite=overwrite, study="efficacy"
  )
  workdir.write_config(
    path, cfg, study="efficacy", variants=list(variants), draws=draws, first_draw=first_draw
  )
  per_draw = {v: [] for v in variants}
  n_of = {}
  numbers = range(first_draw, first_draw + draws)
  for draw in numbers:
    for v in variants:
      sub = workdir.inside(path, os.path.join(v, f"draw_{draw}"))
      done = _finished_draw(sub) if resume else None
      if done is None:
        again = resume and os.path.isfile(os.path.join(sub, STATE_FILE))
        os.makedirs(sub, exist_ok=True)
        plan = planning.prepare(efficacy.draw_config(configs[v], draw))
        m = run_reconstruction(plan, sub, resume=again, overwrite=True)
        done = efficacy.draw_of(m, os.path.join(sub, "metrics.json"))  # the report written
      if done.problems:
        logging.warning("efficacy: %s: %s; read as gaps", done.path, "; ".join(done.problems))
      per_draw[v].append(done.numbers)
      n_of[v] = done.n_train
      logging.info("efficacy: %s draw %d: %s", v, draw, per_draw[v][-1])
  out = _results(list(numbers), per_draw, n_of, variants, cfg.confidence)
  if "map" in cfg:
    out = leakage_map.write(path, out, cfg.map, n_of)
  text = efficacy.efficacy_table(out, variants)
  efficacy.efficacy_figure(workdir.inside(path, "efficacy.png"), out, variants)
  workdir.write_text(path, "results.md", text)
  workdir.write_json(path, "metrics.json", out.to_dict())  # last: a workdir with it is finished
  return out


def _results(draws, per_draw, n_of, variants, confidence) -> efficacy_results.Results:
  """The harness's report: each variant's intervals over ``draws`` (its numbers per draw,
  ``per_draw``; its training images, ``n_of``), and the paired differences of the others
  against the first, each with its verdict."""
  base, first = per_draw[variants[0]], variants[0]
  paired = {}
  for v in variants[1:]:
    n = max(n_of[v], n_of[first])
    diffs = efficacy.paired(per_draw[v], base, confidence=confidence, n_train=n)
    ivs = {k: efficacy_results.Interval.of(d) for k, d in diffs.items()}
    paired[v] = {k: iv._replace(verdict=efficacy.verdict(iv)) for k, iv in ivs.items()}
  return efficacy_results.Results(
    draws=tuple(draws),
    n_train=n_of[first],
    variants={
      v: {
        k: efficacy_results.Interval.of(d)
        for k, d in efficacy.aggregate(per_draw[v], confidence, n_of[v]).items()
      }
      for v in variants
    },
    n_train_of=dict(n_of),
    paired=paired,
  )


def _finished_draw(folder: str):
  """The draw finished before in ``folder`` (:func:`recon_jax.studies.efficacy.read_draw`),
  or None where it must run: it has no metrics.json, or one that cannot be read (said in
  one line naming the file)."""
  try:
    return efficacy.read_draw(folder)
  except ResultFileError as e:
    logging.warning("efficacy: %s; running that draw again", e)
    return None


def _load_done(path: str, name: str):
  """``(entry, x)`` of a sub-run finished before in workdir ``path``, or None."""
  jpath = workdir.inside(path, f"done_{name}.json")
  if not os.path.isfile(jpath):
    return None
  try:
    with open(jpath) as f:
      entry = json.load(f)
    with np.load(workdir.inside(path, f"done_{name}.npz")) as z:
      x = z["x"]
  except (OSError, ValueError, KeyError) as e:
    raise ConfigError(
      f"resume: {jpath} (or its .npz) is unreadable ({e}); remove both to run that sub-run again."
    ) from None
  logging.info("%s: finished before, loaded from %s", name, jpath)
  return entry, x


def run_init_study(cfg, path: str, *, resume: bool = False) -> dict:
  """Runs the study (under ``cfg.x64``) in workdir ``path`` and writes its report there.

  Each sub-run saves its state to ``state_<name>.msgpack`` every
  ``cfg.save_every`` chunks and, once finished, its results to
  ``done_<name>.json``/``.npz``; with ``resume`` the finished sub-runs are
  loaded and the interrupted one continues from its state file (victims are
  cached or retrained deterministically), so the report equals that of an
  uninterrupted run.  Bad settings and unreadable data fail before anything is
  written.  Returns metrics.json's dict.
  """
  cfg.data_dir = workdir.expand(cfg.data_dir)
  init_study_settings.validate(cfg)
  if resume:
    workdir.check_resumable(cfg, path, "config.json", "init_study")
  else:
    init_study.load_data(cfg)  # a missing or corrupt data file fails before config.json
    workdir.write_config(workdir.prepare(path, overwrite=True), cfg, study="init_study")
  with jax.enable_x64(bool(cfg.x64)):
    t_start = time.time()
    ds = init_study.load_data(cfg)  # a missing or corrupt data file fails here
    study = init_study.Study(cfg, ds)
    runs, arrays = {}, {}
    for sub in init_study.sub_runs(cfg):
      done = _load_done(path, sub.name) if resume else None
      if done is None:
        state = workdir.inside(path, f"state_{sub.name}.msgpack")
        entry, x = study.run(sub, resume=resume, state_path=state)
        done = workdir.jsonable(entry), x
        workdir.write_npz(path, f"done_{sub.name}.npz", x=x)
        workdir.write_json(path, f"done_{sub.name}.json", done[0])
      runs[sub.name], arrays[f"{sub.name}_x"] = done
    metrics = workdir.jsonable(
      {
        "sub_runs": runs,
        "dataset": ds.name,
        "n_train": len(ds.x_train),
        "backend": jax.default_backend(),
        "x64": bool(cfg.x64),
        "batching": study.batching,
        "wall_s": time.time() - t_start,
      }
    )
    workdir.write_json(path, "metrics.json", metrics)
    workdir.write_npz(
      path,
      "reconstructions.npz",
      x_train=ds.x_train,
      x_part=ds.x_part,
      noise=study.noise,
      mix_l1=study.l1,
      mix_l2=study.l2,
      **arrays,
    )
    workdir.write_text(path, "summary.md", init_study_settings.summary(cfg, metrics))
    init_study_figures.init_study_figures(path, metrics, arrays, ds.x_train, ds.x_part)
  return metrics


# What the binaries run: everything checked before the workdir is created or touched; each
# returns (the workdir's absolute path, the study's metrics).


def toy_job(cfg, path: str, *, resume=False, overwrite=False) -> tuple[str, dict]:
  """The 2-D toy (toy_2d's config) into workdir ``path``."""
  precision.set_precision(cfg.x64)
  toy.validate(cfg)
  path = workdir.open_run(cfg, path, STATE_FILE, resume=resume, overwrite=overwrite, study="toy_2d")
  return path, run_toy(cfg, path, resume=resume)


def efficacy_job(
  cfg, path: str, *, variants="", draws=5, first_draw=0, resume=False, overwrite=False
) -> tuple[str, efficacy_results.Results]:
  """The harness (efficacy's config) over ``draws`` data draws into workdir ``path``.

  ``variants``: comma-separated names of the config's variants; '' every cell of the
  config's map, else ``default``.  The metrics' ``variants`` are in that order.
  """
  names = [v.strip() for v in variants.split(",") if v.strip()]
  if not variants.strip():
    names = leakage_map.variants_of(cfg.map) if "map" in cfg else ["default"]
  configs = check_efficacy(cfg, names, draws, first_draw)  # before the workdir is touched
  out = run_efficacy(
    cfg, path, names, draws, first_draw, resume=resume, overwrite=overwrite, configs=configs
  )
  return os.path.abspath(workdir.expand(path)), out


def init_study_job(cfg, path: str, *, resume=False, overwrite=False) -> tuple[str, dict]:
  """The initialisation study (init_study's config) into workdir ``path``; its data folder
  expanded (``~``) in ``cfg``."""
  precision.set_precision(cfg.x64)
  cfg.data_dir = workdir.expand(cfg.data_dir)
  init_study_settings.validate(cfg)
  # config.json is what --resume needs: the finished sub-runs are done_<name>.*
  path = workdir.open_run(
    cfg, path, "config.json", resume=resume, overwrite=overwrite, study="init_study"
  )
  return path, run_init_study(cfg, path, resume=resume)
