"""Victims: the networks (:mod:`.models`), their training (:mod:`.train`), the recipe, cache
and stationarity of a trained victim (:mod:`.victim`), checkpoints
(:mod:`recon_jax.io.checkpoint`) and foreign checkpoints imported into them
(:mod:`.importers`)."""
