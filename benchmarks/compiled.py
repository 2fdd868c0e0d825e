"""What XLA made of a compiled program: the dots of its optimised HLO, each rebuilt as a
program of its own to time alone, and its memory (kkt_step.py's breakdown and memory)."""

from __future__ import annotations

import re

_DEF = re.compile(r"^\s*(?:ROOT\s+)?(%[\w.\-]+)\s*=\s*(\w+)\[([\d,]*)\]")
_DOT = re.compile(
  r"^\s*(?:ROOT\s+)?%[\w.\-]+\s*=\s*\w+\[[\d,]*\][^ ]*\s+dot\((%[\w.\-]+),\s*"
  r"(%[\w.\-]+)\),\s*lhs_(?:batch_dims=\{([\d,]*)\},\s*lhs_)?contracting_dims="
  r"\{([\d,]*)\},\s*rhs_(?:batch_dims=\{([\d,]*)\},\s*rhs_)?contracting_dims="
  r"\{([\d,]*)\}"
)


def hlo_dots(hlo_text: str):
  """(lhs shape, rhs shape, dimension numbers) of every dot in an optimised HLO module."""
  dots, shapes = [], {}
  ints = lambda g: tuple(int(s) for s in g.split(",") if s) if g else ()
  for line in hlo_text.splitlines():
    if line.rstrip().endswith("{") and (
      "computation" in line or line.lstrip().startswith(("%", "ENTRY"))
    ):
      shapes = {}  # a new computation: names are local to it
    m = _DEF.match(line)
    if m:
      shapes[m.group(1)] = ints(m.group(3))
    m = _DOT.match(line)
    if m and m.group(1) in shapes and m.group(2) in shapes:
      dn = ((ints(m.group(4)), ints(m.group(6))), (ints(m.group(3)), ints(m.group(5))))
      dots.append((shapes[m.group(1)], shapes[m.group(2)], dn))
  return dots


class Dot:
  """A compiled lax.dot_general of ones of these shapes, its FLOPs and its timings."""

  def __init__(self, lhs, rhs, dn, dt):
    import jax
    from jax import lax
    import jax.numpy as jnp
    import numpy as np

    dot = lambda a, b: lax.dot_general(a, b, dn)
    self.lhs, self.rhs, self.dn = lhs, rhs, dn
    self.a, self.b = jnp.ones(lhs, dt), jnp.ones(rhs, dt)
    out = jax.eval_shape(dot, self.a, self.b).shape
    self.flops = 2.0 * float(np.prod([lhs[i] for i in dn[0][0]])) * float(np.prod(out))
    self.f = jax.jit(dot).lower(self.a, self.b).compile()
    self.times, self.cpu = [], []

  def __call__(self):
    return self.f(self.a, self.b)

  def row(self) -> dict:
    return {
      "lhs": list(self.lhs),
      "rhs": list(self.rhs),
      "contract": [list(self.dn[0][0]), list(self.dn[0][1])],
      "batch": [list(self.dn[1][0]), list(self.dn[1][1])],
      "s": min(self.times),
      "gflops": self.flops / min(self.times) / 1e9,
      "gflop_per_cpu_s": self.flops / min(self.cpu) / 1e9,
    }


def program_memory(compiled, compile_s: float) -> dict:
  """XLA's memory_analysis of a compiled program, and its estimated peak: arguments +
  temporaries + outputs not aliased to (donated) arguments."""
  ma = compiled.memory_analysis()
  fields = ("temp", "argument", "output", "alias")
  out = {f"{f}_size_in_bytes": int(getattr(ma, f"{f}_size_in_bytes", 0)) for f in fields}
  out["peak_bytes"] = (
    sum(out[f"{f}_size_in_bytes"] for f in fields[:3]) - out["alias_size_in_bytes"]
  )
  out["compile_s"] = compile_s
  return out
