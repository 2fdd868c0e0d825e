"""What the benchmark scripts share: options, JSON output, timing, the matmul ceiling, the
precision switch, the machine's record, and the problems several scripts time.

Every script prints one JSON object per measurement (stdout, flushed) and appends the
same lines to ``--out``; it starts with an ``env`` record and ends with a ``done`` one.
Timings are the best (minimum) of several runs after a warm-up call: the machine may be
shared, and the minimum is the least disturbed estimate.  Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import platform
import time

# The KKT sizes (d, h, m) of the d-h-h-1 MLP that kkt_step.py and batching.py time.
KKT_SIZES = ((64, 1000, 100), (784, 1000, 200), (3072, 1000, 200))
QUICK_KKT_SIZES = ((64, 64, 16),)
MAX_STEPS_PER_CHUNK = 50


# ----------------------------------------------------------------------------
# Options and output.
# ----------------------------------------------------------------------------
def parser(doc: str, *, x64: bool = True) -> argparse.ArgumentParser:
  """The options every script takes (``--quick``, ``--out``, ``--repeats``, and ``--x64``
  where it runs float64 variants); a script adds its own before :func:`parse`."""
  p = argparse.ArgumentParser(
    description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of seconds")
  p.add_argument("--out", default="", help="also append the JSON lines to this file")
  p.add_argument("--repeats", type=int, default=None, help="timed runs per measurement")
  if x64:
    p.add_argument(
      "--x64",
      action=argparse.BooleanOptionalAction,
      default=None,
      help="also run the float64 variants (default: on, off with --quick)",
    )
  return p


def parse(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
  """Parsed options with the common defaults filled in; ``args.dtypes`` lists the blocks."""
  args = p.parse_args(argv)
  if getattr(args, "x64", False) is None:
    args.x64 = not args.quick
  if args.repeats is None:
    args.repeats = 2 if args.quick else 3
  if args.repeats < 1:
    p.error("--repeats must be >= 1")
  args.dtypes = ["float32"] + (["float64"] if getattr(args, "x64", False) else [])
  return args


def int_list(text: str) -> list:
  """``'1,8,32'`` -> [1, 8, 32] (empty -> [])."""
  return [int(s) for s in text.split(",") if s.strip()]


def _clean(v):
  import numpy as np

  if isinstance(v, np.generic):
    v = v.item()
  if isinstance(v, float):
    return float(f"{v:.6g}") if math.isfinite(v) else None
  if isinstance(v, dict):
    return {k: _clean(u) for k, u in v.items()}
  if isinstance(v, (list, tuple)):
    return [_clean(u) for u in v]
  return v


class Emitter:
  """Prints one JSON line per record to stdout (flushed) and appends it to ``--out``;
  :meth:`section` times a part of the script for the closing ``done`` record."""

  def __init__(self, out: str):
    self.out = out
    self.records = []
    self.sections = {}
    self.start = time.perf_counter()

  def __call__(self, rec: dict) -> dict:
    rec = {k: _clean(v) for k, v in rec.items()}
    line = json.dumps(rec, sort_keys=False, allow_nan=False)
    print(line, flush=True)
    if self.out:
      with open(self.out, "a") as f:
        f.write(line + "\n")
    self.records.append(rec)
    return rec

  @contextlib.contextmanager
  def section(self, name: str):
    t = time.perf_counter()
    try:
      yield
    finally:
      self.sections[name] = self.sections.get(name, 0.0) + time.perf_counter() - t

  def done(self) -> dict:
    return self(
      {"bench": "done", "wall_s": time.perf_counter() - self.start, "sections_s": self.sections}
    )


def machine() -> dict:
  """The backend, device kind and CPU count: what a figure was measured on."""
  import jax

  return {
    "backend": jax.default_backend(),
    "device_kind": jax.devices()[0].device_kind,
    "cpu_count": os.cpu_count(),
  }


def start(script: str, args: argparse.Namespace, **extra) -> Emitter:
  """An :class:`Emitter` for ``--out``, after the run's ``env`` record."""
  import jax

  emit = Emitter(args.out)
  emit(
    {
      "bench": "env",
      "script": script,
      "date": datetime.datetime.now().isoformat(timespec="seconds"),
      "jax": jax.__version__,
      **machine(),
      "devices": jax.device_count(),
      "cpu": platform.processor() or platform.machine(),
      "python": platform.python_version(),
      "quick": args.quick,
      "dtypes": args.dtypes,
      "repeats": args.repeats,
      "timing": "best (min) of the timed runs after a warm-up call",
      **extra,
    }
  )
  return emit


