r"""The initialisation study of Runkel et al. (2024, §4.3-4.5): bilevel and KKT attacks.

  python -m experiments.init_study --workdir=/tmp/init_study     # digits, 21-point grid, ~8 min
  python -m experiments.init_study --config=experiments/configs/init_study.py:quick \
      --workdir=/tmp/init_quick                                     # three settings, ~1 min
  python -m experiments.init_study --config.dataset=cifar10 --config.data_dir=~/data/cifar \
      --config.n_per_class=250 --config.bilevel_width=6144 --workdir=/tmp/init_cifar
  python -m experiments.init_study --workdir=/tmp/init_study --resume  # after an interruption

One attack run per (attack, victim) covers every x-initialisation: the eq. (10)
mix ``l2 (l1 x_GT + (1 - l1) x_part) + (1 - l2) x_rnd`` over the deduplicated
grid (21 restarts, ``--config.grid``), which contains the three §4.3 settings
(random l2 = 0, ground truth l1 = l2 = 1, partition l1 = 0, l2 = 1).  Sub-runs
(:func:`recon_jax.init_study.sub_runs`): the bilevel attack on the affine net
and on the one-hidden net with a smooth activation (and the paper's ReLU on the
three settings), each victim trained with L-BFGS on the attack's own energy;
the KKT attack on a homogeneous ReLU MLP trained like the main job.

Writes config.json, metrics.json (per sub-run: victim, one row per eq. (10)
point with the nearest-neighbour distances to the training set, the partition
and noise, the attack's last metrics, and the paper's findings), summary.md,
reconstructions.npz and figures: <sub-run>_settings.png (the reconstructions of
the three settings), with the grid <sub-run>_heatmap_{train,partition,noise}.png,
<sub-run>_partition_to_gt.png and <sub-run>_noise_to_gt.png.  While it runs:
state_<sub-run>.msgpack (the running sub-run, every save_every chunks) and
done_<sub-run>.json/.npz (each finished sub-run); --resume loads the finished
sub-runs and continues the interrupted one.
"""
from __future__ import annotations

import json
import os
import time

from absl import app, flags, logging

from experiments import common

FLAGS = flags.FLAGS
CONFIG_FILE = "config.json"
_FINDING_ORDER = ("random_to_noise", "ground_truth_recovered", "partition_returns_init",
                  "lambda1_below_half_nearer_partition")


