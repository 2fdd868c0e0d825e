"""The initialisation study's settings checked before any work, and its summary.md."""

from __future__ import annotations

import dataclasses

from recon_jax import implicit, optim
from recon_jax.attacks import bilevel
from recon_jax.core import activations, rules
from recon_jax.core.rules import INT32_MAX, MAX_ITERATIONS, Rule, setting
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.studies import init_study
from recon_jax.victims import recipe

# The study's names of the KKT victim's recipe fields it sets (the others are as named).
KKT_VICTIM_SETTINGS = {"widths": "kkt_width", "epochs": "kkt_victim_epochs", "data_seed": "seed"}

_POS = Rule("float", low=0, high=1e6, low_open=True)
_TOL = Rule("float", low=0, high=1, low_open=True)
_INT = Rule("int", low=1, high=INT32_MAX)


@dataclasses.dataclass(frozen=True)
class InitStudySettings:
  """The study's settings, each declared once (default: the ``default`` preset).

  ``experiments/configs/init_study.py`` builds its ConfigDict and ``--help`` from these, and
  :func:`validate` checks a config against them before any work.  ``bilevel_*`` settings
  belong to the bilevel attack of §4.3/4.5 and its L-BFGS-trained victims, ``kkt_*`` to the
  KKT attack of §4.4 and its gradient-descent-trained MLP victim.
  """

  # Data: n = 2 * n_per_class training images, as many partition images.
  dataset: str = setting(
    "digits",
    "digits | lfw (embedded) | mnist | cifar10 (data_dir)",
    Rule("str", choices=init_study.IMAGE_DATASETS),
  )
  data_dir: str = setting("", "folder with MNIST/CIFAR files (never downloaded)", Rule("path"))
  n_per_class: int = setting(
    10, "training images per class (as many partition images)", Rule("int", low=1, high=10**6)
  )
  seed: int = setting(
    0, "data sampling, victims, attack keys, KKT draws", Rule("int", low=0, high=2**32 - 1)
  )
  grid: bool = setting(True, "the 21-point eq. (10) grid (else the three settings)", Rule("bool"))
  parts: str = setting(
    "affine,one_hidden,one_hidden_relu,kkt",
    "the sub-runs, comma-separated: affine (bilevel, eq. 8 net), one_hidden (bilevel, eq. 9 "
    "net with bilevel_act), one_hidden_relu (bilevel, the paper's ReLU net, three settings "
    "only), kkt (KKT attack on the homogeneous ReLU MLP)",
    Rule("str"),
  )
  bilevel_wd: float = setting(1e-3, "weight decay of the victims and of the inner problem", _POS)
  bilevel_width: int = setting(256, "one-hidden width (paper: 6144 on CIFAR-10)", _INT)
  bilevel_act: str = setting(
    "softplus", "smooth activation of the one-hidden net (C^2 for the IFT)", Rule("str")
  )
  bilevel_victim_tol: float = setting(1e-7, "victims: L-BFGS until ||grad E|| <= this", _TOL)
  bilevel_victim_maxiter: int = setting(
    20_000, "victims: L-BFGS iteration cap", Rule("int", low=1, high=MAX_ITERATIONS)
  )
  bilevel_steps: int = setting(200, "outer steps", _INT)
  bilevel_optimizer: str = setting(
    "adam", "sgd (momentum 0.9) | adam", Rule("str", choices=optim.OPTIMIZERS)
  )
  bilevel_lr_x: float = setting(0.01, "outer learning rate (of the optimizer at rate 1)", _POS)
  bilevel_theta0: str = setting(
    "target",
    "first inner start: target | uniform | gaussian",
    Rule("str", choices=bilevel.THETA0),
  )
  bilevel_restart_from_target: bool = setting(
    False, "start every inner solve from theta*", Rule("bool")
  )
  bilevel_hessian_solve: str = setting(
    "cg",
    "cg | lbfgs (the paper's quasi-Newton H^{-1})",
    Rule("str", choices=implicit.HESSIAN_SOLVES),
  )
  bilevel_inner_maxiter: int = setting(
    100,
    "inner L-BFGS (theta(x)) iteration cap per outer step",
    Rule("int", low=1, high=rules.MAX_INNER_ITERATIONS),
  )
  bilevel_inner_tol: float = setting(1e-7, "inner L-BFGS: until ||grad E|| <= this", _TOL)
  # KKT attack (§4.4) on a homogeneous ReLU MLP d-w-...-w-1 trained like the main job
  # (recon_jax.victims.recipe.VictimConfig defaults: GD, no weight decay, mean subtracted).
  kkt_width: int = setting(256, "hidden width of the KKT victim", _INT)
  kkt_depth: int = setting(2, "hidden layers of the KKT victim", _INT)
  kkt_victim_epochs: int = setting(10_000, "gradient-descent epochs of the KKT victim", _INT)
  kkt_steps: int = setting(2000, "KKT attack steps", _INT)
  kkt_lr_x: str = setting(
    "0.03:0.6:log", "x learning rate (main job's ranges, a draw per point)", Rule("range")
  )
  kkt_lr_lam: str = setting("1e-4:1e-2:log", "lambda learning rate", Rule("range"))
  kkt_alpha: str = setting("10:40:lin", "surrogate ReLU sharpness", Rule("range"))
  kkt_lam_min: str = setting("0.2:0.7:lin", "lower bound of the multipliers lambda", Rule("range"))
  # Running.
  chunk_steps: int = setting(50, "steps per compiled chunk, between progress lines and saves", _INT)
  batching: str = setting(
    "auto",
    "auto (map on CPU, vmap on GPU/TPU) | vmap | map",
    Rule("str", choices=loop.BATCHINGS),
  )
  x64: bool = setting(True, "float64: the 1e-7 inner and victim tolerances need it", Rule("bool"))
  use_cache: bool = setting(
    True, "cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)", Rule("bool")
  )
  save_every: int = setting(
    1,
    "save state_<sub-run>.msgpack every N chunks (0: never)",
    Rule("int", low=0, high=INT32_MAX),
  )


def validate(cfg) -> None:
  """Raises :class:`ConfigError` naming the first setting of a study config that cannot run.

  ``cfg`` has the settings of :class:`InitStudySettings`.  Nothing is trained or loaded:
  this runs before any work.
  """
  rules.check_declared(cfg, InitStudySettings)
  try:
    activations.get_activation(cfg.bilevel_act)
  except ConfigError:
    raise ConfigError(
      f"bilevel_act {cfg.bilevel_act!r} is not a known activation (e.g. softplus, gelu, tanh).",
      argument="bilevel_act",
    ) from None
  recipe.check_named(lambda: init_study.kkt_victim_config(cfg), KKT_VICTIM_SETTINGS)
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
