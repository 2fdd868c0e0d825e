"""The one optimisation loop every attack runs in: restarts batched, steps scanned.

R restarts, each with its own PRNG key, x-initialisation and hyperparameters,
are one compiled program: ``vmap`` over restarts (or ``lax.map`` where a
backend prefers it, e.g. batched L-BFGS on a CPU) around a ``lax.scan`` over
steps.  The host only sees the state between chunks (progress, checkpoints).

A restart whose state or loss turns non-finite is frozen at its last finite
state and flagged ``diverged``; the others carry on untouched (the step:
:func:`recon_jax.core.stepping.scan_one`, which the stability score re-runs too).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core import arguments, stepping
from recon_jax.core.stepping import RestartState, scan_one
from recon_jax.engine import restarts, resume
from recon_jax.errors import ConfigError
from recon_jax.io.workdir import StateFile  # noqa: F401 (where a sweep saves its state)
from recon_jax.types import Attack, HParams, Target, prepared

XInitFn = Callable[[jax.Array, HParams], jax.Array]  # (key, hparams) -> x0 [m, ...]


def init_one(attack: Attack, x_init: XInitFn, key, hparams: HParams, target: Target):
  """Initial :class:`RestartState` of one restart."""
  kx, ka = jax.random.split(key)
  return stepping.start(attack.init(ka, hparams, target, x_init(kx, hparams)))


BATCHINGS = ("auto", "vmap", "map")


def resolve_batching(batching: str) -> str:
  """'auto' is lax.map on a CPU and vmap elsewhere.

  On a CPU one restart already keeps the cores busy with its matmuls, and the
  vmapped program adds transposes and copies (benchmarks/: 7-17% of a step) and
  outgrows the cache at large R, so a sequential map is as fast or faster; on a
  GPU one small restart cannot fill the device and vmap wins.
  """
  if batching not in BATCHINGS:
    raise ConfigError(f"batching must be one of {BATCHINGS}, got {batching!r}.")
  if batching == "auto":
    return "map" if jax.default_backend() == "cpu" else "vmap"
  return batching


def _batched(fn, batching: str, num_shards: int = 1):
  """``fn`` over a leading restart axis, by vmap or lax.map.

  With ``num_shards`` > 1 (restarts split across devices) the map runs inside
  a vmap over shards, so each device maps over its own restarts and the
  program needs no collective.
  """
  batching = resolve_batching(batching)
  if batching == "vmap":
    return jax.vmap(fn)

  def mapped(*args):
    return jax.lax.map(lambda a: fn(*a), args)

  if num_shards <= 1:
    return mapped

  def sharded(*args):
    split = jax.tree_util.tree_map(
      lambda a: a.reshape(num_shards, a.shape[0] // num_shards, *a.shape[1:]), args
    )
    out = jax.vmap(mapped)(*split)
    return jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), out)

  return sharded


def make_runner(attack: Attack, x_init: XInitFn, *, batching: str = "auto", num_shards: int = 1):
  """Compiled ``(init_fn, chunk_fn)`` over a leading restart axis.

  ``init_fn(keys [R], hparams {[R]}, target) -> RestartState [R]`` and
  ``chunk_fn(state, hparams, target, num_steps) -> (state, metrics {[R]})``.
  The target is shared (broadcast) across restarts; the attack's ``prepare`` of it is
  computed once per call, before the restarts.
  """

  def init_b(keys, hparams, target):
    seen = prepared(attack, target)
    return _batched(lambda k, h: init_one(attack, x_init, k, h, seen), batching, num_shards)(
      keys, hparams
    )

  def chunk_b(state, hparams, target, num_steps):
    seen = prepared(attack, target)
    return _batched(lambda s, h: scan_one(attack, s, h, seen, num_steps), batching, num_shards)(
      state, hparams
    )

  return jax.jit(init_b), jax.jit(chunk_b, static_argnames="num_steps", donate_argnums=0)


# The longest a compiled chunk may run before the host can answer Ctrl-C or SIGTERM.
MAX_CHUNK_S = 20.0
# Chunks of at least this many steps start with a probe of an eighth of a chunk: the first
# chunk also compiles, and on a large network (a CNN on a CPU) a whole one can run for
# minutes before the host hears Ctrl-C or can say how long the rest will take.
PROBE_FROM_STEPS = 500


def _chunk_length(chunk_steps: int, rate: Optional[float], max_s: Optional[float]) -> int:
  """``chunk_steps``, halved until a chunk runs within ``max_s`` at ``rate`` steps per
  second; before the first chunk (``rate`` unknown) an eighth of a long chunk, a length the
  halving reaches too, so a slow network compiles no extra program."""
  n = int(chunk_steps)
  if not max_s:
    return n
  if rate is None:
    return max(n // 8, 1) if n >= PROBE_FROM_STEPS else n
  while n > 1 and n / rate > max_s:
    n //= 2
  return n


class RunResult(NamedTuple):
  state: RestartState  # final batched state
  history: list  # per chunk: {'step': int, metric: np.ndarray [R], 'time_s': float}
  compile_s: float  # ahead-of-time compile time of the chunk program(s), seconds
  run_s: float  # wall time of running all chunks (compilation excluded)


def _check_stages(stages, chunk_steps) -> None:
  """ConfigError unless :func:`run_stages` has stages of > 0 steps and chunks of > 0."""
  if not stages:
    raise ConfigError("run_stages needs at least one stage.")
  if any(steps <= 0 for steps, _ in stages):
    raise ConfigError(f"every stage needs > 0 steps, got {[steps for steps, _ in stages]}.")
  if chunk_steps <= 0:
    raise ConfigError(f"chunk_steps must be > 0, got {chunk_steps}.")


def _placed(sharding, keys, stage_hps, target):
  """``keys`` and every stage's hparams split over the restarts' devices, ``target``
  (theta*) replicated on each."""
  replicated = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
  return (
    jax.device_put(keys, sharding),
    [jax.device_put(hp, sharding) for hp in stage_hps],
    jax.device_put(target, replicated),
  )


def _log_chunk(name: str, loss: np.ndarray, rec: dict, total: int, left_s: float) -> None:
  """One log line after a chunk: the restarts' losses, how many diverged, the time."""
  fin = loss[np.isfinite(loss)]
  logging.info(
    "%s step %d/%d  loss min %.4g median %.4g  diverged %d/%d  %.1fs (about %.0fs left)",
    name,
    rec["step"],
    total,
    fin.min() if fin.size else np.nan,
    np.median(fin) if fin.size else np.nan,
    int(rec["diverged"].sum()),
    len(loss),
    rec["time_s"],
    left_s,
  )


