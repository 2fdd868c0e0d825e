"""Bad input, as a user gives it: ONE line naming the setting or file, and the right exit code.

Most cases run in-process, as the binary does once its flags are parsed: the
config of a preset (``get_config``) with one setting changed goes through
``cli.main_guard(lambda: module.job(cfg, workdir), cfg)``, which must exit 1
with exactly one stderr line ``error: ...`` naming the setting (or file), and
leave the workdir uncreated: every case is refused before anything is written
or trained.  What only the command line can show (flag parsing, ``--help`` and Ctrl-C) runs
through the binary's flag code: one subprocess per binary, all started together at
the beginning (they overlap the in-process cases), the other command lines
in-process through ``cli.define_flags`` and ``cli.parse_flags``.  Every case is
listed in docs/bad_input.md.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

from flax import serialization
import jax
import numpy as np
import pytest
from test_metrics_json import assert_round_trip

from experiments import reconstruct, train_victim
from experiments.configs import reconstruct as recon_configs
from experiments.configs import victim as victim_configs
from recon_jax import cli, data
from recon_jax.errors import ConfigError
from recon_jax.io import checkpoint
from recon_jax.io import workdir as wd
from recon_jax.job import planning
from recon_jax.victims import models, recipe, trained

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = victim_configs.get_config("tiny").victim
TINY_VICTIM = recipe.VictimConfig(**{**TINY.to_dict(), "widths": tuple(TINY.widths)})
R, T = reconstruct, train_victim


# ----------------------------------------------------------------------------- subprocesses


def _env(tmp):
  env = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg", RECON_JAX_CACHE=str(tmp / "cache"))
  return env


# One true subprocess per binary (each pays JAX's import); the other command lines run
# in-process through the same code, ``cli.define_flags`` then ``cli.parse_flags`` (IN_PROCESS).
SUBPROCESSES = {
  "help_train_victim": ["experiments.train_victim", "--helpshort"],
  "help_toy_2d": ["experiments.toy_2d", "-?"],
  "distributed_on_one_host": [
    "experiments.reconstruct",
    "--config=experiments/configs/reconstruct.py:tiny",
    "--config.runtime.distributed=True",
  ],
}


IN_PROCESS = {
  "help_reconstruct": ["experiments.reconstruct", "--help"],
  "flag_not_an_int": ["experiments.reconstruct", "--config.search.num_restarts=abc"],
  "flag_unknown_setting": ["experiments.train_victim", "--config.victim.widht=3"],
  # names from before 0.2.0, read then with a notice: refused as any unknown setting
  "former_flag": ["experiments.reconstruct", "--config.checkpoint=m.pt"],
  "former_flag_audit": ["experiments.audit", "--config.model=m.pt", "--config.job.steps=3"],
}
# each binary's default config file and preset, as its ``cli.run`` names them
BINARY_CONFIGS = {
  "experiments.reconstruct": ("reconstruct", "finetune"),
  "experiments.train_victim": ("victim", "lfw"),
  "experiments.audit": ("audit", "default"),
}

COMMAND_LINE_TESTS = ("test_help_", "test_command_line_", "test_ctrl_c_")


def _in_process(name, tmp, monkeypatch, capsys):
  """A command line of IN_PROCESS as its binary reads it before any work (``cli.run``'s
  ``define_flags`` and ``parse_flags``), on fresh flags: (exit code, stdout, stderr, workdir)."""
  from absl import flags

  from experiments import configs

  module, *args = IN_PROCESS[name]
  config, preset = BINARY_CONFIGS[module]
  argv = [module.replace(".", "/") + ".py", *args, f"--workdir={tmp / name}"]
  monkeypatch.setattr(cli, "FLAGS", flags.FlagValues())
  monkeypatch.setattr(cli.signals, "install", lambda *a, **k: None)  # pytest keeps its Ctrl-C
  capsys.readouterr()
  code = 0
  try:
    cli.define_flags(configs.path(config), preset, argv=argv)
    cli.parse_flags(argv)
  except SystemExit as e:
    code = e.code
  out, err = capsys.readouterr()
  return code, out, err, tmp / name


@pytest.fixture(scope="module", autouse=True)
def procs(request, tmp_path_factory):
  """Every subprocess case, started with the module's first test; ``procs(name)`` waits for it.

  They run while the in-process cases do; their tests come last.  Nothing is
  started when none of them was selected.
  """
  tmp = tmp_path_factory.mktemp("subprocesses")
  started, results = {}, {}
  selected = [item.name for item in request.session.items]
  if not any(name.startswith(COMMAND_LINE_TESTS) for name in selected):
    yield None
    return
  # The --help and command-line cases start at once; the Ctrl-C run when its test asks.
  eager = any(name.startswith(COMMAND_LINE_TESTS[:2]) for name in selected)
  for name, (module, *args) in SUBPROCESSES.items() if eager else ():
    started[name] = subprocess.Popen(
      [sys.executable, "-m", module, *args, f"--workdir={tmp / name}"],
      cwd=ROOT,
      env=_env(tmp),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
  # Ctrl-C in a long run (a victim trained for 10^8 epochs), started when its test asks for
  # it and interrupted once its state file exists. Its log goes to a file, not a pipe.
  work = tmp / "interrupted"
  sigint_log = open(tmp / "sigint.stderr", "w+")

  def start_sigint():
    # A test run started in the background (``cmd &`` without job control, nohup) ignores
    # SIGINT, and a child inherits an ignored signal, so its Python never raises
    # KeyboardInterrupt; a handled signal is reset to the default at exec.  So the parent
    # handles SIGINT while the child starts (no preexec_fn: a fork hook warns under JAX).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
      return subprocess.Popen(
        [
          sys.executable,
          "-m",
          "experiments.train_victim",
          "--config=experiments/configs/victim.py:tiny",
          "--config.victim.epochs=100000000",
          "--config.chunk_epochs=20",
          f"--workdir={work}",
        ],
        cwd=ROOT,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=sigint_log,
        text=True,
      )
    finally:
      signal.signal(signal.SIGINT, previous)

  def result(name):
    if name not in results:
      if name == "sigint":
        started[name] = start_sigint()
      proc = started[name]
      if name == "sigint":
        deadline = time.time() + 120
        while not (work / "train_state.msgpack").exists():
          assert proc.poll() is None, (tmp / "sigint.stderr").read_text()[-3000:]
          assert time.time() < deadline, "no train_state.msgpack after 120 s"
          time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        try:
          out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
          proc.kill()
          proc.communicate()
          sigint_log.seek(0)
          pytest.fail("no exit 120 s after Ctrl-C; its log ends: " + sigint_log.read()[-2000:])
        sigint_log.seek(0)
        results[name] = (proc.returncode, out, sigint_log.read(), tmp / name)
        return results[name]
      out, err = proc.communicate(timeout=120)
      results[name] = (proc.returncode, out, err, tmp / name)
    return results[name]

  yield result
  for name, proc in started.items():
    if name not in results:
      if proc.poll() is None:
        proc.kill()
      proc.communicate()
  sigint_log.close()


# ----------------------------------------------------------------------------- in-process


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """Data folders with a truncated MNIST and a corrupt CIFAR file; good and bad checkpoints."""
  tmp = tmp_path_factory.mktemp("bad_input")
  rng = np.random.default_rng(0)
  mnist = tmp / "mnist"
  mnist.mkdir()
  for prefix, n in (("train", 40), ("t10k", 20)):
    data.write_idx(
      mnist / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    )
    data.write_idx(mnist / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
  path = mnist / "train-images-idx3-ubyte"
  path.write_bytes(path.read_bytes()[:-1000])  # truncated
  cifar = tmp / "cifar"
  cifar.mkdir()
  for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    data.write_cifar10_bin(
      cifar / name, rng.integers(0, 256, (10, 32, 32, 3), dtype=np.uint8), np.arange(10) % 10
    )
  path = cifar / "data_batch_3.bin"
  path.write_bytes(path.read_bytes()[:-7])  # not a whole number of records

  ds = trained.load_data(TINY_VICTIM)
  module, _ = trained.build(TINY_VICTIM, ds)
  params = jax.tree_util.tree_map(
    np.array, models.init_params(module, jax.random.PRNGKey(0), ds.x_train.shape[1:], np.float32)
  )
  good = tmp / "victim.msgpack"
  trained.save(str(good), TINY_VICTIM, ds, params, {"loss": 0.1})
  (tmp / "truncated.msgpack").write_bytes(good.read_bytes()[:-100])
  (tmp / "random.msgpack").write_bytes(np.random.default_rng(1).bytes(4096))

  def variant(name, change=None, meta_change=None, leaf=0):
    p = jax.tree_util.tree_map(np.array, params)
    if change is not None:
      flat, tree = jax.tree_util.tree_flatten(p)
      flat[leaf] = change(flat[leaf])
      p = jax.tree_util.tree_unflatten(tree, flat)
    meta = {
      "victim": TINY_VICTIM.to_dict(),
      "train_idx": ds.train_idx.tolist(),
      "data_fingerprint": data.fingerprint(ds),
      "summary": {"loss": 0.1},
    }
    if meta_change is not None:
      meta_change(meta)
    blob = {"format": checkpoint.FORMAT, "params": p, "meta": json.dumps(meta)}
    (tmp / name).write_bytes(serialization.msgpack_serialize(blob))

  def put(a, i, v):
    a = a.copy()
    a.flat[i] = v
    return a

  variant("nan.msgpack", lambda a: put(a, 0, np.nan))
  variant("inf.msgpack", lambda a: put(a, 0, np.inf), leaf=-1)
  variant("text.msgpack", lambda a: "0.1 0.2 0.3")
  variant("complex.msgpack", lambda a: a.astype(np.complex64))
  p0 = jax.tree_util.tree_map(np.zeros_like, params)
  checkpoint.save(str(tmp / "zeros.msgpack"), p0, {"victim": TINY_VICTIM.to_dict(), "summary": {}})
  variant("meta_float.msgpack", meta_change=lambda m: m["victim"].update(n_per_class=3.5))
  variant("meta_text.msgpack", meta_change=lambda m: m["victim"].update(epochs="many"))
  # Parameters of a 16-16 net under the meta of a 32-32 one.
  other = recipe.VictimConfig(dataset="digits", n_per_class=3, widths=(16, 16))
  om, _ = trained.build(other, ds)
  oparams = models.init_params(om, jax.random.PRNGKey(0), ds.x_train.shape[1:], np.float32)
  checkpoint.save(
    str(tmp / "other_arch.msgpack"), oparams, {"victim": TINY_VICTIM.to_dict(), "summary": {}}
  )
  checkpoint.save(str(tmp / "no_meta.msgpack"), params, {"hello": 1})
  full = tmp / "full"
  full.mkdir()
  (full / "keep.txt").write_text("precious results")
  return tmp


def _config(binary, preset, settings):
  cfg = (recon_configs if binary is R else victim_configs).get_config(preset)
  for key, value in settings.items():
    *parents, name = key.split(".")
    target = cfg
    for part in parents:
      target = target[part]
    target[name] = value
  return cfg


def _refused(capsys, fn, cfg, code=1):
  """Runs ``fn`` under main_guard; returns its one stderr line (exit ``code``)."""
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.main_guard(fn, cfg)
  err = capsys.readouterr().err
  assert e.value.code == code, err[-3000:]
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
  return lines[0]


# (id, binary, preset, settings, substrings of the error line). {d}: the files fixture.
CASES = [
  # a setting that would change nothing: annealing the surrogate of a victim whose own
  # (smooth) derivative the attack uses
  (
    "anneal_exact_derivative",
    R,
    "tiny",
    {"victim.activation": "softplus", "search.anneal_alpha": 200.0},
    ["--config.search.anneal_alpha", "--config.kkt.derivative=surrogate"],
  ),
  # unknown names
  (
    "unknown_dataset",
    R,
    "tiny",
    {"victim.dataset": "imagenet"},
    ["--config.victim.dataset", "imagenet"],
  ),
  (
    "unknown_dataset_train",
    T,
    "tiny",
    {"victim.dataset": "imagenet"},
    ["--config.victim.dataset", "imagenet"],
  ),
  ("unknown_attack", R, "tiny", {"attack": "gradient"}, ["--config.attack", "gradient"]),
  ("unknown_arch", T, "tiny", {"victim.arch": "resnet"}, ["--config.victim.arch", "resnet"]),
  ("unknown_loss", T, "tiny", {"victim.loss": "hinge"}, ["--config.victim.loss", "hinge"]),
  ("unknown_init", R, "tiny", {"search.init": "zeros"}, ["--config.search.init ", "zeros"]),
  # Runkel et al.'s mixed start needs the weights only the init study draws
  (
    "init_mix_outside_the_study",
    R,
    "tiny",
    {"search.init": "mix"},
    ["--config.search.init", "mix"],
  ),
  ("unknown_victim_init", R, "tiny", {"victim.init": "zeros"}, ["--config.victim.init", "zeros"]),
  (
    "unknown_optimizer",
    R,
    "tiny",
    {"search.optimizer": "rmsprop"},
    ["--config.search.optimizer", "rmsprop"],
  ),
  # data
  (
    "mnist_without_data_dir",
    T,
    "tiny",
    {"victim.dataset": "mnist"},
    ["--config.data_dir", "mnist"],
  ),
  (
    "cifar10_without_data_dir",
    R,
    "tiny",
    {"victim.dataset": "cifar10"},
    ["--config.data_dir", "cifar10"],
  ),
  (
    "data_dir_missing",
    T,
    "tiny",
    {"victim.dataset": "mnist", "data_dir": "{d}/nowhere"},
    ["--config.data_dir", "nowhere", "no such directory"],
  ),
  (
    "mnist_truncated",
    T,
    "tiny",
    {"victim.dataset": "mnist", "data_dir": "{d}/mnist", "victim.n_per_class": 1},
    ["train-images-idx3-ubyte"],
  ),
  (
    "cifar10_corrupt",
    T,
    "tiny",
    {"victim.dataset": "cifar10", "data_dir": "{d}/cifar", "victim.n_per_class": 1},
    ["data_batch_3.bin"],
  ),
  # checkpoints
  (
    "checkpoint_truncated",
    R,
    "tiny",
    {"threat.model": "{d}/truncated.msgpack"},
    ["truncated.msgpack", "truncated"],
  ),
  (
    "checkpoint_random_bytes",
    R,
    "tiny",
    {"threat.model": "{d}/random.msgpack"},
    ["random.msgpack", "not a recognised checkpoint"],
  ),
  (
    "checkpoint_missing",
    R,
    "tiny",
    {"threat.model": "{d}/absent.msgpack"},
    ["absent.msgpack", "not found"],
  ),
  ("checkpoint_nan", R, "tiny", {"threat.model": "{d}/nan.msgpack"}, ["nan.msgpack", "NaN"]),
  ("checkpoint_inf", R, "tiny", {"threat.model": "{d}/inf.msgpack"}, ["inf.msgpack", "NaN/Inf"]),
  (
    "checkpoint_text_leaf",
    R,
    "tiny",
    {"threat.model": "{d}/text.msgpack"},
    ["text.msgpack", "not numeric"],
  ),
  (
    "checkpoint_complex",
    R,
    "tiny",
    {"threat.model": "{d}/complex.msgpack"},
    ["complex.msgpack", "complex"],
  ),
  (
    "checkpoint_all_zero",
    R,
    "tiny",
    {"threat.model": "{d}/zeros.msgpack"},
    ["zeros.msgpack", "every parameter is zero"],
  ),
  (
    "checkpoint_meta_not_integer",
    R,
    "tiny",
    {"threat.model": "{d}/meta_float.msgpack"},
    ["meta_float.msgpack", "n_per_class", "3.5"],
  ),
  (
    "checkpoint_meta_text",
    R,
    "tiny",
    {"threat.model": "{d}/meta_text.msgpack"},
    ["meta_text.msgpack", "epochs", "many"],
  ),
  (
    "checkpoint_other_arch",
    R,
    "tiny",
    {"threat.model": "{d}/other_arch.msgpack"},
    ["other_arch.msgpack", "architecture mismatch"],
  ),
  (
    "checkpoint_no_victim_meta",
    R,
    "tiny",
    {"threat.model": "{d}/no_meta.msgpack"},
    ["no_meta.msgpack", "victim"],
  ),
  # ranges
  ("lr_x_negative", R, "tiny", {"search.lr_x": "-0.1"}, ["--config.search.lr_x must be > 0"]),
  ("lr_x_zero", R, "tiny", {"search.lr_x": "0"}, ["--config.search.lr_x must be > 0"]),
  ("lr_x_garbage", R, "tiny", {"search.lr_x": "fast"}, ["--config.search.lr_x", "fast"]),
  ("lr_x_nan", R, "tiny", {"search.lr_x": "nan"}, ["--config.search.lr_x", "finite", "nan"]),
  ("lr_x_inf", R, "tiny", {"search.lr_x": "inf"}, ["--config.search.lr_x", "finite", "inf"]),
  (
    "alpha_range_to_inf",
    R,
    "tiny",
    {"search.alpha": "0.1:inf"},
    ["--config.search.alpha", "finite"],
  ),
  (
    "lam_min_range_nan",
    R,
    "tiny",
    {"search.lam_min": "nan:0.5"},
    ["--config.search.lam_min", "finite"],
  ),
  (
    "sigma_x_beyond_float32",
    R,
    "tiny",
    {"search.sigma_x": "1e300"},
    ["--config.search.sigma_x", "float32"],
  ),
  (
    "refine_alpha_zero",
    R,
    "tiny",
    {"search.refine_steps": 5, "search.refine_alpha": 0.0},
    ["--config.search.refine_alpha"],
  ),
  (
    "refine_alpha_nan",
    R,
    "tiny",
    {"search.refine_steps": 5, "search.refine_alpha": float("nan")},
    ["--config.search.refine_alpha", "nan"],
  ),
  (
    "paper_sweep_with_lr_x",
    R,
    "paper",
    {"search.lr_x": "0.1"},
    ["--config.search.sweep=paper", "--config.search.lr_x='0.1'", "replace"],
  ),
  # counts and sizes
  ("steps_zero", R, "tiny", {"search.steps": 0}, ["--config.search.steps"]),
  ("steps_negative", R, "tiny", {"search.steps": -5}, ["--config.search.steps", "-5"]),
  (
    "refine_steps_negative",
    R,
    "tiny",
    {"search.refine_steps": -1},
    ["--config.search.refine_steps"],
  ),
  ("num_restarts_zero", R, "tiny", {"search.num_restarts": 0}, ["--config.search.num_restarts"]),
  (
    "num_restarts_huge",
    R,
    "lfw",
    {"search.num_restarts": 1_000_000},
    ["--config.search.num_restarts=1000000", "GiB", "memory available on this machine"],
  ),
  (
    "num_restarts_over_limit",
    R,
    "tiny",
    {"search.num_restarts": 1_000_000, "runtime.max_memory_gb": 1.0},
    [
      "--config.search.num_restarts=1000000 needs at least 8.583 GiB",
      "more than the 1 GiB that --config.runtime.max_memory_gb=1 allows",
    ],
  ),
  (  # was "needs at least 0.0 GiB ... more than the 0.0 GiB max_memory_gb limit"
    "memory_limit_under_a_kib",
    R,
    "tiny",
    {"runtime.max_memory_gb": 0.000001},
    [
      "--config.search.num_restarts=2 needs at least 18 KiB for the restarts' state",
      "more than the 1.048 KiB that --config.runtime.max_memory_gb=1e-06 allows",
    ],
  ),
  ("m_negative", R, "tiny", {"search.m": -4}, ["--config.search.m", "-4"]),
  ("m_odd_binary", R, "tiny", {"search.m": 7}, ["--config.search.m", "even"]),
  ("save_every_negative", R, "tiny", {"runtime.save_every": -1}, ["--config.runtime.save_every"]),
  ("chunk_epochs_zero", T, "tiny", {"chunk_epochs": 0}, ["--config.chunk_epochs"]),
  # the victim's recipe
  ("victim_lr_zero", T, "tiny", {"victim.lr": 0.0}, ["--config.victim.lr must be"]),
  ("victim_lr_zero_reconstruct", R, "tiny", {"victim.lr": 0.0}, ["--config.victim.lr must be"]),
  ("epochs_negative", T, "tiny", {"victim.epochs": -1}, ["--config.victim.epochs"]),
  (
    "widths_not_integers",
    T,
    "tiny",
    {"victim.widths": ("64,abc",)},
    ["--config.victim.widths", "64,abc"],
  ),
  ("batch_size_negative", T, "tiny", {"victim.batch_size": -3}, ["--config.victim.batch_size"]),
  ("batch_size_zero", R, "tiny", {"victim.batch_size": 0}, ["--config.victim.batch_size"]),
  (
    "weight_decay_negative",
    T,
    "tiny",
    {"victim.weight_decay": -1.0},
    ["--config.victim.weight_decay"],
  ),
  ("wd_negative", T, "tiny", {"victim.wd": -1.0, "victim.wd_epochs": 5}, ["--config.victim.wd "]),
  ("momentum_one", T, "tiny", {"victim.momentum": 1.0}, ["--config.victim.momentum"]),
  ("data_seed_negative", R, "tiny", {"victim.data_seed": -1}, ["--config.victim.data_seed"]),
  ("seed_negative", R, "tiny", {"search.seed": -1}, ["--config.search.seed "]),
  (
    "seed_huge",
    R,
    "tiny",
    {"search.seed": 99999999999999999999},
    ["--config.search.seed ", "4294967295"],
  ),
  ("m_per_sample_zero", R, "tiny", {"search.m_per_sample": 0}, ["--config.search.m_per_sample "]),
  (
    "stability_candidates_negative",
    R,
    "tiny",
    {"evaluation.identify_stability_candidates": -1},
    ["--config.evaluation.identify_stability_candidates"],
  ),
  (
    "data_mean_without_checkpoint",
    R,
    "tiny",
    {"threat.data_mean": "/nonexistent/mean.npy"},
    ["--config.threat.data_mean", "ignored"],
  ),
  (
    "num_restarts_ten_billion",
    R,
    "tiny",
    {"search.num_restarts": 10_000_000_000},
    ["--config.search.num_restarts=10000000000 needs at least 83.82 TiB"],
  ),
  # the attacks' own settings (their specs)
  ("bilevel_without_weight_decay", R, "tiny", {"attack": "bilevel"}, ["weight decay"]),
  (
    "tied_multipliers_multiclass",
    R,
    "tiny",
    {"kkt.multipliers": "tied", "victim.loss": "ce", "victim.task": "multiclass"},
    ["--config.kkt.multipliers"],
  ),
  ("lm_without_subspace", R, "tiny", {"kkt.solver": "lm"}, ["--config.kkt.solver"]),
  ("unknown_derivative", R, "tiny", {"kkt.derivative": "fd"}, ["--config.kkt.derivative", "fd"]),
  (
    "converge_tol_without_weight_decay",
    T,
    "tiny",
    {"victim.converge_tol": 1e-8},
    ["--config.victim.converge_tol", "weight decay"],
  ),
  # the attack's settings
  (
    "ssim_threshold_above_1",
    R,
    "tiny",
    {"evaluation.ssim_threshold": 1.5},
    ["--config.evaluation.ssim_threshold"],
  ),
  (
    "ssim_threshold_zero",
    R,
    "tiny",
    {"evaluation.ssim_threshold": 0.0},
    ["--config.evaluation.ssim_threshold"],
  ),
  (
    "ssim_threshold_nan",
    R,
    "tiny",
    {"evaluation.ssim_threshold": float("nan")},
    ["--config.evaluation.ssim_threshold", "nan"],
  ),
  ("w_lam_negative", R, "tiny", {"kkt.w_lam": -1.0}, ["--config.kkt.w_lam"]),
  ("w_prior_negative", R, "tiny", {"w_prior": -0.5}, ["--config.w_prior"]),
  ("w_tv_negative", R, "tiny", {"kkt.w_tv": -0.5}, ["--config.kkt.w_tv"]),
  (
    "kkt_setting_for_another_attack",
    R,
    "tiny",
    {"attack": "closed_form", "kkt.multipliers": "tied"},
    ["--config.kkt.multipliers", "does not read it"],
  ),
  (
    "bilevel_setting_for_kkt",
    R,
    "tiny",
    {"bilevel.bilevel_inner_maxiter": 5},
    ["--config.bilevel.bilevel_inner_maxiter", "does not read it"],
  ),
  (
    "w_tv_on_points",
    R,
    "tiny",
    {"kkt.w_tv": 0.1, "victim.dataset": "toy2d"},
    ["--config.kkt.w_tv"],
  ),
  (
    "multiclass_on_binary_victim",
    R,
    "tiny",
    {"problem": "multiclass"},
    ["--config.problem=multiclass", "loss=ce", "logistic"],
  ),
  (
    "binary_on_ce_victim",
    R,
    "tiny",
    {"problem": "binary", "victim.loss": "ce", "search.m": 20},
    ["--config.problem=binary", "ce"],
  ),
  (
    "m_not_multiple_of_classes",
    R,
    "tiny",
    {"victim.loss": "ce", "search.m": 15},
    ["--config.search.m=15", "10 classes"],
  ),
  (
    "inversion_with_ce",
    R,
    "tiny",
    {"attack": "inversion", "victim.loss": "ce"},
    ["--config.attack=inversion", "binary"],
  ),
]


@pytest.mark.parametrize(
  "case_id, binary, preset, settings, must", CASES, ids=[c[0] for c in CASES]
)
def test_bad_setting_is_one_line_before_any_work(
  files, tmp_path, capsys, case_id, binary, preset, settings, must
):
  cfg = _config(
    binary, preset, {k: v.format(d=files) if isinstance(v, str) else v for k, v in settings.items()}
  )
  workdir = tmp_path / "out"
  given = {"explicit": settings} if binary is R else {}  # as the command line passes them
  line = _refused(capsys, lambda: binary.job(cfg, str(workdir), **given), cfg)
  for s in must:
    assert s.format(d=files) in line, (s, line)
  print(f"{case_id}: {line}")
  assert not workdir.exists()  # refused before the workdir was made
  assert not (tmp_path / "cache").exists()
  # A finished run's workdir is byte-identical after the refused run, even with overwrite.
  workdir.mkdir()
  (workdir / "config.json").write_text('{"config": {"finished": true}}')
  (workdir / "metrics.json").write_text('{"recovered_strict": 3}')
  before = _tree_hash(workdir)
  _refused(capsys, lambda: binary.job(cfg, str(workdir), overwrite=True, **given), cfg)
  assert _tree_hash(workdir) == before


def test_checkpoint_contradicting_a_victim_setting_names_both(files, tmp_path, capsys):
  cfg = _config(
    R, "tiny", {"threat.model": str(files / "victim.msgpack"), "victim.widths": (64, 64)}
  )
  line = _refused(
    capsys, lambda: R.job(cfg, str(tmp_path / "out"), explicit={"victim.widths": (64, 64)}), cfg
  )
  assert "--config.victim.widths" in line and "victim.msgpack" in line, line


def test_paper_sweep_with_a_range_set_to_its_default_on_the_command_line(tmp_path, capsys):
  cfg = _config(R, "paper", {})
  line = _refused(
    capsys,
    lambda: R.job(cfg, str(tmp_path / "out"), explicit={"search.alpha": cfg.search.alpha}),
    cfg,
  )
  assert "--config.search.alpha" in line and "--config.search.sweep=random" in line, line


def test_a_size_reads_true_in_its_unit():
  """A memory refusal said "needs at least 0.0 GiB ... more than the 0.0 GiB limit"."""
  from recon_jax.job.planning import size_text

  assert [size_text(n) for n in (0, 512, 18432, 2**19, 1.04 * 2**30, 3 * 2**40)] == [
    "0 bytes",
    "512 bytes",
    "18 KiB",
    "512 KiB",
    "1.04 GiB",
    "3 TiB",
  ]
  # two sizes compared that read alike in their unit: in bytes
  assert size_text(2**30 + 1, 2**30) == "1,073,741,825 bytes"
  assert size_text(2**30, 2**30 + 1) == "1,073,741,824 bytes"


def _tree_hash(folder):
  return {
    p: hashlib.sha256((folder / p).read_bytes()).hexdigest() for p in sorted(os.listdir(folder))
  }


@pytest.fixture
def float32_run(tmp_path):
  """A workdir as a float32 tiny run leaves it (its config.json; a state file)."""
  work = tmp_path / "run"
  work.mkdir()
  cfg = _config(R, "tiny", {})
  wd.write_json(str(work), "config.json", {"config": cfg, "environment": {}})
  (work / "state.msgpack").write_bytes(b"state of the run")
  (work / "metrics.json").write_text("{}")
  return work


@pytest.mark.parametrize(
  "mode, settings, must",
  [
    ("resume", {"runtime.x64": True}, ["--resume", "differs", "runtime.x64"]),
    ("resume", {"victim.epochs": 401}, ["--resume", "victim.epochs"]),
    ("overwrite", {"search.optimizer": "rmsprop"}, ["--config.search.optimizer"]),
    ("overwrite", {"victim.lr": -1.0}, ["--config.victim.lr"]),
    ("plain", {}, ["not empty", "--overwrite"]),
  ],
)
def test_refused_resume_or_overwrite_leaves_the_workdir_byte_identical(
  float32_run, capsys, mode, settings, must
):
  before = _tree_hash(float32_run)
  cfg = _config(R, "tiny", settings)
  line = _refused(
    capsys,
    lambda: R.job(cfg, str(float32_run), resume=mode == "resume", overwrite=mode == "overwrite"),
    cfg,
  )
  for s in must:
    assert s in line, (s, line)
  assert _tree_hash(float32_run) == before


def test_train_victim_refused_resume_leaves_the_workdir_byte_identical(tmp_path, capsys):
  work = tmp_path / "run"
  work.mkdir()
  wd.write_json(str(work), "config.json", {"config": _config(T, "tiny", {}), "environment": {}})
  (work / "train_state.msgpack").write_bytes(b"state")
  before = _tree_hash(work)
  cfg = _config(T, "tiny", {"x64": True})
  line = _refused(capsys, lambda: T.job(cfg, str(work), resume=True), cfg)
  assert "x64" in line and "--resume" in line
  assert _tree_hash(work) == before


def test_resume_without_state_or_workdir(files, tmp_path, capsys):
  cfg = _config(R, "tiny", {})
  line = _refused(capsys, lambda: R.job(cfg, str(files / "full"), resume=True), cfg)
  assert "--resume" in line and "state.msgpack" in line
  line = _refused(capsys, lambda: R.job(cfg, str(tmp_path / "nowhere"), resume=True), cfg)
  assert "--resume" in line and "nowhere" in line and not (tmp_path / "nowhere").exists()
  assert sorted(os.listdir(files / "full")) == ["keep.txt"]


def test_workdir_is_a_file(files, capsys):
  cfg = _config(T, "tiny", {})
  line = _refused(capsys, lambda: T.job(cfg, str(files / "full" / "keep.txt")), cfg)
  assert "--workdir" in line and "keep.txt" in line and "not a folder" in line
  assert (files / "full" / "keep.txt").read_text() == "precious results"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_workdir_not_writable(tmp_path, capsys):
  locked = tmp_path / "locked"
  locked.mkdir()
  os.chmod(locked, 0o500)
  try:
    cfg = _config(T, "tiny", {})
    line = _refused(capsys, lambda: T.job(cfg, str(locked / "run")), cfg)
    assert "--workdir" in line and "not writable" in line
  finally:
    os.chmod(locked, 0o700)


def test_paths_expand_the_home_folder(files, tmp_path, capsys, monkeypatch):
  """``~`` in workdir, data_dir, threat.model and threat.data_mean is the user's home."""
  monkeypatch.setenv("HOME", str(files))
  cfg = _config(
    T, "tiny", {"victim.dataset": "mnist", "data_dir": "~/mnist", "victim.n_per_class": 1}
  )
  line = _refused(capsys, lambda: T.job(cfg, "~/home_run"), cfg)
  assert f"{files}/mnist/train-images-idx3-ubyte" in line, line
  assert not (files / "home_run").exists()  # the data is refused before the workdir is made
  from recon_jax.io import workdir as wd

  assert wd.expand("~/home_run") == f"{files}/home_run"
  cfg = _config(R, "tiny", {"threat.model": "~/absent.msgpack"})
  line = _refused(capsys, lambda: R.job(cfg, str(tmp_path / "out")), cfg)
  assert f"{files}/absent.msgpack" in line, line
  plan = planning.prepare(_config(R, "tiny", {"data_dir": "~/mnist"}))
  assert plan.config.data_dir == f"{files}/mnist"  # the run and config.json see it expanded
  cfg = _config(R, "tiny", {"threat.data_mean": "~/mean.npy"})
  with pytest.raises(ConfigError, match="threat.data_mean"):  # no foreign checkpoint
    planning.prepare(cfg)


