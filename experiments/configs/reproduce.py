"""reproduce's config: the papers' experiments at one scale, as runs of the other binaries.

Presets (scales, ``--config=experiments/configs/reproduce.py:SCALE``; their data, networks
and budgets in ``reproduction.scales``):
  quick    a wiring check: tiny victims over 2 draws, the toy's quick and the init study's
           tiny preset over 3 seeds (minutes; its numbers say nothing)
  default  Haim et al.'s MNIST setting (mnist5k odd vs even, d-1000-1000-1, 10^4 epochs) at n =
           50 and 100 and its ablations, 8 restarts x 2000 steps of their ranges a draw; LFW
           faces and scikit-learn digits as the supplement; the leakage map (3 draws); 5 draws
           from draw 100, the toy and the init study over 3 seeds (hours: resume across sessions)
  paper    the same at their budget (100 restarts x 50 000 steps) with their n = 500, CIFAR-10
           and MNIST from data_dir, the init study at Runkel et al.'s width (for a GPU)

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
from reproduction import scales
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


TUNE_KEEP = ("dataset", "n_per_class", "widths", "lr", "epochs")  # of the quick map's victim


def _runs(scale: str) -> dict:
  """The runs of a scale, by the roles the claims read.

  The main rows and the ablations are on Haim et al.'s own data and network (``mnist``: their
  MNIST setting; quick: a tiny stand-in); the faces ("faces": LFW, CIFAR-10 at the paper
  scale) and scikit-learn digits are the small-image supplement.
  """
  s = scales.scale(scale)
  attack, faces, digits = s["attack"], s["faces"], s["digits"]
  m_preset, m_attack, m_victim = s["mnist"]
  small, mid, large = s["mnist_n"]

  def mnist(attack_kw=None, **victim):  # a run of Haim et al.'s setting: victim and attack settings
    return _recon(
      m_preset, m_attack, {**m_victim, "n_per_class": mid, **victim}, **(attack_kw or {})
    )

  blind = FINETUNE_VARIANTS["unknown_init"]
  quick = scale == "quick"  # the quick map's victim, and its attack for theta* alone
  tune_victim = (
    {k: QUICK_BASE["victim"][k] for k in TUNE_KEEP} if quick else s.get("tune_victim", {})
  )
  tune = {k: v for k, v in QUICK_BASE.items() if k != "victim"} if quick else {}
  runs = {
    "toy": _run("toy_2d", s["toy"]),
    "main_mnist50": mnist(),
    "main_mnist100": mnist(n_per_class=large),
    "main_faces": _recon(faces[0], attack, faces[1]),
    "main_digits": _recon(digits[0], attack, digits[1]),
    "main_faces_wd": _recon(s["faces_wd"][0], attack, s["faces_wd"][1], **s["faces_wd"][2]),
    "inversion": mnist({"attack": "inversion"}),
    "weights": mnist({"attack": "weights"}),
    "abl_n_small": mnist(n_per_class=small),
    "abl_width": mnist(widths=s["widths"]),
    "abl_depth": mnist(widths=s["depth"]),
    "abl_kaiming": mnist(first_layer_std=scales.HE_FIRST),
    "abl_long": mnist(epochs=s["long_epochs"]),
    "abl_bias_all": mnist(bias="all"),
    # App. C.3.3's mini-batch SGD, batch 50, at the larger n (at n = 50 it is full-batch GD):
    # a step is one batch, so the base's epochs take n / 50 times as many steps.
    "abl_sgd": mnist(
      n_per_class=large, batch_size=50, epochs=max(1, 2 * large // 50) * m_victim["epochs"]
    ),
    "multiclass_ce": _recon(
      digits[0], attack, dict(digits[1], n_per_class=s["npc_deco"], loss="ce")
    ),
    "regression_mse_wd": _recon(
      digits[0], attack, dict(digits[1], n_per_class=s["npc_deco"], loss="mse", weight_decay=1e-3)
    ),
    "partition_init": _recon(faces[0], attack, faces[1], search={"init": "partition"}),
    "init_study": _run("init_study", s["init"][0], **s["init"][1]),
    # A model fine-tuned from a theta_0 the attacker knows, read by the finetune preset's attack
    # (the cone; quick: the leakage map's quick victim), and the same victims attacked from
    # theta* alone by Haim et al.'s search at the scale's budget.
    "finetune": _recon("finetune", {}, tune_victim),
    "finetune_blind": _recon("finetune_kkt", tune or attack, tune_victim, **blind),
    # The recipes model owners use, one changed at a time from the finetune preset.
    "leakage_map": _run("efficacy", s["map"][0], draws=s["map"][1]),
  }
  if scale == "paper":  # their n = 500 with their whole sweep: for an accelerator
    runs["main_mnist500"] = mnist(n_per_class=250)
  return runs


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  """reproduce's settings at scale ``preset`` (see the module docstring)."""
  if preset not in SCALES:
    raise KeyError(f"unknown preset (scale) {preset!r}; choose from {', '.join(SCALES)}")
  c = ml_collections.ConfigDict()
  c.scale = preset  # the name of the scale (written into the report)
  c.data_dir = ""  # folder with the MNIST and CIFAR-10 files (scale paper)
  c.draws = 2 if preset == "quick" else 5  # data draws of every efficacy run (draws = 0)
  # number of the first draw; draws are consecutive.  The default scale's draws 100-104 were
  # never used to choose an attack's settings (the cone's were measured on draws 0-14).
  c.first_draw = 100 if preset == "default" else 0
  c.seeds = 3  # seeds 0..seeds-1 of the toy and the init study (draws = 0)
  c.confidence = 0.95  # two-sided t intervals over draws (the claims' criteria use them)
  c.runs = ml_collections.ConfigDict(_runs(preset))
  c.sections = ml_collections.ConfigDict({k: v[1] for k, v in SECTIONS.items()})
  if preset == "paper":  # their n = 500 beside n = 50 and 100
    c.sections.main = (*c.sections.main, "main_mnist500")
  return c