def run_stages(
  attack: Attack,
  x_init: XInitFn,
  keys,
  stages: Sequence[Tuple[int, HParams]],
  target: Target,
  *,
  chunk_steps: int = 500,
  batching: str = "auto",
  shard: bool = True,
  state: Optional[RestartState] = None,
  progress: Optional[Callable] = None,
  log: bool = True,
  checkpoint: Optional[resume.Saver] = None,
  max_chunk_s: Optional[float] = MAX_CHUNK_S,
) -> RunResult:
  """Runs consecutive stages ``[(num_steps, hparams), ...]`` from one state.

  Each stage continues the previous one's state (x, lambda, optimiser buffers)
  with its own per-restart hyperparameters, e.g. a coarse-to-fine schedule of
  the surrogate sharpness alpha (see :func:`recon_jax.engine.sweep.stages`).  The
  hyperparameters are arguments of the compiled chunk, so every stage runs the
  same compiled programs.  Resuming from ``state`` skips the steps it has
  already taken (stage boundaries are counted in steps); the x-initialisation
  of a fresh state reads the first stage's hyperparameters.

  Args:
    attack: the attack (pure init/step).
    x_init: x-initialisation ``(key, hparams) -> x0``.
    keys: [R] PRNG keys, one per restart.
    target: what the attacker sees (shared by all restarts).
    chunk_steps: steps per compiled chunk; the host logs between chunks.
    batching: 'vmap' or 'map' over restarts, or 'auto' (map on CPU, vmap
      elsewhere; see :func:`resolve_batching`). Results do not depend on it.
    shard: split restarts across local devices when more than one.
    state: a state to resume from (e.g. loaded from a checkpoint). Its buffers
      are donated to the compiled chunk, so the caller's copy is consumed.
    progress: ``progress(state, record)`` called on the host after each chunk.
    log: log one line per chunk.
    checkpoint: where and how often to save the run for a later resume
      (:class:`recon_jax.engine.resume.Saver`); the one resumable-run mechanism of every attack.
    stages: (steps in this stage, hparams) pairs; every hparams dict has the
      same keys, [R] shapes and dtypes.
    max_chunk_s: a chunk is a compiled call the host cannot interrupt (Ctrl-C and SIGTERM
      wait for it): once the first chunk has shown how fast steps run, chunks are halved
      until one takes at most this many seconds (None: ``chunk_steps`` always).  Only the
      lengths chunk_steps / 2^j are compiled; results do not depend on the chunking.

  Returns:
    RunResult with the chunks of all stages.
  """
  _check_stages(stages, chunk_steps)
  num_restarts = int(np.shape(keys)[0])
  total = sum(steps for steps, _ in stages)
  if log:
    logging.info(
      "%s: %d restarts x %d steps in chunks of %d (the first chunk compiles)",
      attack.name,
      num_restarts,
      total,
      chunk_steps,
    )
  stage_hps = [{k: jnp.asarray(v) for k, v in hp.items()} for _, hp in stages]
  sharding = restarts.sharding(num_restarts) if shard else None
  init_fn, chunk_fn = make_runner(
    attack,
    x_init,
    batching=batching,
    num_shards=len(sharding.mesh.devices.ravel()) if sharding is not None else 1,
  )
  if sharding is not None:
    keys, stage_hps, target = _placed(sharding, keys, stage_hps, target)
  t0 = time.time()
  if state is None:
    state = init_fn(keys, stage_hps[0], target)
  if sharding is not None:
    # Every leaf has the leading restart axis; constant leaves of a fresh state
    # (zeros, inf) would otherwise come out replicated, and each chunk would be
    # compiled for (and all-gather into) a replicated state.
    state = jax.device_put(state, sharding)
  # restarts.gather: np.asarray in one process; an allgather when the restarts span hosts.
  done = int(np.max(restarts.gather(state.step))) if num_restarts else 0
  history, compiled = [], {}
  compile_s, run_s, end = 0.0, 0.0, 0
  rate = None  # restart-steps per second of the chunks run so far (compilation excluded)
  for (steps, _), hparams in zip(stages, stage_hps):
    end += steps
    while done < end:
      n = min(_chunk_length(chunk_steps, rate, max_chunk_s), end - done)
      if n not in compiled:  # ahead-of-time compile, so compile and run times are separate
        tc = time.time()
        compiled[n] = chunk_fn.lower(state, hparams, target, num_steps=n).compile()
        compile_s += time.time() - tc
      t1 = time.time()
      state, metrics = compiled[n](state, hparams, target)
      if sharding is not None:  # a no-op unless the compiler chose another output layout
        state = jax.device_put(state, sharding)
      metrics = restarts.gather(metrics)  # blocks until the chunk is done
      run_s += time.time() - t1
      rate = n / max(time.time() - t1, 1e-9)
      done += n
      rec = {
        "step": done,
        "time_s": time.time() - t0,
        **metrics,
        "diverged": restarts.gather(state.diverged),
      }
      history.append(rec)
      if log:
        _log_chunk(
          attack.name, restarts.gather(state.loss), rec, total, (total - done) / max(rate, 1e-9)
        )
      if checkpoint is not None:
        checkpoint.chunks.append(resume.chunk_record(rec))
        if checkpoint.every and (len(checkpoint.chunks) % checkpoint.every == 0 or done >= total):
          checkpoint.save(state, keys, stages[0][1])
      if progress is not None:
        progress(state, rec)
  return RunResult(state, history, compile_s, run_s)


