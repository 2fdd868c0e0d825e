"""The binaries: ``python -m experiments.NAME``, each a main over :mod:`recon_jax.cli`."""

import sys


def starting(name: str) -> None:
  """Binary ``name``'s first line at a terminal, before JAX and the library load (seconds)."""
  ran = bool(sys.argv) and sys.argv[0].endswith(f"{name}.py") and sys.stderr.isatty()
  if ran and not any(a.lstrip("-").startswith("help") for a in sys.argv[1:]):
    print(f"{name}: starting (loading JAX; every setting is checked first)", file=sys.stderr)
