r"""Audit a model you have, on the data you have: does it leak its training images?

  python -m experiments.audit --config.model=model.safetensors --config.train=train/ \
      --config.heldout=heldout/ --workdir=audit
  python -m experiments.audit --config.model=model.pt --config.theta0=init.pt \
      --config.train=train.npz --config.heldout=heldout.npz --workdir=audit_finetuned

The model is a PyTorch state dict or safetensors file of Linear/Conv2d layers; the
images an ImageFolder folder (one subfolder per class; for a one-output model the second
class in sorted order is the positive one), an .npz with x and y, or MNIST/CIFAR files.
With --config.theta0 (theta_0, the weights training started from; formerly --config.init)
the attack for a model fine-tuned from known weights runs; without it, Haim et al.'s attack
on the weights alone.  Weights are read as PyTorch's: a Linear layer's is [out, in].
Writes what the main job writes (report.md first); the last line is the verdict: leaks,
no evidence or cannot tell, with the reason.  Exit codes as experiments.reconstruct.
"""

from experiments import starting

starting("audit")  # at a terminal, before the imports below load JAX

from absl import flags  # noqa: E402

from experiments import configs, reconstruct  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS
# The library's names of the audit's settings (errors name the library's).
ALIASES = {
  "checkpoint": "model",
  "train_data": "train",
  "heldout_data": "heldout",
  "init_checkpoint": "theta0",
  "foreign.data_mean": "data_mean",
  "data_mean": "data_mean",
  "victim.loss": "loss",
  "foreign.input_layout": "input_layout",
}


def job(cfg, workdir: str, *, resume=False, overwrite=False) -> dict:
  """What the binary does once its flags are parsed; returns metrics.json's dict."""
  from recon_jax.errors import Error
  from recon_jax.job.audit import Audit, audit_job
  from recon_jax.job.settings import JobConfig

  fields = {k: cfg[k] for k in Audit.__dataclass_fields__}
  try:
    settings = audit_job(Audit(**fields), JobConfig(**cfg.job))
    return reconstruct.job(settings, workdir, resume=resume, overwrite=overwrite)
  except Error as e:  # name the audit's own setting where the library names its field
    e.argument = ALIASES.get(e.argument, e.argument)
    e.aliases = ALIASES  # and every setting its message names (victim.loss='ce' as loss)
    raise


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  cli.run(main, configs.path("audit"), "default", workdir="workdirs/audit")
