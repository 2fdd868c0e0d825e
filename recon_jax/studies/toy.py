"""The 2-D toy of Haim et al. 2022 §4 (Fig. 2): its settings, its victim, its run and its scoring.

:func:`run` trains a 2-W-W-1 ReLU victim on n points of the unit circle with
alternating labels and runs the KKT attack with no prior from Gaussian
starting points; this module also checks its settings (:func:`validate`),
describes its victim (:func:`victim_config`) and scores the attack's
candidates (:func:`score`, with :mod:`recon_jax.eval.points`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Mapping, NamedTuple, Optional, Union

from absl import logging
import numpy as np

from recon_jax import data
from recon_jax.attacks import kkt
from recon_jax.core import losses, rules
from recon_jax.core.rules import INT32_MAX, Rule, setting
from recon_jax.engine import inits, loop, sweep
from recon_jax.errors import ConfigError
from recon_jax.eval import diagnostics, points, verdict
from recon_jax.eval.metrics_json import Victim
from recon_jax.io import plots
from recon_jax.job import planning
from recon_jax.types import float_dtype
from recon_jax.victims import recipe, sources, targets

# The victim's init schemes that need no extra scale ('normal' needs init_std).
VICTIM_INITS = ("torch", "kaiming", "uniform")
# The toy's settings of its victim's recipe: {setting: field of VictimConfig}; the recipe's
# rules (:mod:`recon_jax.victims.recipe`) check them.
VICTIM_SETTINGS = {
  "victim_init": "init",
  "victim_init_gain": "init_gain",
  "victim_bias": "bias",
  "victim_lr": "lr",
  "victim_epochs": "epochs",
  "victim_adaptive": "adaptive",
}


_R = recipe.RULES  # the toy's victim_* settings hold what the recipe's fields may hold
_INT = Rule("int", low=1, high=INT32_MAX)


@dataclasses.dataclass(frozen=True)
class ToySettings:
  """The toy's settings, each declared once (default: Haim et al.'s Fig. 2 at paper size).

  ``experiments/configs/toy_2d.py`` builds its ConfigDict and ``--help`` from these, and
  :func:`validate` checks a config against them before any work.  The ``victim_*`` settings
  are fields of the victim's recipe (:data:`VICTIM_SETTINGS`), held to the recipe's rules.
  """

  n_train: int = setting(
    20, "training points on the unit circle (even)", Rule("int", low=2, high=10**6)
  )
  width: int = setting(
    1000, "hidden width of the 2-W-W-1 ReLU victim", Rule("int", low=1, high=10**6)
  )
  # The victim's recipe: PyTorch's default nn.Linear init (weights and biases
  # U(+-1/sqrt(fan_in))), biases in every layer, plain full-batch GD.  With biases only in
  # the first layer (or none) the trained net is almost homogeneous in x, its decision
  # regions are wedges through the origin, and a candidate's radius is not identifiable:
  # those victims gave 0-4 of 20.
  victim_init: str = setting(
    "torch",
    "the victim's weight init: torch | kaiming | uniform",
    Rule("str", choices=VICTIM_INITS),
  )
  victim_init_gain: float = setting(1.0, "multiplies the victim's init scale", _R["init_gain"])
  victim_bias: str = setting("all", "biases in the victim's layers: all | first | none", _R["bias"])
  victim_lr: float = setting(0.01, "full-batch GD learning rate of the victim", _R["lr"])
  victim_epochs: int = setting(20_000, "full-batch GD epochs of the victim", _R["epochs"])
  victim_adaptive: str = setting("none", "normalised GD: none | loss | grad", _R["adaptive"])
  theta_norm: float = setting(
    0.0,
    "> 0: the attack sees theta* rescaled to this norm (homogeneous victims only: "
    "victim_bias=none or first)",
    Rule("float", low=0, high=1e6, note="0: as trained"),
  )
  m: int = setting(100, "candidates per restart (even: m/2 per label)", _INT)
  num_restarts: int = setting(4, "restarts, batched in one compiled program", _INT)
  steps: int = setting(5000, "steps of the coarse stage", _INT)
  chunk_steps: int = setting(
    1000, "steps per compiled chunk, between progress lines and saves", _INT
  )
  lr_x: str = setting(
    "3e-4:1e-3:log", "candidates' learning rate (a draw per restart)", Rule("range")
  )
  lr_lam: str = setting("5e-3:3e-2:log", "multipliers' (lambda) learning rate", Rule("range"))
  sigma_x: str = setting(
    "0.3:0.5:log", "std of the candidates' Gaussian starting points", Rule("range")
  )
  alpha: str = setting("4:10:lin", "surrogate ReLU sharpness of the coarse stage", Rule("range"))
  lam_min: str = setting("0.3:0.5:log", "lambda below this is penalised", Rule("range"))
  # Refinement stage: a sharp surrogate at a lower rate pulls the candidates onto the ReLU
  # kinks where the training points sit.
  refine_steps: int = setting(
    3000, "steps of the sharp refinement stage (0: off)", Rule("int", low=0, high=INT32_MAX)
  )
  refine_alpha: float = setting(
    200.0, "the refinement stage's sharpness", Rule("float", low=0, high=1e6, low_open=True)
  )
  refine_lr_scale: float = setting(
    0.1,
    "the refinement stage's learning rates, times this",
    Rule("float", low=0, high=1e3, low_open=True),
  )
  lam_filter_frac: float = setting(
    0.1,
    "keep candidates with lambda >= this x the largest lambda of their restart",
    Rule("float", low=0, high=1),
  )
  dedup_radius: float = setting(
    0.03, "greedy de-duplication radius (Haim §4)", Rule("float", low=0, high=1e6)
  )
  tol: float = setting(
    0.05,
    "a training point is recovered if a kept candidate is this close",
    Rule("float", low=0, high=1e6, low_open=True),
  )
  seed: int = setting(
    0, "seed of the points, the victim and the attack", Rule("int", low=0, high=2**32 - 1)
  )
  x64: bool = setting(True, "float64: the victim needs it to reach the KKT direction", Rule("bool"))
  use_cache: bool = setting(
    True, "cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)", Rule("bool")
  )
  save_every: int = setting(
    1, "save state.msgpack every N chunks (0: never)", Rule("int", low=0, high=INT32_MAX)
  )


def validate(cfg) -> tuple:
  """Checks every setting of a toy config before any work; returns ``(hparams, stages, labels)``.

  A bad setting raises :class:`ConfigError` whose message starts with the
  setting's name (``n_train must be even ...``); the attack's ranges and
  refinement settings are checked by :mod:`recon_jax.engine.sweep` and
  :func:`recon_jax.engine.sweep.check_hparams`, which name theirs too.
  """

  def refuse(name: str, message: str):
    raise ConfigError(f"{name} {message}", argument=name)

  rules.check_declared(cfg, ToySettings)
  n = cfg.n_train
  if n % 2:
    refuse("n_train", f"must be even and >= 2, got {n}.")
  recipe.check_named(lambda: victim_config(cfg), {f: name for name, f in VICTIM_SETTINGS.items()})
  if cfg.theta_norm > 0 and cfg.victim_bias == "all":
    refuse("theta_norm", "> 0 needs a homogeneous victim (victim_bias=none or first).")
  # Activations of the victim's training (n_train points) and of the attack (R x m
  # candidates), forward and backward, through two layers of `width` units.
  nbytes = 8 if cfg.get("x64", False) else 4
  need = 6 * nbytes * (n + cfg.num_restarts * cfg.m) * cfg.width
  have = planning.available_memory()
  if have is not None and need > have:
    refuse(
      "n_train",
      f"with width={cfg.width}, num_restarts={cfg.num_restarts} and m={cfg.m} needs about "
      f"{planning.size_text(need, have)} of activations, more than the "
      f"{planning.size_text(have, need)} available; "
      "use fewer points, a narrower victim or fewer restarts.",
    )
  labels = planning.candidate_labels("binary", cfg.m)
  hp, stages = sweep.plan(
    {name: cfg[name] for name in sweep.RANGE_NAMES},
    cfg.seed,
    cfg.num_restarts,
    cfg.steps,
    cfg.refine_steps,
    cfg.refine_alpha,
    cfg.refine_lr_scale,
  )
  return hp, stages, labels


def victim_config(cfg) -> recipe.VictimConfig:
  """The victim the toy trains: ``cfg``'s recipe on ``n_train`` points of the unit circle."""
  return recipe.VictimConfig(
    dataset="toy2d",
    n_per_class=cfg.n_train // 2,
    subtract_mean=False,
    data_seed=cfg.seed,
    arch="mlp",
    widths=(cfg.width, cfg.width),
    init_std=None,
    first_layer_std=None,
    seed=cfg.seed,
    **{field: cfg[name] for name, field in VICTIM_SETTINGS.items()},
  )


