"""Reading theta* - theta_0 before any program: the dense layers, the decay training kept,
the change's span and whether a cone can be there (:func:`read`, :class:`Reading`), each
unit's signed change in the span (:func:`signed_rows`), the noise floor of a facet's
coefficients (:func:`coefficient_noise`) and the units' pre-activations (:class:`Layers`).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from recon_jax.attacks import span
from recon_jax.attacks.cone.handover import short
from recon_jax.errors import ConfigError
from recon_jax.victims import targets

# Units whose change is below this fraction of the median unit's are dropped from the rows
# (and from the groups of :func:`~recon_jax.attacks.cone.decoding.one_image_seeds`): a unit
# training hardly moved holds its images' coefficients at the size of rounding, where a
# facet's zeros cannot be told.  Set when the cone was built (10 + 10 faces, every facet kept
# one training image's); no sweep of it is recorded.
NEGLIGIBLE = 0.05
# A facet's coefficients below this many times the median unit's change outside the span
# (spread over the d - k directions the span leaves) count as 0 (:func:`coefficient_noise`):
# the floor lifts the exact zeros a program's vertex puts on the facets of the images training
# weighted least to where their other units sit (50 + 50 faces, draw 10: 3.2e-5 of the median
# unit's change; from every fifth image's own pattern 20 of 20 facets then pass, 6 without).
NOISE_MULTIPLE = 3.0


def dense_layers(params):
  """``[(kernel [in, out], bias [out]), ...]`` of a dense network ``layer_0 .. layer_L`` with a
  bias in every hidden layer and one output (the output's bias, which no attack reads, 0
  where there is none), float64.

  Raises:
    ConfigError: another layout (a layer without its bias, more than one output).
  """
  layers = params.get("params", {}) if isinstance(params, dict) else {}
  names = [f"layer_{i}" for i in range(len(layers))]
  dense = [layers.get(name, {}) for name in names]
  ok = (
    len(dense) >= 2
    and set(layers) == set(names)
    and all(isinstance(d, dict) and np.ndim(d.get("kernel")) == 2 for d in dense)
    and all(d.get("bias") is not None for d in dense[:-1])
  )
  ok = ok and np.shape(dense[-1]["kernel"])[1] == 1
  ok = ok and all(
    np.shape(a["kernel"])[1] == np.shape(b["kernel"])[0] for a, b in zip(dense, dense[1:])
  )
  if not ok:
    raise ConfigError(
      "attack=cone reads a dense ReLU network with a bias in every hidden layer and one "
      "output (layers layer_0 .. layer_L).",
      "attack",
    )
  f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
  bias = lambda d: f64(
    d["bias"] if d.get("bias") is not None else np.zeros(np.shape(d["kernel"])[1])
  )  # noqa: E731
  return [(f64(d["kernel"]), bias(d)) for d in dense]


def hidden_layer(params):
  """``(kernel [d, h], bias [h], output weights [h])`` of a one-hidden-layer network, float64.

  Raises:
    ConfigError: other layers than ``layer_0`` (dense, with a bias) and ``layer_1`` with one
      output.
  """
  layers = dense_layers(params)
  if len(layers) != 2:
    raise ConfigError(
      "attack=cone reads a network of one dense hidden layer with biases and one output "
      "(layers layer_0 and layer_1) here.",
      "attack",
    )
  (kernel, bias), (out, _) = layers
  return kernel, bias, out[:, 0]


def first_triple(net):
  """The first layer of :func:`dense_layers`' ``net`` as a :func:`hidden_layer` triple, the
  next layer's first column standing for the output weights."""
  return (*net[0], net[1][0][:, 0])


def signed_rows(star, init, basis, decay: float = 1.0, signed: bool = True):
  """``(rows [u, k + 1], units [u])``: each kept unit's change from ``init`` to ``star`` (each
  a :func:`hidden_layer` triple; the change from ``decay`` times ``init`` under weight decay),
  its kernel in the span's coordinates (``basis`` [d, k]) beside its bias, times the sign of
  its output weight (``signed`` False: as it is, for a first layer under more hidden layers,
  whose output weights are ignored).

  Kept: the units whose output weight has the same nonzero sign at theta_0 and theta* (all of
  them unsigned), and whose change is not negligible.  Scaled so that the median row has
  norm 1."""
  (k1, b1, w1), (k0, b0, w0) = star, init
  rows = np.concatenate([(k1 - decay * k0).T @ basis, (b1 - decay * b0)[:, None]], axis=1)
  keep = np.ones(len(rows), bool)
  if signed:
    sign = np.sign(w0)
    rows = rows * sign[:, None]
    keep = (np.sign(w1) == sign) & (sign != 0)
  norms = np.linalg.norm(rows, axis=1)
  if not keep.any():
    raise ConfigError("every output weight changed sign: the cone is not there.", "attack")
  keep &= norms > NEGLIGIBLE * np.median(norms[keep])
  units = np.flatnonzero(keep)
  return rows[units] / np.median(norms[units]), units


