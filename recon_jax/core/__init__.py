"""The small pieces everything stands on: activations and the surrogate ReLU
(``activations``), losses, margins and the margin Jacobian (``losses``),
argument checks (``arguments``), the rules a setting obeys (``rules``), multi-process
sharding helpers (``distributed``), a binary's Ctrl-C and SIGTERM (``signals``), a line
at least every 25 s in every phase of a job (``progress``), the host's fits, SVDs and
linear programs, safe on empty and degenerate inputs (``numerics``), and a restart's steps
under the freeze-on-divergence rule, shared by the engine's loop and the stability score
(``stepping``)."""