def score(cfg, res, x0, x_train) -> tuple:
  """The attack's result ``res`` scored: ``(score, at_init, after_filter, kept)``.

  ``score``: :func:`recon_jax.eval.points.score_point_clouds` with each
  restart's last ``stat_rel`` (None when it diverged); ``at_init``: the
  attacker-selected restart's starting points ``x0`` scored the same way
  (unfiltered), or None; the masks of the lambda filter and de-duplication.
  """
  settings = {
    "lam_filter_frac": cfg.lam_filter_frac,
    "dedup_radius": cfg.dedup_radius,
    "seed": cfg.seed,
  }
  after_filter, kept = points.kept_masks(res.candidates, res.weights, res.diverged, **settings)
  out = points.score_point_clouds(
    res.candidates,
    res.weights,
    res.final_loss,
    res.diverged,
    x_train,
    tol=cfg.tol,
    masks=(after_filter, kept),
    **settings,
  )
  last = res.chunks[-1] if res.chunks else {}
  for row in out["per_restart"]:
    stat = (last.get("stat_rel") or [None] * cfg.num_restarts)[row["restart"]]
    row["stat_rel"] = None if row["diverged"] else stat
  sel = out["selected_restart"]
  at_init = points.recovery(np.asarray(x0)[sel], x_train, cfg.tol) if sel is not None else None
  return out, at_init, after_filter, kept


