"""The main job: victim -> KKT attack sweep (one compiled call) -> evaluation -> report.

Presets (``--config=experiments/configs/reconstruct.py:PRESET``):
  lfw     10 faces + 10 non-faces of scikit-image's LFW subset, 625-256-256-1 victim (default)
  digits  25 + 25 scikit-learn digits (even vs odd), 64-256-256-1 victim, 6000 steps
  lfw_wd  the same data and network with softplus units trained with weight decay to a
          stationary point (float64): the training set is an exact zero of the equations
  tiny    3 + 3 digits, 64-32-32-1 victim (He init, 400 epochs), 2 restarts x 20 steps
          (a smoke test, seconds)
  paper   Haim et al. App. B: d-1000-1000-1 victim, 100 restarts of their hyperparameter
          ranges (set victim.dataset and data_dir to your MNIST/CIFAR-10 folder)

Ranges are ``VALUE`` or ``LO:HI[:log|lin]``, one draw per restart.
"""

import ml_collections
from ml_collections import config_dict

from experiments.configs.victim import PRESETS as victim_presets
from experiments.configs.victim import victim_section

PRESETS = {
  "lfw": dict(),
  "digits": dict(victim=victim_presets["digits"], steps=6000),
  # A victim at a stationary point of a weight-decay-regularised loss, where the training set
  # is an exact zero of the stationarity equations: softplus units, 10^4 epochs of GD, 2000
  # with weight decay 1e-2, then L-BFGS to ||grad E|| <= 1e-10 ||theta||, all in float64.
  "lfw_wd": dict(
    victim=dict(activation="softplus", wd=1e-2, wd_epochs=2000, converge_tol=1e-10),
    x64=True,
  ),
  "tiny": dict(
    victim=victim_presets["tiny"], num_restarts=2, steps=20, chunk_steps=10, identify=False
  ),
  "paper": dict(
    victim=dict(
      dataset="cifar10",
      n_per_class=250,
      widths=(1000, 1000),
      init="kaiming",
      init_std=None,
      first_layer_std=1e-4,
      lr=0.01,
      epochs=100_000,
    ),
    num_restarts=100,
    steps=50_000,
    chunk_steps=5000,
    sweep="paper",
  ),
}


def get_config(preset: str = "lfw") -> ml_collections.ConfigDict:
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  over = dict(PRESETS[preset])
  c = ml_collections.ConfigDict()
  c.victim = victim_section(**over.pop("victim", {}))
  c.checkpoint = ""  # attack this victim file instead of training one: recon_jax's
  #                    victim.msgpack, a PyTorch state dict (.pt/.pth) or safetensors
  # Only for PyTorch / safetensors checkpoints (see README, "Audit your own model"):
  c.foreign = ml_collections.ConfigDict()
  c.foreign.data_mean = ""  # .npy per-pixel mean the model was trained with ('' none)
  c.foreign.input_layout = "nchw"  # how the model flattened conv features (PyTorch: nchw)
  c.foreign.stride = 1  # conv stride (PyTorch's default)
  c.foreign.padding = 0  # conv padding (PyTorch's default)
  c.data_dir = ""  # folder with MNIST/CIFAR files (never downloaded)
  c.allow_data_mismatch = False  # attack a checkpoint trained on other images (warns)
  c.attack = "kkt"  # kkt | closed_form | bilevel (weight-decay victims) | inversion | weights
  c.problem = "auto"  # auto (from victim.loss) | binary | multiclass | general
  c.num_restarts = 16  # restarts R, batched in one compiled program
  c.steps = 4000  # optimisation steps per restart
  c.chunk_steps = 1000  # steps per compiled chunk, between progress lines and saves
  c.m = 0  # candidates per restart (0: m_per_sample x n)
  c.m_per_sample = 2  # candidates per training sample when m = 0 (Haim et al.: 2)
  c.init = "gaussian"  # x-init: gaussian | uniform | ground_truth | partition | mix
  c.sweep = "random"  # random (the ranges below) | paper (Haim et al. App. B ranges)
  c.lr_x = "0.03:0.6:log"  # candidates' learning rate (range: one draw per restart)
  c.lr_lam = "1e-4:1e-2:log"  # multipliers' (lambda) learning rate
  c.sigma_x = "1e-4:1e-2:log"  # std of the candidates' Gaussian starting points
  c.alpha = "10:40:lin"  # surrogate ReLU sharpness
  c.lam_min = "0.2:0.7:lin"  # lambda below this is penalised (the KKT lambda >= 0 term)
  c.refine_steps = 0  # a sharp-alpha refinement stage after `steps` (0: off)
  c.refine_alpha = 200.0  # the refinement stage's alpha (sharper: closer to ReLU)
  c.refine_lr_scale = 0.1  # the refinement stage's learning rates, times this
  c.anneal_alpha = 0.0  # > 0: alpha rises geometrically to this over `steps` (0: fixed)
  c.anneal_stages = 8  # how many steps of that rise (each a stage of steps/anneal_stages)
  c.known_init = False  # the attacker also knows theta_0 and fits theta* - theta_0
  c.derivative = "auto"  # auto (victim's own if smooth, else surrogate) | surrogate | exact
  c.multipliers = "free"  # free (lambda optimised) | tied (lambda_i = c sigma(-y_i Phi(x_i)))
  c.subspace = False  # keep candidates in the span of the first layer's weights
  c.subspace_tol = 1e-3  # that span: singular values above this x the largest
  c.search = "first_order"  # first_order (optimizer) | lm (Levenberg-Marquardt; tied, subspace)
  c.lm_cg_maxiter = 20  # conjugate-gradient iterations per Levenberg-Marquardt step
  c.bilevel_inner_maxiter = 100  # attack=bilevel: L-BFGS iterations of each inner solve
  c.identify = True  # attacker-side scores: which candidates would an attacker trust?
  c.identify_stability_candidates = 64  # candidates re-run for the stability score (0: none)
  c.optimizer = "sgd"  # sgd (momentum 0.9) | adam
  c.w_lam = 1.0  # weight of the lambda >= lam_min penalty (>= 0)
  c.w_prior = 1.0  # weight of the pixel-box prior (>= 0)
  c.normalize = "mean"  # mean (1/m, the reference code) | sum (the paper's eq. 6)
  c.batching = "auto"  # auto (map on CPU, vmap on GPU/TPU) | vmap | map
  c.ssim_threshold = config_dict.placeholder(float)  # strict recovery; default by image size
  c.seed = 0  # seed of the hyperparameter draws and starting points
  c.use_cache = True  # cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)
  c.x64 = False  # float64 everywhere (slower; for the stationarity floor)
  c.max_memory_gb = 0.0  # refuse a sweep whose restart state needs more (0: free memory)
  c.matmul_precision = "default"  # default | high | highest
  c.save_every = 1  # save state.msgpack every N chunks (0: never)
  c.distributed = False  # jax.distributed.initialize() first (multi-host sweeps)
  c.update(over)
  return c