def test_an_unknown_setting_in_a_config_file_is_one_line(capsys, tmp_path):
  """A config file of the user's own may hold a name the main job does not know."""
  cfg = _config(R, "tiny", {})
  with cfg.unlocked():
    cfg.stepz = 7
  line = _refused(capsys, lambda: R.job(cfg, str(tmp_path / "out")), cfg)
  assert line == "error: --config.stepz is not a setting; the settings are the fields of JobConfig."
  assert not (tmp_path / "out").exists()


def test_verbose_shows_the_traceback(capsys):
  cfg = _config(R, "tiny", {"attack": "gradient"})
  with pytest.raises(SystemExit):
    cli.main_guard(lambda: R.job(cfg, "unused"), cfg, verbose=True)
  err = capsys.readouterr().err
  assert "Traceback" in err and err.strip().splitlines()[-1].startswith("error: --config.attack")


# ----------------------------------------------------------------------------- failed runs

UNTRAINED = {
  "victim.init": "normal",
  "victim.init_std": 0.003,
  "victim.first_layer_std": 1e-4,
  "victim.epochs": 10,
}


@pytest.mark.slow
def test_run_where_every_restart_diverged_exits_2_with_results_and_warnings(tmp_path, capsys):
  """Also a victim that did not train (loss ln 2): a warning line, and in metrics.json."""
  cfg = _config(R, "tiny", {**UNTRAINED, "search.lr_x": "1e30", "use_cache": False})
  workdir = tmp_path / "out"
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: R.job(cfg, str(workdir)), cfg)
  err = capsys.readouterr().err.strip().splitlines()
  assert e.value.code == 2, err
  errors = [line for line in err if line.startswith("error:")]
  assert len(errors) == 1 and err[-1] == errors[0], err
  assert "every restart diverged (2 of 2)" in errors[0] and str(workdir) in errors[0]
  assert any(line.startswith("warning: the victim did not train") for line in err), err
  metrics = json.loads((workdir / "metrics.json").read_text())
  assert any(w.startswith("every restart diverged") for w in metrics["warnings"])
  assert metrics["victim_warning"].startswith("the victim did not train")
  assert metrics["recovered_strict"] == 0 and metrics["selection"]["n_diverged"] == 2
  assert metrics["evaluation"]["n_candidates"] == 0
  assert_round_trip(metrics)  # declared, every key of a run that recovered nothing by failing
  for name in ("config.json", "reconstructions.npz", "restarts.tsv"):
    assert (workdir / name).is_file(), name


