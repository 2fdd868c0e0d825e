"""Shared test set-up: x64 on for precise gradient checks, loud broadcasting."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  # One compilation cache for the session, shared by the xdist workers and the
  # subprocesses they start (they inherit the environment): a program compiled once
  # is loaded, not compiled again, by every later test with the same HLO.
  import tempfile

  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="recon_jax_xla_")
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
if "PYTEST_XDIST_WORKER" not in os.environ:  # the workers inherit what the first process set
  # XLA:CPU's fusion emitters about double the compile time of the suite's tiny,
  # compile-bound programs (~12% of its CPU time); every test passes under the older
  # emitters too.  The suite and the processes it starts run under these XLA_FLAGS,
  # never a user's (a device count set for other work).  Only where this XLA knows
  # the flag: an unknown flag in XLA_FLAGS aborts the process.
  import subprocess
  import sys

  FAST_XLA = "--xla_cpu_use_fusion_emitters=false"
  probe = "import jax; jax.devices()"
  env = dict(os.environ, XLA_FLAGS=FAST_XLA, JAX_PLATFORMS="cpu")
  if subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0:
    os.environ["XLA_FLAGS"] = FAST_XLA
  else:
    os.environ.pop("XLA_FLAGS", None)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import ast  # noqa: E402
import contextlib  # noqa: E402

import pytest  # noqa: E402


def cli_config(config_module, flags):
  """The config that ``--config=FILE:PRESET --config.NAME=VALUE ...`` (``flags``) builds."""
  preset = flags[0].rsplit(":", 1)[1]
  cfg = config_module.get_config(preset)
  for flag in flags[1:]:
    name, value = flag[len("--config.") :].split("=", 1)
    try:
      value = ast.literal_eval(value)
    except (ValueError, SyntaxError):
      pass
    *path, leaf = name.split(".")
    node = cfg
    for part in path:
      node = node[part]
    node[leaf] = value
  return cfg


@pytest.fixture(scope="session", autouse=True)
def _victim_cache(tmp_path_factory, request):
  """One victim cache for the session, shared by the xdist workers: each tiny victim trains once.

  Cache files are written atomically, so two workers training the same victim at once
  both write a complete file.
  """
  base = tmp_path_factory.getbasetemp()
  worker = getattr(request.config, "workerinput", None)  # set on xdist workers only
  shared = (base.parent if worker else base) / "victim_cache"
  shared.mkdir(exist_ok=True)
  old = os.environ.get("RECON_JAX_CACHE")
  os.environ["RECON_JAX_CACHE"] = str(shared)
  yield
  if old is None:
    os.environ.pop("RECON_JAX_CACHE", None)
  else:
    os.environ["RECON_JAX_CACHE"] = old


@pytest.fixture(autouse=True)
def _keep_precision():
  """A binary's ``job`` sets its run's precision globally; every test gets x64 back."""
  x64 = jax.config.jax_enable_x64
  yield
  jax.config.update("jax_enable_x64", x64)


@contextlib.contextmanager
def fast_compile():
  """XLA's optimisation passes off, for tiny compile-bound programs
  (LLVM's passes alone take ~1.5 s on one 4-d jax.random.normal).

  JAX's in-memory executables do not record the flag (the persistent cache's keys
  do), so they are dropped on the way in and out: nothing compiled with
  optimisations runs in here, nothing compiled without them runs later.  Two runs
  under ``fast_compile`` then compile (or load) the same programs and give the
  same bits, which the init study's resume test asserts.
  """
  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  jax.clear_caches()
  try:
    yield
  finally:
    jax.config.update("jax_disable_most_optimizations", old)
    jax.clear_caches()


@pytest.fixture(scope="module")
def fast_compile_module():
  """:func:`fast_compile` for a whole test module (``pytestmark = usefixtures(...)``)."""
  with fast_compile():
    yield


def reference_layout_safetensors(path, d, widths=(32, 32), seed=0):
  """A ReLU MLP file in Haim et al.'s NeuralNetwork layout (PyTorch names, bias in the first
  layer only), written with numpy as a user's own model; returns its tensors."""
  import numpy as np
  from safetensors.numpy import save_file

  rng = np.random.default_rng(seed)
  dims = (d, *widths, 1)
  tensors = {}
  for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
    tensors[f"layers.{i}.weight"] = (rng.normal(size=(b, a)) / np.sqrt(a)).astype(np.float32)
  tensors["layers.0.bias"] = (0.1 * rng.normal(size=widths[0])).astype(np.float32)
  save_file(tensors, str(path))
  return tensors
