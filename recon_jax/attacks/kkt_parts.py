"""The parts a KKT attack is built from, as a library user sets them: small frozen groups.

:func:`recon_jax.attacks.kkt.kkt_attack` takes its options in groups, each with its
defaults, a meaning per field and its own checks (made when the group is built):
:class:`Objective` (the terms minimised and their weights), :class:`Multipliers`,
:class:`Subspace` (candidates in a span); the optimiser is
:class:`recon_jax.optim.Steps`, shared with the bilevel attack, and sample splitting
:class:`recon_jax.attacks.splitting.Splitting`.  What goes together is set together
(``Multipliers(kind='tied')``), and a combination across groups is refused by the
factory.  The main job's settings of the same meanings are flat
(:class:`recon_jax.attacks.kkt.KKTOptions`, ``--config.kkt.*``); its build maps them
onto these groups.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from recon_jax.attacks import equations, span
from recon_jax.core.activations import DERIVATIVES
from recon_jax.errors import ConfigError

NORMALIZE = ("mean", "sum")
LAM_INITS = ("uniform", "fit")  # how a restart's multipliers start (Multipliers.init)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Objective:
  """What the attack minimises: the terms of Haim et al.'s eq. (8), their weights, and how
  its stationarity residual is formed."""

  w_stat: float = 1.0
  """alpha_1: the weight of the stationarity residual."""
  w_lam: float = 1.0
  """alpha_2: the weight of the ``lambda >= lam_min`` hinge (free multipliers of a binary
  or multiclass victim; 'general' has none)."""
  w_prior: float = 1.0
  """alpha_3: the weight of the pixel-box prior (:func:`recon_jax.priors.box_prior`)."""
  w_tv: float = 0.0
  """The weight of a total-variation prior on image candidates
  (:func:`recon_jax.priors.tv_prior`; 0: off), a natural-image prior that the stationarity
  equations lack (Refael et al. 2025: without a prior, no leakage)."""
  normalize: str = "mean"
  """'mean' (the sum scaled by 1/m, as the reference code) or 'sum' (paper eq. 6)."""
  derivative: str = "surrogate"
  """'surrogate' (ReLU with derivative sigmoid(alpha x), Haim et al.) or 'exact' (the
  network's own activation: for a smooth victim, softplus or GELU, whose derivative is
  already informative; ``alpha`` is then unused)."""

  def __post_init__(self):
    if self.normalize not in NORMALIZE:
      raise ConfigError(f"normalize must be 'mean' or 'sum', got {self.normalize!r}.")
    if self.derivative not in DERIVATIVES:
      raise ConfigError(f"derivative must be one of {DERIVATIVES}, got {self.derivative!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Multipliers:
  """The multipliers lambda: free or tied to the candidates, how they start in a restart,
  and whether they are refitted."""

  kind: str = "free"
  """'free' (lambda optimised, with the ``lambda >= lam_min`` hinge) or 'tied' (binary
  only): lambda_i = c sigma(-y_i Phi(x_i)), what stationarity of a logistic loss with weight
  decay gives (c = 1/(n wd) there), with the one scale c >= 0 eliminated in closed form at
  every step, so lambda is a function of the candidates, not m free variables."""
  init: str = "uniform"
  """'uniform' (each drawn in [0, 1); in (-1, 1) for 'general') or 'fit' (those that fit the
  reference best with the starting candidates held:
  :func:`recon_jax.attacks.equations.fitted_multipliers`; binary, free multipliers, and
  ``apply_fn`` a :class:`~recon_jax.attacks.equations.OneHidden`).  A start near a training
  image drifts off it under random multipliers, and stays with fitted ones."""
  refit_every: int = 0
  """Every this many steps, the multipliers set to that fit at the current candidates (what
  'fit' needs; 0: never)."""
  outputs: int = 1
  """C, the width of lambda ([m, C]) for problem='general'."""

  def __post_init__(self):
    if self.kind not in equations.MULTIPLIERS:
      raise ConfigError(
        f"Multipliers.kind must be one of {equations.MULTIPLIERS}, got {self.kind!r}.", "kind"
      )
    if self.init not in LAM_INITS:
      raise ConfigError(f"Multipliers.init must be one of {LAM_INITS}, got {self.init!r}.", "init")
    if not (isinstance(self.refit_every, int) and self.refit_every >= 0):
      raise ConfigError(
        f"Multipliers.refit_every must be an integer >= 0, got {self.refit_every!r}.",
        "refit_every",
      )


@dataclasses.dataclass(frozen=True, eq=False)
class Subspace:
  """Candidates searched as their coefficients in a span instead of their d inputs
  (:mod:`recon_jax.attacks.span`): the optimiser, Adam included, acts on the coefficients,
  so the candidates never leave the span.  Needs a dense first layer."""

  basis: Any
  """[d, k] orthonormal columns (:func:`recon_jax.attacks.span.span_basis`)."""
  input_shape: tuple
  """The shape of one candidate (d entries)."""
  dual: Any = None
  """[d, k]: the matrix that encodes inputs as coefficients and that the reference's first
  layer is read with (:func:`recon_jax.attacks.span.whitened`; None: ``basis``)."""

  def __post_init__(self):
    if self.basis is None:
      raise ConfigError("Subspace needs a basis ([d, k]; no span: subspace=None).", "basis")
    shape = tuple(self.input_shape)
    object.__setattr__(self, "input_shape", shape)
    object.__setattr__(self, "basis", span.check_basis(self.basis, shape))
    object.__setattr__(self, "dual", span.check_basis(self.dual, shape))