@pytest.mark.slow
def test_untrained_victim_is_written_with_a_warning(tmp_path, capsys):
  cfg = _config(T, "tiny", UNTRAINED)
  m = T.job(cfg, str(tmp_path / "v"))
  err = capsys.readouterr().err
  assert m["warning"].startswith("the victim did not train") and "ln 2" in m["warning"]
  assert "warning: the victim did not train" in err
  saved = json.loads((tmp_path / "v" / "metrics.json").read_text())
  assert saved["warning"] == m["warning"]
  assert (tmp_path / "v" / "victim.msgpack").is_file()


def test_victim_training_that_diverges_names_the_learning_rate(tmp_path, capsys):
  cfg = _config(T, "tiny", {"victim.lr": 1e8, "victim.epochs": 40, "chunk_epochs": 20})
  line = _refused(capsys, lambda: T.job(cfg, str(tmp_path / "v")), cfg)
  assert line.startswith("error: --config.victim.lr: training diverged"), line
  assert (tmp_path / "v" / "victim_last_finite.msgpack").is_file()


@pytest.mark.slow
def test_a_diverging_overwrite_leaves_no_earlier_victim_beside_its_config(tmp_path, capsys):
  work = tmp_path / "v"
  good = _config(T, "tiny", {"victim.epochs": 20, "chunk_epochs": 20})
  T.job(good, str(work))
  assert (work / "victim.msgpack").is_file()
  bad = _config(T, "tiny", {"victim.lr": 1e8, "victim.epochs": 40, "chunk_epochs": 20})
  line = _refused(capsys, lambda: T.job(bad, str(work), overwrite=True), bad)
  assert "--config.victim.lr" in line
  stored = json.loads((work / "config.json").read_text())["config"]
  assert stored["victim"]["lr"] == 1e8  # config.json is the failed run's ...
  assert not (work / "victim.msgpack").exists()  # ... and no earlier victim contradicts it
  assert (work / "victim_last_finite.msgpack").is_file()


