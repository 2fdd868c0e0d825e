"""ml_collections config files of the binaries: ``--config=experiments/configs/NAME.py[:PRESET]``."""

import os


def path(name: str) -> str:
  """The config file ``NAME.py`` of this folder."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
