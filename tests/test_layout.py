"""The binaries stay thin: a binary is a config plus a report, the pipeline lives in the
library.  Static: counts lines, imports nothing."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# experiments/*.py and experiments/configs/*.py together: 1000, and 30 for the lines every
# binary opens with to hear signals before the library and JAX load (experiments/__init__)
MAX_EXPERIMENT_LINES = 1030


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
