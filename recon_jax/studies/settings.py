"""The main job's settings, shipped with the library: defaults and what each one means.

:func:`reconstruct_config` is the config :func:`recon_jax.reconstruct` takes (an
``ml_collections.ConfigDict``; override any field, or pass overrides as keywords);
:data:`HELP` says what every setting means (the binaries' ``--help`` shows it).  The
binaries' config files (``experiments/configs/``) only add presets on top.
"""

from __future__ import annotations

import dataclasses

import ml_collections
from ml_collections import config_dict

from recon_jax.victims.victim import VictimConfig

# The victim's fields that may be unset (None), with their type.
_OPTIONAL = {"init_std": float, "first_layer_std": float, "batch_size": int}

VICTIM_HELP = {
  "dataset": "digits | lfw (embedded) | mnist | cifar10 | cifar100 (files in data_dir)",
  "task": "binary | multiclass (the labels follow loss: ce is multiclass)",
  "n_per_class": "training images per class (the n the attack must find)",
  "subtract_mean": "train on images minus their mean (as Haim et al.)",
  "data_seed": "seed of the training-image draw",
  "arch": "mlp | affine | one_hidden | cnn",
  "widths": "hidden widths (cnn: channels), e.g. 256,256",
  "bias": "biases in first | all | none of the layers",
  "init": "weight init: normal | kaiming | uniform | torch",
  "init_std": "std of init=normal (or He's std override); unset: the scheme's",
  "first_layer_std": "std of the first layer's weights (unset: as init)",
  "init_gain": "multiplies the init scale",
  "activation": "relu | gelu | softplus | tanh | identity",
  "loss": "logistic (binary) | ce (multiclass) | mse (regression)",
  "lr": "gradient-descent learning rate (> 0)",
  "epochs": "full-batch GD steps",
  "weight_decay": "L2 weight decay of the training energy (>= 0)",
  "wd_epochs": "steps of an optional second phase with weight decay wd (0: off)",
  "wd": "weight decay of that second phase (>= 0)",
  "momentum": "SGD momentum in [0, 1)",
  "adaptive": "normalised GD: none | loss (lr / loss) | grad (lr / ||grad||)",
  "batch_size": "minibatch size (unset: full batch)",
  "loss_threshold": "stop once the training loss is this low (0: run every epoch)",
  "seed": "seed of the victim's initialisation and minibatches",
  "converge_tol": "last phase: L-BFGS to ||grad E|| <= this x ||theta|| (0: off; needs wd)",
  "converge_maxiter": "L-BFGS iteration cap of that phase",
}

