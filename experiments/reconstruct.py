r"""Reconstruct training data from a trained classifier's parameters (the main job).

With no flags: trains (once, then cached) a 625-256-256-1 victim on 10 faces +
10 non-faces of the LFW subset bundled with scikit-image, runs 16 restarts of
the KKT attack of Haim et al. (2022) in one compiled call, and writes the
report into --workdir.

  python -m experiments.reconstruct --workdir=/tmp/recon
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:digits \
      --workdir=/tmp/digits
  python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:paper \
      --config.victim.dataset=mnist --config.data_dir=~/data/mnist --workdir=/tmp/mnist

Writes config.json, metrics.json, restarts.tsv, reconstructions.npz,
reconstructions.png and ssim_vs_margin.png; state.msgpack while it runs
(--resume continues from it).  Exit code 0: done (warnings, e.g. a victim that
did not train, are printed and kept in metrics.json); 1: a setting or file it
cannot use, in one line naming it, before anything is written; 2: every restart
diverged (the results are written); 130: interrupted (Ctrl-C).
"""

import sys
from typing import Optional

from absl import flags

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "state.msgpack"


def check_sweep(cfg, explicit=()) -> None:
  """Refuses sweep=paper with a range the user set: the paper's ranges would replace it.

  ``explicit``: settings given on the command line; a range that differs from
  the config file's default counts as set too (no preset changes the ranges).
  """
  from experiments.configs import reconstruct as configs
  from recon_jax import pipeline

  if cfg.sweep != "paper":
    return
  defaults = configs.get_config()
  named = [n for n in pipeline.RANGE_NAMES if n in explicit or str(cfg[n]) != str(defaults[n])]
  if named:
    raise common.UserError(
      f"--config.sweep=paper draws {', '.join(pipeline.RANGE_NAMES)} from Haim et al.'s "
      f"ranges (App. B), which replace --config.{named[0]}={cfg[named[0]]!r}; drop "
      f"--config.{named[0]} or use --config.sweep=random."
    )


def prepare(cfg, requested_victim=None, explicit=()) -> None:
  """Paths expanded, settings validated: everything that can fail before any work.

  Nothing is written or trained here, so a refused run leaves its workdir as it was.
  """
  from recon_jax import pipeline

  cfg.data_dir = common.expand(cfg.data_dir)
  cfg.checkpoint = common.expand(cfg.checkpoint)
  cfg.foreign.data_mean = common.expand(cfg.foreign.data_mean)
  if cfg.save_every < 0:
    raise common.UserError(f"--config.save_every must be >= 0 (0: never), got {cfg.save_every}.")
  check_sweep(cfg, explicit)
  pipeline.validate(cfg)
  pipeline.victim_config(cfg, requested_victim)


def warnings(metrics: dict, num_classes: int) -> list:
  """What a reader of metrics.json must know before trusting it (``metrics['warnings']``)."""
  from recon_jax import pipeline

  out = []
  v = metrics.get("victim") or {}
  loss = (metrics.get("assumed") or {}).get("task_from_loss", "logistic")
  victim_warning = pipeline.victim_warning(v, loss, num_classes)
  metrics["victim_warning"] = victim_warning
  if victim_warning:
    out.append(victim_warning)
  n_div = (metrics.get("selection") or {}).get("n_diverged")
  if metrics.get("attack") != "weights" and n_div and n_div == metrics.get("num_restarts"):
    out.append(
      f"every restart diverged ({n_div} of {n_div}): nothing was reconstructed; "
      "lower the learning rates (lr_x, lr_lam) or the alpha range"
    )
  if metrics.get("precision_warning"):
    out.append(metrics["precision_warning"])
  return out


def check_outcome(metrics: dict, workdir: str = "") -> dict:
  """Raises :class:`common.RunFailed` (exit code 2) for a run that recovered nothing by failing.

  Called after the results are written: every restart diverged.
  """
  failed = [w for w in metrics.get("warnings", []) if w.startswith("every restart diverged")]
  if failed:
    where = f"; the results are in {workdir}" if workdir else ""
    raise common.RunFailed(f"{failed[0]}{where}")
  return metrics


