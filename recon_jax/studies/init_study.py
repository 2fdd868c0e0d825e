"""The initialisation study of Runkel et al. (2024, §4.3-4.5): its settings and findings.

Every x-initialisation of the study is a point of the eq. (10) mix

  ``x0 = l2 (l1 x_GT + (1 - l1) x_part) + (1 - l2) x_rnd``

(:func:`recon_jax.engine.inits.mix`): ``l1`` moves from the disjoint partition to the
ground truth, ``l2`` from uniform noise to that blend.  The three §4.3
settings are corners of it (:data:`SETTINGS`); the grid (:func:`mix_points`)
adds the 5 x 5 lattice of §4.5 without duplicates (at ``l2 = 0`` the start is
noise whatever ``l1`` is, so that row is one point).
The ground truth ``x_GT`` is the victim's training images: an oracle no attacker has, taken
through :func:`recon_jax.attacker.view.oracle_starts` and named in each part's entry
(``oracle_starts``).

This module holds what the study adds to the library: its parts, one attack
run each, and their victims (:func:`sub_runs`, :func:`bilevel_victim`,
:func:`kkt_victim_config`), the KKT hyperparameter draws (:func:`kkt_hparams`),
the check of a study configuration (:func:`validate`), the paper's findings
as testable criteria (:func:`findings`), one sub-run from victim to rows
(:class:`Study`) and its summary.md (:func:`summary`);
:func:`recon_jax.studies.runner.run_init_study` runs the whole study in a workdir.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data, implicit
from recon_jax.attacker import view as attacker
from recon_jax.attacks import bilevel, kkt
from recon_jax.core import losses
from recon_jax.engine import inits, loop, sweep
from recon_jax.errors import ConfigError
from recon_jax.eval import diagnostics, nearest
from recon_jax.types import float_dtype
from recon_jax.victims import cache, models, recipe, sources, targets, trained

# The three §4.3 settings as (l1, l2) of eq. (10).
SETTINGS = {"random": (0.0, 0.0), "ground_truth": (1.0, 1.0), "partition": (0.0, 1.0)}
GRID_VALUES = (0.0, 0.25, 0.5, 0.75, 1.0)
# Runkel et al. Table 1: ||theta* - theta(x)||^2 after the attack, CIFAR-10.
PAPER_TABLE1 = {
  "affine": {"random": 1.1214e-3, "ground_truth": 1.3888e-3, "partition": 2.9749e-3},
  "one_hidden": {"random": 6.1157e-5, "ground_truth": 1.7055e-3, "partition": 6.3629e-3},
}
KKT_RANGES = ("lr_x", "lr_lam", "alpha", "lam_min")
# The parts of the study (one sub-run each, see sub_runs).
PARTS = ("affine", "one_hidden", "one_hidden_relu", "kkt")
IMAGE_DATASETS = tuple(d for d in data.BINARY if len(data.INPUT_SHAPES[d]) == 3)  # images


def mix_points(grid: bool) -> tuple:
  """``(l1 [k], l2 [k])``: the deduplicated eq. (10) grid (21 points) or the three settings."""
  if grid:
    return inits.mix_grid(GRID_VALUES)
  l1 = np.array([v[0] for v in SETTINGS.values()], np.float64)
  l2 = np.array([v[1] for v in SETTINGS.values()], np.float64)
  return l1, l2


def setting_index(l1, l2) -> dict:
  """Position of each of the three :data:`SETTINGS` among the points ``(l1, l2)``."""
  l1, l2 = np.asarray(l1), np.asarray(l2)
  out = {}
  for name, (a, b) in SETTINGS.items():
    hit = np.flatnonzero((np.abs(l1 - a) < 1e-9) & (np.abs(l2 - b) < 1e-9))
    if not hit.size:
      raise ConfigError(f"points: setting {name} (l1={a}, l2={b}) is not among them.")
    out[name] = int(hit[0])
  return out


class SubRun(NamedTuple):
  """One attack run of the study: an attack on one victim over some eq. (10) points."""

  name: str  # e.g. 'bilevel_affine', file prefix of its outputs
  attack: str  # 'bilevel' or 'kkt'
  arch: str  # 'affine', 'one_hidden' or 'mlp'
  act: Optional[str]  # activation of the one-hidden net (None: affine / the MLP's ReLU)
  grid: bool  # all the points of mix_points(cfg.grid), or the three settings only
  seed: int  # seed of its victim initialisation and attack keys


def parts(cfg) -> list:
  """The parts named in ``cfg.parts`` (comma-separated), checked, in :data:`PARTS` order."""
  names = [p.strip() for p in str(cfg.parts).split(",") if p.strip()]
  bad = [p for p in names if p not in PARTS]
  if bad or not names:
    raise ConfigError(
      f"parts must be a comma-separated selection of {', '.join(PARTS)}, got {cfg.parts!r}.",
      argument="parts",
    )
  return [p for p in PARTS if p in names]


def sub_runs(cfg) -> list:
  """The sub-runs of the parts ``cfg.parts``, in running order.

  Bilevel (§4.3, 4.5): ``affine`` (the eq. 8 net) and ``one_hidden`` (the
  eq. 9 net with the smooth ``bilevel_act``) on the study's points,
  ``one_hidden_relu`` (the paper's ReLU) on the three settings; KKT (§4.4):
  ``kkt``, the homogeneous ReLU MLP on the study's points.  Each part has its
  own seed offset, so a part's results do not depend on which others run.
  """
  chosen = parts(cfg)
  runs = []
  if "affine" in chosen:
    runs.append(SubRun("bilevel_affine", "bilevel", "affine", None, cfg.grid, cfg.seed))
  if "one_hidden" in chosen:
    runs.append(
      SubRun(
        f"bilevel_one_hidden_{cfg.bilevel_act}",
        "bilevel",
        "one_hidden",
        cfg.bilevel_act,
        cfg.grid,
        cfg.seed + 1,
      )
    )
  if "one_hidden_relu" in chosen and not ("one_hidden" in chosen and cfg.bilevel_act == "relu"):
    runs.append(
      SubRun("bilevel_one_hidden_relu", "bilevel", "one_hidden", "relu", False, cfg.seed + 2)
    )
  if "kkt" in chosen:
    runs.append(SubRun("kkt_mlp_relu", "kkt", "mlp", None, cfg.grid, cfg.seed + 7))
  return runs


def load_data(cfg) -> data.Dataset:
  """The study's images in pixel space [0, 1] (no mean subtraction), with a partition."""
  return data.load_dataset(
    cfg.dataset,
    task="binary",
    n_per_class=cfg.n_per_class,
    n_part_per_class=cfg.n_per_class,
    seed=cfg.seed,
    data_dir=cfg.data_dir or None,
  )


def bilevel_victim(
  arch: str,
  act: Optional[str],
  ds: data.Dataset,
  *,
  width: int,
  wd: float,
  tol: float,
  maxiter: int,
  seed: int,
  dtype=None,
  use_cache: bool = True,
) -> tuple:
  """A victim of the bilevel attack: ``theta* = argmin E`` by L-BFGS, cached.

  The attack assumes ``theta*`` minimises ``E = mean logistic + wd/2 ||theta||^2``
  (the same ``E`` and ``wd`` as its inner problem), so the victim is trained to
  ``||grad E|| <= tol`` (:func:`recon_jax.implicit.train_to_convergence`) from a
  N(0, 0.1^2) initialisation.

  Returns:
    ``(apply_fn, params, summary)``; ``summary['grad_norm']`` is ``||grad E(theta*)||``.
  """
  dtype = dtype or float_dtype()
  module = models.build_model(
    arch, widths=(width,), init="normal", init_std=0.1, activation=act or "relu"
  )
  apply_fn = models.make_apply_fn(module)
  shape = ds.x_train.shape[1:]
  p0 = models.init_params(module, jax.random.PRNGKey(seed), shape, dtype)
  spec = {
    "trained_by": "implicit.train_to_convergence",
    "loss": "logistic",
    "arch": arch,
    "act": act,
    "width": int(width) if arch != "affine" else None,
    "wd": float(wd),
    "tol": float(tol),
    "maxiter": int(maxiter),
    "seed": int(seed),
    "init_std": 0.1,
    "dataset": ds.name,
    "data": data.fingerprint(ds),
  }

  def train():
    x, y = jnp.asarray(ds.x_train, dtype), jnp.asarray(ds.y_train, dtype)
    params, gnorm = implicit.train_to_convergence(
      apply_fn, p0, x, y, "logistic", wd, tol=tol, maxiter=maxiter
    )
    return params, {"grad_norm": gnorm}

  params, summary, _ = cache.cached_params("converged", spec, p0, train, use_cache=use_cache)
  return apply_fn, params, summary


def kkt_victim_config(cfg) -> recipe.VictimConfig:
  """The §4.4 KKT victim: a homogeneous ReLU MLP d-w-...-w-1 trained like the main job.

  :class:`recon_jax.victims.recipe.VictimConfig` defaults (first-layer bias only,
  N(0, 0.003) init with the first layer N(0, 1e-4), gradient descent at 0.05
  on the logistic loss without weight decay, training mean subtracted): the
  setting of Haim et al., on the study's training images.
  """
  return recipe.VictimConfig(
    dataset=cfg.dataset,
    n_per_class=cfg.n_per_class,
    data_seed=cfg.seed,
    seed=cfg.seed,
    widths=(cfg.kkt_width,) * cfg.kkt_depth,
    epochs=cfg.kkt_victim_epochs,
  )


def kkt_hparams(cfg, num: int) -> dict:
  """``num`` seeded draws of the ranges ``kkt_lr_x``, ``kkt_lr_lam``, ``kkt_alpha``, ``kkt_lam_min``.

  Returns ``{lr_x, lr_lam, alpha, lam_min: [num]}`` (the KKT attack's names);
  a bad range raises :class:`ConfigError` naming its ``kkt_`` setting.
  """
  ranges = {k: sweep.parse_range(f"kkt_{k}", cfg[f"kkt_{k}"], "log") for k in KKT_RANGES}
  try:
    hp = sweep.random_search(cfg.seed, num, ranges)
    sweep.check_hparams(hp)
  except ConfigError as e:
    arg = e.argument if e.argument in KKT_RANGES else None
    if arg is None:
      raise
    raise ConfigError(f"kkt_{e}", argument=f"kkt_{arg}") from None
  return hp


def _row_ok(value) -> bool:
  return value is not None and np.isfinite(value)


def findings(
  rows: Sequence[dict], idx: dict, l1, l2, theta_sq_norm: float, attack: str, grid: bool
) -> dict:
  """The paper's findings for one sub-run -> ``{finding: {'reproduced', 'evidence'}}``.

  Args:
    rows: per point of eq. (10): ``l2_train``, ``l2_partition``, ``l2_noise``
      (mean distance of the reconstructions to their nearest image of each
      set), ``ssim_train`` and, for the bilevel attack, ``param_dist``.
    idx: the rows of the three settings (:func:`setting_index`).
    l1, l2: the points of the rows.
    theta_sq_norm: ``||theta*||^2`` (``param_dist`` is judged relative to it).
    attack: 'bilevel' or 'kkt'.
    grid: whether the rows cover the grid (else the grid finding is not run:
      ``reproduced`` None).

  Criteria: random init -> noise: nearer to a U(0, 1) image than to any
  training image (bilevel: and relative parameter distance < 1e-2, i.e. the
  attack converged to another solution); ground truth recovered: mean
  nearest-train L2 below 0.1 x that of the random init; partition returns
  the init: nearer to the partition than to the training set; l1 < 0.5:
  every such grid point with l2 > 0 nearer to the partition.
  """
  rnd, gt, part = rows[idx["random"]], rows[idx["ground_truth"]], rows[idx["partition"]]
  f = {}
  evidence = f"L2 to nearest noise {rnd['l2_noise']:.3g} vs train {rnd['l2_train']:.3g}"
  small = True
  if attack == "bilevel":
    pd = rnd.get("param_dist")
    rel = pd / theta_sq_norm if _row_ok(pd) and theta_sq_norm > 0 else float("nan")
    small = bool(rel < 1e-2)
    evidence += f", rel param dist {rel:.2e}"
  f["random_to_noise"] = {
    "reproduced": bool(rnd["l2_noise"] < rnd["l2_train"] and small),
    "evidence": evidence,
  }
  f["ground_truth_recovered"] = {
    "reproduced": bool(gt["l2_train"] < 0.1 * rnd["l2_train"]),
    "evidence": f"L2 to nearest train {gt['l2_train']:.3g} (random init: "
    f"{rnd['l2_train']:.3g}); SSIM {gt['ssim_train']:.3f}",
  }
  f["partition_returns_init"] = {
    "reproduced": bool(part["l2_partition"] < part["l2_train"]),
    "evidence": f"L2 to nearest partition {part['l2_partition']:.3g} vs train "
    f"{part['l2_train']:.3g}",
  }
  if grid:
    sel = [i for i in range(len(rows)) if l1[i] < 0.5 and l2[i] > 0]
    nearer = [rows[i]["l2_partition"] < rows[i]["l2_train"] for i in sel]
    f["lambda1_below_half_nearer_partition"] = {
      "reproduced": bool(nearer and all(nearer)),
      "evidence": f"{sum(nearer)}/{len(nearer)} grid points with l1 < 0.5, l2 > 0",
    }
  else:
    f["lambda1_below_half_nearer_partition"] = {"reproduced": None, "evidence": "not run (no grid)"}
  return f


def grid_table(rows: Sequence[dict], key: str, values: Sequence[float] = GRID_VALUES):
  """``[len(values), len(values)]`` table of ``row[key]`` at (l2 = values[i], l1 = values[j]).

  Cells of points not run are NaN: at l2 = 0 the start is noise whatever l1
  is, so that row holds one point (l1 = 0); a sub-run of the three settings
  fills three cells.
  """
  table = np.full((len(values), len(values)), np.nan)
  for row in rows:
    for j, a in enumerate(values):
      for i, b in enumerate(values):
        if abs(row["l1"] - a) < 1e-9 and abs(row["l2"] - b) < 1e-9:
          v = row.get(key)
          table[i, j] = np.nan if v is None else v
  return table


class Study:
  """The shared pieces of one study (data, points, noise references) and its sub-runs."""

  def __init__(self, cfg, ds: data.Dataset):
    self.cfg, self.ds = cfg, ds
    self.l1, self.l2 = mix_points(cfg.grid)
    self.idx = setting_index(self.l1, self.l2)
    self.batching = loop.resolve_batching(cfg.batching)
    # The "noise" reference set: U(0, 1) images, as many as training images.
    self.noise = np.random.default_rng(cfg.seed + 99).uniform(size=ds.x_train.shape)
    self._centred = None

  def centred(self):
    """The data as the KKT victim sees them (training mean subtracted), loaded once."""
    if self._centred is None:
      self._centred = trained.load_data(kkt_victim_config(self.cfg), self.cfg.data_dir or None)
      if not np.array_equal(self._centred.train_idx, self.ds.train_idx):
        raise AssertionError("the KKT victim's training set differs from the study's")
    return self._centred

  def run(self, sub: SubRun, *, state_path: str, resume: bool):
    """One sub-run: victim -> attack -> rows -> ``(entry, x [R, m, ...])``.

    The attack saves its state to ``state_path`` every ``cfg.save_every``
    chunks; with ``resume`` (and that file present) it continues from there.
    """
    import time

    from absl import logging

    cfg, ds = self.cfg, self.ds
    t0 = time.time()
    dtype = float_dtype()
    sel = np.arange(len(self.l1)) if sub.grid else np.array(sorted(self.idx.values()))
    l1, l2 = self.l1[sel], self.l2[sel]
    hp = {"mix_l1": jnp.asarray(l1, dtype), "mix_l2": jnp.asarray(l2, dtype)}
    n = len(ds.x_train)
    entry = {"attack": sub.attack, "arch": sub.arch, "act": sub.act}
    if sub.attack == "bilevel":
      apply_fn, params, vsum = bilevel_victim(
        sub.arch,
        sub.act,
        ds,
        width=cfg.bilevel_width,
        wd=cfg.bilevel_wd,
        tol=cfg.bilevel_victim_tol,
        maxiter=cfg.bilevel_victim_maxiter,
        seed=sub.seed,
        dtype=dtype,
        use_cache=cfg.use_cache,
      )
      attack = bilevel.bilevel_attack(
        apply_fn,
        "logistic",
        wd=cfg.bilevel_wd,
        inner=implicit.InnerSolve(
          maxiter=cfg.bilevel_inner_maxiter,
          tol=cfg.bilevel_inner_tol,
          hessian_solve=cfg.bilevel_hessian_solve,
        ),
        start=bilevel.InnerStart(
          theta0=cfg.bilevel_theta0,
          restart_from_target_each_step=cfg.bilevel_restart_from_target,
        ),
        steps=bilevel.Steps(cfg.bilevel_optimizer),
      )
      target = targets.make_target(params, ds.y_train, dtype=dtype)
      oracle = attacker.oracle_starts(ds, "mix")  # the study's starts: training images
      x_init = inits.mix(oracle.images, ds.x_part, n, dtype=dtype)
      hp["lr_x"] = jnp.asarray(np.full(len(sel), cfg.bilevel_lr_x), dtype)
      steps, offset, draws = cfg.bilevel_steps, 0.0, {}
      metric_keys = ("param_dist", "inner_grad_norm", "inner_iters")
    else:
      dsc = self.centred()
      vic = sources.load_or_train_victim(kkt_victim_config(cfg), dsc, use_cache=cfg.use_cache)
      params = vic.params
      vsum = {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")}
      attack = kkt.kkt_attack(vic.apply_fn, "binary")
      target = targets.make_target(params, dsc.y_train, dsc.mean, dtype=dtype)
      oracle = attacker.oracle_starts(dsc, "mix")  # the study's starts: training images
      x_init = inits.mix(oracle.images, dsc.x_part, n, offset=dsc.mean, dtype=dtype)
      draws = kkt_hparams(cfg, len(sel))
      hp.update({k: jnp.asarray(v, dtype) for k, v in draws.items()})
      steps, offset = cfg.kkt_steps, np.asarray(dsc.mean, np.float64)
      metric_keys = ("stat_rel",)
    entry["victim"] = vsum
    entry["oracle_starts"] = oracle.init  # said, as the main job's metrics.json says it
    entry["theta_star_sq_norm"] = float(losses.tree_sq_norm(target.params))
    entry["victim_s"] = time.time() - t0
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(sub.seed), 1), len(sel))
    out = loop.run_attack(
      attack,
      x_init,
      keys,
      [(steps, hp)],
      target,
      chunk_steps=min(cfg.chunk_steps, steps),
      batching=self.batching,
      state_file=loop.StateFile(
        state_path, cfg.save_every, resume and os.path.isfile(state_path), {"sub_run": sub.name}
      ),
    )
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
      settings={k: rows[v] for k, v in sub_idx.items()},
      grid=bool(sub.grid),
      points=rows,
      steps=int(steps),
      findings=findings(rows, sub_idx, l1, l2, entry["theta_star_sq_norm"], sub.attack, sub.grid),
      compile_s=out.compile_s,
      run_s=out.run_s,
      wall_s=time.time() - t0,
    )
    logging.info("%s done in %.1fs", sub.name, time.time() - t0)
    return entry, x_rec
