r"""Audit a model you have, on the data you have: does it leak its training images?

  python -m experiments.audit --config.model=model.safetensors --config.train=train/ \
      --config.heldout=heldout/ --workdir=audit
  python -m experiments.audit --config.model=model.pt --config.theta0=init.pt \
      --config.train=train.npz --config.heldout=heldout.npz --workdir=audit_finetuned

The model: a PyTorch state dict or safetensors file of Linear/Conv2d layers, weights [out,
in]; the images: an ImageFolder folder (one subfolder per class, the second in sorted order
the positive one), an .npz with x and y, or MNIST/CIFAR files.  With --config.theta0 (the
weights training started from) the known-weights attack runs, else Haim et al.'s on theta*
alone.  These settings are the main job's threat section
(recon_jax.job.settings.Threat) and the model's loss; --config.job.* are the job's others.
Writes what the main job writes (report.md first); the last line is the verdict with its
reason.  Exit codes as experiments.reconstruct.
"""

from experiments import starting

starting("audit")  # SIGINT and SIGTERM heard from here on, before JAX loads

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402

FLAGS = flags.FLAGS


def job(cfg, workdir: str, *, resume=False, overwrite=False):
  """What the binary does once its flags are parsed; returns the report (typed)."""
  from recon_jax.job.audit import audit_job, threat_of
  from recon_jax.job.settings import JobConfig

  settings = audit_job(threat_of(cfg), cfg.loss, JobConfig(**cfg.job))
  return cli.main_job(settings, workdir, resume=resume, overwrite=overwrite, spoken=cfg)


def main(cfg):
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  cli.run(main, configs.path("audit"), "default", workdir="workdirs/audit")
