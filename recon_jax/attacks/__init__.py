"""Attacks: each returns a :class:`recon_jax.types.Attack` (pure init/step)."""
