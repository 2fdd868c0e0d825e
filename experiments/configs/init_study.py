"""The initialisation study of Runkel et al. (2024, §4.3-4.5): bilevel and KKT attacks.

Presets (``--config=experiments/configs/init_study.py:PRESET``):
  default  10 + 10 digits, the 21-point eq. (10) grid, one-hidden width 256 (~8 min, 2-core CPU)
  quick    3 + 3 digits, the three settings only, small nets, few steps (~1 min)
  tiny     2 + 2 digits, the affine and KKT parts, 4 steps (the tests, seconds)

Settings that belong to one part are prefixed: ``bilevel_*`` (the bilevel attack
of §4.3/4.5 and its L-BFGS-trained victims), ``kkt_*`` (the KKT attack of §4.4
and its gradient-descent-trained MLP victim).  The KKT ranges are ``VALUE`` or
``LO:HI[:log|lin]``, one seeded draw per eq. (10) point.
"""

import ml_collections

PRESETS = {
  "default": dict(),
  "quick": dict(
    n_per_class=3,
    bilevel_width=16,
    kkt_width=16,
    bilevel_steps=20,
    chunk_steps=20,
    kkt_victim_epochs=2000,
    kkt_steps=100,
    grid=False,
    bilevel_inner_maxiter=50,
  ),
  "tiny": dict(
    n_per_class=2,
    parts="affine,kkt",
    bilevel_width=8,
    kkt_width=8,
    bilevel_steps=4,
    chunk_steps=2,
    kkt_steps=4,
    kkt_victim_epochs=200,
    bilevel_inner_maxiter=20,
    grid=False,
  ),
}


def get_config(preset: str = "default") -> ml_collections.ConfigDict:
  """The study's settings: the defaults below, updated by ``PRESETS[preset]``."""
  if preset not in PRESETS:
    raise KeyError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  # Data: n = 2 * n_per_class training images, as many partition images.
  c.dataset = "digits"  # digits | lfw (embedded) | mnist | cifar10 (data_dir)
  c.data_dir = ""  # folder with MNIST/CIFAR files (never downloaded)
  c.n_per_class = 10  # training images per class (as many partition images)
  c.seed = 0  # data sampling, victims, attack keys, KKT draws
  c.grid = True  # the 21-point eq. (10) grid (else the three settings)
  # Parts (sub-runs) to run, comma-separated: affine (bilevel, eq. 8 net), one_hidden
  # (bilevel, eq. 9 net with bilevel_act), one_hidden_relu (bilevel, the paper's ReLU
  # net, three settings only), kkt (KKT attack on the homogeneous ReLU MLP).
  c.parts = "affine,one_hidden,one_hidden_relu,kkt"  # the sub-runs, comma-separated
  # Bilevel attack (§4.3, 4.5) and its victims, trained with L-BFGS on its own energy.
  c.bilevel_wd = 1e-3  # weight decay of the victims and of the inner problem
  c.bilevel_width = 256  # one-hidden width (paper: 6144 on CIFAR-10)
  c.bilevel_act = "softplus"  # smooth activation of the one-hidden net (C^2 for the IFT)
  c.bilevel_victim_tol = 1e-7  # victims: L-BFGS until ||grad E|| <= this
  c.bilevel_victim_maxiter = 20_000  # victims: L-BFGS iteration cap
  c.bilevel_steps = 200  # outer steps
  c.bilevel_optimizer = "adam"  # sgd (momentum 0.9) | adam
  c.bilevel_lr_x = 0.01  # outer learning rate (of the optimizer at rate 1)
  c.bilevel_theta0 = "target"  # first inner start: target | uniform | gaussian
  c.bilevel_restart_from_target = False  # start every inner solve from theta*
  c.bilevel_hessian_solve = "cg"  # cg | lbfgs (the paper's quasi-Newton H^{-1})
  c.bilevel_inner_maxiter = 100  # inner L-BFGS (theta(x)) iteration cap per outer step
  c.bilevel_inner_tol = 1e-7  # inner L-BFGS: until ||grad E|| <= this
  # KKT attack (§4.4) on a homogeneous ReLU MLP d-w-...-w-1 trained like the main job
  # (recon_jax.victims.victim.VictimConfig defaults: GD, no weight decay, mean subtracted).
  c.kkt_width = 256  # hidden width of the KKT victim
  c.kkt_depth = 2  # hidden layers of the KKT victim
  c.kkt_victim_epochs = 10_000  # gradient-descent epochs of the KKT victim
  c.kkt_steps = 2000  # KKT attack steps
  c.kkt_lr_x = "0.03:0.6:log"  # x learning rate (main job's ranges, a draw per point)
  c.kkt_lr_lam = "1e-4:1e-2:log"  # lambda learning rate
  c.kkt_alpha = "10:40:lin"  # surrogate ReLU sharpness
  c.kkt_lam_min = "0.2:0.7:lin"  # lower bound of the multipliers lambda
  # Running.
  c.chunk_steps = 50  # steps per compiled chunk, between progress lines and saves
  c.batching = "auto"  # auto (map on CPU, vmap on GPU/TPU) | vmap | map
  c.x64 = True  # float64: the 1e-7 inner and victim tolerances need it
  c.use_cache = True  # cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)
  c.save_every = 1  # save state_<sub-run>.msgpack every N chunks (0: never)
  c.update(PRESETS[preset])
  return c
