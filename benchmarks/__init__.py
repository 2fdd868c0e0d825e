"""Benchmarks of recon_jax against the machine's own matmul ceiling: one script per thing
measured, each printing one JSON line per measurement (see README.md)."""