def run(cfg, workdir: str, *, resume: bool = False, requested_victim=None, explicit=()) -> dict:
  """Runs one reconstruction job and writes its report into ``workdir``.

  ``requested_victim``: victim settings the user gave explicitly; with a
  checkpoint they must agree with it.  ``explicit``: every setting given on
  the command line.  Returns metrics.json's dict; its ``warnings`` are also
  printed on stderr, and :func:`check_outcome` says whether the run failed.
  """
  from recon_jax import pipeline, plotting, train

  prepare(cfg, requested_victim, explicit)
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
  else:
    common.write_json(workdir, "config.json", {"config": cfg, "environment": common.environment()})
  try:
    out = pipeline.reconstruct(
      cfg,
      state_path=common.inside(workdir, STATE_FILE),
      save_every=cfg.save_every,
      resume=resume,
      save_meta={"config": common.jsonable(cfg)},
      requested_victim=requested_victim,
    )
  except train.TrainError as e:  # the victim's training diverged: name its learning rate
    e.argument = "victim.lr"
    raise
  metrics = out.metrics
  metrics["warnings"] = warnings(metrics, out.dataset.num_classes)
  for w in metrics["warnings"]:
    if not w.startswith("every restart diverged"):  # that one ends the run (check_outcome)
      print(f"warning: {w}", file=sys.stderr)
  common.write_json(workdir, "metrics.json", metrics)
  common.write_npz(workdir, "reconstructions.npz", **out.arrays)
  common.write_text(workdir, "restarts.tsv", restart_table(metrics["per_restart"]))
  if out.eval_result is not None:
    ds = out.dataset
    plotting.reconstruction_report(
      workdir,
      out.eval_result,
      ds.x_train + ds.mean,
      ds.x_test + ds.mean if len(ds.x_test) else None,
      out.victim.summary.get("margins"),
      metrics["evaluation"]["ssim_threshold"],
    )
  if "identification" in metrics:
    ds = out.dataset
    plotting.trusted_figure(
      common.inside(workdir, "trusted.png"),
      metrics["identification"],
      out.arrays["candidates"] + ds.mean,
      ds.x_train + ds.mean,
    )
  return metrics


def restart_table(rows: list) -> str:
  """One line per restart (tab-separated): its hyperparameters and its scores."""
  keys = sorted({k for r in rows for k in r} - {"restart"})
  lines = ["\t".join(["restart"] + keys)]
  for r in rows:
    lines.append(
      "\t".join(
        [str(r.get("restart"))]
        + [
          "" if r.get(k) is None else (f"{r[k]:.5g}" if isinstance(r[k], float) else str(r[k]))
          for k in keys
        ]
      )
    )
  return "\n".join(lines) + "\n"


def job(
  cfg,
  workdir: str,
  *,
  resume: bool = False,
  overwrite: bool = False,
  explicit: Optional[dict] = None,
) -> dict:
  """What the binary does once its flags are parsed; returns metrics.json's dict.

  ``explicit``: the settings given on the command line, ``{name: value}``.
  Everything is checked before the workdir is created or touched; a run
  whose every restart diverged writes its results, then raises
  :class:`common.RunFailed` (exit code 2).
  """
  from recon_jax import distributed

  explicit = dict(explicit or {})
  distributed.maybe_initialize(cfg.distributed)  # before any other JAX call
  common.configure_precision(cfg.x64, cfg.matmul_precision)
  requested = {k[len("victim.") :]: v for k, v in explicit.items() if k.startswith("victim.")}
  prepare(cfg, requested, explicit)
  if resume:  # before prepare_workdir, which would create a missing folder
    common.check_resumable(cfg, workdir, STATE_FILE)
  workdir = common.prepare_workdir(workdir, overwrite or resume)
  m = run(cfg, workdir, resume=resume, requested_victim=requested, explicit=explicit)
  check_outcome(m, workdir)
  print(
    f"wrote {workdir}: recovered {m['recovered_strict']}/{m['n_train']} strictly "
    f"(held-out baseline {m['baseline_heldout_recovered_strict']})"
  )
  return m


def main(cfg):
  """The command line: flags -> job."""
  job(
    cfg,
    FLAGS.workdir,
    resume=FLAGS.resume,
    overwrite=FLAGS.overwrite,
    explicit=common.overrides(FLAGS),
  )


if __name__ == "__main__":
  common.define_flags("reconstruct", "lfw")
  common.run_main(main)
