r"""Train a victim classifier and write its checkpoint with provenance.

  python -m experiments.train_victim --config=experiments/configs/victim.py:digits \
      --workdir=/tmp/victim
  python -m experiments.train_victim --config.victim.dataset=mnist --config.data_dir=~/data/mnist \
      --config.victim.n_per_class=250 --config.victim.widths=1000,1000 \
      --config.victim.epochs=1000000 --config.victim.lr=0.01 --workdir=/tmp/mnist

Writes victim.msgpack (parameters + architecture + data provenance, no pickle),
config.json, metrics.json (final train loss, train error, test accuracy,
epochs run, margins), history.json and train_idx.npz; train_state.msgpack
while it runs (--resume continues from it).
"""
from absl import app, flags, logging

from experiments import common

FLAGS = flags.FLAGS
STATE_FILE = "train_state.msgpack"


def run(cfg, workdir: str, *, resume: bool = False) -> dict:
  """Trains ``cfg.victim`` and writes the checkpoint and its report into ``workdir``."""
  from recon_jax import pipeline, train, victim
  vcfg = pipeline.victim_config(cfg)
  cfg.data_dir = common.expand(cfg.data_dir)
  if cfg.chunk_epochs <= 0:
    raise common.UserError(f"--config.chunk_epochs must be > 0, got {cfg.chunk_epochs}.")
  if cfg.save_every < 0:
    raise common.UserError(f"--config.save_every must be >= 0 (0: never), got {cfg.save_every}.")
  ds = victim.load_data(vcfg, cfg.data_dir or None)
  state_path = common.inside(workdir, STATE_FILE)
  resume_from = None
  if resume:
    common.check_resumable(cfg, workdir, STATE_FILE)
    resume_from = victim.load_training(state_path, vcfg, ds, cfg.chunk_epochs)
    logging.info("resuming phase %d at epoch %d", resume_from["phase"],
                 int(resume_from["state"].step))
  else:
    common.write_json(workdir, "config.json", {"config": cfg, "environment":
                                               common.environment()})
  chunks = [0]

  def on_chunk(phase, state, histories):
    chunks[0] += 1
    if cfg.save_every and chunks[0] % cfg.save_every == 0:
      victim.save_training(state_path, phase, state, histories, cfg.chunk_epochs)

  try:
    params, history, summary = victim.fit(vcfg, ds, chunk=cfg.chunk_epochs, on_chunk=on_chunk,
                                          resume_from=resume_from)
  except train.TrainError as e:
    if e.params is not None:  # keep the last finite parameters for inspection
      victim.save(common.inside(workdir, "victim_last_finite.msgpack"), vcfg, ds, e.params,
                  {"error": str(e)})
    raise
  victim.save(common.inside(workdir, "victim.msgpack"), vcfg, ds, params, summary)
  metrics = {k: v for k, v in summary.items() if k != "outputs"}
  common.write_json(workdir, "metrics.json", metrics)
  common.write_json(workdir, "history.json", history)
  common.write_npz(workdir, "train_idx.npz", train_idx=ds.train_idx, mean=ds.mean)
  return metrics


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  cfg = FLAGS.config

  def job():
    common.configure_precision(cfg.x64)
    if FLAGS.resume:
      common.check_resumable(cfg, FLAGS.workdir, STATE_FILE)
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    m = run(cfg, workdir, resume=FLAGS.resume)
    print(f"wrote {workdir}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
          f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}")

  common.main_guard(job, cfg, FLAGS.verbose)


if __name__ == "__main__":
  common.define_flags("victim", "lfw", workdir="workdirs/victim")
  app.run(main)
