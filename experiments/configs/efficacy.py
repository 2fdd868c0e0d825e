"""The efficacy harness: one reconstruction config (a preset of reconstruct.py) over data draws.

Presets name the base job (``finetune``, ``lfw``, ``digits``, ``tiny``, as in
reconstruct.py); ``variants`` are named sets of overrides of that job, compared on the
same draws (``--variants=default,refine``).  The ``finetune`` preset has the levers of
its own threat model (a model fine-tuned from known weights) as variants; the others
the levers of Haim et al.'s.  Add your own by copying this file.
"""

import ml_collections

from experiments.configs import reconstruct

HELP = {f"base.{k}": v for k, v in reconstruct.HELP.items()}  # --help's text of each setting

VARIANTS = {
  "default": {},
  # Haim et al.'s sweep with a sharp-alpha refinement stage after it.
  "refine": {"refine_steps": 2000},
  # alpha rising geometrically from each restart's draw to 200 over the run (Loo et al.).
  "anneal": {"anneal_alpha": 200.0},
  # The attacker also knows theta_0 and fits theta* - theta_0 (Loo et al.).
  "known_init": {"known_init": True},
  # Runkel et al.'s setting: candidates start at unseen images of the disjoint partition.
  "partition": {"init": "partition"},
  # Twice as many candidates (4n instead of 2n).
  "m4n": {"m_per_sample": 4},
  # lambda eliminated in closed form at every step (Iurada et al.). A step costs ~30x a KKT
  # step on a CPU (the Gram matrix), so 4 restarts x 1000 steps: about the default's wall time.
  "closed_form": {"attack": "closed_form", "num_restarts": 4, "steps": 1000, "chunk_steps": 250},
  # m = n candidates instead of 2n.
  "m1": {"m_per_sample": 1},
  # Multipliers tied to the candidates, lambda_i = c sigma(-y_i Phi(x_i)) (weight-decay
  # victims, e.g. the lfw_wd preset); Adam, since the tied loss is scaled unlike the free one.
  "tied": {
    "multipliers": "tied",
    "m_per_sample": 1,
    "optimizer": "adam",
    "lr_x": "1e-4:1e-1:log",
  },
  # Candidates kept in the span of the first layer's weights (the data subspace of a
  # weight-decay victim; Tansley et al. 2026).
  "subspace": {"subspace": True},
  # Sample splitting (Shen et al. 2026): every 250 steps the candidate whose split lowers
  # the objective most becomes two, 0.5 apart, in the slot of an unused candidate.
  "split": {"split_every": 250, "split_eps": 0.5},
  # More restarts x fewer steps at the default's step count (16 x 4000 = 64 x 1000).
  "wide": {"num_restarts": 64, "steps": 1000},
  # A total-variation prior on the candidates (a natural-image prior; Refael et al. 2025).
  "tv": {"w_tv": 0.1},
  # Levenberg-Marquardt on the tied equations in the first layer's span (200 steps).
  "lm": {
    "multipliers": "tied",
    "m_per_sample": 1,
    "subspace": True,
    "search": "lm",
    "steps": 200,
    "chunk_steps": 50,
  },
}


# The levers on a model fine-tuned from known weights (the finetune preset's default: Adam on
# the span's coefficients, gradients halfway between theta_0 and theta*, alpha annealed).
FINETUNE_VARIANTS = {
  "default": {},
  # The first-order search of Haim et al.'s reference: SGD-momentum at their rates, no anneal.
  "sgd": {
    "optimizer": "sgd",
    "lr_x": "0.03:0.6:log",
    "lr_lam": "1e-4:1e-2:log",
    "anneal_alpha": 0.0,
  },
  # Gradients at theta* (Haim et al.'s point) instead of halfway.
  "theta_star": {"linearize": 1.0},
  # Candidates searched in pixels (625 inputs) instead of the span's coefficients.
  "pixels": {"subspace": False},
  # Levenberg-Marquardt on the free-multiplier equations in the span (200 steps).
  "lm": {
    "search": "lm",
    "steps": 200,
    "chunk_steps": 50,
    "anneal_alpha": 0.0,
    "optimizer": "sgd",
    "lr_x": "0.03:0.6:log",
    "lr_lam": "1e-4:1e-2:log",
  },
  # Sample splitting (Shen et al. 2026) with lambda_min = 0.
  "split": {"split_every": 250, "split_eps": 0.5, "lam_min": "0"},
  # More restarts x fewer steps at the default's step count (16 x 4000 = 64 x 1000).
  "wide": {"num_restarts": 64, "steps": 1000},
  # The attacker does not know theta_0: theta* alone, Haim et al.'s attack in pixels.
  "unknown_init": {
    "known_init": False,
    "linearize": 1.0,
    "subspace": False,
    "optimizer": "sgd",
    "lr_x": "0.03:0.6:log",
    "lr_lam": "1e-4:1e-2:log",
    "anneal_alpha": 0.0,
  },
}


def get_config(preset: str = "finetune") -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.base = reconstruct.get_config(preset)
  c.variants = ml_collections.ConfigDict(FINETUNE_VARIANTS if preset == "finetune" else VARIANTS)
  c.confidence = 0.95
  return c
