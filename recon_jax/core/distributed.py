r"""Multi-host sweeps: ``jax.distributed`` behind a flag, and the process that writes.

One process runs per host (per GPU host, or per TPU-VM worker).  After
:func:`maybe_initialize`, ``jax.devices()`` lists the devices of *every* host,
so :func:`recon_jax.engine.restarts.sharding` builds its ``'restarts'`` mesh over
all of them: the R restarts of a sweep are split across hosts and devices, theta*
is replicated, and one SPMD program runs everywhere (the restarts are
independent, so the step itself needs no cross-device communication).  Results
live on the hosts that computed them; :func:`recon_jax.engine.restarts.gather` brings the whole
restart axis to every process (it is a collective: all processes call it) and
:func:`is_main_process` picks the one that writes files.

Every process must run the same command with the same flags and seed, so that
all of them build the same hyperparameter grid and the same global arrays.

Command lines (``--distributed`` is the flag the binaries pass to
:func:`maybe_initialize`; R must be a multiple of the total device count, or
the sweep runs unsharded with a warning):

* Multi-host GPU, explicit (2 hosts, 8 GPUs each; host 0 at 10.0.0.1)::

    # on host 0
    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \
      python -m experiments.reconstruct --distributed --num_restarts=128 ...
    # on host 1
    JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 \
      python -m experiments.reconstruct --distributed --num_restarts=128 ...

  (``JAX_LOCAL_DEVICE_IDS=0,1,...`` restricts the GPUs a process uses, e.g. one
  process per GPU.)

* Slurm or Open MPI: no variables needed, ``jax.distributed.initialize()``
  reads the cluster environment::

    srun --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 \
      python -m experiments.reconstruct --distributed --num_restarts=128 ...
    mpirun -np 2 python -m experiments.reconstruct --distributed ...

* Cloud TPU pod slice: ``initialize()`` needs no arguments; run the same
  command on every worker::

    gcloud compute tpus tpu-vm ssh my-pod --worker=all --command \
      "cd recon_jax && python -m experiments.reconstruct --distributed --num_restarts=256 ..."

* Trying it on one machine (CPU, 2 processes x 2 devices)::

    for i in 0 1; do XLA_FLAGS=--xla_force_host_platform_device_count=2 \
      JAX_COORDINATOR_ADDRESS=localhost:12345 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=$i \
      python -m experiments.reconstruct --distributed --preset=tiny --num_restarts=4 \
        --workdir=/tmp/dist$i & done; wait

Single-host multi-device (several GPUs in one machine, or
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` on a CPU) needs no
flag at all: ``loop.run_stages(..., shard=True)`` shards over the local devices.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from absl import logging
import jax

from recon_jax.errors import ConfigError

_FALSE = ("", "0", "false", "no", "off", "none")
# jax.distributed.initialize's ValueErrors for a setting that neither the environment nor a
# detected cluster gave.
_UNDEFINED = {
  "coordinator_address": "the coordinator's address",
  "Number of processes": "the process count",
  "process id": "the process id",
}


def _env_int(name: str) -> Optional[int]:
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise ConfigError(f"${name} must be an integer, got {value!r}.") from None


def maybe_initialize(flag_value: Union[bool, str, None]) -> bool:
  """Calls ``jax.distributed.initialize`` when ``flag_value`` asks for it.

  Call it first, before any JAX computation or ``jax.devices()`` (JAX refuses
  to initialise the distributed runtime after its backend has started).

  Args:
    flag_value: the value of a ``--distributed`` flag.  Falsy (False, None,
      '', '0', 'false', 'no') does nothing; anything else initialises.  The
      coordinator comes from ``$JAX_COORDINATOR_ADDRESS`` (read by JAX), the
      process count and index from ``$JAX_NUM_PROCESSES`` and
      ``$JAX_PROCESS_ID`` when set; otherwise JAX detects them (Cloud TPU,
      Slurm, Open MPI).

  Returns:
    True when the distributed runtime is (now) initialised, False when the flag
    was off.  Calling it twice is harmless.

  Raises:
    ConfigError: a malformed ``$JAX_NUM_PROCESSES``/``$JAX_PROCESS_ID``; or the
      coordinator's address, the process count or id neither set nor found by JAX (one
      host: nothing to join), naming ``runtime.distributed``.
    RuntimeError: from JAX, e.g. when called after the backend started.
  """
  if (
    flag_value is None
    or flag_value is False
    or (isinstance(flag_value, str) and flag_value.strip().lower() in _FALSE)
  ):
    return False
  if jax.distributed.is_initialized():
    return True
  num_processes = _env_int("JAX_NUM_PROCESSES")
  process_id = _env_int("JAX_PROCESS_ID")
  try:
    jax.distributed.initialize(num_processes=num_processes, process_id=process_id)
  except ValueError as e:  # jax's words for what neither the environment nor a cluster gave
    if not any(word in str(e) for word in _UNDEFINED):
      raise
    missing = next(what for word, what in _UNDEFINED.items() if word in str(e))
    raise ConfigError(
      "distributed=True joins the processes of a multi-host run, one per host, and needs the "
      f"coordinator's address, the process count and this process's id; {missing} was not "
      "found. Set $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES and $JAX_PROCESS_ID on every "
      "host (under Slurm, Open MPI or on a Cloud TPU pod jax.distributed finds them itself), "
      "or leave it off to run on this host alone (its devices still share the restarts).",
      "runtime.distributed",
    ) from None
  logging.info(
    "jax.distributed: process %d of %d, %d local / %d global devices",
    jax.process_index(),
    jax.process_count(),
    jax.local_device_count(),
    jax.device_count(),
  )
  return True


def is_main_process() -> bool:
  """True on process 0: the one that writes reports, checkpoints and figures."""
  return jax.process_index() == 0
