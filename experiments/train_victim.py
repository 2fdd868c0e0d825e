r"""Train a victim classifier and write its checkpoint with provenance.

  python -m experiments.train_victim --dataset=digits --n_per_class=25 --workdir=/tmp/victim
  python -m experiments.train_victim --dataset=mnist --data_dir=~/data/mnist \
      --n_per_class=250 --widths=1000,1000 --epochs=1000000 --victim_lr=0.01 --workdir=/tmp/mnist

Writes victim.msgpack (parameters + architecture + data provenance, no pickle),
config.json, metrics.json (final train loss, train error, test accuracy,
epochs run, margins), history.json and train_idx.npz.
"""
from absl import app, flags, logging

from experiments import common
from experiments.victim_flags import define_victim_flags, victim_config_from_flags
from recon_jax import train, victim

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "workdirs/victim", "Output folder (must be empty).")
flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.")
flags.DEFINE_bool("verbose", False, "Show tracebacks on errors.")
flags.DEFINE_string("data_dir", None, "Folder with CIFAR-10/MNIST files (not downloaded).")
flags.DEFINE_bool("x64", False, "Train in float64.")
define_victim_flags()


def run(cfg: victim.VictimConfig, workdir: str, data_dir=None) -> dict:
  ds = victim.load_data(cfg, data_dir)
  common.write_json(workdir, "config.json", {"victim": cfg.to_dict(), "data_dir": data_dir,
                                             "environment": common.environment()})
  try:
    params, history, summary = victim.fit(cfg, ds)
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
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite)
    m = run(cfg, workdir, FLAGS.data_dir)
    print(f"wrote {workdir}: loss {m['loss']:.3g}, train error {m['train_error']:.3g}, "
          f"test accuracy {m.get('test_accuracy', float('nan')):.3f}, epochs {m['epochs_run']}")

  common.main_guard(job, FLAGS.verbose)


if __name__ == "__main__":
  app.run(main)