def coefficient_noise(star, init, basis, units, decay: float = 1.0) -> float:
  """The size a facet's coefficient (``rows @ h``, ``h`` a unit normal; :func:`signed_rows`'
  scale) reaches on units the facet holds, from what the cone does not explain: each unit's
  change outside the span (``basis`` [d, k]), spread over the d - k directions it leaves,
  :data:`NOISE_MULTIPLE` times its median.  Coefficients below it cannot be told from 0."""
  (k1, b1, _), (k0, b0, _) = star, init
  change = (k1 - decay * k0)[:, units]
  inside = basis.T @ change
  norms = np.linalg.norm(np.concatenate([inside, (b1 - decay * b0)[None, units]]), axis=0)
  outside = np.linalg.norm(change - basis @ inside, axis=0)
  spread = np.sqrt(max(basis.shape[0] - basis.shape[1], 1))
  return float(NOISE_MULTIPLE * np.median(outside) / spread / np.median(norms))


class Layers(NamedTuple):
  """The pre-activations of the kept units as affine maps of an image's span coefficients
  ``c`` (the image ``basis c``): ``c @ kernel + bias`` at theta_0 and at theta*."""

  kernels: tuple  # ([k, u] at theta_0, [k, u] at theta*)
  biases: tuple  # ([u], [u])

  @classmethod
  def of(cls, star, init, basis, units) -> "Layers":
    """``star``, ``init``: :func:`hidden_layer` triples at theta* and theta_0."""
    (k1, b1, _), (k0, b0, _) = star, init
    return cls((basis.T @ k0[:, units], basis.T @ k1[:, units]), (b0[units], b1[units]))

  def inactive(self, c):
    """[u] bool: the units inactive on ``basis c`` at both theta_0 and theta*."""
    return np.logical_and.reduce([c @ g + b <= 0 for g, b in zip(self.kernels, self.biases)])

  def stacked(self, on):
    """``(G [k, 2s], b [2s])`` of the units ``on`` (a mask), at theta_0 then theta*."""
    return (
      np.concatenate([g[:, on] for g in self.kernels], 1),
      np.concatenate([b[on] for b in self.biases]),
    )


def unsigned_first_layer(net_star, net_init, basis, decay):
  """``(rows, layers)`` of the first of several hidden layers: its units' changes in the
  span ``basis`` without the output weights' signs (:func:`signed_rows` unsigned), and
  their pre-activations (:class:`Layers`)."""
  star, init = (*net_star[0], None), (*net_init[0], None)
  rows, units = signed_rows(star, init, basis, decay, signed=False)
  return rows, Layers.of(star, init, basis, units)


class Reading(NamedTuple):
  """What the first layer's change shows before the facets are searched (:func:`read`)."""

  decay: float  # the multiple of theta_0 training kept (1: no weight decay found)
  basis: np.ndarray  # [d, k] the change's span
  info: span.SpanInfo
  n: Optional[int]  # the training-set size, where known
  cannot: Optional[str]  # why the cone cannot read this model, in one sentence (None: it can)
  # the images read exactly, once read: one hidden layer's facets; deeper, the first layer's
  # facets that agreed with their seeds or were found without one (the other candidates are
  # the seeds, inverted representations)
  read: Optional[int] = None
  # why what the cone read is checked by the search however much it read (:func:`short`):
  # squared error (a facet's zeros are soft), or hidden layers after the first (the signs of
  # its coefficients are lost, and "agreed" does not mean exact); None: not so
  unsure: Optional[str] = None
  # the facets found whose images are blends, not counted in ``read`` (:data:`SHARP`)
  blends: int = 0

  def summary(self) -> dict:
    k, n = int(self.info.dim), self.n
    out = {
      "decay": float(self.decay),
      "span_dim": k,
      "input_dim": int(self.info.input_dim),
      "under_noise_floor": None if n is None else max(int(n) - k, 0),
      "cannot": self.cannot,
      "read": self.read,
    }
    out["short"] = None if self.read is None else short(out, self.read, n, self.unsure, self.blends)
    return out


def read(star, init, n: Optional[int], decay: Optional[float] = None) -> Reading:
  """:class:`Reading` of theta* and theta_0 (:func:`hidden_layer` triples) for ``n`` images:
  the weight decay training kept (``decay`` where the caller knows it, else
  :func:`recon_jax.victims.targets.decay_factor`), the change's span, and whether a cone of
  the images can be there.  Gradient descent leaves at most n directions; a change that
  spans more (or every input direction) was not made by it from this theta_0."""
  if decay is None:
    decay = targets.decay_factor(star[:2], init[:2], n) if n else 1.0
  change = {"params": {"layer_0": {"kernel": star[0] - decay * init[0]}}}
  basis, info = span.span_basis(change, n=n)
  k, d = int(info.dim), int(info.input_dim)
  cannot = None
  if n and (k > n or info.rule == "all"):
    cannot = (
      f"the first layer's change theta* - theta_0 spans {k} of {d} input directions for {n} "
      "training images, where gradient descent from theta_0 (full or mini-batch, momentum, "
      "weight decay) leaves at most one per image: the model was not trained from this "
      "theta_0 by gradient descent (Adam scales each weight apart), so its images are not "
      "the generators of a cone the attack can read"
    )
  return Reading(decay, basis, info, int(n) if n else None, cannot)