# ----------------------------------------------------------------------------- command line


def _error_lines(err):
  return [line for line in err.strip().splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
  "name, must",
  [
    (
      "help_reconstruct",
      [
        "num_restarts = 16",
        "victim.lr = 0.01",
        "known_init = True",
        "finetune",
        "tiny",
        "paper",
        "--config.NAME=VALUE",
        "--workdir",
        "--resume",
      ],
    ),
    ("help_train_victim", ["victim.epochs = 10000", "chunk_epochs = 2000", "digits", "tiny"]),
    ("help_toy_2d", ["n_train = 20", "lam_filter_frac = 0.1", "quick", "small"]),
  ],
)
def test_help_lists_settings_and_presets_and_exits_0(
  procs, name, must, tmp_path, monkeypatch, capsys
):
  run = procs if name in SUBPROCESSES else lambda n: _in_process(n, tmp_path, monkeypatch, capsys)
  code, out, err, _ = run(name)
  assert code == 0, err[-2000:]
  for s in must:
    assert s in out, (s, out[-3000:])
  assert "Traceback" not in err


@pytest.mark.parametrize(
  "name, must",
  [
    (
      "flag_not_an_int",
      [
        "--config.search.num_restarts=abc",
        "--config.search.num_restarts=abc: expected an integer, got 'abc'",
      ],
    ),
    (
      "flag_unknown_setting",
      ["--config.victim.widht", "no such setting", "did you mean --config.victim.widths"],
    ),
    (
      "former_flag",
      ["error: --config.checkpoint: no such setting", "CHANGELOG.md, 0.2.0, lists the names"],
    ),
    (
      "former_flag_audit",
      ["error: --config.job.steps: no such setting", "CHANGELOG.md, 0.2.0, lists the names"],
    ),
    (  # was jax's ValueError "coordinator_address should be defined." and a traceback
      "distributed_on_one_host",
      [
        "error: --config.runtime.distributed=True joins the processes of a multi-host run",
        "the coordinator's address was not found",
        "$JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES and $JAX_PROCESS_ID",
        "leave it off to run on this host alone",
      ],
    ),
  ],
)
def test_command_line_errors_are_one_line(procs, name, must, tmp_path, monkeypatch, capsys):
  run = procs if name in SUBPROCESSES else lambda n: _in_process(n, tmp_path, monkeypatch, capsys)
  code, _, err, workdir = run(name)
  assert code == 1 and "Traceback" not in err, err[-3000:]
  lines = err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
  for s in must:
    assert s in lines[0], (s, lines[0])
  assert not workdir.exists()


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_ctrl_c_is_one_line_exit_130_and_says_how_to_resume(procs):
  """Also: no "Unable to initialize backend 'tpu'" line at the start of a run on a CPU."""
  code, _, err, _ = procs("sigint")
  assert code == 130, err[-3000:]
  assert "Traceback" not in err and "Unable to initialize backend" not in err, err[-3000:]
  last = err.strip().splitlines()[-1]
  assert last.startswith("interrupted") and "--resume" in last, last
  assert not _error_lines(err)


