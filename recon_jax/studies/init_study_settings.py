"""The initialisation study's settings checked before any work, and its summary.md."""

from __future__ import annotations

import math

from recon_jax import implicit, optim
from recon_jax.attacks import bilevel
from recon_jax.core import activations, rules
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.studies import init_study
from recon_jax.victims import recipe

_POSITIVE = ("bilevel_wd", "bilevel_lr_x", "bilevel_inner_tol", "bilevel_victim_tol")


_AT_LEAST_ONE = (
  "n_per_class",
  "bilevel_width",
  "bilevel_steps",
  "chunk_steps",
  "bilevel_inner_maxiter",
  "bilevel_victim_maxiter",
  "kkt_width",
  "kkt_depth",
  "kkt_victim_epochs",
  "kkt_steps",
)


# The study's names of the KKT victim's recipe fields it sets (the others are as named).
KKT_VICTIM_SETTINGS = {"widths": "kkt_width", "epochs": "kkt_victim_epochs", "data_seed": "seed"}

_CHOICES = {
  "bilevel_theta0": bilevel.THETA0,
  "bilevel_hessian_solve": implicit.HESSIAN_SOLVES,
  "bilevel_optimizer": optim.OPTIMIZERS,
  "batching": loop.BATCHINGS,
  "dataset": init_study.IMAGE_DATASETS,
}


def validate(cfg) -> None:
  """Raises :class:`ConfigError` naming the first setting of a study config that cannot run.

  ``cfg`` has the fields of ``experiments/configs/init_study.py``.  Nothing is
  trained or loaded: this runs before any work.
  """
  for name in _POSITIVE:
    v = cfg[name]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
      raise ConfigError(f"{name} must be > 0, got {v}.", argument=name)
  for name in _AT_LEAST_ONE:
    v = cfg[name]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
      raise ConfigError(f"{name} must be an integer >= 1, got {v}.", argument=name)
  for name, cap in (
    ("bilevel_inner_maxiter", rules.MAX_INNER_ITERATIONS),
    ("bilevel_victim_maxiter", rules.MAX_ITERATIONS),
  ):
    if cfg[name] > cap:  # an unbounded solve: no Ctrl-C or SIGTERM until it ends
      raise ConfigError(f"{name} must be an integer in [1, {cap}], got {cfg[name]}.", name)
  if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
    raise ConfigError(f"seed must be an integer >= 0, got {cfg.seed}.", argument="seed")
  if cfg.save_every < 0:
    raise ConfigError(
      f"save_every must be >= 0 (0: never), got {cfg.save_every}.", argument="save_every"
    )
  for name, choices in _CHOICES.items():
    if cfg[name] not in choices:
      raise ConfigError(
        f"{name} must be one of {', '.join(choices)}, got {cfg[name]!r}.", argument=name
      )
  try:
    activations.get_activation(cfg.bilevel_act)
  except ConfigError:
    raise ConfigError(
      f"bilevel_act {cfg.bilevel_act!r} is not a known activation (e.g. softplus, gelu, tanh).",
      argument="bilevel_act",
    ) from None
  recipe.check_named(init_study.kkt_victim_config(cfg), KKT_VICTIM_SETTINGS)
  init_study.parts(cfg)
  init_study.kkt_hparams(cfg, len(init_study.mix_points(cfg.grid)[0]))


# The paper's findings in the order summary.md lists them.
FINDING_ORDER = (
  "random_to_noise",
  "ground_truth_recovered",
  "partition_returns_init",
  "lambda1_below_half_nearer_partition",
)


def _num(v, fmt: str) -> str:
  """``v`` formatted, or "-" for None."""
  return "-" if v is None else format(v, fmt)


def summary(cfg, metrics: dict) -> str:
  """summary.md of a study: the Table 1 analogue, the findings and their criteria.

  ``cfg``: the study's config; ``metrics``: its metrics.json.
  """
  lines = [
    f"# Initialisation study (Runkel et al. 2024, §4.3-4.5) on {metrics['dataset']}",
    "",
    f"n = {metrics['n_train']} training images, bilevel wd = {cfg.bilevel_wd}, "
    f"bilevel steps = {cfg.bilevel_steps}, KKT steps = {cfg.kkt_steps}, "
    f"{'the 21-point eq. (10) grid' if cfg.grid else 'the three settings'}; backend "
    f"{metrics['backend']} ({metrics['batching']}, x64 {metrics['x64']}), wall "
    f"{metrics['wall_s']:.0f} s.",
    "",
    "## Where the reconstructions end up (paper Table 1: ||theta* - theta(x)||^2 on "
    "CIFAR-10, affine / one-hidden ReLU 6144)",
    "",
    "L2 X: mean distance of a reconstruction to its nearest image of X (train: the "
    "training set, part: the disjoint partition, noise: U(0, 1) images).",
    "",
    "| sub-run | victim grad E | setting | param dist | rel. | inner grad / stat_rel | "
    "L2 train | L2 part | L2 noise | SSIM train | SSIM part | paper |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for name, r in metrics["sub_runs"].items():
    gnorm = r["victim"].get("grad_norm")
    for s in init_study.SETTINGS:
      row = r["settings"][s]
      pd, norm = row.get("param_dist"), r["theta_star_sq_norm"]
      rel = pd / norm if pd is not None and norm else None
      paper = (
        init_study.PAPER_TABLE1["affine" if r["arch"] == "affine" else "one_hidden"][s]
        if r["attack"] == "bilevel"
        else None
      )
      inner = row.get("inner_grad_norm", row.get("stat_rel"))
      lines.append(
        f"| {name} | {_num(gnorm, '.1e')} | {s} | {_num(pd, '.3g')} | {_num(rel, '.1e')} | "
        f"{_num(inner, '.1e')} | {_num(row['l2_train'], '.3g')} | "
        f"{_num(row['l2_partition'], '.3g')} | {_num(row['l2_noise'], '.3g')} | "
        f"{_num(row['ssim_train'], '.3f')} | {_num(row['ssim_partition'], '.3f')} | "
        f"{_num(paper, '.2e')} |"
      )
  lines += ["", "## Paper findings: reproduced here?", ""]
  for name, r in metrics["sub_runs"].items():
    for fname in FINDING_ORDER:
      f = r["findings"][fname]
      if f["reproduced"] is None:
        lines.append(f"- {name} / {fname}: {f['evidence']}")
      else:
        lines.append(
          f"- {name} / {fname}: **{'yes' if f['reproduced'] else 'no'}** ({f['evidence']})"
        )
  lines += [
    "",
    "Criteria: random -> noise: nearer to a U(0, 1) image than to any training "
    "image (bilevel: and relative parameter distance < 1e-2); ground truth recovered: "
    "mean nearest-train L2 < 0.1 x that of the random init; partition: nearer to the "
    "partition than to the training set; lambda1 < 0.5: every such grid point "
    "(lambda2 > 0) nearer to the partition.",
    "",
  ]
  return "\n".join(lines)