# ----------------------------------------------------------------------------
# Timing.
# ----------------------------------------------------------------------------
@contextlib.contextmanager
def precision(dtype: str):
  """x64 on for 'float64', off for 'float32' (as the binaries set it); yields the library's
  float dtype of the block, ``float_dtype()``.  The previous setting is restored."""
  import jax

  from recon_jax.types import float_dtype

  old = jax.config.read("jax_enable_x64")
  jax.config.update("jax_enable_x64", dtype == "float64")
  try:
    yield float_dtype()
  finally:
    jax.config.update("jax_enable_x64", old)


def block(tree):
  import jax

  return jax.block_until_ready(tree)


def best_of(fn, repeats: int, warmup: int = 1):
  """(min seconds, all seconds) of ``fn()`` (blocked) after ``warmup`` untimed calls."""
  for _ in range(warmup):
    block(fn())
  times = []
  for _ in range(repeats):
    t = time.perf_counter()
    block(fn())
    times.append(time.perf_counter() - t)
  return min(times), times


def timed(fn):
  """(wall, CPU) seconds of ``fn()``, blocked.  CPU time counts all the process's threads:
  insensitive to what other processes take, blind to idle cores in serial sections."""
  t, c = time.perf_counter(), time.process_time()
  block(fn())
  return time.perf_counter() - t, time.process_time() - c


def matmul_fn(dtype: str, n: int):
  """(compiled n x n matmul thunk, its FLOPs)."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  with precision(dtype) as dt:  # operands drawn by numpy: no program to compile for them
    a, b = jnp.asarray(np.random.default_rng(0).standard_normal((2, n, n)), dt)
    f = jax.jit(jnp.matmul).lower(a, b).compile()
  return lambda: f(a, b), 2 * n**3


class Ceiling:
  """Best matmul GFLOP/s seen per dtype (the utilisation denominator)."""

  def __init__(self):
    self.best = {}

  def measure(self, dtype: str, n: int, repeats: int, emit=None, label="ceiling"):
    mm, flops = matmul_fn(dtype, n)
    best, times = best_of(mm, repeats)
    gflops = flops / best / 1e9
    self.best[dtype] = max(self.best.get(dtype, 0.0), gflops)
    if emit is not None:
      emit(
        {
          "bench": "matmul",
          "what": label,
          "dtype": dtype,
          "n": n,
          "best_s": best,
          "gflops": gflops,
          "best_gflops_so_far": self.best[dtype],
          "runs": len(times),
        }
      )
    return gflops

  def get(self, dtype: str) -> float:
    return self.best.get(dtype, float("nan"))

  def steps_per_chunk(self, dtype: str, flops_per_step: float, chunk_s: float):
    """(steps, estimated seconds of one step): about ``chunk_s`` of work at 70% of the
    ceiling, at least 1 and at most MAX_STEPS_PER_CHUNK steps."""
    ceil = self.get(dtype)
    est = flops_per_step / (0.7 * ceil * 1e9) if ceil == ceil else 0.1
    return int(min(MAX_STEPS_PER_CHUNK, max(1, math.ceil(chunk_s / max(est, 1e-6))))), est


@functools.lru_cache(maxsize=None)
def _compiled_init():
  import jax

  from recon_jax.victims import models

  return jax.jit(models.init_params, static_argnums=(0, 2, 3))


def init_params(module, input_shape, seed: int = 0):
  """``models.init_params`` for one input of ``input_shape`` (an int: [d]) in the current
  float dtype, as one compiled program (eagerly, each initialiser op compiles on its own)."""
  import jax

  from recon_jax.types import float_dtype

  shape = (input_shape,) if isinstance(input_shape, int) else tuple(input_shape)
  return _compiled_init()(module, jax.random.PRNGKey(seed), shape, float_dtype())


# ----------------------------------------------------------------------------
# The attack's compiled chunk, as the product runs it.
# ----------------------------------------------------------------------------
def attack_hparams(num_restarts: int, seed: int = 0, preset: str = "lfw") -> dict:
  """Per-restart hyperparameters of the main job's sweep at ``preset``, as the loop gets them."""
  import jax.numpy as jnp

  from experiments.configs import reconstruct as configs
  from recon_jax import attacks
  from recon_jax.job import planning

  cfg = configs.get_config(preset)
  cfg.search.num_restarts, cfg.search.seed = num_restarts, seed
  return {k: jnp.asarray(v) for k, v in planning.hparams_for(cfg, attacks.get(cfg.attack)).items()}