def prepare(cfg) -> None:
  """Paths expanded, settings validated: everything that can fail before any work."""
  from recon_jax import init_study
  cfg.data_dir = common.expand(cfg.data_dir)
  init_study.validate(cfg)


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Runs the study (under ``cfg.x64``) and writes its report into ``workdir``.

  Bad settings and unreadable data fail before anything is written.  Each
  sub-run saves its state to ``state_<name>.msgpack`` every ``cfg.save_every``
  chunks and, once finished, its results to ``done_<name>.json``/``.npz``;
  with ``resume`` the finished sub-runs are loaded and the interrupted one
  continues from its state file (victims are cached or retrained
  deterministically), so the report equals that of an uninterrupted run.

  Returns:
    The metrics written to metrics.json.
  """
  import jax

  from recon_jax import init_study
  prepare(cfg)
  if resume:
    common.check_resumable(cfg, workdir, CONFIG_FILE)
  with jax.enable_x64(bool(cfg.x64)):
    t_start = time.time()
    ds = init_study.load_data(cfg)  # a missing or corrupt data file fails here
    if not resume:
      os.makedirs(workdir, exist_ok=True)
      common.write_json(workdir, CONFIG_FILE, {"config": cfg,
                                               "environment": common.environment()})
    study = _Study(cfg, ds, workdir)
    runs, arrays = {}, {}
    for sub in init_study.sub_runs(cfg):
      done = _load_done(workdir, sub.name) if resume else None
      if done is None:
        done = study.run(sub, resume=resume)
        common.write_npz(workdir, f"done_{sub.name}.npz", x=done[1])
        common.write_json(workdir, f"done_{sub.name}.json", done[0])
      runs[sub.name], arrays[f"{sub.name}_x"] = done
    metrics = {"sub_runs": runs, "dataset": ds.name, "n_train": len(ds.x_train),
               "backend": jax.default_backend(), "x64": bool(cfg.x64),
               "batching": study.batching, "wall_s": time.time() - t_start}
    metrics = common.jsonable(metrics)
    common.write_json(workdir, "metrics.json", metrics)
    common.write_npz(workdir, "reconstructions.npz", x_train=ds.x_train, x_part=ds.x_part,
                     noise=study.noise, mix_l1=study.l1, mix_l2=study.l2, **arrays)
    common.write_text(workdir, "summary.md", summary(cfg, metrics))
    figures(workdir, metrics, arrays, ds)
  return metrics


class _Study:
  """The shared pieces of one study (data, points, noise references) and its sub-runs."""

  def __init__(self, cfg, ds, workdir):
    import numpy as np

    from recon_jax import init_study, loop
    self.cfg, self.ds, self.workdir = cfg, ds, workdir
    self.l1, self.l2 = init_study.mix_points(cfg.grid)
    self.idx = init_study.setting_index(self.l1, self.l2)
    self.batching = loop.resolve_batching(cfg.batching)
    # The "noise" reference set: U(0, 1) images, as many as training images.
    self.noise = np.random.default_rng(cfg.seed + 99).uniform(size=ds.x_train.shape)
    self._centred = None

  def centred(self):
    """The data as the KKT victim sees them (training mean subtracted), loaded once."""
    if self._centred is None:
      import numpy as np

      from recon_jax import init_study, victim
      self._centred = victim.load_data(init_study.kkt_victim_config(self.cfg),
                                       self.cfg.data_dir or None)
      if not np.array_equal(self._centred.train_idx, self.ds.train_idx):
        raise AssertionError("the KKT victim's training set differs from the study's")
    return self._centred

  def run(self, sub, *, resume: bool):
    """One sub-run: victim -> attack (resumable) -> rows -> ``(entry, x [R, m, ...])``."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from recon_jax import diagnostics, init_study, inits, losses, pipeline
    from recon_jax.attacks import bilevel, kkt
    from recon_jax.eval import nearest
    cfg, ds = self.cfg, self.ds
    t0 = time.time()
    dtype = pipeline.float_dtype()
    sel = np.arange(len(self.l1)) if sub.grid else np.array(sorted(self.idx.values()))
    l1, l2 = self.l1[sel], self.l2[sel]
    hp = {"mix_l1": jnp.asarray(l1, dtype), "mix_l2": jnp.asarray(l2, dtype)}
    n = len(ds.x_train)
    entry = {"attack": sub.attack, "arch": sub.arch, "act": sub.act}
    if sub.attack == "bilevel":
      apply_fn, params, vsum = init_study.bilevel_victim(
          sub.arch, sub.act, ds, width=cfg.bilevel_width, wd=cfg.bilevel_wd,
          tol=cfg.bilevel_victim_tol, maxiter=cfg.bilevel_victim_maxiter, seed=sub.seed,
          dtype=dtype, use_cache=cfg.use_cache)
      attack = bilevel.bilevel_attack(
          apply_fn, "logistic", wd=cfg.bilevel_wd, inner_maxiter=cfg.bilevel_inner_maxiter,
          inner_tol=cfg.bilevel_inner_tol, hessian_solve=cfg.bilevel_hessian_solve,
          theta0=cfg.bilevel_theta0,
          restart_from_target_each_step=cfg.bilevel_restart_from_target,
          optimizer=cfg.bilevel_optimizer)
      target = pipeline.make_target(params, ds.y_train, dtype=dtype)
      x_init = inits.mix(ds.x_train, ds.x_part, n, dtype=dtype)
      hp["lr_x"] = jnp.asarray(np.full(len(sel), cfg.bilevel_lr_x), dtype)
      steps, offset, draws = cfg.bilevel_steps, 0.0, {}
      metric_keys = ("param_dist", "inner_grad_norm", "inner_iters")
    else:
      dsc = self.centred()
      vic = pipeline.load_or_train_victim(init_study.kkt_victim_config(cfg), dsc,
                                          use_cache=cfg.use_cache)
      params = vic.params
      vsum = {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")}
      attack = kkt.kkt_attack(vic.apply_fn, "binary")
      target = pipeline.make_target(params, dsc.y_train, dsc.mean, dtype=dtype)
      x_init = inits.mix(dsc.x_train, dsc.x_part, n, offset=dsc.mean, dtype=dtype)
      draws = init_study.kkt_hparams(cfg, len(sel))
      hp.update({k: jnp.asarray(v, dtype) for k, v in draws.items()})
      steps, offset = cfg.kkt_steps, np.asarray(dsc.mean, np.float64)
      metric_keys = ("stat_rel",)
    entry["victim"] = vsum
    entry["theta_star_sq_norm"] = float(losses.tree_sq_norm(target.params))
    entry["victim_s"] = time.time() - t0
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(sub.seed), 1), len(sel))
    state_path = common.inside(self.workdir, f"state_{sub.name}.msgpack")
    out = pipeline.run_attack(attack, x_init, keys, [(steps, hp)], target,
                              chunk_steps=min(cfg.chunk_steps, steps), batching=self.batching,
                              state_path=state_path, save_every=cfg.save_every,
                              resume=resume and os.path.isfile(state_path),
                              save_meta={"sub_run": sub.name})
    x_rec = np.asarray(out.candidates, np.float64) + offset
    last = out.chunks[-1]
    entry["precision_warning"] = diagnostics.float32_floor_warning(out.chunks, dtype)
    refs = {"train": ds.x_train, "partition": ds.x_part, "noise": self.noise}
    rows = []
    for j in range(len(sel)):
      row = {"l1": float(l1[j]), "l2": float(l2[j])}
      row.update(nearest.summary(x_rec[j], refs))
      row.update({k: last[k][j] for k in metric_keys})
      row.update({k: float(v[j]) for k, v in draws.items()})
      row["final_loss"] = float(out.final_loss[j])
      row["diverged"] = bool(out.diverged[j])
      rows.append(row)
    sub_idx = {k: int(np.flatnonzero(sel == v)[0]) for k, v in self.idx.items()}
    entry.update(
        settings={k: rows[v] for k, v in sub_idx.items()}, grid=bool(sub.grid), points=rows,
        steps=int(steps),
        findings=init_study.findings(rows, sub_idx, l1, l2, entry["theta_star_sq_norm"],
                                     sub.attack, sub.grid),
        compile_s=out.compile_s, run_s=out.run_s, wall_s=time.time() - t0)
    logging.info("%s done in %.1fs", sub.name, time.time() - t0)
    return common.jsonable(entry), x_rec