def metrics_keys(score_: Mapping) -> dict:
  """The entries of the toy's metrics.json taken from :func:`score`'s first result."""
  return {
    k: score_[k]
    for k in (
      "n_train",
      "recovered",
      "median_distance",
      "selected_restart",
      "recovered_best_restart",
      "best_restart",
      "recovered_pooled",
      "n_diverged",
      "per_restart",
    )
  }


class ToyRun(NamedTuple):
  """A toy run's outcome: the report and what its figure needs."""

  metrics: dict  # metrics.json
  arrays: dict  # reconstructions.npz
  dataset: Any
  victim: Any
  labels: np.ndarray


def run(
  cfg,
  *,
  state_file: Optional[loop.StateFile] = None,
) -> ToyRun:
  """Trains (or loads) the toy's victim, runs the attack sweep and scores it.

  The precision is the caller's (float64 when ``cfg.x64``: a warning otherwise).
  The sweep saves to and resumes from ``state_file``
  (:class:`recon_jax.engine.loop.StateFile`, None: never saved).
  """
  import jax
  import jax.numpy as jnp

  hp, stages, labels = validate(cfg)
  t_start = time.time()
  dtype = float_dtype()
  if bool(cfg.x64) != (dtype == jnp.float64):
    logging.warning("x64=%s but JAX runs in %s", cfg.x64, np.dtype(dtype).name)
  ds = data.load_dataset("toy2d", toy_n=cfg.n_train, seed=cfg.seed)
  vic = sources.load_or_train_victim(victim_config(cfg), ds, use_cache=cfg.use_cache)
  timing = {"victim_s": time.time() - t_start}
  t0 = time.time()
  params = targets.cast_params(vic.params, dtype)
  x_train = jnp.asarray(ds.x_train, dtype)
  oracle = diagnostics.oracle_residual(vic.apply_fn, "binary", params, x_train, ds.y_train)
  kinks = diagnostics.kink_fraction(params, ds.x_train)
  timing["oracle_s"] = time.time() - t0
  logging.info(
    "toy victim: loss %.3g, oracle residual %.4f, first-layer kinks on data %.2f",
    vic.summary.get("loss", float("nan")),
    oracle["residual_rel"],
    kinks,
  )
  if cfg.theta_norm > 0:
    scale = cfg.theta_norm / jnp.sqrt(losses.tree_sq_norm(params))
    params = jax.tree_util.tree_map(lambda a: a * scale, params)
  target = targets.make_target(params, labels, ds.mean, box=None, dtype=dtype)
  attack = kkt.kkt_attack(
    vic.apply_fn, "binary", objective=kkt.Objective(w_prior=0.0)
  )  # no prior (Haim §4)
  x_init = inits.gaussian(cfg.m, (2,), dtype)
  keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_restarts)
  hp_arrays = {k: jnp.asarray(v) for k, v in hp.items()}
  x0 = np.asarray(
    jax.jit(jax.vmap(lambda k, h: loop.init_one(attack, x_init, k, h, target).inner.x))(
      keys, hp_arrays
    )
  )
  res = loop.run_attack(
    attack,
    x_init,
    keys,
    stages,
    target,
    chunk_steps=cfg.chunk_steps,
    state_file=state_file,
  )
  timing.update(compile_s=res.compile_s, run_s=res.run_s)
  scores, at_init, after_filter, kept = score(cfg, res, x0, ds.x_train)
  timing["total_s"] = time.time() - t_start
  settings = ("m", "width", "num_restarts", "tol", "lam_filter_frac", "dedup_radius")
  metrics = {
    **metrics_keys(scores),
    **{k: cfg[k] for k in settings},
    "at_init": at_init,  # the selected restart's starting points, scored the same way
    "oracle_residual_rel": oracle["residual_rel"],
    "kink_fraction": kinks,
    "victim": {k: v for k, v in vic.summary.items() if k not in ("margins", "outputs")},
    # the same warning as the main job's: a victim at chance holds nothing to find
    "victim_warning": verdict.victim_warning(Victim.of(vic.summary), "logistic", 2),
    "victim_source": vic.source,
    "dtype": np.dtype(dtype).name,
    "timing": timing,
  }
  arrays = dict(
    x=res.candidates,
    lam=res.weights,
    x0=x0,
    after_filter=after_filter,
    kept=kept,
    final_loss=res.final_loss,
    diverged=res.diverged,
    x_train=ds.x_train,
    y_train=ds.y_train,
    **{f"hp_{k}": v for k, v in hp.items()},
  )
  logging.info(
    "toy 2d: recovered %d/%d (attacker-selected restart), best restart %d, pooled %d",
    metrics["recovered"],
    cfg.n_train,
    metrics["recovered_best_restart"],
    metrics["recovered_pooled"],
  )
  return ToyRun(metrics, arrays, ds, vic, labels)


