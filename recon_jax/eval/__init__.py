"""Scoring reconstructions against the truth; only this package reads the training set (a
search starts from it only through the named oracle, :mod:`recon_jax.attacker.view`).

* :mod:`recon_jax.eval.similarity`: stretch to [0, 1], normalised
  cross-correlation, SSIM (dm-pix) and its filter sizes.
* :mod:`recon_jax.eval.images`: matching with voting, strict recovery and its
  thresholds, the mean-image and held-out baselines.
* :mod:`recon_jax.eval.ranking`: ROC AUC and precision@k of a score against the truth.
* :mod:`recon_jax.eval.trusted`: whether the attacker's own scores
  (:mod:`recon_jax.attacker`, which reads no training image) tell the real reconstructions,
  measured against the truth (ROC AUC, precision@k; the candidates a fixed score trusts most).
* :mod:`recon_jax.eval.identifiability`: whether the training set fits the attack's
  equations best, against the candidates and a family of other exact fits.
* :mod:`recon_jax.eval.evaluation`: the one evaluation every attack's candidates
  go through, as a JSON-able report dict (figures are drawn by
  :mod:`recon_jax.io.plots`).
* :mod:`recon_jax.eval.membership`: every given image, training or held-out, scored by
  one rule, and the membership test of that score (ROC AUC, TPR at low FPR, a
  permutation p-value), as privacy audits report it.
* :mod:`recon_jax.eval.scoring`: a run's candidates scored in one call (identifiability,
  the evaluation, the attacker's own scores), as a reconstruction job needs them.
* :mod:`recon_jax.eval.verdict`: the verdict and the warnings a reader needs first, read
  off :mod:`recon_jax.eval.metrics_json`: the declaration of every key of metrics.json,
  one frozen dataclass per section, from which the job writes it and its readers (the
  verdict, the efficacy harness, the reproduction, report.md, the figures) read it typed.
* :mod:`recon_jax.eval.points`: point clouds (the 2-D toy).
* :mod:`recon_jax.eval.nearest`: nearest-neighbour distances to several
  reference sets (the initialisation study).
"""
