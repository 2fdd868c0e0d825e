"""Restarts sharded across devices give the single-device results.

Each test runs a child Python (the device count is fixed when JAX starts):
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` for one process with 4
CPU devices, and two processes x 2 devices joined by ``jax.distributed`` for
the multi-host path (restarts spread over both processes, gathered to all).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

CHILD = r"""
import json, sys
mode, out = sys.argv[1], sys.argv[2]
from recon_jax.core import distributed
if mode == "multiprocess":
  distributed.maybe_initialize(True)  # JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID
import re
import jax, jax.numpy as jnp, numpy as np
from recon_jax.engine import inits, loop, restarts
from recon_jax.victims import models
from recon_jax.attacks import kkt
from recon_jax.types import Target

d, h, m, R = 12, 16, 6, 4
module = models.MLP(widths=(h, h), out_dim=1, bias="first")
# one compiled program (run eagerly, every op of the initialisers compiles on its own)
params = jax.jit(lambda k: models.init_params(module, k, (d,), jnp.float32))(jax.random.PRNGKey(0))
attack = kkt.kkt_attack(models.make_apply_fn(module), "binary")
target = Target(params, jnp.asarray([1., 1., 1., -1., -1., -1.], jnp.float32),
                jnp.full((d,), -0.5, jnp.float32), jnp.full((d,), 0.5, jnp.float32))
x_init = inits.gaussian(m, (d,), jnp.float32)
rng = np.random.default_rng(0)
hp = {"lr_x": rng.uniform(0.02, 0.1, R), "lr_lam": rng.uniform(1e-3, 1e-2, R),
      "alpha": rng.uniform(10, 40, R), "lam_min": rng.uniform(0.2, 0.7, R),
      "sigma_x": rng.uniform(1e-3, 1e-2, R)}
hp = {k: v.astype(np.float32) for k, v in hp.items()}
keys = jax.random.split(jax.random.PRNGKey(1), R)

def sweep(shard, batching="vmap"):
  # two chunks: the second call reuses the compiled chunk on the first one's output
  return loop.run_stages(attack, x_init, keys, [(12, hp)], target, chunk_steps=6,
                  batching=batching, shard=shard, log=False)

def result(res):
  st = restarts.gather(res.state)
  return {"x": st.inner.x, "lam": st.inner.lam, "loss": st.loss, "step": st.step}

info = {"device_count": jax.device_count(), "process_count": jax.process_count()}
if mode == "single":
  sharded = sweep(True)
  x = sharded.state.inner.x
  info["x_devices"] = len(x.sharding.device_set)
  info["x_spec"] = str(getattr(x.sharding, "spec", None))
  info["shard_shapes"] = sorted({tuple(s.data.shape) for s in x.addressable_shards})
  # The compiled chunk of a sharded state needs no communication: restarts are independent.
  # Lowered with loop.run_stages's own placement and chunk length, so these are the programs the
  # sweeps run (compiled once: the persistent compilation cache serves the second request).
  sharding = restarts.sharding(R)
  hps = jax.device_put({k: jnp.asarray(v) for k, v in hp.items()}, sharding)
  replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
  target_r = jax.device_put(target, replicated)
  info["collectives"] = {}
  for batching in ("vmap", "map"):
    init_fn, chunk_fn = loop.make_runner(attack, x_init, batching=batching,
                                         num_shards=jax.device_count())
    state = jax.device_put(init_fn(jax.device_put(keys, sharding), hps, target_r), sharding)
    hlo = chunk_fn.lower(state, hps, target_r, num_steps=6).compile().as_text()
    info["collectives"][batching] = sum(len(re.findall(op + r"(?:-start)?\(", hlo)) for op in (
        "all-gather", "all-reduce", "all-to-all", "collective-permute", "reduce-scatter"))
  arrays = {f"sharded_{k}": v for k, v in result(sharded).items()}
  arrays.update({f"single_{k}": v for k, v in result(sweep(False)).items()})
  arrays.update({f"map_{k}": v for k, v in result(sweep(True, "map")).items()})
  np.savez(out + ".npz", **arrays)
else:
  res = sweep(True)
  info["x_devices"] = len(res.state.inner.x.sharding.device_set)
  info["process_index"] = jax.process_index()
  if distributed.is_main_process():
    np.savez(out + ".npz", **{f"gathered_{k}": v for k, v in result(res).items()})
  else:
    result(res)  # a collective: every process takes part
with open(out + f".{jax.process_index()}.json", "w") as f:
  json.dump(info, f)