# (name, default, meaning) of every setting of the main job but its victim section.
_NONE_FLOAT = config_dict.placeholder(float)
SETTINGS = (
  (
    "checkpoint",
    "",
    "attack this victim file instead of training one: recon_jax's victim.msgpack, a "
    "PyTorch state dict (.pt/.pth) or safetensors",
  ),
  (
    "foreign.data_mean",
    "",
    ".npy per-pixel mean a PyTorch/safetensors model was trained with ('' none)",
  ),
  ("foreign.input_layout", "nchw", "how the model flattened conv features (PyTorch: nchw)"),
  ("foreign.stride", 1, "conv stride (PyTorch's default)"),
  ("foreign.padding", 0, "conv padding (PyTorch's default)"),
  ("data_dir", "", "folder with MNIST/CIFAR files (never downloaded)"),
  ("allow_data_mismatch", False, "attack a checkpoint trained on other images (warns)"),
  ("attack", "kkt", "kkt | closed_form | bilevel (weight-decay victims) | inversion | weights"),
  ("problem", "auto", "auto (from victim.loss) | binary | multiclass | general"),
  ("num_restarts", 16, "restarts R, batched in one compiled program"),
  ("steps", 4000, "optimisation steps per restart"),
  ("chunk_steps", 1000, "steps per compiled chunk, between progress lines and saves"),
  ("m", 0, "candidates per restart (0: m_per_sample x n)"),
  ("m_per_sample", 2, "candidates per training sample when m = 0 (Haim et al.: 2)"),
  ("init", "gaussian", "x-init: gaussian | uniform | ground_truth | partition | mix"),
  ("sweep", "random", "random (the ranges below) | paper (Haim et al. App. B ranges)"),
  ("lr_x", "0.03:0.6:log", "candidates' learning rate (range: one draw per restart)"),
  ("lr_lam", "1e-4:1e-2:log", "multipliers' (lambda) learning rate"),
  ("sigma_x", "1e-4:1e-2:log", "std of the candidates' Gaussian starting points"),
  ("alpha", "10:40:lin", "surrogate ReLU sharpness"),
  ("lam_min", "0.2:0.7:lin", "lambda below this is penalised (the KKT lambda >= 0 term)"),
  ("refine_steps", 0, "a sharp-alpha refinement stage after `steps` (0: off)"),
  ("refine_alpha", 200.0, "the refinement stage's alpha (sharper: closer to ReLU)"),
  ("refine_lr_scale", 0.1, "the refinement stage's learning rates, times this"),
  ("anneal_alpha", 0.0, "> 0: alpha rises geometrically to this over `steps` (0: fixed)"),
  ("anneal_stages", 8, "how many steps of that rise (each a stage of steps/anneal_stages)"),
  ("known_init", False, "the attacker also knows theta_0 and fits theta* - theta_0"),
  ("derivative", "auto", "auto (victim's own if smooth, else surrogate) | surrogate | exact"),
  ("multipliers", "free", "free (lambda optimised) | tied (lambda_i = c sigma(-y_i Phi(x_i)))"),
  ("subspace", False, "keep candidates in the span of the first layer's weights"),
  ("subspace_tol", 1e-3, "that span: singular values above this x the largest"),
  ("search", "first_order", "first_order (optimizer) | lm (Levenberg-Marquardt; tied, subspace)"),
  ("lm_cg_maxiter", 20, "conjugate-gradient iterations per Levenberg-Marquardt step"),
  ("split_every", 0, "split a candidate in two every this many steps (0: off; Shen et al.)"),
  ("split_eps", 0.05, "distance of the two copies from the split candidate"),
  ("bilevel_inner_maxiter", 100, "attack=bilevel: L-BFGS iterations of each inner solve"),
  ("identify", True, "attacker-side scores: which candidates would an attacker trust?"),
  ("identify_stability_candidates", 64, "candidates re-run for the stability score (0: none)"),
  ("optimizer", "sgd", "sgd (momentum 0.9) | adam"),
  ("w_lam", 1.0, "weight of the lambda >= lam_min penalty (>= 0)"),
  ("w_prior", 1.0, "weight of the pixel-box prior (>= 0)"),
  ("w_tv", 0.0, "kkt: weight of a total-variation prior on image candidates (0: off)"),
  ("normalize", "mean", "mean (1/m, the reference code) | sum (the paper's eq. 6)"),
  ("batching", "auto", "auto (map on CPU, vmap on GPU/TPU) | vmap | map"),
  ("ssim_threshold", _NONE_FLOAT, "strict recovery; default by image size"),
  ("seed", 0, "seed of the hyperparameter draws and starting points"),
  ("use_cache", True, "cache trained victims (RECON_JAX_CACHE, ~/.cache/recon_jax)"),
  ("x64", False, "float64 everywhere (slower; for the stationarity floor)"),
  ("max_memory_gb", 0.0, "refuse a sweep whose restart state needs more (0: free memory)"),
  ("matmul_precision", "default", "default | high | highest"),
  ("save_every", 1, "save state.msgpack every N chunks (0: never)"),
  ("distributed", False, "jax.distributed.initialize() first (multi-host sweeps)"),
)

HELP = {
  **{f"victim.{k}": v for k, v in VICTIM_HELP.items()},
  **{name: text for name, _, text in SETTINGS},
}


def victim_section(**overrides) -> ml_collections.ConfigDict:
  """:class:`VictimConfig`'s defaults as a ConfigDict (optional fields as typed placeholders).

  Raises:
    KeyError: naming overrides that are not victim settings.
  """
  c = ml_collections.ConfigDict()
  for f in dataclasses.fields(VictimConfig):
    value = overrides.pop(f.name, f.default)
    if f.name in _OPTIONAL:
      c[f.name] = config_dict.placeholder(_OPTIONAL[f.name])
      c[f.name] = value
    else:
      c[f.name] = tuple(value) if f.name == "widths" else value
  if overrides:
    raise KeyError(f"unknown victim settings {sorted(overrides)}")
  return c


def reconstruct_config(victim=None, **overrides) -> ml_collections.ConfigDict:
  """The main job's config: every setting at its default, then ``victim`` and ``overrides``.

  ``victim`` is a dict of victim settings; ``overrides`` are top-level settings
  (``foreign`` a dict).  Raises KeyError naming an unknown setting.
  """
  c = ml_collections.ConfigDict()
  c.victim = victim_section(**dict(victim or {}))
  for name, default, _ in SETTINGS:
    section, _, leaf = name.rpartition(".")
    if section and section not in c:
      c[section] = ml_collections.ConfigDict()
    value = config_dict.placeholder(float) if default is _NONE_FLOAT else default
    (c[section] if section else c)[leaf] = value  # a placeholder of its own per config
  unknown = sorted(set(overrides) - {n.partition(".")[0] for n, _, _ in SETTINGS})
  if unknown:
    raise KeyError(f"unknown settings {unknown}")
  c.update(overrides)
  return c