# ----------------------------------------------------------------------------- the audit
# A model owner's files as `python -m experiments.audit` takes them (its `quick` preset): a
# 64-256-1 model and its theta_0 (theta0), 3 + 3 digit PNGs as train, 20 + 20 as held-out;
# each case spoils one of them, refused before the workdir is made (docs/bad_input.md).


@pytest.fixture(scope="module")
def owner(tmp_path_factory):
  from PIL import Image
  from safetensors.numpy import save_file

  root = tmp_path_factory.mktemp("owner")
  ds = data.load_dataset("digits", n_per_class=3, seed=0)
  pick = np.r_[np.flatnonzero(ds.y_test > 0)[:20], np.flatnonzero(ds.y_test < 0)[:20]]
  for name, x, y in (
    ("train", ds.x_train, ds.y_train),
    ("heldout", ds.x_test[pick], ds.y_test[pick]),
  ):
    for i, (img, label) in enumerate(zip(x, y)):
      d = root / name / ("pos" if label > 0 else "neg")
      d.mkdir(parents=True, exist_ok=True)
      Image.fromarray(np.round(img[..., 0] * 255).astype(np.uint8)).save(d / f"{i}.png")
  rng = np.random.default_rng(0)
  model = {
    "fc1.weight": rng.normal(size=(256, 64)).astype(np.float32) / 8,
    "fc1.bias": np.zeros(256, np.float32),
    "fc2.weight": rng.normal(size=(1, 256)).astype(np.float32) / 16,
    "fc2.bias": np.zeros(1, np.float32),
  }
  save_file(model, str(root / "model.safetensors"))
  save_file({k: v * 0.9 for k, v in model.items()}, str(root / "init.safetensors"))
  save_file({**model, "fc1.weight": np.ones((256, 0), np.float32)}, str(root / "w0.safetensors"))
  (root / "model_folder").mkdir()
  flat = ds.x_train.reshape(len(ds.x_train), -1).astype(np.float32)
  labels = (ds.y_train > 0).astype(np.int64)
  np.savez(root / "vectors.npz", x=flat, y=labels)
  np.savez(root / "one_class.npz", x=ds.x_train.astype(np.float32), y=np.ones_like(labels))
  nan = ds.x_train.astype(np.float32).copy()
  nan[1, 2, 3, 0] = np.nan
  np.savez(root / "nan.npz", x=nan, y=labels)
  return root


