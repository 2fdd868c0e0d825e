"""Initialisation study of Runkel et al. (2024), §4.3-4.5: bilevel and KKT attacks.

One attack run per (attack, network) covers every setting: the x-initialisations
are the eq. (10) mix ``l2 (l1 x_GT + (1 - l1) x_part) + (1 - l2) x_rnd`` over the
deduplicated grid (:func:`recon_jax.inits.mix_grid`, 21 restarts), which contains
the three §4.3 settings: random (l2 = 0), ground truth (l1 = l2 = 1) and partition
(l1 = 0, l2 = 1).  ``quick`` runs only those three.

Networks: the affine classifier (eq. 8) and the one-hidden-layer net (eq. 9) with a
smooth activation (``act``, default softplus: the implicit function theorem needs
C^2, see :mod:`recon_jax.implicit`), plus, if ``run_relu``, the paper's ReLU on the
three settings.  Victims are trained with L-BFGS on the same ``E`` and ``wd`` as the
attack assumes, and ``||grad E(theta*)||`` is recorded.  The KKT attack (§4.4) runs
on its own victim: a homogeneous ReLU MLP (default d-256-256-1) trained like the
main job (:class:`recon_jax.victim.VictimConfig` defaults, GD without weight
decay, training mean subtracted, the setting of Haim et al.), with the main
job's KKT hyperparameter ranges (one seeded draw per grid point).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from experiments import common
from recon_jax import implicit, inits, loop, plotting, resume, sweep
from recon_jax.eval import images as metrics
from recon_jax.checkpoint import atomic_write_text
from recon_jax import victim as victim_lib
from recon_jax.attacks.bilevel import bilevel_attack
from recon_jax.attacks.kkt import kkt_attack
from recon_jax.data import load_dataset
from recon_jax.models import build_model, get_activation, init_params, make_apply_fn
from recon_jax.types import Target

SETTINGS = {"random": (0.0, 0.0), "ground_truth": (1.0, 1.0), "partition": (0.0, 1.0)}


@dataclasses.dataclass(frozen=True)
class Config:
  dataset: str = "digits"
  data_dir: Optional[str] = None
  n_per_class: int = 10           # n = 20 training images (the scale)
  seed: int = 0
  wd: float = 1e-3                # inner weight decay, victims trained with the same
  width: int = 256                # one-hidden width (paper: 6144 on CIFAR-10)
  act: str = "softplus"           # smooth activation for the bilevel one-hidden net
  run_relu: bool = True           # also the paper's ReLU (three settings only)
  theta0: str = "target"          # first inner start: target | uniform | gaussian
  restart_from_target_each_step: bool = False
  steps: int = 200
  chunk_steps: int = 50
  optimizer: str = "adam"
  lr_x: float = 0.01
  hessian_solve: str = "cg"
  inner_maxiter: int = 100
  inner_tol: float = 1e-7
  victim_tol: float = 1e-7
  # §4.4 KKT victim: a homogeneous MLP d-w-w-1 trained like the main job
  # (recon_jax.victim.VictimConfig defaults: bias='first', N(0, 0.003) init with
  # first layer N(0, 1e-4), GD lr 0.05, logistic loss, training mean subtracted).
  kkt_width: int = 256
  kkt_depth: int = 2
  kkt_train_epochs: int = 10_000
  kkt_steps: int = 2000
  # The main job's KKT ranges; one random draw per grid point (seeded).
  kkt_lr_x: str = "0.03:0.6:log"
  kkt_lr_lam: str = "1e-4:1e-2:log"
  kkt_alpha: str = "10:40:lin"
  kkt_lam_min: str = "0.2:0.7:lin"
  grid: bool = True               # the 21-point eq. (10) grid (else the 3 settings)
  batching: str = "auto"          # vmap | map | auto (map on CPU, vmap elsewhere)


def quick_config(**kw) -> Config:
  """CI-sized: 3 images per class, small nets, few steps, three settings."""
  base = dict(n_per_class=3, width=16, kkt_width=16, steps=20, chunk_steps=20,
              kkt_train_epochs=2000, kkt_steps=100, grid=False, run_relu=True,
              inner_maxiter=50)
  base.update(kw)
  return Config(**base)


def _dtype():
  return jnp.float64 if jax.config.read("jax_enable_x64") else jnp.float32


def _batching(cfg):
  return loop.resolve_batching(cfg.batching)


def _grid(cfg):
  if cfg.grid:
    l1, l2 = inits.mix_grid()
  else:
    l1 = np.array([v[0] for v in SETTINGS.values()])
    l2 = np.array([v[1] for v in SETTINGS.values()])
  return l1, l2


def _setting_index(l1, l2):
  out = {}
  for name, (a, b) in SETTINGS.items():
    hit = np.where((np.abs(l1 - a) < 1e-9) & (np.abs(l2 - b) < 1e-9))[0]
    out[name] = int(hit[0])
  return out


def _nearest(x, ref):
  """Per reconstruction: min L2 (per-image norm) to ``ref`` and the max SSIM."""
  flat = x.reshape(x.shape[0], -1)
  rf = ref.reshape(ref.shape[0], -1)
  d = np.sqrt(np.maximum(np.sum(flat ** 2, 1)[:, None] + np.sum(rf ** 2, 1)[None]
                         - 2 * flat @ rf.T, 0))
  s = np.asarray(metrics.ssim_matrix(np.clip(x, 0, 1).astype(np.float32),
                                     np.clip(ref, 0, 1).astype(np.float32)))
  return d.min(1), s.max(1)


def _evaluate(x_rec, ds, noise):
  out = {}
  for name, ref in (("train", ds.x_train), ("partition", ds.x_part), ("noise", noise)):
    l2, ss = _nearest(x_rec, np.asarray(ref, np.float64))
    out[f"l2_{name}"] = float(l2.mean())
    out[f"ssim_{name}"] = float(ss.mean())
  return out


def _train_victim(arch, cfg, ds, act_name, key, dtype):
  module = build_model(arch, widths=(cfg.width,), init="normal", init_std=0.1)
  apply_fn = make_apply_fn(module)
  p0 = init_params(module, key, ds.x_train.shape[1:], dtype)
  act = get_activation(act_name) if arch != "affine" else None
  x, y = jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train, dtype)
  params, gnorm = implicit.train_to_convergence(apply_fn, p0, x, y, "logistic", cfg.wd,
                                                tol=cfg.victim_tol, maxiter=20_000, act=act)
  return apply_fn, params, gnorm


def _run_attack(attack, x_init, hparams, target, cfg, steps, seed, *, workdir, name,
                resume_run=False, save_every=1):
  """One attack run; its state goes to ``state_<name>.msgpack`` every ``save_every`` chunks.

  Returns (last chunk record {metric: np [R]}, compile_s, run_s, candidates [R, m, ...]).
  With ``resume_run`` and a state file present, the run continues from it.
  """
  r = len(next(iter(hparams.values())))
  keys = jax.random.split(jax.random.PRNGKey(seed), r)
  hpj = {k: jnp.asarray(v) for k, v in hparams.items()}
  batching = _batching(cfg)
  path = common.inside(workdir, f"state_{name}.msgpack")
  state0, last = None, [None]
  if resume_run and os.path.isfile(path):
    state0, last[0] = _load_state(path, attack, x_init, keys, hpj, target, batching)

  def progress(state, rec):
    last[0] = {k: np.asarray(v) for k, v in rec.items() if k != "time_s"}
    done = int(rec["step"])
    if save_every and (done // min(cfg.chunk_steps, steps) % save_every == 0 or done >= steps):
      resume.save(path, resume.run_tree(state, keys, hpj),
                  {"name": name, "last": {k: _encode(v) for k, v in last[0].items()}})

  res = loop.run(attack, x_init, keys, hpj, target, num_steps=steps,
                 chunk_steps=min(cfg.chunk_steps, steps), batching=batching, log=True,
                 state=state0, progress=progress)
  x, _ = jax.vmap(attack.candidates)(res.state.inner)
  return last[0], res.compile_s, res.run_s, np.asarray(x, np.float64)


def _encode(a):
  """Bit-exact JSON form of a small array (NaN/Inf included)."""
  a = np.ascontiguousarray(a)
  return {"dtype": a.dtype.str, "shape": list(a.shape), "hex": a.tobytes().hex()}


def _decode(d):
  return np.frombuffer(bytes.fromhex(d["hex"]), np.dtype(d["dtype"])).reshape(d["shape"])


def _load_state(path, attack, x_init, keys, hpj, target, batching):
  """(batched RestartState, last chunk record) from a state file, validated."""
  state, meta = resume.load_run(path, attack, x_init, keys, hpj, target, batching)
  last = {k: _decode(v) for k, v in meta["last"].items()}
  logging.info("resuming from %s at step %d", path, int(np.max(np.asarray(state.step))))
  return state, last


def _load_done(workdir, name):
  """(results entry, reconstructions) of a finished sub-run, or None."""
  jpath = common.inside(workdir, f"done_{name}.json")
  if not os.path.isfile(jpath):
    return None
  try:
    with open(jpath) as fh:
      entry = json.load(fh)
    with np.load(common.inside(workdir, f"done_{name}.npz")) as z:
      x_rec = z["x"]
  except (OSError, ValueError, KeyError) as e:
    raise common.UserError(f"--resume: {jpath} (or its .npz) is unreadable ({e}).") from None
  logging.info("%s: finished before, loaded from %s", name, jpath)
  return entry, x_rec


def _save_done(workdir, name, entry, x_rec):
  common.write_npz(workdir, f"done_{name}.npz", x=x_rec)
  atomic_write_text(common.inside(workdir, f"done_{name}.json"), json.dumps(entry, indent=2))


def _findings(rows, idx, grid_l1, grid_l2, norm_sq, kind):
  """Paper findings -> (reproduced?, evidence) for one (attack, network)."""
  f = {}
  rnd, gt, part = rows[idx["random"]], rows[idx["ground_truth"]], rows[idx["partition"]]
  small = lambda r: (r.get("param_dist", 0.0) / norm_sq) < 1e-2 if kind == "bilevel" else True
  f["random_to_noise"] = {
      "reproduced": bool(rnd["l2_noise"] < rnd["l2_train"] and small(rnd)),
      "evidence": f"L2 to nearest noise {rnd['l2_noise']:.3g} vs train {rnd['l2_train']:.3g}"
                  + (f", rel param dist {rnd['param_dist'] / norm_sq:.2e}"
                     if kind == "bilevel" else "")}
  f["ground_truth_recovered"] = {
      "reproduced": bool(gt["l2_train"] < 0.1 * rnd["l2_train"]),
      "evidence": f"L2 to nearest train {gt['l2_train']:.3g} (random init: "
                  f"{rnd['l2_train']:.3g}); SSIM {gt['ssim_train']:.3f}"}
  f["partition_returns_init"] = {
      "reproduced": bool(part["l2_partition"] < part["l2_train"]),
      "evidence": f"L2 to nearest partition {part['l2_partition']:.3g} vs train "
                  f"{part['l2_train']:.3g}"}
  sel = [i for i in range(len(rows)) if grid_l1[i] < 0.5 and grid_l2[i] > 0]
  nearer = [rows[i]["l2_partition"] < rows[i]["l2_train"] for i in sel]
  f["lambda1_below_half_nearer_partition"] = {
      "reproduced": bool(nearer and all(nearer)),
      "evidence": f"{sum(nearer)}/{len(nearer)} grid points with l1 < 0.5, l2 > 0"}
  return f


def run(cfg: Config, workdir: str, *, resume_run: bool = False, save_every: int = 1) -> dict:
  """Runs the study, writes config/metrics/npz/figures/summary into ``workdir``.

  Each attack sub-run saves its full state to ``state_<name>.msgpack`` every
  ``save_every`` chunks (0: never) and, once finished, its results to
  ``done_<name>.json``/``.npz``.  With ``resume_run`` finished sub-runs are
  loaded and the interrupted one continues from its state file (victims are
  deterministic and retrained).
  """
  validate(cfg)
  if save_every < 0:
    raise common.UserError(f"--save_every must be >= 0 (0: never), got {save_every}.")
  if resume_run:
    check_resumable(cfg, workdir)
  os.makedirs(workdir, exist_ok=True)
  t_start = time.time()
  dtype = _dtype()
  if not resume_run:
    atomic_write_text(common.inside(workdir, "config.json"),
                      json.dumps(dataclasses.asdict(cfg), indent=2))
  sub = dict(workdir=workdir, resume_run=resume_run, save_every=save_every)
  ds = load_dataset(cfg.dataset, task="binary", n_per_class=cfg.n_per_class,
                    n_part_per_class=cfg.n_per_class, seed=cfg.seed, data_dir=cfg.data_dir)
  n, shape = ds.x_train.shape[0], ds.x_train.shape[1:]
  noise = np.asarray(jax.random.uniform(jax.random.PRNGKey(cfg.seed + 99), (n, *shape)))
  l1, l2 = _grid(cfg)
  idx = _setting_index(l1, l2)
  x_init = inits.mix(ds.x_train, ds.x_part, n, dtype=dtype)
  mix_hp = {"mix_l1": jnp.asarray(l1, dtype), "mix_l2": jnp.asarray(l2, dtype)}
  box = (jnp.zeros((), dtype), jnp.ones((), dtype))
  labels = jnp.asarray(ds.y_train, dtype)
  results, arrays = {}, {"x_train": ds.x_train, "x_part": ds.x_part, "mix_l1": l1,
                         "mix_l2": l2}
  keys = jax.random.split(jax.random.PRNGKey(cfg.seed), 8)

  runs = [("bilevel_affine", "affine", None, True),
          (f"bilevel_one_hidden_{cfg.act}", "one_hidden", cfg.act, True)]
  if cfg.run_relu:
    runs.append(("bilevel_one_hidden_relu", "one_hidden", "relu", False))
  for i, (name, arch, act, use_grid) in enumerate(runs):
    done = _load_done(workdir, name) if resume_run else None
    if done is not None:
      results[name], arrays[f"{name}_x"] = done
      continue
    t0 = time.time()
    apply_fn, pstar, gnorm = _train_victim(arch, cfg, ds, act or "relu", keys[i], dtype)
    norm_sq = float(sum(jnp.sum(a ** 2) for a in jax.tree_util.tree_leaves(pstar)))
    attack = bilevel_attack(apply_fn, "logistic", wd=cfg.wd, act=act,
                            inner_maxiter=cfg.inner_maxiter, inner_tol=cfg.inner_tol,
                            hessian_solve=cfg.hessian_solve, theta0=cfg.theta0,
                            restart_from_target_each_step=cfg.restart_from_target_each_step,
                            optimizer=cfg.optimizer)
    if use_grid:
      sel = np.arange(len(l1))
    else:
      sel = np.array(sorted(idx.values()))
    hp = {k: v[sel] for k, v in mix_hp.items()}
    hp["lr_x"] = jnp.full((len(sel),), cfg.lr_x, dtype)
    last, compile_s, run_s, x_rec = _run_attack(
        attack, x_init, hp, Target(pstar, labels, *box), cfg, cfg.steps, cfg.seed + i,
        name=name, **sub)
    rows = []
    for j in range(len(sel)):
      row = _evaluate(x_rec[j], ds, noise)
      row.update(l1=float(l1[sel[j]]), l2=float(l2[sel[j]]),
                 param_dist=float(last["param_dist"][j]),
                 inner_grad_norm=float(last["inner_grad_norm"][j]),
                 inner_iters=float(last["inner_iters"][j]),
                 diverged=bool(last["diverged"][j]))
      rows.append(row)
    sub_idx = {k: int(np.where(sel == v)[0][0]) for k, v in idx.items()}
    results[name] = {
        "victim_grad_norm": gnorm, "theta_star_sq_norm": norm_sq,
        "settings": {k: rows[v] for k, v in sub_idx.items()},
        "grid": rows if use_grid else None,
        "compile_s": compile_s, "run_s": run_s, "wall_s": time.time() - t0,
        "findings": _findings(rows, sub_idx, l1[sel], l2[sel], norm_sq, "bilevel"),
    }
    arrays[f"{name}_x"] = x_rec
    _figures(workdir, name, x_rec, rows, sub_idx, ds, l1[sel], l2[sel], use_grid)
    _save_done(workdir, name, results[name], x_rec)
    logging.info("%s done in %.1fs (victim |grad E| %.2e)", name, time.time() - t0, gnorm)

  # §4.4: the KKT attack on a homogeneous MLP victim trained like the main job
  # (GD, no weight decay, the setting of Haim et al.), in mean-subtracted space.
  done = _load_done(workdir, "kkt_mlp_relu") if resume_run else None
  if done is not None:
    results["kkt_mlp_relu"], arrays["kkt_mlp_relu_x"] = done
  else:
    _run_kkt(cfg, ds, dtype, l1, l2, idx, mix_hp, labels, noise, results, arrays, sub)
  return _finish(cfg, workdir, results, arrays, t_start)


def _run_kkt(cfg, ds, dtype, l1, l2, idx, mix_hp, labels, noise, results, arrays, sub):
  workdir = sub["workdir"]
  n = ds.x_train.shape[0]
  t0 = time.time()
  vcfg = victim_lib.VictimConfig(dataset=cfg.dataset, n_per_class=cfg.n_per_class,
                                 data_seed=cfg.seed, seed=cfg.seed,
                                 widths=(cfg.kkt_width,) * cfg.kkt_depth,
                                 epochs=cfg.kkt_train_epochs)
  mean = ds.x_train.mean(0)
  ds_c = ds._replace(x_train=ds.x_train - mean, x_part=ds.x_part - mean,
                     x_test=ds.x_test - mean, mean=mean)
  _, apply_fn = victim_lib.build(vcfg, ds_c)
  pk, thist, vsum = victim_lib.fit(vcfg, ds_c, dtype=dtype)
  attack = kkt_attack(apply_fn, "binary")
  sel = np.arange(len(l1))
  r = len(sel)
  ranges = {k: sweep.parse_range(k, getattr(cfg, f"kkt_{k}"), "log")
            for k in ("lr_x", "lr_lam", "alpha", "lam_min")}
  draws = sweep.random_search(cfg.seed, r, ranges)
  hp = dict(mix_hp, **{k: jnp.asarray(v, dtype) for k, v in draws.items()})
  x_init_c = inits.mix(ds_c.x_train, ds_c.x_part, n, offset=mean, dtype=dtype)
  mean_j = jnp.asarray(mean, dtype)  # per-pixel bounds of one candidate
  last, compile_s, run_s, x_rec = _run_attack(
      attack, x_init_c, hp, Target(pk, labels, -mean_j, 1 - mean_j), cfg, cfg.kkt_steps,
      cfg.seed + 7, name="kkt_mlp_relu", **sub)
  x_rec = x_rec + mean[None, None]
  rows = []
  for j in range(r):
    row = _evaluate(x_rec[j], ds, noise)
    row.update(l1=float(l1[j]), l2=float(l2[j]), stat_rel=float(last["stat_rel"][j]),
               diverged=bool(last["diverged"][j]),
               **{k: float(np.asarray(v)[j]) for k, v in draws.items()})
    rows.append(row)
  results["kkt_mlp_relu"] = {
      "victim": {k: v for k, v in vsum.items() if k not in ("margins", "outputs")},
      "victim_train_loss": thist[-1]["loss"] if thist else None,
      "settings": {k: rows[v] for k, v in idx.items()},
      "grid": rows if cfg.grid else None,
      "compile_s": compile_s, "run_s": run_s, "wall_s": time.time() - t0,
      "findings": _findings(rows, idx, l1, l2, 1.0, "kkt"),
  }
  arrays["kkt_mlp_relu_x"] = x_rec
  _figures(workdir, "kkt_mlp_relu", x_rec, rows, idx, ds, l1, l2, cfg.grid)
  _save_done(workdir, "kkt_mlp_relu", results["kkt_mlp_relu"], x_rec)


def _finish(cfg, workdir, results, arrays, t_start):
  results["wall_s"] = time.time() - t_start
  results["backend"] = jax.default_backend()
  results["batching"] = _batching(cfg)
  with open(os.path.join(workdir, "metrics.json"), "w") as fh:
    json.dump(results, fh, indent=2)
  np.savez_compressed(os.path.join(workdir, "reconstructions.npz"), **arrays)
  with open(os.path.join(workdir, "summary.md"), "w") as fh:
    fh.write(_summary(cfg, results))
  return results


_STRINGS = {"theta0": ("target", "uniform", "gaussian"), "hessian_solve": ("cg", "lbfgs"),
            "batching": ("vmap", "map", "auto")}


def validate(cfg: Config) -> None:
  """Bad flags -> UserError (one line), before any training."""
  for k in ("wd", "lr_x", "inner_tol", "victim_tol"):
    v = getattr(cfg, k)
    if not (isinstance(v, (int, float)) and np.isfinite(v) and v > 0):
      raise common.UserError(f"--{k} must be > 0, got {v}.")
  for k in ("n_per_class", "width", "steps", "chunk_steps", "inner_maxiter", "kkt_width",
            "kkt_depth", "kkt_train_epochs", "kkt_steps"):
    if getattr(cfg, k) < 1:
      raise common.UserError(f"--{k} must be >= 1, got {getattr(cfg, k)}.")
  for k in ("theta0", "hessian_solve", "batching"):
    if getattr(cfg, k) not in _STRINGS[k]:
      raise common.UserError(f"--{k} must be one of {', '.join(_STRINGS[k])}, got "
                             f"{getattr(cfg, k)!r}.")
  try:
    get_activation(cfg.act)
  except (ValueError, KeyError):
    raise common.UserError(f"--act {cfg.act!r} is not a known activation.") from None


def check_resumable(cfg: Config, workdir: str) -> None:
  """Raises UserError unless ``workdir`` holds this configuration's config.json."""
  workdir = os.path.abspath(workdir)
  if not os.path.isdir(workdir):
    raise common.UserError(f"--resume: --workdir {workdir} does not exist; nothing to resume.")
  cfg_path = common.inside(workdir, "config.json")
  try:
    with open(cfg_path) as fh:
      stored = json.load(fh)
  except FileNotFoundError:
    raise common.UserError(f"--resume: {cfg_path} not found; nothing to resume "
                           "(run without --resume).") from None
  except (OSError, ValueError):
    raise common.UserError(f"--resume: {cfg_path} is unreadable or corrupt.") from None
  want = json.loads(json.dumps(dataclasses.asdict(cfg)))
  if not isinstance(stored, dict):
    raise common.UserError(f"--resume: {cfg_path} is unreadable or corrupt.")
  diff = [k for k in sorted(set(want) | set(stored)) if want.get(k) != stored.get(k)]
  if diff:
    raise common.UserError(f"--resume: the configuration differs from {cfg_path} in "
                           f"{', '.join(diff[:5])}; resume with the same flags.")


