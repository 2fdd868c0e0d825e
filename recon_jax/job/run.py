"""The main job run in a workdir: config.json, the resumable reconstruction, and what it
writes (metrics.json, report.md, reconstructions.npz, restarts.tsv, the figures).

:func:`run_reconstruction` is what the binary, a notebook and a test call, so each
produces the same folder.
"""

from __future__ import annotations

import os
import time

from recon_jax.core import distributed, progress
from recon_jax.engine import precision
from recon_jax.errors import ConfigError, RunFailed
from recon_jax.eval import verdict
from recon_jax.eval.metrics_json import Metrics
from recon_jax.io import workdir
from recon_jax.job import figures, pipeline, planning, report
from recon_jax.job.settings import JobConfig


def restart_table(restarts) -> str:
  """One line per restart (tab-separated): its hyperparameters and its scores
  (``restarts``: the report's :attr:`~recon_jax.eval.metrics_json.Metrics.per_restart`)."""
  rows = [r.to_dict() for r in restarts]
  keys = sorted({k for r in rows for k in r} - {"restart"})

  def cell(v):
    return "" if v is None else (f"{v:.5g}" if isinstance(v, float) else str(v))

  lines = ["\t".join(["restart"] + keys)]
  lines += ["\t".join([str(r.get("restart"))] + [cell(r.get(k)) for k in keys]) for r in rows]
  return "\n".join(lines) + "\n"


STATE_FILE = "state.msgpack"  # a reconstruction's (or the toy's) resumable state in its workdir


def run_reconstruction(
  plan: planning.Plan, path: str, *, resume: bool = False, overwrite: bool = False, spell=None
) -> Metrics:
  """One reconstruction job in workdir ``path``: config.json, the run (resumable), the report.

  ``plan``: the job resolved and checked once (:func:`recon_jax.job.planning.prepare` of its
  settings: everything that can fail before any work).  The folder is opened as a binary
  opens it (:func:`open_workdir`): created if missing, refused when not empty (unless
  ``overwrite``), when in use by a live process, or, with ``resume``, when its config.json
  is of other settings; with ``resume`` the run continues from ``path``'s state file.
  Returns the report metrics.json was written from (typed); its ``warnings`` and ``verdict``
  say what a reader must know.
  ``spell``: report.md's words for the settings (:func:`write_reconstruction`).
  """
  if not isinstance(plan, planning.Plan):
    raise ConfigError(
      f"plan must be a Plan (recon_jax.job.planning.prepare(settings) makes one), got "
      f"{type(plan).__name__}.",
      "plan",
    )
  cfg, runtime = plan.config, plan.config.runtime
  with precision.scoped(runtime.x64, runtime.matmul_precision):  # config.json records what runs
    path = open_workdir(cfg, path, resume=resume, overwrite=overwrite)
    with workdir.restored_on_refusal(path, "config.json", STATE_FILE):
      state_file = workdir.begin(
        cfg,
        path,
        STATE_FILE,
        resume=resume,
        study="reconstruct",
        every=runtime.save_every,
        checked=True,
      )
      out = pipeline.run(plan, state_file)
    return write_reconstruction(path, out, spell)


def open_workdir(cfg: JobConfig, path: str, *, resume: bool, overwrite: bool) -> str:
  """The main job's workdir opened (:func:`recon_jax.io.workdir.open_run`)."""
  return workdir.open_run(
    cfg, path, STATE_FILE, resume=resume, overwrite=overwrite, study="reconstruct"
  )


def main_job(
  config, path: str, *, resume=False, overwrite=False, explicit=None, warn=None, spell=None
) -> tuple[str, Metrics]:
  """The main job as its binary runs it: returns (the workdir's absolute path, the report).

  ``config``: a :class:`~recon_jax.job.settings.JobConfig` or a mapping of its settings;
  ``explicit``: the settings the user set, ``{name: value}`` (the victim's as
  ``victim.NAME``).  Everything is checked before the workdir is created or touched, and
  the process's precision set (and a multi-host run initialised).  ``warn`` is called with
  each warning; ``spell`` writes report.md's (:func:`write_reconstruction`).  A run whose
  every restart diverged writes its results, then raises :class:`RunFailed`
  (:func:`check_outcome`).
  """
  explicit = dict(explicit or {})
  settings = JobConfig.of(config)  # typed and checked: a bool is a bool before anything starts
  runtime = settings.runtime
  distributed.maybe_initialize(runtime.distributed)  # before any other JAX call
  precision.set_precision(runtime.x64, runtime.matmul_precision)
  requested = {k[len("victim.") :]: v for k, v in explicit.items() if k.startswith("victim.")}
  with pipeline.progress_shown(), progress.watch():
    progress.phase("checking the settings and reading the files")
    plan = planning.prepare(settings, requested, explicit)
  m = run_reconstruction(plan, path, resume=resume, overwrite=overwrite, spell=spell)
  path = os.path.abspath(workdir.expand(path))  # the folder run_reconstruction opened
  for w in m.warnings or ():
    if warn and not w.startswith(verdict.ALL_DIVERGED):  # that one ends the run
      warn(w)
  return path, check_outcome(m, path)


def write_reconstruction(path: str, out, spell=None) -> Metrics:
  """metrics.json, reconstructions.npz, restarts.tsv, report.md and the figures of a
  reconstruction (:func:`recon_jax.job.figures.reconstruction_figures`).

  ``out``: :func:`recon_jax.job.pipeline.reconstruct`'s result.  report.md and the figures
  read its typed report, and metrics.json is written from it (with the seconds the files
  took), last, so a workdir that holds it holds every file of a finished run (a harness
  resuming its sub-runs takes one with metrics.json as done).  ``spell``: report.md's
  reasons and warnings as a binary says them (its flags for the settings they name,
  :func:`recon_jax.cli.in_flags`); metrics.json keeps the library's names.  Returns the
  report as written.
  """
  typed = out.report
  margins = out.victim.summary.get("margins")
  t0 = time.time()
  figures.reconstruction_figures(path, typed, out.arrays, out.dataset, out.eval_result, margins)
  text = report.report(typed, path, spell)  # after the figures: it shows those that exist
  typed = typed.with_(timing=typed.timing.with_(files_s=time.time() - t0))
  workdir.write_npz(path, "reconstructions.npz", **out.arrays)
  workdir.write_text(path, "restarts.tsv", restart_table(typed.per_restart))
  workdir.write_text(path, "report.md", text)
  workdir.write_json(path, "metrics.json", typed.to_dict())
  return typed


def check_outcome(report: Metrics, path: str = "") -> Metrics:
  """Raises :class:`RunFailed` for a run that wrote its results but recovered nothing by failing.

  That is: every restart diverged.
  """
  failed = [w for w in report.warnings or () if w.startswith(verdict.ALL_DIVERGED)]
  if failed:
    raise RunFailed(f"{failed[0]}{f'; the results are in {path}' if path else ''}")
  return report
