r"""Runkel et al.'s bilevel attack (``recon_jax.attacks.bilevel``, implicit differentiation).

  python -m benchmarks.bilevel                   # float64 (float32 with --no-x64)
  python -m benchmarks.bilevel --quick           # smoke run (seconds)

* ``outer_step``: the attack's outer step from theta* against its inner solve alone (the
  difference is the Hessian solve), CG vs the quasi-Newton memory, on an affine and a
  one-hidden-layer net at digits size; the target is outer <= 3x inner.
* ``memory_vs_iters``: time and XLA temp bytes of the compiled outer step as the inner
  iterations T grow (fixed-step GD, exactly T steps), implicit differentiation
  (custom_root + CG) against reverse mode through the unrolled loop (the baseline).
* ``memory_growth``: temp bytes at the largest T over the smallest (implicit: flat).

One dtype: float64 when enabled (implicit gradients want the inner tolerance 1e-7 that
float32 cannot reach reliably), else float32.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple, Optional

from benchmarks import common
from benchmarks.common import block, precision


def parse_args(argv=None):
  args = common.parse(common.parser(__doc__), argv)
  args.dtypes = args.dtypes[-1:]
  return args


def bilevel_problem(net: str, d: int, n: int, width: int, seed: int = 0):
  """(apply_fn, activation name, target, x) of a small binary bilevel problem: theta* of an
  affine or one-hidden-layer net, n uniform candidates in the [0, 1] box."""
  import jax.numpy as jnp
  import numpy as np

  import recon_jax
  from recon_jax.types import float_dtype
  from recon_jax.victims import models, targets

  dt = float_dtype()
  if net == "affine":
    module, act = models.build_model("affine", init="kaiming"), None
  else:
    module, act = models.build_model("one_hidden", widths=(width,), init="kaiming"), "softplus"
  theta_star = common.init_params(module, d, seed)
  target = targets.make_target(theta_star, recon_jax.candidate_labels("binary", n))
  x = jnp.asarray(np.random.default_rng(seed).uniform(0, 1, (n, d)), dt)
  return models.make_apply_fn(module), act, target, x


WD = 1e-3  # the victims' weight decay, in the inner energy and the attack


class Problem(NamedTuple):
  """A bilevel problem of :func:`bilevel_problem` at one size and dtype, with what both
  measurements read of it."""

  net: str
  dtype: str
  d: int
  n: int
  width: int
  apply_fn: Any
  act: Optional[str]
  target: Any
  x: Any  # [n, d] candidates
  y: Any  # their labels, in x's dtype
  energy: Any  # the inner problem's energy (logistic loss, weight decay WD)
  n_params: int


def run_bilevel(args, dtypes, emit):
  """One outer step against its inner solve, and memory vs inner iterations."""
  try:
    from recon_jax import implicit  # noqa: F401
    from recon_jax.attacks import bilevel  # noqa: F401
  except ImportError as e:
    emit({"bench": "bilevel", "skipped": f"recon_jax.attacks.bilevel / implicit missing ({e})"})
    return
  if args.quick:
    d, n, width, iters, nets = 16, 6, 8, (2, 8), ("affine",)
  else:
    d, n, width, iters, nets = 64, 20, 256, (10, 30, 100, 300), ("affine", "one_hidden")
  # The attack's default inner solver (L-BFGS, tol 1e-7, <= 100 iterations); --quick: a
  # 5-step GD inner solve (L-BFGS takes seconds to compile).
  inner_kw = (
    dict(solver="gd", maxiter=5, tol=0.0, stepsize=0.5)
    if args.quick
    else dict(solver="lbfgs", maxiter=100, tol=1e-7, stepsize=0.0)
  )
  for dtype, net in itertools.product(dtypes, nets):
    with precision(dtype):
      p = problem_of(net, dtype, d, n, width)
      # 1. The attack's outer step (attacks.bilevel, from theta*) against its inner solve
      #    alone: the difference is the Hessian solve, CG vs the quasi-Newton memory.
      for hsolve in ("cg",) if args.quick else ("cg", "lbfgs"):
        emit(outer_step(p, hsolve, inner_kw, args.repeats))
      # 2. Memory and time vs inner iterations T (fixed-step GD, tol 0: exactly T steps) of
      #    the attack's outer loss: implicit differentiation (custom_root + CG) against
      #    reverse mode through the unrolled loop (the baseline; not in the library).
      for T in iters:
        for kind in ("implicit", "unrolled"):
          emit(memory_vs_iters(p, T, kind, args.repeats))
  _bilevel_summary(emit)


def problem_of(net: str, dtype: str, d: int, n: int, width: int) -> Problem:
  """:func:`bilevel_problem` and its inner energy (logistic loss, weight decay :data:`WD`)."""
  import jax

  from recon_jax.core import losses
  from recon_jax.victims import models

  apply_fn, act, target, x = bilevel_problem(net, d, n, width)
  energy = losses.energy(apply_fn, "logistic", WD, act and models.get_activation(act))
  n_params = sum(a.size for a in jax.tree_util.tree_leaves(target.params))
  y = target.labels.astype(x.dtype)
  return Problem(net, dtype, d, n, width, apply_fn, act, target, x, y, energy, n_params)


def outer_step(p: Problem, hsolve: str, inner_kw: dict, repeats: int) -> dict:
  """The attack's outer step from theta* against its inner solve alone (timed interleaved,
  under the same load): the ``outer_step`` record."""
  import jax
  import jax.numpy as jnp

  from recon_jax import implicit
  from recon_jax.attacks import bilevel

  apply_fn, act, target, x, y = p.apply_fn, p.act, p.target, p.x, p.y
  inner = implicit.InnerSolve(hessian_solve=hsolve, **inner_kw)
  attack = bilevel.bilevel_attack(apply_fn, "logistic", wd=WD, act=act, inner=inner)
  solve = implicit.make_inner_solve(p.energy, inner)
  hp = {"lr_x": jnp.asarray(0.01, x.dtype)}
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)
  fwd = jax.jit(lambda xx: solve(target.params, xx, y)).lower(x).compile()
  step = jax.jit(attack.step).lower(state, hp, target).compile()
  inner_fn, outer_fn = (lambda: fwd(x)), (lambda: step(state, hp, target))
  block(inner_fn())
  block(outer_fn())
  ti, to = [], []
  for _ in range(max(3, repeats)):  # interleaved: the same load for both
    ti.append(common.timed(inner_fn)[0])
    to.append(common.timed(outer_fn)[0])
  inner_s, outer_s = min(ti), min(to)
  _, metrics = outer_fn()
  return {
    "bench": "bilevel",
    "what": "outer_step",
    "net": p.net,
    "dtype": p.dtype,
    "d": p.d,
    "n": p.n,
    "width": p.width if p.net != "affine" else None,
    "params": p.n_params,
    "inner": inner_kw["solver"],
    "hessian_solve": hsolve,
    "inner_iters": float(metrics["inner_iters"]),
    "inner_grad_norm": float(metrics["inner_grad_norm"]),
    "inner_solve_s": inner_s,
    "outer_step_s": outer_s,
    "hessian_solve_s": max(outer_s - inner_s, 0.0),
    "outer_over_inner": outer_s / inner_s,
    "target_ratio": 3.0,
    "target_met": bool(outer_s / inner_s <= 3.0),
    "temp_bytes": getattr(step.memory_analysis(), "temp_size_in_bytes", None),
    "grad_finite": bool(jnp.isfinite(metrics["grad_x_norm"])),
  }


def memory_vs_iters(p: Problem, T: int, kind: str, repeats: int) -> dict:
  """Time and XLA temp bytes of the compiled outer loss's gradient through ``T`` steps of
  fixed-step GD, differentiated ``kind``: 'implicit' (custom_root + CG) or 'unrolled'
  (reverse mode through the loop): the ``memory_vs_iters`` record."""
  import jax

  from recon_jax import implicit, priors
  from recon_jax.core import losses

  energy, target, y = p.energy, p.target, p.y
  lr_inner = 0.5 if p.net == "affine" else 0.1
  if kind == "implicit":
    solve = implicit.make_inner_solve(
      energy, implicit.InnerSolve(solver="gd", maxiter=T, tol=0.0, stepsize=lr_inner)
    )
  else:

    def solve(theta0, xx, yy):
      def body(th, _):
        g = jax.grad(energy)(th, xx, yy)
        return jax.tree_util.tree_map(lambda a, b: a - lr_inner * b, th, g), None

      return jax.lax.scan(body, theta0, None, length=T)

  def outer(xx):
    theta, _ = solve(target.params, xx, y)
    return losses.tree_sq_dist(theta, target.params) + priors.box_prior(
      xx, target.box_lo, target.box_hi
    )

  compiled = jax.jit(jax.value_and_grad(outer)).lower(p.x).compile()
  t, _ = common.best_of(lambda: compiled(p.x), repeats)
  return {
    "bench": "bilevel",
    "what": "memory_vs_iters",
    "net": p.net,
    "dtype": p.dtype,
    "d": p.d,
    "n": p.n,
    "params": p.n_params,
    "inner": "gd",
    "inner_iters": T,
    "diff": kind,
    "outer_step_s": t,
    "temp_bytes": getattr(compiled.memory_analysis(), "temp_size_in_bytes", None),
  }


def _bilevel_summary(emit):
  """Flatness: temp bytes at the largest T over the smallest, per (net, dtype, diff)."""
  groups = {}
  for r in emit.records:
    if r.get("bench") == "bilevel" and r.get("what") == "memory_vs_iters":
      groups.setdefault((r["net"], r["dtype"], r["diff"]), []).append(r)
  for (net, dtype, diff), rs in groups.items():
    rs = sorted(rs, key=lambda r: r["inner_iters"])
    a, b = rs[0], rs[-1]
    if not a["temp_bytes"]:
      continue
    growth = b["temp_bytes"] / a["temp_bytes"]
    emit(
      {
        "bench": "bilevel",
        "what": "memory_growth",
        "net": net,
        "dtype": dtype,
        "diff": diff,
        "iters_from": a["inner_iters"],
        "iters_to": b["inner_iters"],
        "temp_bytes_from": a["temp_bytes"],
        "temp_bytes_to": b["temp_bytes"],
        "growth": growth,
        **({"flat_target_met": bool(growth <= 1.1)} if diff == "implicit" else {}),
      }
    )


def main(argv=None):
  args = parse_args(argv)
  emit = common.start("bilevel", args)
  with emit.section("bilevel"):
    run_bilevel(args, args.dtypes, emit)
  emit.done()


if __name__ == "__main__":
  main()