def _figures(workdir, name, x_rec, rows, idx, ds, l1, l2, use_grid):
  k = min(10, x_rec.shape[1])
  for setting, j in idx.items():
    plotting.image_grid(os.path.join(workdir, f"{name}_{setting}.png"),
                        [np.clip(x_rec[j][:k], 0, 1), ds.x_train[:k], ds.x_part[:k]],
                        row_labels=["recon", "train", "partition"],
                        title=f"{name}: {setting} init")
  if not use_grid:
    return
  vals = (0.0, 0.25, 0.5, 0.75, 1.0)
  for ref in ("train", "partition", "noise"):
    h = np.full((len(vals), len(vals)), np.nan)
    for row in rows:
      for a, v1 in enumerate(vals):
        for b, v2 in enumerate(vals):
          if abs(row["l1"] - v1) < 1e-9 and abs(row["l2"] - v2) < 1e-9:
            h[b, a] = row[f"l2_{ref}"]
    h[0, :] = h[0, 0]  # l2 = 0: one start whatever l1 is
    plotting.heatmap(os.path.join(workdir, f"{name}_heatmap_{ref}.png"), h, list(vals),
                     list(vals), "lambda1", "lambda2", f"{name}: mean L2 to nearest {ref}")
  by = lambda cond: sorted([r for r in rows if cond(r)], key=lambda r: (r["l1"], r["l2"]))
  p = by(lambda r: abs(r["l2"] - 1) < 1e-9)  # partition <-> GT (Fig. 11)
  plotting.line_plot(os.path.join(workdir, f"{name}_partition_to_gt.png"),
                     [r["l1"] for r in p], {"train": [r["l2_train"] for r in p],
                                            "partition": [r["l2_partition"] for r in p]},
                     "lambda1 (lambda2 = 1)", "mean L2 to nearest", name)
  g = sorted([r for r in rows if abs(r["l1"] - 1) < 1e-9 or r["l2"] == 0],
             key=lambda r: r["l2"])  # noise <-> GT (Fig. 12)
  plotting.line_plot(os.path.join(workdir, f"{name}_noise_to_gt.png"),
                     [r["l2"] for r in g], {"train": [r["l2_train"] for r in g],
                                            "noise": [r["l2_noise"] for r in g]},
                     "lambda2 (lambda1 = 1)", "mean L2 to nearest", name)


