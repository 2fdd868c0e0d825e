"""The last stage of the pipeline: a study's outcome written into its workdir.

Each writer takes what a study returned (:class:`recon_jax.pipeline.Reconstruction`,
:class:`recon_jax.toy.ToyRun`, ...) and writes metrics.json, the arrays and the
figures, so a binary, a notebook and a test produce the same folder.
"""

from __future__ import annotations

from recon_jax import pipeline, plotting, victim, workdir
from recon_jax.errors import RunFailed


def restart_table(rows: list) -> str:
  """One line per restart (tab-separated): its hyperparameters and its scores."""
  keys = sorted({k for r in rows for k in r} - {"restart"})

  def cell(v):
    return "" if v is None else (f"{v:.5g}" if isinstance(v, float) else str(v))

  lines = ["\t".join(["restart"] + keys)]
  lines += ["\t".join([str(r.get("restart"))] + [cell(r.get(k)) for k in keys]) for r in rows]
  return "\n".join(lines) + "\n"


STATE_FILE = "state.msgpack"  # a reconstruction's resumable state in its workdir


def run_reconstruction(
  cfg, path: str, *, resume: bool = False, requested_victim=None, explicit=()
) -> dict:
  """One reconstruction job in workdir ``path``: config.json, the run (resumable), the report.

  ``requested_victim``, ``explicit``: see :func:`recon_jax.pipeline.prepare`.  With
  ``resume`` it continues from ``path``'s state file (the config must match).
  Returns metrics.json's dict; its ``warnings`` say what a reader must know.
  """
  pipeline.prepare(cfg, requested_victim, explicit)
  if resume:
    workdir.check_resumable(cfg, path, STATE_FILE)
  else:
    workdir.write_config(path, cfg)
  out = pipeline.reconstruct(
    cfg,
    state_path=workdir.inside(path, STATE_FILE),
    save_every=cfg.save_every,
    resume=resume,
    save_meta={"config": workdir.jsonable(cfg)},
    requested_victim=requested_victim,
  )
  return write_reconstruction(path, out)


def write_reconstruction(path: str, out) -> dict:
  """metrics.json, reconstructions.npz, restarts.tsv and the figures of a reconstruction.

  ``out``: :func:`recon_jax.pipeline.reconstruct`'s result.  Returns its metrics.
  """
  metrics, ds = out.metrics, out.dataset
  workdir.write_json(path, "metrics.json", metrics)
  workdir.write_npz(path, "reconstructions.npz", **out.arrays)
  workdir.write_text(path, "restarts.tsv", restart_table(metrics["per_restart"]))
  if out.eval_result is not None:
    plotting.reconstruction_report(
      path,
      out.eval_result,
      ds.x_train + ds.mean,
      ds.x_test + ds.mean if len(ds.x_test) else None,
      out.victim.summary.get("margins"),
      metrics["evaluation"]["ssim_threshold"],
    )
  if "identification" in metrics:
    plotting.trusted_figure(
      workdir.inside(path, "trusted.png"),
      metrics["identification"],
      out.arrays["candidates"] + ds.mean,
      ds.x_train + ds.mean,
    )
  return metrics


def check_outcome(metrics: dict, path: str = "") -> dict:
  """Raises :class:`RunFailed` for a run that wrote its results but recovered nothing by failing.

  That is: every restart diverged.
  """
  failed = [w for w in metrics.get("warnings", []) if w.startswith(pipeline.ALL_DIVERGED)]
  if failed:
    raise RunFailed(f"{failed[0]}{f'; the results are in {path}' if path else ''}")
  return metrics


def write_training(path: str, vcfg, ds, params, history, summary) -> dict:
  """victim.msgpack, metrics.json (with a ``warning`` if the victim did not learn its data),
  history.json and train_idx.npz of a trained victim; returns the metrics."""
  victim.save(workdir.inside(path, "victim.msgpack"), vcfg, ds, params, summary)
  metrics = {k: v for k, v in summary.items() if k != "outputs"}
  metrics["warning"] = pipeline.victim_warning(summary, vcfg.loss, ds.num_classes)
  workdir.write_json(path, "metrics.json", metrics)
  workdir.write_json(path, "history.json", history)
  workdir.write_npz(path, "train_idx.npz", train_idx=ds.train_idx, mean=ds.mean)
  return metrics


def write_toy(path: str, cfg, out) -> dict:
  """metrics.json, reconstructions.npz and toy_2d.png of :func:`recon_jax.toy.run`'s result."""
  workdir.write_json(path, "metrics.json", out.metrics)
  workdir.write_npz(path, "reconstructions.npz", **out.arrays)
  a = out.arrays
  plotting.toy_figure(
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