def resume_state(
  path: str,
  attack: Attack,
  x_init: XInitFn,
  keys,
  hparams: HParams,
  target: Target,
  batching: str = "auto",
):
  """``(state, chunk records, meta)`` of a sweep saved by :class:`~recon_jax.engine.resume.Saver`,
  checked by :func:`~recon_jax.engine.resume.restore` against this sweep's own init."""
  init_fn, _ = make_runner(attack, x_init, batching=batching)
  hp = {k: jnp.asarray(v) for k, v in hparams.items()}
  template = resume.run_tree(jax.eval_shape(init_fn, keys, hp, target), keys, hparams)
  return resume.restore(path, template, keys, hparams)


class AttackRun(NamedTuple):
  """What :func:`run_attack` returns (host numpy arrays, restart axis first)."""

  candidates: np.ndarray  # [R, m, *input_shape], the attack's input space
  weights: np.ndarray  # [R, m] lambda (KKT) or ones
  final_loss: np.ndarray  # [R], NaN where the restart diverged
  diverged: np.ndarray  # [R] bool
  chunks: list  # JSON records of every chunk (a resumed run: all of them)
  state: Any  # the final batched loop state
  compile_s: float
  run_s: float
  inner: Any = None  # the attack's final state, host arrays gathered from every process


def _check_run_arguments(attack, x_init, keys, stages, target, chunk_steps, batching) -> None:
  """ConfigError naming the first argument of :func:`run_attack` it cannot run with."""
  if not isinstance(attack, Attack):
    raise ConfigError(
      f"attack must be an Attack (init, step, candidates), got {attack!r}.", "attack"
    )
  if not callable(x_init):
    raise ConfigError("x_init must be a function (key, hparams) -> x0 (see make_x_init).", "x_init")
  if not isinstance(target, Target):
    raise ConfigError(
      f"target must be a Target (see make_target), got {type(target).__name__}.", "target"
    )
  k = np.asarray(
    jax.random.key_data(keys)
    if jnp.issubdtype(jnp.asarray(keys).dtype, jax.dtypes.prng_key)
    else keys
  )
  if k.ndim != 2 or k.shape[0] < 1:
    raise ConfigError(
      f"keys must be [R] PRNG keys (jax.random.split(key, R)), got shape {k.shape}.", "keys"
    )
  r = k.shape[0]
  arguments.count("chunk_steps", chunk_steps)
  if batching not in BATCHINGS:
    raise ConfigError(f"batching must be one of {BATCHINGS}, got {batching!r}.", "batching")
  if isinstance(stages, (str, bytes)) or not hasattr(stages, "__len__") or not len(stages):
    raise ConfigError("stages must be a non-empty list of (steps, hparams).", "stages")
  for i, stage in enumerate(stages):
    if not (isinstance(stage, (tuple, list)) and len(stage) == 2):
      raise ConfigError(f"stages[{i}] must be (steps, hparams), got {stage!r}.", "stages")
    steps, hp = stage
    arguments.count(f"stages[{i}] steps", steps, low=0)
    if not hasattr(hp, "items"):
      raise ConfigError(f"stages[{i}] hparams must be a dict of [R] arrays.", "stages")
    for name, v in hp.items():
      a = np.asarray(v)
      if a.shape != (r,):
        raise ConfigError(
          f"stages[{i}] hparams[{name!r}] must have one value per restart ([{r}], as keys), "
          f"got shape {a.shape}.",
          "stages",
        )
      if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
        raise ConfigError(f"stages[{i}] hparams[{name!r}] holds NaN or infinite values.", "stages")
  h0 = {name: np.asarray(v)[0] for name, v in stages[0][1].items()}
  key0 = jnp.asarray(keys)[0]
  try:
    x0 = jax.eval_shape(lambda: x_init(key0, h0))
  except ConfigError:
    raise
  except Exception as e:  # noqa: BLE001 (the user's function: named, with its own error)
    raise ConfigError(f"x_init(key, hparams) fails: {type(e).__name__}: {e}", "x_init") from None
  m = int(np.shape(target.labels)[0]) if np.ndim(target.labels) else None
  if m is not None and (not x0.shape or x0.shape[0] != m):
    raise ConfigError(
      f"x_init makes candidates of shape {x0.shape}; the target's labels are for {m} "
      "candidates (the first axis).",
      "x_init",
    )
  if attack.prepare is None:  # an abstract first step: the candidates must fit the network

    def first_step():
      state = init_one(attack, x_init, key0, h0, target)
      return attack.step(state.inner, h0, target)

    try:
      jax.eval_shape(first_step)
    except ConfigError:
      raise
    except Exception as e:  # noqa: BLE001 (flax's shape errors, named as the argument)
      first = str(e).strip().splitlines()[0] if str(e).strip() else ""
      raise ConfigError(
        f"x_init's candidates of shape {x0.shape[1:]} do not fit the attack's network or "
        f"target ({type(e).__name__}: {first[:200]}).",
        "x_init",
      ) from None


