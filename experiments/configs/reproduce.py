"""reproduce's config: the papers' experiments at one scale, as runs of the other binaries.

Presets (scales, ``--config=experiments/configs/reproduce.py:SCALE``):
  quick    a wiring check: reconstruct's tiny preset over 2 draws, the toy's quick and the
           init study's tiny preset over 3 seeds (minutes; its numbers say nothing)
  default  embedded LFW faces and scikit-learn digits over 5 draws (8 restarts x 3000 steps),
           the toy's small and the init study's default preset over 3 seeds (~1-2 h on an
           idle 2-core CPU)
  paper    CIFAR-10 and MNIST from data_dir at Haim et al.'s sizes (d-1000-1000-1, n = 500,
           100 restarts x 50 000 steps of their ranges), the toy's paper preset, the init
           study on CIFAR-10 at Runkel et al.'s width (meant for a GPU)

``runs.NAME`` is one run of a binary (its own process): ``binary`` efficacy, toy_2d or
init_study; ``preset`` of that binary's config (efficacy: a reconstruct preset);
``overrides`` of its settings (efficacy: of its reconstruct ``base``); ``draws``: data
draws of an efficacy run, seeds 0..draws-1 of the toy or the init study (0: the ``draws``
or ``seeds`` setting).  ``sections.SECTION`` names the runs of a section (a run named in
several sections runs once).  The run names are the roles that CLAIMS below read
(main_faces, inversion, abl_kaiming, ...) that ``reproduction.claims.CLAIMS`` reads; a claim
whose runs a config lacks is 'not run'.
The claims, their sections and criteria are fixed in ``reproduction.claims``.
"""

import ml_collections

from experiments.configs.efficacy import FINETUNE_VARIANTS, QUICK_BASE
from recon_jax.io.workdir import flatten
from recon_jax.job.settings import nested
from reproduction.claims import SECTIONS

SCALES = ("quick", "default", "paper")
PRESETS = SCALES


def _run(binary: str, preset: str, draws: int = 0, **overrides) -> dict:
  return dict(binary=binary, preset=preset, draws=draws, overrides=overrides)


def _recon(preset: str, size: dict, victim=None, **kw) -> dict:
  """An efficacy run of a reconstruct preset: the attack's ``size``, then ``kw``/``victim``."""
  over = nested({**flatten(size), **flatten(kw)})  # each setting once, in its section
  if victim:
    over["victim"] = dict(victim)
  return _run("efficacy", preset, **over)


