"""The binaries stay thin: a binary is a config plus a report, the pipeline lives in the
library.  Static: counts lines, imports nothing."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# experiments/*.py and experiments/configs/*.py together: 1000, and 30 for the lines every
# binary opens with to hear signals before the library and JAX load (experiments/__init__)
MAX_EXPERIMENT_LINES = 1030
# A module a reader can hold in mind, a function one screenful or two.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 120
SOURCE_ROOTS = ("recon_jax", "experiments", "benchmarks", "reproduction")


def experiment_lines() -> dict:
  """Lines of each Python file under experiments/, by path relative to the checkout."""
  return {
    str(p.relative_to(ROOT)): len(p.read_text().splitlines())
    for p in sorted((ROOT / "experiments").rglob("*.py"))
  }


def test_experiments_stay_within_their_line_budget():
  lines = experiment_lines()
  assert "experiments/reconstruct.py" in lines  # the count reads the real folder
  total = sum(lines.values())
  largest = sorted(lines.items(), key=lambda kv: -kv[1])[:3]
  assert total <= MAX_EXPERIMENT_LINES, (
    f"experiments/ is {total} lines (at most {MAX_EXPERIMENT_LINES}); the largest: {largest}. "
    "Move logic into the library, or shorten the configs' comments."
  )


def size_problems(path: pathlib.Path, text: str) -> list:
  """The module's length and every function's over their budgets, one line each."""
  lines = len(text.splitlines())
  out = [f"{path}: {lines} lines"] if lines > MAX_MODULE_LINES else []
  for node in ast.walk(ast.parse(text)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      n = node.end_lineno - node.lineno + 1
      if n > MAX_FUNCTION_LINES:
        out.append(f"{path}:{node.lineno} {node.name}: {n} lines")
  return out


def test_modules_and_functions_stay_within_their_sizes():
  paths = [p for root in SOURCE_ROOTS for p in sorted((ROOT / root).rglob("*.py"))]
  assert any(p.name == "pipeline.py" for p in paths)  # the walk reads the real tree
  problems = [x for p in paths for x in size_problems(p.relative_to(ROOT), p.read_text())]
  assert not problems, (
    f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function "
    "(split it by what it does):\n" + "\n".join(problems)
  )


def test_the_size_check_catches_a_long_module_and_a_long_function():
  body = "\n".join(f"  x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
  found = size_problems(pathlib.Path("m.py"), f"def f():\n{body}\n" + "\n" * MAX_MODULE_LINES)
  assert any("f: 121 lines" in x for x in found) and any("m.py: " in x for x in found)
  assert size_problems(pathlib.Path("m.py"), "def g():\n  return 1\n") == []
