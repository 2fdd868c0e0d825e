"""The papers' reproduction, apart from the library: which runs reproduce which claim of Haim
et al., Buzaglo et al. and Runkel et al. (:mod:`reproduction.claims`), the driver that
runs them (:mod:`reproduction.driver`, behind ``python -m experiments.reproduce``) and the
RESULTS.md writer (:mod:`reproduction.results_md`).  Not installed with ``recon_jax``: it
runs from a checkout, like the binaries.
"""
