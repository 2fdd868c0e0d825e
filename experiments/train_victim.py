r"""Train a victim classifier and write its checkpoint with provenance.

  python -m experiments.train_victim --dataset=digits --n_per_class=25 --workdir=/tmp/victim
  python -m experiments.train_victim --dataset=mnist --data_dir=~/data/mnist \
      --n_per_class=250 --widths=1000,1000 --epochs=1000000 --victim_lr=0.01 --workdir=/tmp/mnist

Writes victim.msgpack (parameters + architecture + data provenance, no pickle),
config.json, metrics.json (final train loss, train error, test accuracy,
epochs run, margins), history.json and train_idx.npz.
"""
import json
import os

import jax
from absl import app, flags, logging

from experiments import common
from experiments.victim_flags import define_victim_flags, victim_config_from_flags
from recon_jax import checkpoint, models, resume, train, victim

STATE = "train_state.msgpack"

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "workdirs/victim", "Output folder (must be empty).")
flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")
flags.DEFINE_string("data_dir", None, "Folder with CIFAR-10/MNIST files (not downloaded).")
flags.DEFINE_bool("x64", False, "Train in float64.")
flags.DEFINE_integer("chunk_epochs", 2000, "Epochs per compiled chunk (between logs/saves).")
flags.DEFINE_integer("save_every", 1, "Save train_state.msgpack every N chunks (0: never).")
flags.DEFINE_bool("resume", False, "Continue from --workdir/train_state.msgpack.")
define_victim_flags()


def _template(cfg: victim.VictimConfig, ds, phase: int, chunk: int):
  module, _ = victim.build(cfg, ds)
  dtype = "float64" if jax.config.jax_enable_x64 else "float32"
  params = jax.eval_shape(lambda: models.init_params(module, jax.random.PRNGKey(0),
                                                     ds.x_train.shape[1:], dtype))
  tcfg = victim.phase_configs(cfg, chunk)[phase]
  return {"state": jax.eval_shape(lambda: train.init_state(params, tcfg))}


def load_resume(cfg: victim.VictimConfig, ds, workdir: str, chunk: int) -> dict:
  """The saved training state of ``workdir``, checked against this run's flags."""
  path = common.inside(workdir, STATE)
  if not os.path.isfile(path):
    raise common.UserError(f"--resume: {path} not found; nothing to resume.")
  try:
    with open(common.inside(workdir, "config.json")) as f:
      saved_cfg = json.load(f)["victim"]
  except (OSError, ValueError, KeyError):
    raise common.UserError(f"--resume: {workdir}/config.json is missing or corrupt.") from None
  if saved_cfg != cfg.to_dict():
    diff = sorted(k for k in saved_cfg if saved_cfg.get(k) != cfg.to_dict().get(k))
    raise common.UserError(f"--resume: the flags differ from {workdir}/config.json in "
                           f"{', '.join(diff[:5])}; resume with the same flags.")
  with open(path, "rb") as f:
    _, meta = checkpoint.read_blob(f.read(), path, resume.FORMAT, "state file")
  if meta.get("chunk") != chunk:
    raise common.UserError(f"--resume: --chunk_epochs={chunk} differs from the saved run's "
                           f"{meta.get('chunk')}.")
  tree, meta = resume.load(path, _template(cfg, ds, int(meta["phase"]), chunk))
  return {"phase": meta["phase"], "state": tree["state"], "histories": meta["histories"]}


def run(cfg: victim.VictimConfig, workdir: str, data_dir=None, *, chunk: int = 2000,
        save_every: int = 1, resume_run: bool = False) -> dict:
  if chunk <= 0:
    raise common.UserError(f"--chunk_epochs must be > 0, got {chunk}.")
  if save_every < 0:
    raise common.UserError(f"--save_every must be >= 0 (0: never), got {save_every}.")
  ds = victim.load_data(cfg, data_dir)
  resume_from = load_resume(cfg, ds, workdir, chunk) if resume_run else None
  if resume_from is None:
    common.write_json(workdir, "config.json", {"victim": cfg.to_dict(), "data_dir": data_dir,
                                               "environment": common.environment()})
  else:
    logging.info("resuming phase %d at epoch %d", resume_from["phase"],
                 int(resume_from["state"].step))
  n_chunks = [0]

  def on_chunk(phase, state, histories):
    n_chunks[0] += 1
    if save_every and n_chunks[0] % save_every == 0:
      resume.save(common.inside(workdir, STATE), {"state": state},
                  {"phase": phase, "histories": histories, "chunk": chunk})

  try:
    params, history, summary = victim.fit(cfg, ds, chunk=chunk, on_chunk=on_chunk,
                                          resume_from=resume_from)
  except train.TrainError as e:
    if e.params is not None:  # keep the last finite parameters for inspection
      victim.save(common.inside(workdir, "victim_last_finite.msgpack"), cfg, ds, e.params,
                  {"error": str(e)})
    raise common.UserError(str(e)) from None
  victim.save(common.inside(workdir, "victim.msgpack"), cfg, ds, params, summary)
  metrics = {k: v for k, v in summary.items() if k != "outputs"}
  common.write_json(workdir, "metrics.json", metrics)
  common.write_json(workdir, "history.json", history)
  common.write_npz(workdir, "train_idx.npz", train_idx=ds.train_idx, mean=ds.mean)
  return metrics


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)

  def job():
    common.configure_precision(FLAGS.x64)
    cfg = victim_config_from_flags(victim.VictimConfig())
    if FLAGS.resume and not os.path.isdir(FLAGS.workdir):
      raise common.UserError(f"--resume: --workdir {FLAGS.workdir} does not exist.")
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    m = run(cfg, workdir, FLAGS.data_dir, chunk=FLAGS.chunk_epochs,
            save_every=FLAGS.save_every, resume_run=FLAGS.resume)
    print(f"wrote {workdir}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
          f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}")

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