"""


def _env(**extra):
  env = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("XLA_", "JAX_")) or k == "JAX_PLATFORMS"
  }
  # The children's programs are tiny and compile-bound (as in the parent's tests): skip
  # XLA's optimisation passes; the sharding and the collectives are the partitioner's.
  env.update(JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1", **extra)
  return env


def _run(args, env):
  return subprocess.Popen(
    [sys.executable, "-c", CHILD, *args],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
    text=True,
  )


def _wait(procs, timeout=150):
  outs = []
  for p in procs:
    try:
      out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
    outs.append(out)
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  return outs


@pytest.fixture(scope="module")
def single_process(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("shard") / "single")
  env = _env(
    XLA_FLAGS="--xla_force_host_platform_device_count=4",
    # the child compiles each chunk program twice (sweep and HLO check): once, with a cache
    JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("xla_cache")),
    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
  )
  _wait([_run(["single", out], env)])
  with open(out + ".0.json") as f:
    info = json.load(f)
  with np.load(out + ".npz") as z:
    return info, {k: z[k] for k in z.files}


@pytest.mark.slow
def test_sharded_run_uses_four_devices(single_process):
  info, _ = single_process
  assert info["device_count"] == 4
  assert info["x_devices"] == 4
  assert "restarts" in info["x_spec"]
  assert info["shard_shapes"] == [[1, 6, 12]]  # one restart of [m, d] per device
  assert info["collectives"] == {"vmap": 0, "map": 0}, info["collectives"]


@pytest.mark.slow
def test_sharded_equals_single_device(single_process):
  _, arr = single_process
  assert np.all(arr["sharded_step"] == 12) and np.all(arr["single_step"] == 12)
  for k in ("x", "lam", "loss"):
    np.testing.assert_allclose(
      arr[f"sharded_{k}"], arr[f"single_{k}"], rtol=1e-6, atol=1e-6, err_msg=k
    )
    np.testing.assert_allclose(
      arr[f"map_{k}"], arr[f"single_{k}"], rtol=1e-6, atol=1e-6, err_msg=f"lax.map {k}"
    )
  assert np.all(np.isfinite(arr["single_loss"]))


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_gather_to_process_zero(single_process, tmp_path):
  _, arr = single_process
  out = str(tmp_path / "multi")
  port = _free_port()
  procs = [
    _run(
      ["multiprocess", out],
      _env(
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_COORDINATOR_ADDRESS=f"localhost:{port}",
        JAX_NUM_PROCESSES="2",
        JAX_PROCESS_ID=str(i),
      ),
    )
    for i in range(2)
  ]
  _wait(procs)
  for i in range(2):
    with open(f"{out}.{i}.json") as f:
      info = json.load(f)
    assert info["process_count"] == 2 and info["device_count"] == 4
    assert info["x_devices"] == 4  # the restarts span both processes' devices
  with np.load(out + ".npz") as z:
    got = {k: z[k] for k in z.files}
  for k in ("x", "lam", "loss"):
    np.testing.assert_allclose(
      got[f"gathered_{k}"], arr[f"single_{k}"], rtol=1e-6, atol=1e-6, err_msg=k
    )


def test_distributed_helpers_single_process(monkeypatch):
  import jax

  from recon_jax.core import distributed
  from recon_jax.engine import restarts

  for off in (False, None, "", "0", "false", "No"):
    assert distributed.maybe_initialize(off) is False
  assert not jax.distributed.is_initialized()
  monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
  with pytest.raises(ValueError, match="JAX_NUM_PROCESSES"):
    distributed._env_int("JAX_NUM_PROCESSES")
  tree = {"a": jax.numpy.arange(3), "b": (np.ones(2),)}
  got = restarts.gather(tree)
  assert isinstance(got["a"], np.ndarray) and got["a"].tolist() == [0, 1, 2]
  assert distributed.is_main_process()


def test_distributed_on_one_host_is_refused_naming_the_setting(monkeypatch, tmp_path):
  """distributed=True with no coordinator (no $JAX_COORDINATOR_ADDRESS, no cluster) gave
  jax's ValueError "coordinator_address should be defined." and a traceback; it is refused
  naming the setting and what a multi-host run needs, before the workdir is touched (the
  binary's one line: tests/test_bad_input.py).  In this process JAX has started already, so
  jax.distributed.initialize answers as it does on one host before (its own words)."""
  import jax

  from recon_jax import cli
  from recon_jax.core import distributed
  from recon_jax.errors import ConfigError
  from recon_jax.job import run
  from recon_jax.job.settings import JobConfig, reconstruct_config

  def no_coordinator(**kwargs):
    del kwargs
    raise ValueError("coordinator_address should be defined.")

  monkeypatch.setattr(jax.distributed, "initialize", no_coordinator)
  with pytest.raises(ConfigError) as e:
    distributed.maybe_initialize(True)
  assert e.value.argument == "runtime.distributed"
  assert "the coordinator's address was not found" in str(e.value)
  assert "$JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES and $JAX_PROCESS_ID" in str(e.value)
  work = tmp_path / "w"
  with pytest.raises(ConfigError) as e:
    run.main_job(JobConfig(runtime={"distributed": True}), str(work))
  line = cli.error_line(e.value, reconstruct_config())
  assert line.startswith("error: --config.runtime.distributed=True joins the processes of a ")
  assert not work.exists()
