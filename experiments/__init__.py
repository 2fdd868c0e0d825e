"""The binaries: ``python -m experiments.NAME``, each a main over :mod:`recon_jax.cli`."""

import sys


def starting(name: str) -> None:
  """Binary ``name``'s first line at a terminal, before JAX and the library load (seconds)."""
  if sys.argv[0].endswith(f"{name}.py") and sys.stderr.isatty() and "--help" not in sys.argv:
    print(f"{name}: starting (loading JAX; every setting is checked first)", file=sys.stderr)
