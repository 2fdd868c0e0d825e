"""Hyperparameter sweeps as arrays: one row per restart, vmapped in one program.

A range is ``(lo, hi, 'log'|'lin')``; random search draws each restart's
values independently (:func:`random_search`), and stages turn them into
refinement (:func:`stages`) or annealing (:func:`anneal`) schedules.  The result is a
dict of [R] arrays fed to :func:`recon_jax.engine.loop.run_attack` as per-restart
hyperparameters: the W&B sweep of the reference becomes one compiled call.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Tuple

import numpy as np

from recon_jax.errors import ConfigError

Range = Tuple[float, float, str]

# The ranges a sweep's settings give (Haim et al.'s names), unless it draws the paper's.
RANGE_NAMES = ("lr_x", "lr_lam", "sigma_x", "alpha", "lam_min")

# Haim et al. 2022, Appendix B.2.
PAPER_RANGES: dict[str, Range] = {
  "lr_x": (1e-5, 1.0, "log"),
  "sigma_x": (1e-6, 1.0, "log"),
  "alpha": (10.0, 500.0, "lin"),
  "lam_min": (1e-4, 1.0, "log"),
  "lr_lam": (1e-5, 1.0, "log"),
}
# Model inversion (Haim et al. App. B.2).
INVERSION_RANGES: dict[str, Range] = {
  "lr_x": (1e-6, 1.0, "log"),
  "sigma_x": (1e-7, 1.0, "log"),
}


def _finite(x) -> bool:
  try:
    return math.isfinite(float(x))
  except (TypeError, ValueError):
    return False


def _check(name: str, rng: Range) -> None:
  lo, hi, kind = rng
  for end, v in (("lower", lo), ("upper", hi)):
    if not _finite(v):
      raise ConfigError(
        f"{name}: the range's {end} end must be a finite number, got {v!r}.", argument=name
      )
  if kind not in ("log", "lin"):
    raise ConfigError(f"{name}: range kind must be 'log' or 'lin', got {kind!r}.")
  if hi < lo:
    raise ConfigError(f"{name}: range upper end {hi} is below the lower end {lo}.")
  if kind == "log" and lo <= 0:
    raise ConfigError(f"{name}: a log-uniform range needs a positive lower end, got {lo}.")


def check_hparams(hparams: Mapping) -> None:
  """Raises ConfigError naming the first per-restart hyperparameter outside its domain
  (learning rates and alpha > 0, lam_min and sigma_x >= 0)."""
  for name in ("lr_x", "lr_lam", "alpha"):
    if name in hparams and np.any(np.asarray(hparams[name]) <= 0):
      raise ConfigError(f"{name} must be > 0, got {float(np.min(hparams[name])):g}.")
  for name in ("lam_min", "sigma_x"):
    if name in hparams and np.any(np.asarray(hparams[name]) < 0):
      raise ConfigError(f"{name} must be >= 0, got {float(np.min(hparams[name])):g}.")


def random_search(seed: int, num: int, ranges: Mapping[str, Range], dtype=np.float32):
  """``num`` independent draws from ``ranges`` (log- or linear-uniform)."""
  if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num <= 0:
    raise ConfigError(f"num_restarts must be an integer > 0, got {num!r}.", "num")
  if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
    raise ConfigError(f"seed must be an integer >= 0, got {seed!r}.", "seed")
  if not isinstance(ranges, Mapping) or not ranges:
    raise ConfigError(
      f"ranges must be a non-empty mapping name -> (lo, hi, kind), got {ranges!r}.", "ranges"
    )
  for name, rng in ranges.items():
    if not (isinstance(rng, (tuple, list)) and len(rng) == 3):
      raise ConfigError(f"{name}: a range is (lo, hi, 'log'|'lin'), got {rng!r}.", name)
  rng = np.random.default_rng(seed)
  out = {}
  for name in sorted(ranges):
    lo, hi, kind = ranges[name]
    _check(name, ranges[name])
    with np.errstate(over="ignore", invalid="ignore"):
      try:
        if kind == "log":
          out[name] = np.exp(rng.uniform(np.log(lo), np.log(hi), num))
        else:
          out[name] = rng.uniform(lo, hi, num)
      except OverflowError:  # hi - lo beyond float64
        out[name] = np.full(num, np.inf)
      out[name] = out[name].astype(dtype)
    if not np.all(np.isfinite(out[name])):
      raise ConfigError(
        f"{name}: the range {lo:g}:{hi:g} does not fit in {np.dtype(dtype).name}.", argument=name
      )
  return out


def refine(hparams: Mapping[str, np.ndarray], alpha: float, lr_scale: float) -> dict:
  """The hyperparameters of a refinement stage (see :func:`stages`).

  A small surrogate sharpness alpha smooths the ReLU derivative, so the
  candidates find the right region, but it also blurs where they settle: a
  training point that sits on a ReLU kink is pulled off it.  The refinement
  stage sets every restart's alpha to ``alpha`` (sharper, closer to the true
  derivative) and multiplies its learning rates by ``lr_scale``.
  """
  if not (_finite(alpha) and alpha > 0):
    raise ConfigError(f"refine_alpha must be a finite number > 0, got {alpha}.")
  if not (_finite(lr_scale) and lr_scale > 0):
    raise ConfigError(f"refine_lr_scale must be a finite number > 0, got {lr_scale}.")
  out = {k: np.array(v, copy=True) for k, v in hparams.items()}
  if "alpha" in out:
    out["alpha"] = np.full_like(out["alpha"], alpha)
  for k in ("lr_x", "lr_lam"):
    if k in out:
      out[k] = out[k] * np.asarray(lr_scale, out[k].dtype)
  return out


def stages(
  hparams: Mapping[str, np.ndarray],
  steps: int,
  refine_steps: int = 0,
  refine_alpha: float = 200.0,
  refine_lr_scale: float = 0.1,
  anneal_alpha: float = 0.0,
  anneal_stages: int = 8,
) -> list:
  """The stages of a run for :func:`recon_jax.engine.loop.run_stages`.

  ``[(steps, hparams)]`` (with ``anneal_alpha > 0``: the :func:`anneal` stages rising to
  it over the same ``steps``), followed by ``(refine_steps, refine(hparams, ...))`` of the
  last stage's hyperparameters when ``refine_steps > 0``.  The refinement settings are
  checked either way.
  """
  if (
    isinstance(refine_steps, bool)
    or not isinstance(refine_steps, (int, np.integer))
    or (refine_steps < 0)
  ):
    raise ConfigError(f"refine_steps must be an integer >= 0, got {refine_steps!r}.")
  main = anneal(hparams, steps, anneal_alpha, anneal_stages) if anneal_alpha else [(steps, hparams)]
  refined = refine(main[-1][1], refine_alpha, refine_lr_scale)
  return main + ([(refine_steps, refined)] if refine_steps else [])


def parse_range(name: str, text: str, default_kind: str) -> Range:
  """``'0.01'`` (a fixed value), ``'0.01:0.5'`` or ``'0.01:0.5:log'`` -> Range.

  Every end must be a finite number (``nan``, ``inf`` are refused) and the
  range is checked as :func:`random_search` would (order, kind, log > 0).
  """
  parts = [p.strip() for p in str(text).split(":")]
  rng = None
  try:
    if len(parts) == 1 and parts[0]:
      v = float(parts[0])
      rng = (v, v, "lin")
    elif len(parts) in (2, 3) and parts[0] and parts[1]:
      kind = parts[2] if len(parts) == 3 else default_kind
      rng = (float(parts[0]), float(parts[1]), kind)
  except ValueError:
    pass
  if rng is None:
    raise ConfigError(f"{name}: expected VALUE or LO:HI[:log|lin], got {text!r}.", argument=name)
  if len(parts) == 1 and not _finite(rng[0]):
    raise ConfigError(
      f"{name} must be a finite number (or LO:HI[:log|lin]), got {text!r}.", argument=name
    )
  _check(name, rng)
  return rng


def plan(
  ranges: Mapping[str, Any],
  seed: int,
  num_restarts: int,
  steps: int,
  refine_steps: int = 0,
  refine_alpha: float = 200.0,
  refine_lr_scale: float = 0.1,
  anneal_alpha: float = 0.0,
  anneal_stages: int = 8,
) -> Tuple[dict, list]:
  """A sweep of ``num_restarts`` restarts, drawn once: ``(hparams, stages)``.

  ``ranges``: ``{name: Range}``, or a range as a setting gives it (:func:`parse_range`:
  log-uniform unless it says otherwise); each is drawn per restart (:func:`random_search`)
  and the draws checked (:func:`check_hparams`), then staged over ``steps``
  (:func:`stages`: the refinement and annealing settings).
  """
  parsed = {
    name: rng if isinstance(rng, tuple) else parse_range(name, rng, "log")
    for name, rng in ranges.items()
  }
  hp = random_search(seed, num_restarts, parsed)
  check_hparams(hp)
  staged = stages(
    hp,
    steps,
    refine_steps,
    refine_alpha,
    refine_lr_scale,
    anneal_alpha=anneal_alpha,
    anneal_stages=anneal_stages,
  )
  return hp, staged


def anneal(
  hparams: Mapping[str, np.ndarray], steps: int, alpha_end: float, num_stages: int = 8
) -> list:
  """Stages in which each restart's alpha rises geometrically to ``alpha_end``.

  A generalisation of the two-stage refinement: Loo et al. (2024) anneal the
  sharpness of their smooth ReLU from 10 towards 200.  Stage k of
  ``num_stages`` (``steps // num_stages`` steps each, the remainder in the
  last) uses ``alpha_0 (alpha_end / alpha_0)^(k / (num_stages - 1))``, so the
  first stage runs at the restart's drawn alpha and the last at ``alpha_end``.
  """
  if not (np.isfinite(alpha_end) and alpha_end > 0):
    raise ConfigError(f"anneal_alpha must be a finite number > 0, got {alpha_end}.")
  if num_stages < 2 or num_stages > steps:
    raise ConfigError(f"anneal_stages must be in [2, steps={steps}], got {num_stages}.")
  alpha0 = np.asarray(hparams["alpha"], np.float64)
  base = steps // num_stages
  out = []
  for k in range(num_stages):
    hp = {key: np.array(v, copy=True) for key, v in hparams.items()}
    frac = k / (num_stages - 1)
    hp["alpha"] = (alpha0 * (alpha_end / alpha0) ** frac).astype(np.asarray(hparams["alpha"]).dtype)
    out.append((base + (steps - base * num_stages if k == num_stages - 1 else 0), hp))
  return out
