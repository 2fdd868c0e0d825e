"""Shared test set-up: x64 on for precise gradient checks, loud broadcasting."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _victim_cache(tmp_path_factory):
  """One victim cache for the whole session (per xdist worker): each tiny victim trains once."""
  old = os.environ.get("RECON_JAX_CACHE")
  os.environ["RECON_JAX_CACHE"] = str(tmp_path_factory.mktemp("victim_cache"))
  yield
  if old is None:
    os.environ.pop("RECON_JAX_CACHE", None)
  else:
    os.environ["RECON_JAX_CACHE"] = old
