"""Benchmarks of recon_jax against the machine's own matmul ceiling (see bench.py)."""
