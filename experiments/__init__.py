"""The binaries: ``python -m experiments.NAME``, each a main over :mod:`recon_jax.cli`."""

import sys

HELP_ARGS = ("help", "h", "?", "helpshort", "helpfull")


def starting(name: str) -> None:
  """A binary's first line, said before JAX and the library load (seconds, more on a busy
  machine), so that a person at a terminal knows it started: on stderr, and only there
  (a captured run, and --help, stay as they are)."""
  asks_help = any(a.split("=")[0].lstrip("-") in HELP_ARGS for a in sys.argv[1:])
  if sys.stderr.isatty() and not asks_help:
    print(
      f"{name}: starting; loading JAX and the library, then every setting and file is "
      "checked before any work",
      file=sys.stderr,
      flush=True,
    )
