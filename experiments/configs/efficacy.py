"""The efficacy harness: one reconstruction config (a preset of reconstruct.py) over data draws.

Presets name the base job (``finetune``, ``finetune_kkt``, ``lfw``, ``digits``, ``tiny``,
as in reconstruct.py); ``variants`` are named sets of overrides of that job, compared on
the same draws (``--variants=default,refine``).  ``finetune`` pairs its default (the cone)
with the KKT search (``kkt``); ``finetune_kkt`` has the levers of that search as variants;
the others the levers of Haim et al.'s.  Add your own by copying this file.
"""

import ml_collections

from experiments.configs import reconstruct
from recon_jax.job.settings import nested
from recon_jax.studies.leakage_map import BASE, RECIPES, map_config

HELP = {f"base.{k}": v for k, v in reconstruct.HELP.items()}  # --help's text of each setting

VARIANTS = {
  "default": {},
  # Haim et al.'s sweep with a sharp-alpha refinement stage after it.
  "refine": {"search.refine_steps": 2000},
  # alpha rising geometrically from each restart's draw to 200 over the run (Loo et al.).
  "anneal": {"search.anneal_alpha": 200.0},
  # The attacker also knows theta_0 and fits theta* - theta_0 (Loo et al.).
  "known_init": {"threat": {"known_init": True}},
  # Runkel et al.'s setting: candidates start at unseen images of the disjoint partition.
  "partition": {"search.init": "partition"},
  # Twice as many candidates (4n instead of 2n).
  "m4n": {"search.m_per_sample": 4},
  # lambda in closed form (Iurada et al.): ~30x a KKT step, so 4 x 1000 steps, same wall time.
  "closed_form": {
    "attack": "closed_form",
    "search": {"num_restarts": 4, "steps": 1000, "chunk_steps": 250},
  },
  # m = n candidates instead of 2n.
  "m1": {"search.m_per_sample": 1},
  # Tied multipliers lambda_i = c sigma(-y_i Phi(x_i)) (weight decay, lfw_wd), with Adam.
  "tied": {
    "kkt.multipliers": "tied",
    "search": {"m_per_sample": 1, "optimizer": "adam", "lr_x": "1e-4:1e-1:log"},
  },
  # Candidates in the span of the first layer's weights (Tansley et al. 2026).
  "subspace": {"kkt.subspace": True},
  # Sample splitting (Shen et al. 2026): every 250 steps the best split makes two, 0.5 apart.
  "split": {"kkt.split_every": 250, "kkt.split_eps": 0.5},
  # More restarts x fewer steps at the default's step count (16 x 4000 = 64 x 1000).
  "wide": {"search.num_restarts": 64, "search.steps": 1000},
  # A total-variation prior on the candidates (a natural-image prior; Refael et al. 2025).
  "tv": {"kkt.w_tv": 0.1},
  # Levenberg-Marquardt on the tied equations in the first layer's span (200 steps).
  "lm": {
    "kkt.multipliers": "tied",
    "kkt.subspace": True,
    "kkt.solver": "lm",
    "search.m_per_sample": 1,
    "search.steps": 200,
    "search.chunk_steps": 50,
  },
}

# Haim et al.'s first-order search: SGD-momentum at their rates, no anneal.
SGD = {
  "search.optimizer": "sgd",
  "search.lr_x": "0.03:0.6:log",
  "search.lr_lam": "1e-4:1e-2:log",
  "search.anneal_alpha": 0.0,
}
# The levers of the KKT search on a model fine-tuned from known weights (finetune_kkt: Adam on
# the span's coefficients, gradients halfway between theta_0 and theta*, alpha annealed).
FINETUNE_VARIANTS = {
  "default": {},
  # The first-order search of Haim et al.'s reference (SGD above).
  "sgd": SGD,
  # Gradients at theta* (Haim et al.'s point) instead of halfway.
  "theta_star": {"linearize": 1.0},
  # Paired with the preset on draws 10-14 (docs/log/leakage.md); none moves strict pooled.
  "lin03": {"linearize": 0.3},  # gradients nearer theta_0 than halfway
  "lin07": {"linearize": 0.7},
  "tv4": {"kkt.w_tv": 1e-4},  # a total-variation prior, ~5% of the final loss at n = 20
  "tv3": {"kkt.w_tv": 1e-3},
  "steps6k": {"search.steps": 6000},  # the loss still falls at 4000
  # Candidates searched in pixels (625 inputs) instead of the span's coefficients.
  "pixels": {"kkt.subspace": False, "kkt.span_whiten": 0.0},
  # Levenberg-Marquardt on the free-multiplier equations in the span (200 steps).
  "lm": {
    **SGD,
    "kkt.solver": "lm",
    "search.steps": 200,
    "search.chunk_steps": 50,
    "kkt.span_whiten": 0.0,
  },
  # Sample splitting (Shen et al. 2026) with lambda_min = 0.
  "split": {"kkt.split_every": 250, "kkt.split_eps": 0.5, "search.lam_min": "0"},
  # More restarts x fewer steps at the default's step count (16 x 4000 = 64 x 1000).
  "wide": {"search.num_restarts": 64, "search.steps": 1000},
  # The victims themselves trained with squared error to labels +-1 instead of the logistic
  # loss (the attack the same; its problem follows the loss): no margin beyond the label is
  # rewarded, so an image's gradient fades only once it is fitted (docs/log/leakage.md).
  "mse": {"victim": {"loss": "mse"}},
  # The default before the tuning of 2026-11-26 (span unweighted, 2n, lr_x, lambda_min).
  "plain": {
    "kkt.span_whiten": 0.0,
    "search.m_per_sample": 2,
    "search.lr_x": "3e-3:1e-1:log",
    "search.lam_min": "0.2:0.7:lin",
  },
  # Each direction of the span counted alike ((s_j / s_1)^-1 instead of ^-0.5).
  "whiten1": {"kkt.span_whiten": 1.0},
  # 2n candidates instead of 3n.
  "m2": {"search.m_per_sample": 2},
  # The images read off the cone of the first layer's change by linear programs (no search).
  "cone": {
    **SGD,
    "attack": "cone",
    "kkt.subspace": False,
    "kkt.span_whiten": 0.0,
    "search.lam_min": "0.2:0.7:lin",
  },
  # theta_0 unknown: theta* alone, Haim et al.'s attack in pixels (their 2n, lambda_min).
  "unknown_init": {
    "threat": {"known_init": False},
    "linearize": 1.0,
    "kkt.subspace": False,
    "kkt.span_whiten": 0.0,
    "search.m_per_sample": 2,
    "search.lam_min": "0.2:0.7:lin",
    **SGD,
  },
}