def _spoiled(owner, tmp, change):
  """A copy of the owner's train folder with ``change(folder)`` applied; returns its path."""
  import shutil

  folder = tmp / "spoiled"
  shutil.copytree(owner / "train", folder)
  change(folder)
  return str(folder)


def _save(path, array, **kw):
  from PIL import Image

  Image.fromarray(array).save(path, **kw)


def _frames(path):
  from PIL import Image

  frames = [Image.fromarray(np.full((8, 8), v, np.uint8)) for v in (0, 200)]
  frames[0].save(path, save_all=True, append_images=frames[1:])


# (id, settings: {setting: value, or a function (owner, tmp) -> value}, substrings of the line)
AUDIT_CASES = [
  (  # class 3: vectors [N, D] without an image beside them to give their shape
    "npz_vectors_without_a_shape",
    {"train": "{o}/vectors.npz", "heldout": "{o}/vectors.npz"},
    ["vectors.npz: vectors [N, 64]", "--config.image_size=HxW"],
  ),
  (  # class 4: no silent resize to the first image's size
    "images_of_two_sizes",
    {
      "train": lambda o, t: _spoiled(
        o, t, lambda f: _save(f / "pos/9.png", np.zeros((9, 9), np.uint8))
      )
    },
    ["spoiled/pos/9.png: 9x9 pixels, but", "spoiled/neg/", "has 8x8", "--config.image_size=HxW"],
  ),
  (
    "transparent_pixels",
    {
      "train": lambda o, t: _spoiled(
        o, t, lambda f: _save(f / "pos/9.png", np.zeros((8, 8, 4), np.uint8))
      )
    },
    ["spoiled/pos/9.png: 64 transparent pixel(s)"],
  ),
  (
    "animated_gif",
    {"train": lambda o, t: _spoiled(o, t, lambda f: _frames(f / "pos/9.gif"))},
    ["spoiled/pos/9.gif: 2 frames"],
  ),
  (
    "image_1x1",
    {
      "train": lambda o, t: _spoiled(
        o, t, lambda f: _save(f / "neg/0.png", np.zeros((1, 1), np.uint8))
      )
    },
    ["spoiled/neg/0.png: 1x1 pixels; an image must be at least 3x3"],
  ),
  (  # class 5: nothing dropped without a word
    "image_one_folder_too_deep",
    {"train": lambda o, t: _spoiled(o, t, lambda f: (f / "pos/more").mkdir())},
    ["spoiled/pos/more: a folder inside the class folder"],
  ),
  (
    "dangling_symlink",
    {"train": lambda o, t: _spoiled(o, t, lambda f: os.symlink(t / "gone.png", f / "pos/9.png"))},
    ["spoiled/pos/9.png: a broken link"],
  ),
  (
    "not_an_image_file",
    {"train": lambda o, t: _spoiled(o, t, lambda f: (f / "neg/7.webp").write_bytes(b"RIFF"))},
    ["spoiled/neg/7.webp: not an image file"],
  ),
  (
    "image_beside_the_class_folders",
    {
      "train": lambda o, t: _spoiled(o, t, lambda f: _save(f / "9.png", np.zeros((8, 8), np.uint8)))
    },
    ["spoiled/9.png: an image beside the class folders"],
  ),
  (  # class 6: one class is refused in every format
    "one_class_npz",
    {"train": "{o}/one_class.npz"},
    ["one_class.npz: no image of class 0 (of 0, 1)"],
  ),
  (
    "one_class_folder",
    {"train": lambda o, t: _spoiled(o, t, lambda f: __import__("shutil").rmtree(f / "neg"))},
    ["spoiled: a binary model needs exactly 2 classes, found 1 (pos)"],
  ),
  (  # class 7: messages that name what is wrong
    "nan_pixels",
    {"train": "{o}/nan.npz"},
    ["nan.npz: x holds 1 NaN or infinite value(s) (the first in image 1)"],
  ),
  (
    "weight_with_a_zero_dimension",
    {"model": "{o}/w0.safetensors", "theta0": ""},
    ["w0.safetensors: tensor 'fc1.weight' has shape (256, 0)"],
  ),
  (
    "model_is_a_folder",
    {"model": "{o}/model_folder"},
    ["model_folder: a folder; the checkpoint must be a file"],
  ),
  (
    "theta0_is_a_folder",
    {"theta0": "{o}/model_folder"},
    ["model_folder: a folder; the initial parameters must be a file"],
  ),
  (
    "loss_named_as_the_audit_flag",
    {"loss": "ce"},
    ["error: --config.loss='ce' needs 2 output(s);", "model.safetensors has 1."],
  ),
  (  # the change theta* - theta_0 is zero: the file given as theta_0 is named, not a setting
    "theta0_is_the_model",
    {"theta0": "{o}/model.safetensors"},
    ["error: --config.theta0=", "model.safetensors has the model's own first layer", "zero"],
  ),
]


