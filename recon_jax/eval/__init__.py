"""Scoring reconstructions against the truth; only this package reads the training set.

* :mod:`recon_jax.eval.images`: image metrics (stretch, NCC, SSIM), matching
  with voting, strict recovery, the mean-image and held-out baselines.
* :mod:`recon_jax.eval.report`: the one evaluation every attack's candidates
  go through, as a JSON-able report dict (figures are drawn by
  :mod:`recon_jax.studies.figures`).
* :mod:`recon_jax.eval.points`: point clouds (the 2-D toy).
* :mod:`recon_jax.eval.nearest`: nearest-neighbour distances to several
  reference sets (the initialisation study).
"""