def toy_figure(
  path: Union[str, os.PathLike],
  cfg,
  ds,
  vic,
  metrics: Mapping[str, Any],
  candidates,
  x0,
  labels,
  after_filter,
  kept,
) -> None:
  """toy_2d.png: data, decision regions and the selected restart's candidates, step by step.

  ``cfg``: the toy's config; ``ds``/``vic``: its data set and victim;
  ``metrics``: its metrics.json; the rest: the attack's candidates, starting
  points, candidate labels and the masks of the lambda filter and de-duplication.
  """
  import jax.numpy as jnp

  n, r = cfg.n_train, metrics["selected_restart"]
  g = np.linspace(-1.6, 1.6, 121)
  gx, gy = np.meshgrid(g, g)
  grid = jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1), float_dtype())
  params = targets.cast_params(vic.params)
  out = np.asarray(vic.apply_fn(params, grid, None))[:, 0].reshape(gx.shape)
  train = {"train": ds.x_train, "train_labels": ds.y_train}
  panels = [
    {"title": f"(a) the {n} training points", **train},
    {
      "title": "(b) the victim's decision regions\n(red: output > 0, blue: < 0)",
      **train,
      "field": (g, g, np.tanh(out / (np.abs(out).max() + 1e-12))),
    },
  ]
  net = f"a 2-{cfg.width}-{cfg.width}-1 ReLU net"
  if r is None:
    title = (
      f"Haim et al. §4: {n} points on the unit circle, {net}: all "
      f"{cfg.num_restarts} restarts of the attack diverged"
    )
  else:
    f, k = after_filter[r], kept[r]
    row = metrics["per_restart"][r]
    panels += [
      {
        "title": f"(c) start: {cfg.m} candidates ~ N(0, σ²)",
        **train,
        "points": x0[r],
        "labels": labels,
      },
      {
        "title": f"(d) after the attack: all {cfg.m} candidates",
        **train,
        "points": candidates[r],
        "labels": labels,
      },
      {
        "title": f"(e) λ filter: the {int(f.sum())} with\nλ ≥ {cfg.lam_filter_frac:g} × max λ "
        "(λ ≈ 0: no information)",
        **train,
        "points": candidates[r][f],
        "labels": labels[f],
      },
      {
        "title": f"(f) de-duplicated (radius {cfg.dedup_radius:g}):\n{int(k.sum())} kept, "
        f"{row['recovered']}/{n} within {cfg.tol:g} of a training point",
        **train,
        "points": candidates[r][k],
        "labels": labels[k],
      },
    ]
    title = (
      f"Haim et al. §4: reconstructing {n} training points on the unit circle from {net}"
      f"\nrestart {r} of {cfg.num_restarts} (the attacker's pick: lowest final loss): "
      f"{metrics['recovered']}/{n} recovered within {cfg.tol:g}; best restart "
      f"{metrics['recovered_best_restart']}/{n}, all restarts pooled "
      f"{metrics['recovered_pooled']}/{n}"
    )
  plots.points_2d_panels(path, panels, title=title, ncols=3)