PAPER_TABLE1 = {"affine": {"random": 1.1214e-3, "ground_truth": 1.3888e-3, "partition": 2.9749e-3},
                "one_hidden": {"random": 6.1157e-5, "ground_truth": 1.7055e-3,
                               "partition": 6.3629e-3}}


def _summary(cfg, results) -> str:
  lines = [f"# Initialisation study (Runkel et al. 2024, §4.3-4.5) on {cfg.dataset}",
           "", f"n = {2 * cfg.n_per_class} training images, wd = {cfg.wd}, "
           f"steps = {cfg.steps} (KKT {cfg.kkt_steps}), backend {results['backend']} "
           f"({results['batching']}), wall {results['wall_s']:.0f} s.", "",
           "## ||theta* - theta(x)||^2 after the attack (paper Table 1: CIFAR-10, "
           "affine / one-hidden ReLU 6144)", "",
           "| attack | victim grad E | setting | param dist | rel. | inner grad | "
           "L2 train | L2 part | L2 noise | SSIM train | SSIM part | paper |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    if not isinstance(r, dict) or "settings" not in r:
      continue
    for s, row in r["settings"].items():
      pd = row.get("param_dist")
      paper = PAPER_TABLE1["affine" if "affine" in name else "one_hidden"].get(s) \
          if name.startswith("bilevel") else None
      lines.append(
          f"| {name} | {r.get('victim_grad_norm', float('nan')):.1e} | {s} | "
          + (f"{pd:.3g} | {pd / r['theta_star_sq_norm']:.1e} | {row['inner_grad_norm']:.1e}"
             if pd is not None else f"stat_rel {row['stat_rel']:.3g} | - | -")
          + f" | {row['l2_train']:.3g} | {row['l2_partition']:.3g} | {row['l2_noise']:.3g} | "
          f"{row['ssim_train']:.3f} | {row['ssim_partition']:.3f} | "
          + (f"{paper:.2e}" if paper else "-") + " |")
  lines += ["", "## Paper findings: reproduced here?", ""]
  for name, r in results.items():
    if not isinstance(r, dict) or "findings" not in r:
      continue
    for fname, f in r["findings"].items():
      if fname == "lambda1_below_half_nearer_partition" and r.get("grid") is None:
        lines.append(f"- {name} / {fname}: not run (no grid)")
        continue
      lines.append(f"- {name} / {fname}: **{'yes' if f['reproduced'] else 'no'}** "
                   f"({f['evidence']})")
  lines += ["", "Criteria: random->noise: nearer to a U(0,1) image than to any training image "
            "and relative parameter distance < 1e-2; ground truth recovered: mean nearest-train "
            "L2 < 0.1x that of the random init; partition: nearer to the partition than to the "
            "training set; lambda1 < 0.5: every such grid point (lambda2 > 0) nearer to the "
            "partition.", ""]
  return "\n".join(lines)
