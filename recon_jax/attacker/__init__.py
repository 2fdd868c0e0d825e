"""The attacker's side, apart from the attacks that read it and the evaluation that scores it.

* :mod:`recon_jax.attacker.view`: the threat model as a type: :class:`AttackerView`, what
  the attacker holds (theta*, theta_0 where known, the labels, the public pool, the pixel
  box, the image shape), built once by the job and never holding a training image; and
  :func:`~recon_jax.attacker.view.oracle_starts`, the one named way a training image
  reaches a search (as its starts), which the report then names.
* :mod:`recon_jax.attacker.selection`: the attacker's per-candidate scores (lambda,
  agreement, leave-one-out, margin), from what it holds alone.
* :mod:`recon_jax.attacker.stability`: the stability score (re-runs the attack).

How well these scores tell the real reconstructions is measured against the truth in
:mod:`recon_jax.eval.trusted` (the evaluation's: it reads the training set).
"""
