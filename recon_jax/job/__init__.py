"""The main job, the product: its typed settings (:mod:`.settings`), resolved once into a
:class:`~.planning.Plan` with everything checked before any work (:mod:`.planning`), run
through the one pipeline (:mod:`.pipeline`: victim, target, attack, evaluation, report) and
written into its workdir (:mod:`.run`, figures in :mod:`.figures`); :mod:`.estimate` says
how long the attack and the scoring will take before the attack starts."""
