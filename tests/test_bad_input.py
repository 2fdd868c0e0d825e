"""Bad input, as a user would give it: every case exits 1 with ONE line 'error: ...'.

Each case runs a binary in a subprocess (``python -m experiments.<name>``) and
checks that it fails with exit code 1, that stderr holds exactly one line
starting with ``error:``, as its last line, naming the flag or file, and that
no traceback is shown (unless ``--verbose``).  Nearly all cases fail in
validation, before any training; where a victim is needed it is the tiny one,
cached under a temporary RECON_JAX_CACHE.  The cases are listed in
docs/bad_input.md.
"""
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from recon_jax import checkpoint, data, models, victim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_VICTIM = victim.VictimConfig(dataset="digits", n_per_class=3, widths=(32, 32), epochs=400)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A data_dir with a truncated MNIST file, one with a corrupt CIFAR file, checkpoints."""
  tmp = tmp_path_factory.mktemp("bad_input")
  rng = np.random.default_rng(0)
  mnist = tmp / "mnist"
  mnist.mkdir()
  for prefix, n in (("train", 40), ("t10k", 20)):
    data.write_idx(mnist / f"{prefix}-images-idx3-ubyte",
                   rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
    data.write_idx(mnist / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
  path = mnist / "train-images-idx3-ubyte"
  path.write_bytes(path.read_bytes()[:-1000])  # truncated
  cifar = tmp / "cifar"
  cifar.mkdir()
  for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    data.write_cifar10_bin(cifar / name, rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8),
                           np.arange(10) % 10)
  path = cifar / "data_batch_3.bin"
  path.write_bytes(path.read_bytes()[:-7])  # not a whole number of records

  ds = victim.load_data(TINY_VICTIM)
  module, _ = victim.build(TINY_VICTIM, ds)
  params = models.init_params(module, jax.random.PRNGKey(0), ds.x_train.shape[1:], np.float32)
  good = tmp / "victim.msgpack"
  victim.save(str(good), TINY_VICTIM, ds, params, {"loss": 0.1})
  (tmp / "truncated.msgpack").write_bytes(good.read_bytes()[:-100])
  (tmp / "random.msgpack").write_bytes(np.random.default_rng(1).bytes(4096))
  nan_params = jax.tree_util.tree_map(np.array, params)
  leaf = jax.tree_util.tree_leaves(nan_params)[0]
  leaf.flat[0] = np.nan
  victim.save(str(tmp / "nan.msgpack"), TINY_VICTIM, ds, nan_params, {"loss": 0.1})
  inf_params = jax.tree_util.tree_map(np.array, params)
  jax.tree_util.tree_leaves(inf_params)[-1].flat[0] = np.inf
  victim.save(str(tmp / "inf.msgpack"), TINY_VICTIM, ds, inf_params, {"loss": 0.1})
  # Parameters of a 16-16 net under the meta of a 32-32 one.
  other = victim.VictimConfig(dataset="digits", n_per_class=3, widths=(16, 16))
  om, _ = victim.build(other, ds)
  oparams = models.init_params(om, jax.random.PRNGKey(0), ds.x_train.shape[1:], np.float32)
  checkpoint.save(str(tmp / "other_arch.msgpack"), oparams,
                  {"victim": TINY_VICTIM.to_dict(), "summary": {}})
  checkpoint.save(str(tmp / "no_meta.msgpack"), params, {"hello": 1})
  full = tmp / "full"
  full.mkdir()
  (full / "keep.txt").write_text("precious results")
  return tmp


def _run(binary, args, tmp, case_id):
  workdir = tmp / f"wd_{case_id}"
  argv = [sys.executable, "-m", f"experiments.{binary}", *args]
  if not any(a.startswith("--workdir") for a in args):
    argv.append(f"--workdir={workdir}")
  env = dict(os.environ, RECON_JAX_CACHE=str(tmp / "cache"), JAX_PLATFORMS="cpu",
             MPLBACKEND="Agg")
  return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def _check(proc, must_name):
  err = proc.stderr.strip().splitlines()
  errors = [l for l in err if l.startswith("error:")]
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert len(errors) == 1 and err[-1] == errors[0], proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  for s in must_name:
    assert s in errors[0], (s, errors[0])
  return errors[0]


# (id, binary, flags, substrings the error line must contain). {d} is the tmp folder.
R, T, I, TOY = "reconstruct", "train_victim", "init_study", "toy_2d"
TINY = ["--preset=tiny", "--nocache"]
CASES = [
    ("unknown_dataset", T, ["--dataset=imagenet"], ["--dataset", "imagenet"]),
    ("unknown_dataset_reconstruct", R, TINY + ["--dataset=imagenet"], ["--dataset", "imagenet"]),
    ("unknown_attack", R, TINY + ["--attack=gradient"], ["--attack", "gradient"]),
    ("unknown_arch", T, ["--dataset=digits", "--arch=resnet"], ["--arch", "resnet"]),
    ("unknown_arch_reconstruct", R, TINY + ["--arch=resnet"], ["--arch", "resnet"]),
    ("unknown_loss", T, ["--dataset=digits", "--loss=hinge"], ["--loss", "hinge"]),
    ("unknown_init", R, TINY + ["--init=zeros"], ["--init", "zeros"]),
    ("mnist_without_data_dir", T, ["--dataset=mnist"], ["--data_dir", "mnist"]),
    ("cifar10_without_data_dir", R, TINY + ["--dataset=cifar10"], ["--data_dir", "cifar10"]),
    ("data_dir_missing", T, ["--dataset=mnist", "--data_dir={d}/nowhere"],
     ["--data_dir", "nowhere"]),
    ("mnist_truncated", T, ["--dataset=mnist", "--data_dir={d}/mnist", "--n_per_class=1"],
     ["train-images-idx3-ubyte"]),
    ("cifar10_corrupt", T, ["--dataset=cifar10", "--data_dir={d}/cifar", "--n_per_class=1"],
     ["data_batch_3.bin"]),
    ("checkpoint_truncated", R, TINY + ["--checkpoint={d}/truncated.msgpack"],
     ["truncated.msgpack", "truncated"]),
    ("checkpoint_random_bytes", R, TINY + ["--checkpoint={d}/random.msgpack"],
     ["random.msgpack", "not a recon_jax checkpoint"]),
    ("checkpoint_missing", R, TINY + ["--checkpoint={d}/absent.msgpack"],
     ["absent.msgpack", "not found"]),
    ("checkpoint_nan", R, TINY + ["--checkpoint={d}/nan.msgpack"], ["nan.msgpack", "NaN"]),
    ("checkpoint_inf", R, TINY + ["--checkpoint={d}/inf.msgpack"], ["inf.msgpack", "NaN/Inf"]),
    ("checkpoint_widths_contradict", R, TINY + ["--checkpoint={d}/victim.msgpack",
                                                "--widths=64,64"],
     ["--widths", "victim.msgpack"]),
    ("checkpoint_other_arch", R, TINY + ["--checkpoint={d}/other_arch.msgpack"],
     ["other_arch.msgpack", "architecture mismatch"]),
    ("checkpoint_no_victim_meta", R, TINY + ["--checkpoint={d}/no_meta.msgpack"],
     ["no_meta.msgpack", "victim"]),
    ("lr_x_negative", R, TINY + ["--lr_x=-0.1"], ["--lr_x"]),
    ("lr_x_zero", R, TINY + ["--lr_x=0"], ["--lr_x"]),
    ("lr_x_garbage", R, TINY + ["--lr_x=fast"], ["--lr_x", "fast"]),
    ("victim_lr_zero", T, ["--dataset=digits", "--victim_lr=0"], ["--victim_lr"]),
    ("steps_zero", R, TINY + ["--steps=0"], ["--steps"]),
    ("steps_negative", R, TINY + ["--steps=-5"], ["--steps"]),
    ("refine_steps_negative", R, TINY + ["--refine_steps=-1"], ["--refine_steps"]),
    ("refine_alpha_zero", R, TINY + ["--refine_steps=5", "--refine_alpha=0"], ["--refine_alpha"]),
    ("epochs_negative", T, ["--dataset=digits", "--epochs=-1"], ["--epochs"]),
    ("num_restarts_zero", R, TINY + ["--num_restarts=0"], ["--num_restarts"]),
    ("m_negative", R, TINY + ["--m=-4"], ["--m"]),
    ("m_odd_binary", R, TINY + ["--m=7"], ["--m", "even"]),
    ("m_not_multiple_of_classes", R, TINY + ["--loss=ce", "--m=15"], ["--m=15", "10 classes"]),
    ("save_every_negative", R, TINY + ["--save_every=-1"], ["--save_every"]),
    ("inversion_with_ce", R, TINY + ["--attack=inversion", "--loss=ce"],
     ["--attack=inversion", "binary"]),
    ("resume_without_state", R, TINY + ["--resume", "--workdir={d}/full"],
     ["--resume", "state.msgpack"]),
    ("resume_missing_workdir", R, TINY + ["--resume", "--workdir={d}/nowhere"],
     ["--resume", "nowhere"]),
    ("workdir_not_empty", R, TINY + ["--workdir={d}/full"], ["--workdir", "--overwrite"]),
    ("toy_n_train_odd", TOY, ["--n_train=3"], ["--n_train", "3"]),
    ("init_study_wd_zero", I, ["--quick", "--wd=0"], ["--wd"]),
    ("init_study_wd_negative", I, ["--quick", "--wd=-1"], ["--wd"]),
    ("init_study_unknown_dataset", I, ["--quick", "--dataset=imagenet"],
     ["--dataset", "imagenet"]),
    ("init_study_resume_without_config", I, ["--quick", "--resume", "--workdir={d}/full"],
     ["--resume", "config.json"]),
    ("workdir_is_a_file", T, ["--dataset=digits", "--workdir={d}/full/keep.txt"],
     ["--workdir", "keep.txt"]),
]


@pytest.mark.parametrize("case_id,binary,args,must_name", CASES, ids=[c[0] for c in CASES])
def test_bad_input(files, case_id, binary, args, must_name):
  args = [a.format(d=files) for a in args]
  line = _check(_run(binary, args, files, case_id), must_name)
  print(f"{binary} {' '.join(args)}\n  -> {line}")
  assert (files / "full" / "keep.txt").read_text() == "precious results"
  assert sorted(os.listdir(files / "full")) == ["keep.txt"]


def test_verbose_shows_the_traceback(files):
  proc = _run(R, TINY + ["--attack=gradient", "--verbose"], files, "verbose")
  assert proc.returncode == 1
  assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_workdir_not_writable(files):
  locked = files / "locked"
  locked.mkdir(exist_ok=True)
  os.chmod(locked, 0o500)
  try:
    _check(_run(T, ["--dataset=digits", f"--workdir={locked}/run"], files, "locked"),
           ["--workdir", "not writable"])
  finally:
    os.chmod(locked, 0o700)
