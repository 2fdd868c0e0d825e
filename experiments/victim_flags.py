"""Victim flags shared by train_victim.py and reconstruct.py."""
import dataclasses

from absl import flags

from recon_jax import victim

FLAGS = flags.FLAGS

_VICTIM_FLAGS = {
    # flag name: (VictimConfig field, flag type, help)
    "dataset": ("dataset", "string", "digits | lfw | toy2d | mnist | cifar10 | cifar100."),
    "n_per_class": ("n_per_class", "integer", "Training samples per class."),
    "subtract_mean": ("subtract_mean", "bool", "Subtract the training mean (Haim et al.)."),
    "data_seed": ("data_seed", "integer", "Seed of the balanced sampling."),
    "arch": ("arch", "string", "mlp | affine | one_hidden | cnn."),
    "widths": ("widths", "list", "Hidden widths, e.g. 1000,1000."),
    "bias": ("bias", "string", "first | all | none."),
    "victim_init": ("init", "string", "kaiming | normal | uniform | torch."),
    "init_std": ("init_std", "float", "Std of init=normal (or He override)."),
    "first_layer_std": ("first_layer_std", "float", "Std of the first layer (Haim: 1e-4)."),
    "init_gain": ("init_gain", "float", "Multiplier of He's std or torch's bound."),
    "adaptive": ("adaptive", "string", "Normalised GD: none | loss | grad."),
    "loss": ("loss", "string", "logistic (binary) | ce (multiclass) | mse (regression)."),
    "victim_lr": ("lr", "float", "Victim learning rate."),
    "epochs": ("epochs", "integer", "Victim training epochs (full-batch GD steps)."),
    "weight_decay": ("weight_decay", "float", "Weight decay during training."),
    "wd_epochs": ("wd_epochs", "integer", "Epochs of an extra weight-decay phase (0: none)."),
    "wd": ("wd", "float", "Weight decay of that extra phase."),
    "batch_size": ("batch_size", "integer", "Mini-batch size (default: full batch)."),
    "victim_seed": ("seed", "integer", "Seed of the victim's initialisation."),
}


def define_victim_flags():
  for name, (_, kind, helptext) in _VICTIM_FLAGS.items():
    if kind == "list":
      flags.DEFINE_list(name, None, helptext)
    else:
      getattr(flags, f"DEFINE_{kind}")(name, None, helptext)


def victim_config_from_flags(base: victim.VictimConfig,
                             checkpoint_path: str = "") -> victim.VictimConfig:
  """The victim config: ``base`` with the flags given, or the checkpoint's own.

  With a checkpoint, its stored config (architecture and data provenance) is
  used, and a victim flag given on the command line that contradicts it is an
  error naming the flag.
  """
  over = _overrides()
  if checkpoint_path:
    from recon_jax import checkpoint
    _, meta = checkpoint.load(checkpoint_path)
    try:
      stored = dict(meta["victim"])
      stored["widths"] = tuple(stored["widths"])
      ck = victim.VictimConfig(**stored)
    except (KeyError, TypeError):
      raise checkpoint.CheckpointError(
          f"{checkpoint_path}: not a victim checkpoint (no victim config).") from None
    for field, value in over.items():
      if getattr(ck, field) != value:
        flag = next(n for n, (f, _, _) in _VICTIM_FLAGS.items() if f == field)
        raise ValueError(f"--{flag}={value} contradicts --checkpoint {checkpoint_path}, "
                         f"which was trained with {field}={getattr(ck, field)}.")
    return ck
  return dataclasses.replace(base, **over)


def _overrides() -> dict:
  over = {}
  for name, (field, kind, _) in _VICTIM_FLAGS.items():
    value = FLAGS[name].value
    if value is None:
      continue
    if kind == "list":
      try:
        value = tuple(int(v) for v in value)
      except ValueError:
        raise ValueError(f"--{name} must be comma-separated integers, got {value}.") from None
    over[field] = value
  from recon_jax import models, train
  for flag, field, choices in (("arch", "arch", ("mlp", "affine", "one_hidden", "cnn")),
                               ("loss", "loss", train.LOSSES), ("bias", "bias", models.BIAS_MODES),
                               ("victim_init", "init", models.INIT_SCHEMES)):
    if field in over and over[field] not in choices:
      raise ValueError(f"--{flag} must be one of {', '.join(choices)}, got {over[field]!r}.")
  for k in ("lr", "epochs", "n_per_class"):
    if k in over and over[k] <= 0:
      flag = {"lr": "victim_lr"}.get(k, k)
      raise ValueError(f"--{flag} must be > 0, got {over[k]}.")
  return over
