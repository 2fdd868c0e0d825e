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
(main_faces, inversion, abl_kaiming, ...); a claim whose runs a config lacks is 'not run'.
Each claim's criterion is fixed in experiments/reproduce.py (CRITERIA).
"""

import ml_collections

SCALES = ("quick", "default", "paper")
PRESETS = SCALES
# section: (title, its runs)
SECTIONS = {
  "toy": ("1. Haim et al. §4, Fig. 2: the 2-D toy", ("toy",)),
  "main": ("2. Haim et al. §5.2-5.3, Figs 3-4: the main attack", ("main_faces", "main_digits")),
  "ablations": (
    "3. Haim et al. §5.3 / App. C: n, width/depth, init, training length, biases",
    (
      "abl_base",
      "abl_n_small",
      "abl_n_large",
      "abl_width",
      "abl_depth",
      "abl_kaiming",
      "abl_short",
      "abl_bias_all",
    ),
  ),
  "baselines": (
    "4. Haim et al. §5.4: model inversion and first-layer weights",
    ("main_faces", "inversion", "weights"),
  ),
  "decoreco": (
    "5. Buzaglo et al. (DecoReco): multiclass and regression with weight decay",
    ("multiclass_ce", "regression_mse_wd"),
  ),
  "init_study": ("6. Runkel et al. §4.3-4.5: the initialisation study", ("init_study",)),
  "attacker": (
    "7. The attacker's side: restart selection without ground truth",
    ("main_faces", "main_digits", "partition_init"),
  ),
}
# The claims: (section, criterion of experiments/reproduce.py, its runs, the claim ({ds}: the
# first run's dataset), the paper's result).
CLAIMS = (
  (
    "toy",
    "toy",
    ("toy",),
    "2-D toy: the KKT attack recovers all or nearly all training points (Fig. 2)",
    "all 20/20",
  ),
  (
    "main",
    "leak_quarter",
    ("main_faces",),
    "{ds}: a substantial fraction of the training "
    "images is reconstructed, above the baselines (Figs 3-4)",
    "large portion, n = 500",
  ),
  ("main", "leak_quarter", ("main_digits",), "{ds}: as above", "large portion, n = 500"),
  (
    "ablations",
    "n_trend",
    ("abl_n_small", "abl_base", "abl_n_large"),
    "larger n makes reconstruction harder (Fig. 4 top)",
    "fewer good reconstructions as n grows",
  ),
  (
    "ablations",
    "all_leak",
    ("abl_base", "abl_width", "abl_depth"),
    "reconstruction works across widths and depths (Fig. 4 bottom)",
    "good reconstructions for each",
  ),
  (
    "ablations",
    "lower_with_signal",
    ("abl_base", "abl_kaiming"),
    "Kaiming init in all "
    "layers: lower quality than a 1e-4 first layer, some signal left (App. C, Figs 17-18)",
    "lower quality, some correlation",
  ),
  (
    "ablations",
    "leak",
    ("abl_short",),
    "shorter training still reconstructs (App. C, Fig. 16)",
    "reconstructions remain",
  ),
  (
    "ablations",
    "leak",
    ("abl_bias_all",),
    "a non-homogeneous victim (biases in all layers) still leaks (Fig. 4)",
    "high-quality reconstructions",
  ),
  (
    "baselines",
    "fewer",
    ("main_faces", "inversion"),
    "model inversion recovers fewer training images than the KKT attack (§5.4, Fig. 5)",
    "class representatives",
  ),
  (
    "baselines",
    "fewer",
    ("main_faces", "weights"),
    "first-layer weights recover fewer training images than the KKT attack (§5.4)",
    "not training samples",
  ),
  (
    "decoreco",
    "leak",
    ("multiclass_ce",),
    "{ds}, 10-class CE victim: training images are reconstructed (DecoReco multiclass)",
    "reconstructions",
  ),
  (
    "decoreco",
    "leak",
    ("regression_mse_wd",),
    "{ds}, MSE regression with weight decay: "
    "training images are reconstructed (DecoReco general loss)",
    "reconstructions",
  ),
  ("init_study", "findings", ("init_study",), "", "Runkel et al. §4.3-4.5"),
  (
    "attacker",
    "selected_leak",
    ("main_faces",),
    "{ds}: the attacker's own pick (lowest-loss restart, no ground truth) beats the baselines",
    "not reported",
  ),
  ("attacker", "selected_leak", ("main_digits",), "{ds}: as above", "not reported"),
  (
    "attacker",
    "pick_rate",
    ("main_faces", "main_digits"),
    "the lowest-loss restart is the truly best one",
    "not reported",
  ),
  (
    "attacker",
    "partition",
    ("partition_init", "main_faces"),
    "{ds}: the KKT attack started from disjoint partition images (Runkel's setting) vs from noise",
    "argued, no number",
  ),
)


def _run(binary: str, preset: str, draws: int = 0, **overrides) -> dict:
  return dict(binary=binary, preset=preset, draws=draws, overrides=overrides)


def _recon(preset: str, size: dict, victim=None, **kw) -> dict:
  """An efficacy run of a reconstruct preset: the attack's ``size``, then ``kw``/``victim``."""
  over = dict(size, **kw)
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
  elif scale == "default":
    attack = {"num_restarts": 8, "steps": 3000, "chunk_steps": 1000}
    faces, digits = ("lfw", {}), ("digits", {})
    abl = ("digits", {"n_per_class": 10})
    n_rows, widths, depth, short = (5, 25), (64, 64), (256, 256, 256), 3000
    # tiny's victim is He-initialised in every layer; the rest is set back to digits'.
    kaiming = ("tiny", {"n_per_class": 10, "widths": (256, 256), "epochs": 10_000}, attack)
    npc_deco, toy, init = 5, "small", ("default", {})
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
      {"num_restarts": 100, "steps": 50_000, "chunk_steps": 5000, "sweep": "paper"},
    )
    npc_deco, toy = 50, "paper"
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
  runs = {
    "toy": _run("toy_2d", toy),
    "main_faces": _recon(faces[0], attack, faces[1]),
    "main_digits": _recon(digits[0], attack, digits[1]),
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
    "partition_init": _recon(faces[0], attack, faces[1], init="partition"),
    "init_study": _run("init_study", init[0], **init[1]),
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
