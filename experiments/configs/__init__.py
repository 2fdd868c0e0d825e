"""ml_collections config files of the binaries: ``--config=experiments/configs/NAME.py[:PRESET]``."""
