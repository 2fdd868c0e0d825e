"""Studies: what the binaries run.  The main job (:mod:`.pipeline`, its settings in
:mod:`.job` and :mod:`.checks`), the 2-D toy, the initialisation study, the efficacy harness,
the claims and the reproduction, each writing its workdir through :mod:`.runner`; their
figures in :mod:`.figures`."""