def _load_done(workdir: str, name: str):
  """``(entry, x)`` of a sub-run finished before, or None."""
  import numpy as np
  jpath = common.inside(workdir, f"done_{name}.json")
  if not os.path.isfile(jpath):
    return None
  try:
    with open(jpath) as f:
      entry = json.load(f)
    with np.load(common.inside(workdir, f"done_{name}.npz")) as z:
      x = z["x"]
  except (OSError, ValueError, KeyError) as e:
    raise common.UserError(f"--resume: {jpath} (or its .npz) is unreadable ({e}); remove both "
                           "to run that sub-run again.") from None
  logging.info("%s: finished before, loaded from %s", name, jpath)
  return entry, x


# ----------------------------------------------------------------------------- report

def _num(v, fmt: str) -> str:
  return "-" if v is None else format(v, fmt)


def summary(cfg, metrics: dict) -> str:
  """summary.md: the Table 1 analogue, the findings and their criteria."""
  from recon_jax import init_study
  lines = [f"# Initialisation study (Runkel et al. 2024, §4.3-4.5) on {metrics['dataset']}", "",
           f"n = {metrics['n_train']} training images, bilevel wd = {cfg.bilevel_wd}, "
           f"bilevel steps = {cfg.bilevel_steps}, KKT steps = {cfg.kkt_steps}, "
           f"{'the 21-point eq. (10) grid' if cfg.grid else 'the three settings'}; backend "
           f"{metrics['backend']} ({metrics['batching']}, x64 {metrics['x64']}), wall "
           f"{metrics['wall_s']:.0f} s.", "",
           "## Where the reconstructions end up (paper Table 1: ||theta* - theta(x)||^2 on "
           "CIFAR-10, affine / one-hidden ReLU 6144)", "",
           "L2 X: mean distance of a reconstruction to its nearest image of X (train: the "
           "training set, part: the disjoint partition, noise: U(0, 1) images).", "",
           "| sub-run | victim grad E | setting | param dist | rel. | inner grad / stat_rel | "
           "L2 train | L2 part | L2 noise | SSIM train | SSIM part | paper |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, r in metrics["sub_runs"].items():
    gnorm = r["victim"].get("grad_norm")
    for s in init_study.SETTINGS:
      row = r["settings"][s]
      pd, norm = row.get("param_dist"), r["theta_star_sq_norm"]
      rel = pd / norm if pd is not None and norm else None
      paper = (init_study.PAPER_TABLE1["affine" if r["arch"] == "affine" else "one_hidden"][s]
               if r["attack"] == "bilevel" else None)
      inner = row.get("inner_grad_norm", row.get("stat_rel"))
      lines.append(
          f"| {name} | {_num(gnorm, '.1e')} | {s} | {_num(pd, '.3g')} | {_num(rel, '.1e')} | "
          f"{_num(inner, '.1e')} | {_num(row['l2_train'], '.3g')} | "
          f"{_num(row['l2_partition'], '.3g')} | {_num(row['l2_noise'], '.3g')} | "
          f"{_num(row['ssim_train'], '.3f')} | {_num(row['ssim_partition'], '.3f')} | "
          f"{_num(paper, '.2e')} |")
  lines += ["", "## Paper findings: reproduced here?", ""]
  for name, r in metrics["sub_runs"].items():
    for fname in _FINDING_ORDER:
      f = r["findings"][fname]
      if f["reproduced"] is None:
        lines.append(f"- {name} / {fname}: {f['evidence']}")
      else:
        lines.append(f"- {name} / {fname}: **{'yes' if f['reproduced'] else 'no'}** "
                     f"({f['evidence']})")
  lines += ["", "Criteria: random -> noise: nearer to a U(0, 1) image than to any training "
            "image (bilevel: and relative parameter distance < 1e-2); ground truth recovered: "
            "mean nearest-train L2 < 0.1 x that of the random init; partition: nearer to the "
            "partition than to the training set; lambda1 < 0.5: every such grid point "
            "(lambda2 > 0) nearer to the partition.", ""]
  return "\n".join(lines)


def figures(workdir: str, metrics: dict, arrays: dict, ds) -> None:
  """The study's figures, from the rows of metrics.json and the reconstructions."""
  import numpy as np

  from recon_jax import init_study, plotting
  k = min(10, len(ds.x_train))
  for name, r in metrics["sub_runs"].items():
    x = arrays[f"{name}_x"]
    points = r["points"]
    at = {(p["l1"], p["l2"]): j for j, p in enumerate(points)}
    order = [(s, at[r["settings"][s]["l1"], r["settings"][s]["l2"]])
             for s in init_study.SETTINGS]
    rows = [ds.x_train[:k], ds.x_part[:k]] + [np.clip(x[j][:k], 0, 1) for _, j in order]
    labels = ["train", "partition"] + [f"from {s.replace('_', ' ')}" for s, _ in order]
    plotting.image_grid(os.path.join(workdir, f"{name}_settings.png"), rows, row_labels=labels,
                        title=f"{name}: reconstructions from the three starts\n(first {k} "
                              f"of {x.shape[1]}; top rows: the training images, the partition)")
    if not r["grid"]:
      continue
    vals = list(init_study.GRID_VALUES)
    note = ("Blank cells: grid points not run. At lambda2 = 0 the start is pure noise "
            "whatever lambda1 is, so only lambda1 = 0 is run there.")
    for ref, what in (("train", "training image"), ("partition", "partition image"),
                      ("noise", "U(0, 1) noise image")):
      plotting.heatmap(
          os.path.join(workdir, f"{name}_heatmap_{ref}.png"),
          init_study.grid_table(points, f"l2_{ref}", vals), vals, vals,
          "lambda1 (0: partition, 1: ground truth)", "lambda2 (0: noise, 1: no noise)",
          f"{name}: distance of the reconstructions to the nearest {what}",
          colorbar_label=f"mean L2 to the nearest {what}", note=note, origin="lower")
    grid = points
    p = sorted([g for g in grid if abs(g["l2"] - 1) < 1e-9], key=lambda g: g["l1"])
    plotting.line_plot(
        os.path.join(workdir, f"{name}_partition_to_gt.png"), [g["l1"] for g in p],
        {"to the nearest training image": [g["l2_train"] for g in p],
         "to the nearest partition image": [g["l2_partition"] for g in p]},
        "lambda1 at lambda2 = 1 (0: partition start, 1: ground-truth start)",
        "mean L2 distance", f"{name}: from partition to ground-truth starts (Fig. 11)")
    g = sorted([g for g in grid if abs(g["l1"] - 1) < 1e-9 or g["l2"] == 0],
               key=lambda g: g["l2"])
    plotting.line_plot(
        os.path.join(workdir, f"{name}_noise_to_gt.png"), [v["l2"] for v in g],
        {"to the nearest training image": [v["l2_train"] for v in g],
         "to the nearest noise image": [v["l2_noise"] for v in g]},
        "lambda2 at lambda1 = 1 (0: noise start, 1: ground-truth start)",
        "mean L2 distance", f"{name}: from noise to ground-truth starts (Fig. 12)")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  cfg = FLAGS.config

  def job():
    common.configure_precision(cfg.x64)
    prepare(cfg)
    if FLAGS.resume:  # before prepare_workdir, which would create a missing folder
      common.check_resumable(cfg, FLAGS.workdir, CONFIG_FILE)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    run(cfg, workdir, resume=FLAGS.resume)
    with open(os.path.join(workdir, "summary.md")) as f:
      print(f.read())

  common.main_guard(job, cfg, FLAGS.verbose)


if __name__ == "__main__":
  common.define_flags("init_study", "default")
  common.run_main(main)
