"""The restarts of a sweep across devices and hosts: placed on a mesh of every device
(:func:`sharding`), and brought whole to every process as host arrays (:func:`gather`).

A multi-host run starts with :func:`recon_jax.core.distributed.maybe_initialize`, so that
``jax.devices()`` lists every host's devices; the loop
(:func:`recon_jax.engine.loop.run_stages`) places its restarts with :func:`sharding` and
gathers what the host reads (losses, the final state) with :func:`gather`.
"""

from __future__ import annotations

from typing import Any

from absl import logging
import jax
import numpy as np


def sharding(num_restarts: int):
  """NamedSharding splitting the restart axis over all devices, or None on one device.

  Restarts are independent, so the only change across devices is placement:
  θ* and the data are replicated, the results are the same as on one device.
  """
  devices = jax.devices()
  if len(devices) <= 1:
    return None
  if num_restarts % len(devices):
    logging.warning(
      "%d restarts do not divide over %d devices; running unsharded.", num_restarts, len(devices)
    )
    return None
  mesh = jax.sharding.Mesh(np.array(devices), ("restarts",))
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("restarts"))


def gather(tree: Any, tiled: bool = True) -> Any:
  """Whole per-restart results as numpy arrays on every process (process 0 writes them).

  ``jax.experimental.multihost_utils.process_allgather`` around a pytree whose
  leaves have the restart axis first:

  * a *global* array (the output of a sweep sharded over every host's devices
    by :func:`sharding`) comes back whole, ``[R, ...]``;
  * a *host-local* array (each process ran its own block of ``R_local``
    restarts) is concatenated in process order into ``[P * R_local, ...]``
    (``tiled=True``) or stacked into ``[P, R_local, ...]`` (``tiled=False``).

  It is a collective: every process must call it, in the same order.  In a
  single-process run it is ``np.asarray`` on every leaf (no communication).

  Args:
    tree: pytree of arrays (e.g. a ``RestartState`` or a metrics dict).
    tiled: concatenate (True) or stack (False) host-local arrays.

  Returns:
    The same pytree with numpy leaves.
  """
  if jax.process_count() == 1:
    return jax.tree_util.tree_map(np.asarray, tree)
  from jax.experimental import multihost_utils

  return multihost_utils.process_allgather(tree, tiled=tiled)