@pytest.mark.parametrize("case_id, settings, must", AUDIT_CASES, ids=[c[0] for c in AUDIT_CASES])
def test_bad_audit_input_is_one_line_before_any_work(
  owner, tmp_path, capsys, case_id, settings, must
):
  from experiments import audit
  from experiments.configs import audit as audit_configs

  cfg = audit_configs.get_config("quick")
  cfg.update(
    model=str(owner / "model.safetensors"),
    theta0=str(owner / "init.safetensors"),
    train=str(owner / "train"),
    heldout=str(owner / "heldout"),
  )
  for key, value in settings.items():
    cfg[key] = value(owner, tmp_path) if callable(value) else value.format(o=owner)
  workdir = tmp_path / "out"
  line = _refused(capsys, lambda: audit.job(cfg, str(workdir)), cfg)
  for s in must:
    assert s in line, (s, line)
  assert "job.victim" not in line and "Traceback" not in line
  print(f"{case_id}: {line}")
  assert not workdir.exists()  # refused before the workdir was made


@pytest.mark.parametrize("attack", ["cone", "kkt"])
def test_theta0_equal_to_the_model_names_theta0_before_any_work(owner, tmp_path, capsys, attack):
  """theta_0 the model itself: the change every known-theta_0 attack reads is zero, and the
  refusal names the file given as theta_0 in each binary's own spelling, not a setting the
  attack's span reads (which the cone does not use)."""
  from experiments import audit
  from experiments.configs import audit as audit_configs

  model = str(owner / "model.safetensors")
  cfg = audit_configs.get_config("quick")
  cfg.update(model=model, theta0=model, train=str(owner / "train"))
  cfg.update(heldout=str(owner / "heldout"))
  cfg.job.attack = attack
  line = _refused(capsys, lambda: audit.job(cfg, str(tmp_path / "a")), cfg)
  assert line.startswith(f"error: --config.theta0={model} has the model's own first"), line
  assert "subspace" not in line and not (tmp_path / "a").exists()
  settings = {
    "attack": attack,
    "threat.model": model,
    "threat.theta0": model,
    "threat.known_init": True,
    "threat.train": str(owner / "train"),
    "threat.heldout": str(owner / "heldout"),
    "victim.widths": (256,),  # the model's (the preset's own are refused, another case)
  }
  cfg = _config(R, "tiny", settings)
  line = _refused(capsys, lambda: reconstruct.job(cfg, str(tmp_path / "r")), cfg)
  assert line.startswith(f"error: --config.threat.theta0={model} has the model's own"), line
  assert "subspace" not in line and not (tmp_path / "r").exists()