def _runs(scale: str) -> dict:
  """The runs of a scale.  "faces" is the natural-image data set: LFW, CIFAR-10 (paper)."""
  if scale == "quick":
    faces, digits, attack = ("tiny", {"dataset": "lfw"}), ("tiny", {}), {}
    # tiny is He-initialised; the ablations' base is Haim's small init (1e-4 first layer).
    small = {"init": "normal", "init_std": 0.003, "first_layer_std": 1e-4}
    abl = ("tiny", dict(small, n_per_class=3))
    n_rows, widths, depth, short = (2, 5), (16, 16), (32, 32, 32), 200
    kaiming = ("tiny", {}, {})  # = main_digits: one run
    npc_deco, toy, init = 1, "quick", ("tiny", {})
    # A smooth victim at a stationary point of a weight-decay-regularised loss.
    wd = dict(activation="softplus", wd=1e-2, wd_epochs=200, converge_tol=1e-8)
    faces_wd = ("tiny", dict(faces[1], **wd), {"runtime": {"x64": True}})
  elif scale == "default":
    attack = {"search": {"num_restarts": 8, "steps": 3000, "chunk_steps": 1000}}
    faces, digits = ("lfw", {}), ("digits", {})
    abl = ("digits", {"n_per_class": 10})
    n_rows, widths, depth, short = (5, 25), (64, 64), (256, 256, 256), 3000
    # tiny's victim is He-initialised in every layer; the rest is set back to digits'.
    kaiming = ("tiny", {"n_per_class": 10, "widths": (256, 256), "epochs": 10_000}, attack)
    npc_deco, toy, init = 5, "small", ("default", {})
    faces_wd = ("lfw_wd", {}, {})  # the preset is float64 already
  else:
    attack = {}
    faces, digits = ("paper", {"dataset": "cifar10"}), ("paper", {"dataset": "mnist"})
    abl = ("paper", {"dataset": "mnist", "n_per_class": 10})
    n_rows, widths, depth, short = (5, 50), (1000, 1000), (1000, 1000, 1000), 10_000
    kaiming = (
      "tiny",
      {
        "dataset": "mnist",
        "n_per_class": 10,
        "widths": (1000, 1000),
        "lr": 0.01,
        "epochs": 100_000,
      },
      {"search": {"num_restarts": 100, "steps": 50_000, "chunk_steps": 5000, "sweep": "paper"}},
    )
    npc_deco, toy = 50, "paper"
    wd = dict(activation="softplus", wd=1e-2, wd_epochs=2000, converge_tol=1e-10)
    faces_wd = ("paper", dict(faces[1], **wd), {"runtime": {"x64": True}})
    init = (
      "default",
      {
        "dataset": "cifar10",
        "n_per_class": 250,
        "bilevel_width": 6144,
        "bilevel_steps": 2000,
        "kkt_width": 1000,
        "kkt_steps": 50_000,
      },
    )
  base_preset, base_victim = abl
  # A model fine-tuned from a theta_0 the attacker knows, read by the finetune preset's attack
  # (the cone; quick: the leakage map's quick victim), and the same victims attacked from
  # theta* alone by Haim et al.'s search at the scale's budget, as in sections 2-8.
  tune = {k: v for k, v in QUICK_BASE.items() if k != "victim"} if scale == "quick" else {}
  keep = ("dataset", "n_per_class", "widths", "lr", "epochs")  # the rest is the preset's
  tune_victim = {k: QUICK_BASE["victim"][k] for k in keep} if scale == "quick" else {}
  if scale == "paper":
    tune_victim = {"dataset": "cifar10", "n_per_class": 50}
  blind = FINETUNE_VARIANTS["unknown_init"]
  runs = {
    "toy": _run("toy_2d", toy),
    "main_faces": _recon(faces[0], attack, faces[1]),
    "main_digits": _recon(digits[0], attack, digits[1]),
    "main_faces_wd": _recon(faces_wd[0], attack, faces_wd[1], **faces_wd[2]),
    "inversion": _recon(faces[0], attack, faces[1], attack="inversion"),
    "weights": _recon(faces[0], attack, faces[1], attack="weights"),
    "abl_base": _recon(base_preset, attack, base_victim),
    "abl_n_small": _recon(base_preset, attack, dict(base_victim, n_per_class=n_rows[0])),
    "abl_n_large": _recon(base_preset, attack, dict(base_victim, n_per_class=n_rows[1])),
    "abl_width": _recon(base_preset, attack, dict(base_victim, widths=widths)),
    "abl_depth": _recon(base_preset, attack, dict(base_victim, widths=depth)),
    "abl_kaiming": _recon(kaiming[0], kaiming[2], kaiming[1]),
    "abl_short": _recon(base_preset, attack, dict(base_victim, epochs=short)),
    "abl_bias_all": _recon(base_preset, attack, dict(base_victim, bias="all")),
    "multiclass_ce": _recon(digits[0], attack, dict(digits[1], n_per_class=npc_deco, loss="ce")),
    "regression_mse_wd": _recon(
      digits[0], attack, dict(digits[1], n_per_class=npc_deco, loss="mse", weight_decay=1e-3)
    ),
    "partition_init": _recon(faces[0], attack, faces[1], search={"init": "partition"}),
    "init_study": _run("init_study", init[0], **init[1]),
    "finetune": _recon("finetune", {}, tune_victim),
    "finetune_blind": _recon("finetune_kkt", tune or attack, tune_victim, **blind),
  }
  if scale == "default":  # n_per_class 25 is main_digits' victim: one run
    runs["abl_n_large"] = runs["main_digits"]
  return runs


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  """reproduce's settings at scale ``preset`` (see the module docstring)."""
  if preset not in SCALES:
    raise KeyError(f"unknown preset (scale) {preset!r}; choose from {', '.join(SCALES)}")
  c = ml_collections.ConfigDict()
  c.scale = preset  # the name of the scale (written into the report)
  c.data_dir = ""  # folder with the MNIST and CIFAR-10 files (scale paper)
  c.draws = 2 if preset == "quick" else 5  # data draws of every efficacy run (draws = 0)
  c.first_draw = 0  # number of the first draw; draws are consecutive
  c.seeds = 3  # seeds 0..seeds-1 of the toy and the init study (draws = 0)
  c.confidence = 0.95  # two-sided t intervals over draws (the claims' criteria use them)
  c.runs = ml_collections.ConfigDict(_runs(preset))
  c.sections = ml_collections.ConfigDict({k: v[1] for k, v in SECTIONS.items()})
  return c
