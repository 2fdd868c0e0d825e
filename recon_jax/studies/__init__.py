"""Studies beside the main job (:mod:`recon_jax.job`): the 2-D toy, the initialisation study,
the efficacy harness over data draws and its leakage map, each run in its workdir by
:mod:`.runner`; their figures in :mod:`.figures`."""
