"""The batched search machinery: the one loop every attack runs in (``loop``), its sweep of
hyperparameters (``sweep``), the x-initialisations (``inits``), the resumable run state
(``resume``) and the matmul precision settings (``precision``)."""