class ChunkProgram:
  """One compiled chunk of ``loop.make_runner`` (the product code path): ``num_steps``
  steps of R restarts, state carried from call to call.  Build it inside ``precision``."""

  def __init__(self, attack, x_init, target, hparams, batching, num_steps, dtype):
    import jax

    from recon_jax.engine import loop

    self.num_restarts = len(next(iter(hparams.values())))
    self.batching, self.k, self.dtype = loop.resolve_batching(batching), num_steps, dtype
    self.target, self.hp = target, hparams
    self.long = False  # a chunk of >= 2 s: no warm-up call (set by who sizes the chunk)
    keys = jax.random.split(jax.random.PRNGKey(1), self.num_restarts)
    init_fn, chunk_fn = loop.make_runner(attack, x_init, batching=self.batching)
    self.state = init_fn(keys, hparams, target)
    t = time.perf_counter()
    self.compiled = chunk_fn.lower(self.state, hparams, target, num_steps=num_steps).compile()
    self.compile_s = time.perf_counter() - t
    self.times, self.cpu_times = [], []

  def call(self, timed=True):
    with precision(self.dtype):
      t, c = time.perf_counter(), time.process_time()
      self.state, metrics = self.compiled(self.state, self.hp, self.target)
      block((self.state, metrics))
      if timed:
        self.times.append(time.perf_counter() - t)
        self.cpu_times.append(time.process_time() - c)

  def timing(self) -> dict:
    """The timed chunks as steps: the best chunk over its steps."""
    import numpy as np

    step_s = min(self.times) / self.k
    loss = np.asarray(self.state.loss)
    return {
      "R": self.num_restarts,
      "batching": self.batching,
      "steps_per_chunk": self.k,
      "timed_chunks": len(self.times),
      "step_s": step_s,
      "steps_per_s": 1.0 / step_s,
      "restart_steps_per_s": self.num_restarts / step_s,
      "compile_s": self.compile_s,
      "chunk_times_s": self.times,
      "cpu_s_per_step": min(self.cpu_times) / self.k,
      "final_loss_min": float(np.nanmin(loss)) if np.isfinite(loss).any() else None,
    }


def time_rounds(programs, rounds: int, mm=None):
  """One warm-up call of each program (none for chunks estimated >= 2 s), then ``rounds``
  interleaved rounds, each one chunk of every program (and one call of the matmul ``mm``,
  the "local" ceiling under the same load): on a shared machine every program then sees
  the same mix of load and the ratios between them hold.  Returns the matmul's
  (min wall, min CPU) seconds, or None."""
  for p in programs:
    if not p.long:
      p.call(timed=False)
  local, local_cpu = [], []
  for _ in range(rounds):
    if mm is not None:
      wall, cpu = timed(mm)
      local.append(wall)
      local_cpu.append(cpu)
    for p in programs:
      p.call()
  return (min(local), min(local_cpu)) if local else None


# ----------------------------------------------------------------------------
# The KKT problem of Haim et al.'s victim, built by the library (kkt_step.py, batching.py).
# ----------------------------------------------------------------------------
def kkt_flops(d: int, h: int, m: int) -> int:
  """FLOPs of one KKT step of one restart (issue 5): the big matmuls of loss and gradient."""
  return 10 * m * d * h + 14 * m * h * h


def kkt_problem(d: int, h: int, m: int, seed: int = 0):
  """(attack, x_init, target) of the binary KKT attack on a d-h-h-1 MLP with bias='first'.

  The pixel box is [0, 1] after subtracting a per-pixel mean of 0.45, as for mean-subtracted
  data; theta*, the box and x take the current ``float_dtype()``.
  """
  import numpy as np

  import recon_jax
  from recon_jax.attacks import kkt
  from recon_jax.engine import inits
  from recon_jax.types import float_dtype
  from recon_jax.victims import models, targets

  module = models.build_model("mlp", widths=(h, h), bias="first")
  params = init_params(module, d, seed)
  target = targets.make_target(params, recon_jax.candidate_labels("binary", m), np.full((d,), 0.45))
  attack = kkt.kkt_attack(models.make_apply_fn(module), "binary")
  return attack, inits.gaussian(m, (d,), float_dtype()), target


def kkt_program(d, h, m, dtype, num_restarts, batching, ceiling: Ceiling, chunk_s: float):
  """The KKT chunk of (d, h, m) at R restarts, about ``chunk_s`` seconds of steps long."""
  flops = kkt_flops(d, h, m)
  k, est = ceiling.steps_per_chunk(dtype, num_restarts * flops, chunk_s)
  with precision(dtype):
    attack, x_init, target = kkt_problem(d, h, m)
    prog = ChunkProgram(attack, x_init, target, attack_hparams(num_restarts), batching, k, dtype)
  prog.size, prog.flops, prog.long = (d, h, m), flops, est * k >= 2.0
  return prog