def run_attack(
  attack: Attack,
  x_init,
  keys,
  stages: Sequence[Tuple[int, HParams]],
  target: Target,
  *,
  chunk_steps: int = 500,
  batching: str = "auto",
  state_file: Optional[StateFile] = None,
  log: bool = True,
) -> AttackRun:
  """Runs ``attack`` from ``x_init`` for R = len(keys) restarts through ``stages``.

  Args:
    attack: the attack.
    x_init: ``(key, hparams) -> x0`` (see :mod:`recon_jax.engine.inits`).
    keys: [R] PRNG keys.
    stages: ``[(steps, hparams)]`` (see :func:`recon_jax.engine.sweep.stages`).
    target: what the attacker sees.
    chunk_steps: steps per compiled chunk.
    batching: 'auto', 'vmap' or 'map' over restarts.
    state_file: where and how often to save the run, and whether to continue from
      that file (None: never saved).
    log: one log line per chunk.
  """
  _check_run_arguments(attack, x_init, keys, stages, target, chunk_steps, batching)
  state0, chunks, sf = None, [], state_file
  if sf is not None and sf.resume:
    state0, chunks, _ = resume_state(sf.path, attack, x_init, keys, stages[0][1], target, batching)
  carried = getattr(sf, "carried", None)  # a direct attack's memo, before the search
  ckpt = resume.Saver(sf.path, sf.every, sf.meta, chunks, carried) if sf is not None else None
  res = run_stages(
    attack,
    x_init,
    keys,
    stages,
    target,
    chunk_steps=chunk_steps,
    batching=batching,
    state=state0,
    log=log,
    checkpoint=ckpt,
  )
  chunks = [resume.chunk_record(r) for r in res.history] if ckpt is None else ckpt.chunks
  inner = restarts.gather(res.state.inner)
  cx, w = jax.vmap(attack.candidates)(inner)
  diverged = np.asarray(restarts.gather(res.state.diverged))
  final_loss = np.where(diverged, np.nan, restarts.gather(res.state.loss))
  return AttackRun(
    np.asarray(cx),
    np.asarray(w),
    np.asarray(final_loss, np.float64),
    diverged,
    chunks,
    res.state,
    res.compile_s,
    res.run_s,
    inner,
  )