# The finetune preset's default (the cone) and the KKT search in the span on the same draws.
CONE_VARIANTS = {"default": {}, "kkt": {"attack": "kkt", **reconstruct.KNOWN_INIT_ATTACK}}

# The leakage map, rows (axis, ((label, overrides), ...)): one thing a model owner controls or
# knows changed at a time from the finetune_kkt preset (2048 units, 10 + 10 faces, He init,
# 2000 epochs, no weight decay, the logistic loss, a published random theta_0 the attacker
# knows); its search throughout, but the last row's "no" (Haim et al.'s attack on theta*).
_victim = lambda **kw: {"victim": kw}
MAP = (
  ("width", (("256", _victim(widths=(256,))), ("1024", _victim(widths=(1024,))), ("2048", BASE),
             ("4096", _victim(widths=(4096,))))),
  ("images per class", (("5", _victim(n_per_class=5)), ("10", BASE),
                        ("25", _victim(n_per_class=25)),
                        ("50", _victim(n_per_class=50, n_part_per_class=10)))),
  ("init scale", (("1e-4 first layer", _victim(first_layer_std=1e-4)),
                  ("He x 0.1", _victim(init_gain=0.1)), ("He", BASE))),
  ("epochs", (("500", _victim(epochs=500)), ("2000", BASE), ("10000", _victim(epochs=10_000)))),
  ("weight decay", (("0", BASE), ("1e-3", _victim(weight_decay=1e-3)),
                    ("1e-2", _victim(weight_decay=1e-2)))),
  ("training loss", (("logistic", BASE), ("squared error", _victim(loss="mse")))),
  ("theta_0", (("random (seed)", BASE), ("pretrained", _victim(pretrain_epochs=2000)))),
  ("theta_0 known", (("yes", BASE), ("no", FINETUNE_VARIANTS["unknown_init"]))),
)  # fmt: skip

# The quick map for tests and CI: a 64-256-1 digits victim fine-tuned 300 epochs (3 + 3
# images), 2 restarts x 240 steps; one row.
QUICK_MAP = MAP[-1:]
QUICK_BASE = dict(
  victim=dict(dataset="digits", n_per_class=3, arch="mlp", widths=(256,), bias="all",
              init="kaiming", init_std=None, first_layer_std=None, lr=0.05, epochs=300),
  search=dict(num_restarts=2, steps=240, chunk_steps=240, anneal_stages=4),
  evaluation=dict(identify=False),
)  # fmt: skip


def get_config(preset: str = "finetune") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  if preset == "leakage_map_cone":
    c.base = reconstruct.get_config("finetune")
    variants, spec = map_config(RECIPES)
    c.variants = ml_collections.ConfigDict(variants)
    c.map = spec
  elif preset in ("leakage_map", "leakage_map_quick"):
    c.base = reconstruct.get_config("finetune_kkt")  # the map was measured with the search
    rows = MAP
    if preset == "leakage_map_quick":
      c.base.update(ml_collections.ConfigDict(QUICK_BASE))
      rows = QUICK_MAP
    variants, spec = map_config(rows)
    c.variants = ml_collections.ConfigDict(variants)
    c.map = spec
  else:
    c.base = reconstruct.get_config(preset)
    variants = {"finetune": CONE_VARIANTS, "finetune_kkt": FINETUNE_VARIANTS}.get(preset, VARIANTS)
    c.variants = ml_collections.ConfigDict({k: nested(v) for k, v in variants.items()})
  c.confidence = 0.95
  return c
