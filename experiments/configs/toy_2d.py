"""The 2-D toy of Haim et al. 2022 §4 (Fig. 2): n points on the unit circle, alternating labels.

Presets (``--config=experiments/configs/toy_2d.py:PRESET``):
  paper   n = 20, 2-1000-1000-1 victim, 4 restarts x (5000 + 3000 refinement) steps
          (the default; ~13 min on 2 CPU cores)
  small   the same with width 200 and 8 restarts (~2 min)
  quick   n = 4, width 16, 2 restarts x 60 steps (a smoke test, seconds)

Ranges are ``VALUE`` or ``LO:HI[:log|lin]``, one draw per restart.  The
settings named ``victim_*`` are the victim's training recipe; the attack's
candidates always start from N(0, sigma_x^2) (Haim §4).
"""

import ml_collections

PRESETS = {
  "paper": {},
  "small": {"width": 200, "num_restarts": 8},
  "quick": {
    "n_train": 4,
    "width": 16,
    "victim_epochs": 300,
    "m": 8,
    "num_restarts": 2,
    "steps": 40,
    "chunk_steps": 20,
    "refine_steps": 20,
  },
}


def get_config(preset: str = "paper") -> ml_collections.ConfigDict:
  """The toy's settings for ``preset`` (see the module docstring)."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  c.n_train = 20  # training points on the unit circle (even)
  c.width = 1000  # hidden width of the 2-W-W-1 ReLU victim
  # The victim's recipe (see README): PyTorch's default nn.Linear init (weights
  # and biases U(+-1/sqrt(fan_in))), biases in every layer, plain full-batch GD.
  # With biases only in the first layer (or none) the trained net is almost
  # homogeneous in x, its decision regions are wedges through the origin, and a
  # candidate's radius is not identifiable: those victims gave 0-4 of 20.
  c.victim_init = "torch"  # the victim's weight init: torch | kaiming | uniform
  c.victim_init_gain = 1.0  # multiplies the victim's init scale
  c.victim_bias = "all"  # biases in the victim's layers: all | first | none
  c.victim_lr = 0.01  # full-batch GD learning rate of the victim
  c.victim_epochs = 20_000
  c.victim_adaptive = "none"  # normalised GD: none | loss | grad
  # > 0: the attack sees theta* rescaled to this norm (homogeneous victims only,
  # victim_bias=none or first: there the KKT conditions do not depend on the scale).
  c.theta_norm = 0.0
  c.m = 100  # candidates per restart (even: m/2 per label)
  c.num_restarts = 4  # restarts, batched in one compiled program
  c.steps = 5000  # steps of the coarse stage
  c.chunk_steps = 1000  # steps per compiled chunk, between progress lines and saves
  c.lr_x = "3e-4:1e-3:log"
  c.lr_lam = "5e-3:3e-2:log"
  c.sigma_x = "0.3:0.5:log"  # std of the candidates' Gaussian starting points
  c.alpha = "4:10:lin"  # surrogate ReLU sharpness of the coarse stage
  c.lam_min = "0.3:0.5:log"
  # Refinement stage: a sharp surrogate at a lower rate pulls the candidates onto
  # the ReLU kinks where the training points sit (0 steps: off).
  c.refine_steps = 3000
  c.refine_alpha = 200.0
  c.refine_lr_scale = 0.1
  c.lam_filter_frac = 0.1  # keep candidates with lambda >= frac * max lambda of their restart
  c.dedup_radius = 0.03  # greedy de-duplication radius (Haim §4)
  c.tol = 0.05  # a training point is recovered if a kept candidate is this close
  c.seed = 0
  c.x64 = True  # float64: the victim needs it to reach the KKT direction
  c.use_cache = True  # cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)
  c.save_every = 1  # save state.msgpack every N chunks (0: never)
  c.update(PRESETS[preset])
  return c
