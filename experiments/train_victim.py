r"""Train a victim classifier and write its checkpoint with provenance.

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits \
      --workdir=/tmp/victim
  python -m experiments.train_victim --config.victim.dataset=mnist --config.data_dir=~/data/mnist \
      --config.victim.n_per_class=250 --config.victim.widths=1000,1000 \
      --config.victim.epochs=1000000 --config.victim.lr=0.01 --workdir=/tmp/mnist

Writes victim.msgpack (parameters + architecture + data provenance, no pickle),
config.json, metrics.json (final train loss, train error, test accuracy,
epochs run, margins), history.json and train_idx.npz; train_state.msgpack
while it runs (--resume continues from it).  Exit code 0: done (a victim that
did not learn its training set is written with a warning); 1: a setting or
file it cannot use, in one line naming it, or training diverged; 130:
interrupted (Ctrl-C).
"""

import sys

from absl import flags, logging

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "train_state.msgpack"


def prepare(cfg):
  """Paths expanded, settings validated (nothing written): returns the VictimConfig."""
  from recon_jax import pipeline

  cfg.data_dir = common.expand(cfg.data_dir)
  for name in ("chunk_epochs", "save_every"):
    low = 1 if name == "chunk_epochs" else 0
    if isinstance(cfg[name], bool) or not isinstance(cfg[name], int) or cfg[name] < low:
      raise common.UserError(
        f"--config.{name} must be an integer >= {low}"
        f"{' (0: never)' if low == 0 else ''}, got {cfg[name]!r}."
      )
  pipeline.check_widths(cfg)
  vcfg = pipeline.victim_config(cfg)
  pipeline.validate_victim(vcfg)
  pipeline.check_data_dir(vcfg, cfg.data_dir)
  return vcfg


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Trains ``cfg.victim`` and writes the checkpoint and its report into ``workdir``.

  A victim that did not learn its training set is still written; metrics.json
  says so (``warning``) and so does a line on stderr.
  """
  from recon_jax import pipeline, train, victim

  vcfg = prepare(cfg)
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
  ds = victim.load_data(vcfg, cfg.data_dir or None)
  state_path = common.inside(workdir, STATE_FILE)
  resume_from = None
  if resume:
    resume_from = victim.load_training(state_path, vcfg, ds, cfg.chunk_epochs)
    logging.info(
      "resuming phase %d at epoch %d", resume_from["phase"], int(resume_from["state"].step)
    )
  else:
    common.write_json(workdir, "config.json", {"config": cfg, "environment": common.environment()})
  chunks = [0]

  def on_chunk(phase, state, histories):
    chunks[0] += 1
    if cfg.save_every and chunks[0] % cfg.save_every == 0:
      victim.save_training(state_path, phase, state, histories, cfg.chunk_epochs)

  try:
    params, history, summary = victim.fit(
      vcfg, ds, chunk=cfg.chunk_epochs, on_chunk=on_chunk, resume_from=resume_from
    )
  except train.TrainError as e:
    if e.params is not None:  # keep the last finite parameters for inspection
      victim.save(
        common.inside(workdir, "victim_last_finite.msgpack"), vcfg, ds, e.params, {"error": str(e)}
      )
    e.argument = "victim.lr"  # the error line names the setting to change
    raise
  victim.save(common.inside(workdir, "victim.msgpack"), vcfg, ds, params, summary)
  metrics = {k: v for k, v in summary.items() if k != "outputs"}
  metrics["warning"] = pipeline.victim_warning(summary, vcfg.loss, ds.num_classes)
  if metrics["warning"]:
    print(f"warning: {metrics['warning']}", file=sys.stderr)
  common.write_json(workdir, "metrics.json", metrics)
  common.write_json(workdir, "history.json", history)
  common.write_npz(workdir, "train_idx.npz", train_idx=ds.train_idx, mean=ds.mean)
  return metrics


def job(cfg, workdir: str, *, resume: bool = False, overwrite: bool = False) -> dict:
  """What the binary does once its flags are parsed; returns metrics.json's dict.

  Everything is checked before the workdir is created or touched.
  """
  common.configure_precision(cfg.x64)
  prepare(cfg)
  if resume:  # before prepare_workdir, which would create a missing folder
    common.check_resumable(cfg, workdir, STATE_FILE)
  workdir = common.prepare_workdir(workdir, overwrite or resume)
  m = run(cfg, workdir, resume=resume)
  print(
    f"wrote {workdir}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
    f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}"
  )
  return m


def main(cfg):
  """The command line: flags -> job."""
  job(cfg, FLAGS.workdir, resume=FLAGS.resume, overwrite=FLAGS.overwrite)


if __name__ == "__main__":
  common.define_flags("victim", "lfw", workdir="workdirs/victim")
  common.run_main(main)
