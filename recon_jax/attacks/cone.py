"""Training images read off the cone of a first layer's change, by linear programs: no search.

A network with one hidden layer of ReLU units, ``f(x) = sum_j w_j relu(x . k_j + b_j)``,
trained by gradient descent from a theta_0 the attacker knows.  Every step adds to unit j's
kernel and bias ``eta |l'| y_i w_j [x_i, 1]`` for each training image i the unit is active
on (``l'`` the loss derivative, ``y_i`` the label).  So for a unit whose output weight ``w_j``
kept its sign through training, ``sign(w_j) (k*_j - k0_j, b*_j - b0_j)`` is a nonnegative
combination of the labelled images ``y_i [x_i, 1]``, with a coefficient exactly 0 for every
image the unit was never active on.  The units' changes lie in a cone with one generator per
training image, and each image's facet of that cone holds every unit inactive on it
throughout training, about half of them.

:func:`find_facets` finds facets one linear program at a time: from the activation pattern
of a random image of the span, a reweighted L1 program finds the normal ``h`` whose
coefficients ``rows @ h`` (one per unit, >= 0) vanish on as many units as it can;
:func:`peel` then looks for the facets the random starts missed in the complement of the
images found, where only their normals can be.
:func:`decode` turns the facets into images: the generator of facet q is orthogonal to the
other facets' normals (an affine system in the image's span coefficients, the bias column
fixing the scale), and the units on facet q were inactive on the image at theta_0 and at
theta*, which picks the point along what the system leaves free.  Where every facet is
found the images come back to rounding (on the LFW fine-tuning victims, normalised
cross-correlation 0.98-1.0); the images training weighted least have the noisiest facets
and are the ones missed (docs/leakage.md).

Exact for full-batch or mini-batch gradient descent, with or without momentum, and a loss
whose derivative keeps its sign (logistic; squared error while no output overshoots its
label: where one did, its image's coefficients mix both signs, and ``mixed`` programs price
a negative coefficient softly).

Deeper networks (:func:`_read_deep`): only the last hidden layer's change has signs the
output weights give, and it is a cone of the images' representations (the activations
feeding that layer), which move while training; its top n directions hold their average,
the same programs read it, and each representation inverted to an image (:func:`invert`)
seeds the first layer's facet of that image, found by consensus (:func:`consensus_facet`)
and polished by an unsigned program (:func:`seeded_facet`): below the last hidden layer the
units mix the images with either sign, but an image's facet still holds every unit inactive
on it.  Coupled weight decay keeps a multiple ``c`` of theta_0 in every step, so the cone is
that of ``theta* - c theta_0``: :func:`recon_jax.victims.targets.decay_factor` finds ``c``
from theta* and theta_0 alone
(the one multiple that leaves a change of rank n).  Before any program :func:`read` checks
what the change shows: a change that spans more input directions than there are training
images (Adam's per-weight scaling, a theta_0 the model was not trained from) has no cone of
the images, and the attack says so in one sentence instead of searching it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterable, NamedTuple, Optional

from absl import logging
import jax
import numpy as np
from scipy import sparse

from recon_jax.attacks import span
from recon_jax.attacks.spec import AttackSpec, Setup, option, register, require
from recon_jax.core import numerics, progress
from recon_jax.core.rules import Rule
from recon_jax.engine import resume
from recon_jax.errors import ConfigError
from recon_jax.victims import recipe, targets

VIOLATION_COST = 20.0  # a unit's coefficient below 0 costs this many times the largest weight
MIXED_VIOLATION_COST = 5.0  # ... this many times its own weight, for squared error
REWEIGHTS = 6  # reweighted L1 rounds of one facet's program
START_WEIGHT = 0.01  # the weight of the units active on the start's image (1 for the others)
NEGLIGIBLE = 0.05  # units whose change is below this fraction of the median are dropped
MIN_ON_FACET = 0.3  # a facet holds at least this share of the units (an image's: about half)
NOISE_MULTIPLE = 3.0  # a facet's coefficients below this many noise levels count as 0
MIN_GAP = 1.0  # decades between the facet's zero and nonzero coefficients
SAME_FACET = 0.95  # cosine between two facets' coefficients that makes them one
PEEL_STARTS = 30  # random starts of the search for missed facets (:func:`peel`)
PATIENCE = 25  # the random starts stop after this many in a row found no new facet
FIRST_PATIENCE = 10  # ... or after this many found none at all (no cone to read: large n)
# ... and after this many seconds without a new facet (before the first: FIRST_PATIENCE_S):
# at n = 500 one start's programs take a minute and more on 2 cores.
PATIENCE_S = 120.0
FIRST_PATIENCE_S = 60.0
# Deeper networks (:func:`_read_deep`):
ACTIVE = 1e-3  # a representation's units above this fraction of its largest are active
INVERT_STEPS = 20  # Gauss-Newton steps of :func:`invert` (one for two hidden layers)
CONSENSUS_TRIALS = 200  # draws of k - 1 rows of :func:`consensus_facet`
CONSENSUS_TOL = 1e-2  # a unit is on a drawn hyperplane below this fraction of the median
CONSENSUS_REFINE = 3  # rounds of a consensus facet's refinement on the units it holds
CONSENSUS_MISSES = 5  # the unseeded consensus search stops after this many draws found nothing
# The cone read too little where it read fewer images than this share of the directions the
# first layer's change keeps (or of n): the facets of the rest were not found (10 + 10 faces:
# 18-20 read of 19-20 directions; 50 + 50: 37-57 of 88-94).
SPAN_READ = 0.9
PATTERN_AGREES = 0.9  # a facet's image leaves this share of its units inactive, as the facet
# A facet is sharp where at least this share of the units its image leaves inactive (at
# theta_0 and theta*) are on it, at 0 in its program, and of the units on it are inactive on
# its image (:func:`sharpness`): an image's facet holds every unit inactive on it and no
# other, where a program that landed between facets gives a blend whose inactive units the
# facet holds only in part (or, fixed by the other facets, one active on units the facet
# holds).  Both ways, finetune Quickstart victims (draws 0-2, held-image starts): every
# facet whose image is exact (56 of 58) 0.940-1.000, a blend at 0.849; 50 + 50 MNIST draws
# 0-2 (4,800 held starts): 7, 8 and 8 facets, all blends (0.75-0.88 to the nearest training
# image), 0.76-0.91 one way and 0.84-0.90 the other.  One way, measured first
# on one hidden layer
# (random and held-image starts, default options): 10 + 10 faces, 20 facets all exact
# (normalised cross-correlation 1.000 to a training image), 0.961-1.000 (median 0.998);
# 50 + 50 MNIST digits (784-1024-1), 23 facets all blends (0.82-0.90 to the nearest
# training image), 0.816-0.889 (median 0.850); 25 + 25 faces, 46 facets: the 37 exact ones
# (above 0.95) 0.947-1.000 but one at 0.798, the 9 blends 0.37-0.944, 8 of them below.  The
# facet's own statistics do not tell them apart: its share of the units at 0 (0.44-0.50 in
# both) and its gap (2.2-8.3 decades exact, 2.7-5.6 blends).
SHARP = 0.93
SEED_AGREES = 0.9  # a first-layer facet's image agrees with its seed above this correlation
ONE_IMAGE = 0.995  # rows this parallel where the agreed images are not: one image's units
ONE_IMAGE_ROWS = 8  # ... at least this many of them
DEFLATE_TRIES = 4  # the largest groups of such rows tried as seeds in each round


@dataclasses.dataclass(frozen=True)
class ConeOptions:
  """The cone attack's options."""

  cone_starts: int = option(
    100,
    "attack=cone: random starts of the facet search (a few linear programs each; it stops "
    "once every facet the span allows is found)",
    Rule("int", low=1, high=10**6),
  )
  cone_public: bool = option(
    True,
    "attack=cone: where the random starts leave facets unfound, start again from images "
    "the attacker holds that are not training images (the public pool, else the held-out "
    "images; on one hidden layer, each followed by its mirror image); their patterns land on "
    "more facets",
    Rule("bool"),
  )
  cone_search_minutes: float = option(
    30.0,
    "attack=cone: where the cone reads fewer images than the change's span holds (below "
    "0.9 of them, or of n), and always under squared error or past one hidden layer (where "
    "an image read may be a blend), the KKT search in that span runs after it, started "
    "from the images it read, if it is estimated to take at most this many minutes (the "
    "report says so where it is not); its candidates are then scored beside the cone's "
    "images (the finetune_kkt preset's search, 4 restarts of 2000 steps at two or more "
    "hidden layers unless num_restarts or steps are set: at 50 + 50 faces 73 of 100 "
    "against the cone's 22)",
    Rule("float", low=0, high=1e6, note="0: never"),
  )


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


SOFT_FACETS = (
  "off facets that squared error leaves soft (an image's coefficient may change sign in training)"
)
SIGNS_LOST = (
  "through the first of several hidden layers, whose facets lose the signs of the images' "
  "coefficients (a facet that agreed with its seed may still give a blend)"
)


def unsure_of(mixed: bool, hidden_layers: int) -> Optional[str]:
  """Why any reading of a network of ``hidden_layers`` hidden layers falls short (:func:`short`)
  and hands over, whatever it read: :data:`SOFT_FACETS` under squared error (``mixed``),
  :data:`SIGNS_LOST` past one hidden layer; None where a reading can be exact."""
  return SOFT_FACETS if mixed else SIGNS_LOST if hidden_layers > 1 else None


def short(
  summary: dict, read: int, n: Optional[int], unsure: Optional[str] = None, blends: int = 0
) -> Optional[str]:
  """Why ``read`` images fall short of what the change's span holds (``summary``:
  :meth:`Reading.summary`; ``n``: the training images, None where unknown), or None: fewer
  than :data:`SPAN_READ` of min(n, the span's directions) (of the directions where n is
  unknown: a blind audit's blends hand over as a known n's do).  With ``unsure`` (why an image read
  may not be exact: :data:`SOFT_FACETS`, :data:`SIGNS_LOST`) every reading falls short, and
  the search checks it: the report scores the cone's images beside the search's, so that
  costs the search's minutes, never an image the cone read.  ``blends``: the facets found
  beside ``read`` that are not sharp (:data:`SHARP`), whose images are blends."""
  k = summary.get("span_dim")
  if summary.get("cannot") or not k:
    return None
  # without the training-set size (a blind audit) the span's directions are what it holds
  held = min(n, k) if n else k
  images = f"for {n} training images" if n else "for an unknown number of training images"
  if unsure:
    return f"read {read} images {images} {unsure}"
  if read >= SPAN_READ * held:
    return None
  under = summary.get("under_noise_floor")
  floor = f" ({under} of the images under it)" if under else ""
  rest = held - read - blends
  said = [f"{blends} of the facets found are blends" if blends else ""]
  if blends:  # read off what the facet holds at 0 against its image's pattern (SHARP)
    said[0] += (
      f", not sharp (fewer than {SHARP:g} of the units their image leaves inactive are at 0 "
      "on them, or of the units at 0 on them inactive on their image): their images mix "
      "training images"
    )
  if rest > 0:
    said.append(f"the facets of {rest} more were not found (the images training weighted least)")
  return (
    f"read {read} images {images}, where the first layer's change keeps {k} "
    f"directions above its rounding noise{floor}: " + ", and ".join(w for w in said if w)
  )


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


def zero_split(coefficients):
  """``(on_facet [u] bool, gap)``: the units whose coefficient is in the lower of two
  clusters of log10 values (Otsu's split), and the clusters' distance in decades."""
  c = np.asarray(coefficients, np.float64)
  logs = np.log10(np.maximum(c / np.abs(c).max(), 1e-9))
  order = np.sort(logs)
  n = len(order)
  split = np.arange(max(1, n // 10), max(2, n - n // 10))
  total = np.cumsum(order)
  low = total[split - 1] / split
  high = (total[-1] - total[split - 1]) / (n - split)
  best = int(np.argmax(split * (n - split) * (high - low) ** 2))
  return logs < order[split[best]], float(high[best] - low[best])


def facet(rows, start_zero, mixed: bool = False):
  """:func:`solve_facet` through the run's memo (:func:`recon_jax.engine.resume.remembered`):
  a resumed run replays the programs it solved before it was stopped."""
  inputs = (rows, start_zero, np.array(bool(mixed)))
  h = resume.remembered(
    "cone.facet", inputs, lambda: _or_empty(solve_facet(rows, start_zero, mixed))
  )
  return h if h.size else None


def _or_empty(h):
  """``h``, or an empty array for None (a program that failed), as a memo holds it."""
  return np.zeros(0) if h is None else h


def solve_facet(rows, start_zero, mixed: bool = False):
  """The unit normal ``h`` of the facet a reweighted L1 program reaches from ``start_zero``
  (the units taken to be on it at first), or None where the program fails.

  A unit's coefficient below 0 costs :data:`VIOLATION_COST` times the largest weight (a
  cone: the logistic loss), or with ``mixed`` :data:`MIXED_VIOLATION_COST` times its own
  (squared error: an image whose output overshot its label mixes both signs)."""
  u, k = rows.shape
  bounds = [(None, None)] * k + [(0, None)] * u
  a_ub = sparse.hstack([sparse.csr_matrix(-rows), -sparse.identity(u)]).tocsr()
  a_eq = np.concatenate([rows[~start_zero].sum(0), np.zeros(u)])[None]
  weights = np.where(start_zero, 1.0, START_WEIGHT)
  for _ in range(REWEIGHTS):
    slack = MIXED_VIOLATION_COST * weights if mixed else VIOLATION_COST * weights.max()
    cost = np.concatenate([rows.T @ weights, slack * np.ones(u)])
    # Scaled to a largest cost of 1: the reweighted costs span decades, and HiGHS fails on
    # about a third of the programs unscaled (the same solution, a scaled objective).
    res = numerics.linprog(
      cost / np.abs(cost).max(), A_ub=a_ub, b_ub=np.zeros(u), A_eq=a_eq, b_eq=[1.0], bounds=bounds
    )
    if res.status != 0:
      return None
    h = res.x[:k]
    coef = rows @ h
    size = np.abs(coef) if mixed else np.maximum(coef, 0.0)
    weights = 1.0 / (size + 1e-2 * np.median(np.abs(coef)) + 1e-30)
  return h / np.linalg.norm(h)


def seeded_facet(rows, start_zero, generator):
  """:func:`solve_seeded_facet` through the run's memo (as :func:`facet`)."""
  inputs = (rows, start_zero, np.asarray(generator, np.float64))
  h = resume.remembered(
    "cone.seeded_facet", inputs, lambda: _or_empty(solve_seeded_facet(rows, start_zero, generator))
  )
  return h if h.size else None


def solve_seeded_facet(rows, start_zero, generator):
  """The unit normal ``h`` of the facet a reweighted L1 program on the sizes ``|rows @ h|``
  reaches from ``start_zero``, normalised on ``generator`` (``h . generator = 1``: the facet
  of the image nearest it), or None where the program fails.  For rows whose signs are not
  known (a first layer under more hidden layers): an image's facet is where its units'
  coefficients vanish, whatever the others' signs."""
  u, k = rows.shape
  a_ub = sparse.vstack(
    [
      sparse.hstack([sparse.csr_matrix(rows), -sparse.identity(u)]),
      sparse.hstack([sparse.csr_matrix(-rows), -sparse.identity(u)]),
    ]
  ).tocsr()
  a_eq = np.concatenate([np.asarray(generator, np.float64), np.zeros(u)])[None]
  bounds = [(None, None)] * k + [(0, None)] * u
  weights = np.where(start_zero, 1.0, START_WEIGHT)
  for _ in range(REWEIGHTS):
    cost = np.concatenate([np.zeros(k), weights])
    res = numerics.linprog(
      cost / cost.max(), A_ub=a_ub, b_ub=np.zeros(2 * u), A_eq=a_eq, b_eq=[1.0], bounds=bounds
    )
    if res.status != 0:
      return None
    h = res.x[:k]
    size = np.abs(rows @ h)
    weights = 1.0 / (size + 1e-2 * np.median(size) + 1e-30)
  return h / np.linalg.norm(h)


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


class _Patience:
  """When a facet search gives up: :data:`PATIENCE` starts or :data:`PATIENCE_S` seconds in a
  row without a new facet (:data:`FIRST_PATIENCE`, :data:`FIRST_PATIENCE_S` before the
  first one)."""

  def __init__(self):
    self.idle, self.since = 0, time.monotonic()

  def update(self, found: bool) -> None:
    if found:
      self.idle, self.since = 0, time.monotonic()
    else:
      self.idle += 1

  def over(self, any_found: bool) -> bool:
    starts, seconds = (PATIENCE, PATIENCE_S) if any_found else (FIRST_PATIENCE, FIRST_PATIENCE_S)
    return self.idle >= starts or time.monotonic() - self.since > seconds


def find_facets(rows, layers: Layers, starts: int, scale: float, rng, limit: int, mixed=False):
  """``(normals [F, k + 1], coefficients [F, u])``: up to ``limit`` distinct facets that
  hold at least :data:`MIN_ON_FACET` of the units with a clear gap, from up to ``starts``
  random images of the span (coefficients of norm ``scale``, drawn one start at a time);
  the search stops when its patience runs out (:class:`_Patience`)."""
  k = rows.shape[1] - 1
  randoms = (scale * c / np.linalg.norm(c) for c in (rng.normal(size=k) for _ in range(starts)))
  what = f"random starts (at most {starts})"
  return facets_from(rows, layers, randoms, limit, what=what, mixed=mixed)


def facets_from(
  rows,
  layers: Layers,
  starts: Iterable,
  limit: int,
  normals=(),
  coefs=(),
  what: str = "",
  mixed: bool = False,
  noise: float = 0.0,
):
  """``(normals, coefficients)``: the facets ``normals`` and ``coefs`` already found, and
  those reached from the activation patterns of ``starts`` (span coefficients [k] of
  images: random ones, or images the attacker holds that are not training images), until
  ``limit`` facets or the search's patience runs out (:class:`_Patience`).  Real images
  share more of a training image's pattern than random points of the span do (at 25 + 25
  faces, 50 public images found 12 facets the random starts had missed)."""
  normals, coefs, patience = list(normals), list(coefs), _Patience()
  starts, done = iter(starts), 0
  # A start is drawn only once the search goes on (random starts share the rng with peel).
  while len(normals) < limit and not patience.over(bool(normals)):
    c = next(starts, None)
    if c is None:
      break
    before = len(normals)
    _add(rows, facet(rows, layers.inactive(c), mixed), normals, coefs, not mixed, noise)
    patience.update(len(normals) > before)
    done += 1
    progress.beat(f"cone, {what}: {len(normals)} facets after {done} starts")
  return _arrays(rows, normals, coefs)


def _arrays(rows, normals: list, coefs: list):
  """``(normals [F, k + 1], coefficients [F, u])`` of the facets listed (F may be 0)."""
  return np.reshape(normals, (-1, rows.shape[1])), np.reshape(coefs, (-1, len(rows)))


def _add(rows, h, normals: list, coefs: list, signed: bool = True, noise: float = 0.0) -> None:
  """Appends the facet of normal ``h`` to ``normals`` and its unit coefficients to ``coefs``
  where it holds enough units with a clear gap and is not one of them already (``signed``
  False: the coefficients' sizes, for rows whose signs are not known).

  A linear program's vertex holds about k units at exactly 0 whatever facet it is on.  On
  the facets of the images training weighted least, those split off alone from the units
  the facet holds at the noise level, and the facet is lost (at 50 + 50 faces, two thirds of
  those found).  Where that happens, the coefficients floored at ``noise``
  (:func:`coefficient_noise`; 0: never) are split instead, and kept where they make a facet;
  a facet the unfloored split accepts is kept as it is."""
  if h is None:
    return
  coef = rows @ h if signed else np.abs(rows @ h)
  on, gap = zero_split(coef)
  if (on.mean() < MIN_ON_FACET or gap < MIN_GAP) and noise > 0:
    coef = np.maximum(coef, noise)
    on, gap = zero_split(coef)
  if on.mean() < MIN_ON_FACET or gap < MIN_GAP:
    return
  unit = coef / np.linalg.norm(coef)
  if any(abs(unit @ other) > SAME_FACET for other in coefs):
    return
  normals.append(h)
  coefs.append(unit)


def peel(rows, normals, coefs, generators, starts: int, rng, limit: int, mixed=False, noise=0.0):
  """The facets the random starts missed, searched where only they can be.

  A facet's normal is orthogonal to every generator but its own, so the facets not yet
  found have their normals in the complement of the ``generators`` [F, k + 1] decoded from
  the facets found.  Projected there, the units' rows are combinations of the missing
  generators alone: a program in a few dimensions instead of k + 1, from ``starts`` random
  sign patterns.  Returns ``(normals, coefficients)`` with the facets found appended."""
  generators = np.reshape(generators, (-1, rows.shape[1]))
  complement = _complement(generators)
  normals, coefs = list(normals), list(coefs)
  projected = rows @ complement
  for i in range(int(starts) if complement.shape[1] else 0):
    if len(normals) >= limit:
      break
    h = facet(projected, projected @ rng.normal(size=complement.shape[1]) <= 0, mixed)
    _add(rows, None if h is None else complement @ h, normals, coefs, not mixed, noise)
    progress.beat(f"cone, the missed facets: {len(normals)} facets after {i + 1} starts")
  return _arrays(rows, normals, coefs)


def decode(normals, coefs, q: int, layers: Layers, bound: float):
  """:func:`solve_decode` through the run's memo (as :func:`facet`)."""
  inputs = (normals, coefs[q], np.array(q), np.array(float(bound)), *layers.biases)
  out = resume.remembered(
    "cone.decode", inputs, lambda: np.append(*solve_decode(normals, coefs, q, layers, bound))
  )
  return out[:-1], float(out[-1])


def solve_decode(normals, coefs, q: int, layers: Layers, bound: float):
  """``(c [k], label)``: the span coefficients of facet ``q``'s image and its label (+-1).

  The image's generator ``y [c, 1]`` is orthogonal to every other facet's normal (least
  squares); along what that leaves free, the point where the units on facet q are inactive
  at theta_0 and theta* with the least violation (coefficients within ``bound``)."""
  k = normals.shape[1] - 1
  others = np.delete(normals, q, axis=0)
  c0 = np.zeros(k)
  free = np.eye(k)
  if len(others):
    c0 = numerics.lstsq(others[:, :k], -others[:, k])
    _, sv, vt = numerics.svd(others[:, :k])
    rank = numerics.rank(sv, 1e-8)
    free = vt[rank:].T
  if free.shape[1]:
    g, b = layers.stacked(zero_split(coefs[q])[0])
    s, f = g.shape[1], free.shape[1]
    a_ub = sparse.hstack([sparse.csr_matrix(g.T @ free), -sparse.identity(s)]).tocsr()
    res = numerics.linprog(
      np.concatenate([np.zeros(f), np.ones(s)]),
      A_ub=a_ub,
      b_ub=-b - c0 @ g,
      bounds=[(-bound, bound)] * f + [(0, None)] * s,
    )
    if res.status == 0:
      c0 = c0 + free @ res.x[:f]
  label = 1.0 if normals[q, :k] @ c0 + normals[q, k] >= 0 else -1.0
  return c0, label


def cone_images(
  theta_star,
  theta_0,
  input_shape,
  box_lo,
  box_hi,
  *,
  n=None,
  starts=100,
  seed=0,
  public=None,
  decay=None,
  mixed=False,
):
  """``(images [F, *input_shape], labels [F], reading)`` read off the cone of the first
  layer's change (``reading``: what the change showed, :class:`Reading`; F is 0 where it
  says the cone cannot be there, or no facet was found).

  Args:
    theta_star, theta_0: the victim's trained and initial parameters (one hidden layer).
    input_shape: one image's shape.
    box_lo, box_hi: the pixel box (broadcastable to one image): a quarter of its diagonal is
      the norm of the random images the facet search starts from.
    n: the training-set size where known (it tells the span from rounding noise, and the
      weight decay training kept).
    starts, seed: the facet search's random starts (at most; see :data:`PATIENCE`).
    public: images the attacker holds that are not training images ([N, *input_shape], in
      the model's input space): where the random starts leave facets of the span's images
      unfound, the search starts again from these images' activation patterns.
    decay: the multiple of theta_0 weight decay kept, where the caller found it already
      (a target's :attr:`~recon_jax.types.Target.decay`); None: found here.
    mixed: the loss's derivative may change sign in training (squared error): a unit's
      coefficient below 0 is a soft cost of its own (:func:`facet`).
  """
  net_star, net_init = dense_layers(theta_star), dense_layers(theta_0)
  star, init = _first_triple(net_star), _first_triple(net_init)
  reading = read(star, init, n, decay)
  none = np.zeros((0, *tuple(input_shape))), np.zeros(0)
  if reading.cannot:
    logging.info("cone: %s", reading.cannot)
    return (*none, reading)
  if reading.decay < 1.0:
    logging.info(
      "cone: training kept %.4g of theta_0 (weight decay): reading theta* - %.4g theta_0",
      reading.decay,
      reading.decay,
    )
  basis = reading.basis
  diagonal = np.broadcast_to(np.asarray(box_hi) - np.asarray(box_lo), tuple(input_shape))
  scale = float(np.linalg.norm(diagonal)) / 4.0
  rng = np.random.default_rng(seed)
  held = None
  if public is not None and len(public):
    held = np.asarray(public, np.float64).reshape(len(public), -1)
  if len(net_star) == 2:
    starts_held = None if held is None else with_mirrors(held, input_shape)
    out, exact = _read_cone(
      star, init, basis, reading.decay, n, scale, rng, starts, starts_held, mixed
    )
    blends = len(out) - exact
    if blends:
      logging.info("cone: %d of the %d facets found are blends, not sharp", blends, len(out))
  else:
    out, exact = _read_deep(net_star, net_init, reading, n, scale, rng, starts, held, mixed)
    blends = 0
  unsure = unsure_of(mixed, len(net_star) - 1)
  reading = reading._replace(read=exact, unsure=unsure, blends=blends)
  if not out:
    return (*none, reading)
  images = np.array([basis @ c for c, _ in out]).reshape(len(out), *input_shape)
  return images, np.array([y for _, y in out]), reading


def first_layer_images(theta_star, theta_0, seeds, *, n=None, decay=None, bound=None):
  """``images [F, *seeds.shape[1:]]``: the first layer's facets of a network of two or more
  hidden layers that images near the training images (``seeds`` [S, ...] in the model's
  input space: a search's candidates) lead to, each decoded to the image on it.

  Below the last hidden layer the signs of the images' coefficients are lost, so the cone
  cannot find these facets from random starts; an image close to a training image holds
  nearly that image's units inactive, and the unsigned program from there lands on its
  facet (:func:`seeded_facet`), whose image is exact where the facet is.  ``bound``: the
  largest norm an image's span coefficients may take (default: 4 times the seeds' largest).
  """
  net_star, net_init = dense_layers(theta_star), dense_layers(theta_0)
  seeds = np.asarray(seeds, np.float64)
  if len(net_star) < 3 or not len(seeds):
    return np.zeros((0, *seeds.shape[1:]))
  reading = read(_first_triple(net_star), _first_triple(net_init), n, decay)
  if reading.cannot:
    return np.zeros((0, *seeds.shape[1:]))
  basis = reading.basis
  rows, layers = _unsigned_first_layer(net_star, net_init, basis, reading.decay)
  coefficients = seeds.reshape(len(seeds), -1) @ basis
  if bound is None:
    bound = 4.0 * float(np.linalg.norm(coefficients, axis=1).max())
  # One seed per activation pattern: seeds whose patterns agree on PATTERN_AGREES of the
  # units lead to one facet, and each extra facet a program lands on blurs the others'
  # decoding (two hidden layers, tuning draws 11-15: 60 seeds gave 20-23 facets and 9-14
  # exact images, one per pattern 22-40 seeds, 17-21 facets, 13-18 images, in half the time).
  patterns, kept = [], []
  for c in coefficients:
    zero = layers.inactive(c)
    if all(np.mean(zero == p) < PATTERN_AGREES for p in patterns):
      patterns.append(zero)
      kept.append(c)
  normals, coefs, _ = _seeded_facets(rows, layers, kept, np.random.default_rng(0))
  out = []
  for q in range(len(normals)):
    progress.beat(f"cone, decoding the search's facet {q + 1} of {len(normals)}")
    out.append(basis @ decode(normals, coefs, q, layers, bound)[0])
  return np.array(out).reshape(len(out), *seeds.shape[1:])


def _first_triple(net):
  """The first layer of :func:`dense_layers`' ``net`` as a :func:`hidden_layer` triple, the
  next layer's first column standing for the output weights."""
  return (*net[0], net[1][0][:, 0])


def _unsigned_first_layer(net_star, net_init, basis, decay):
  """``(rows, layers)`` of the first of several hidden layers: its units' changes in the
  span ``basis`` without the output weights' signs (:func:`signed_rows` unsigned), and
  their pre-activations (:class:`Layers`)."""
  star, init = (*net_star[0], None), (*net_init[0], None)
  rows, units = signed_rows(star, init, basis, decay, signed=False)
  return rows, Layers.of(star, init, basis, units)


def with_mirrors(images, input_shape):
  """``[N or 2N, d]``: flat ``images`` followed by their mirror images (the width axis of an
  ``input_shape`` of height, width and channels reversed; other shapes: the images alone).
  A mirrored face is another face, and its pattern lands on other facets: at 50 + 50 faces
  (draw 10) 100 held images and their mirrors found 50 facets against 38, and 26 images at
  SSIM 0.7 against 16."""
  shape = tuple(input_shape)
  if len(shape) != 3 or shape[1] < 2:
    return images
  mirrored = np.asarray(images).reshape(-1, *shape)[:, :, ::-1, :]
  return np.concatenate([images, mirrored.reshape(len(images), -1)])


def _read_cone(
  star, init, basis, decay, n, scale, rng, starts, held=None, mixed=False, exact_span=True
):
  """``([(c [k], label), ...], sharp)``: the images (span coefficients in ``basis``) read off
  the signed cone of one hidden layer's change, and how many of their facets are sharp
  (:func:`sharpness`; the others' images are blends) (``star``, ``init``: :func:`hidden_layer` triples; its
  inputs ``held`` [N, d]: images the attacker holds, or None; ``mixed``: see :func:`facet`).
  ``exact_span`` False: what lies outside ``basis`` is no noise (the last hidden layer's
  inputs move in training), and coefficients are not floored at it
  (:func:`coefficient_noise`)."""
  rows, units = signed_rows(star, init, basis, decay)
  layers = Layers.of(star, init, basis, units)
  # One facet per image, in the k + 1 dimensions of the span and the bias.
  limit = min(int(n), basis.shape[1] + 1) if n else basis.shape[1] + 1

  def read_all(normals, coefs):
    out = []
    for q in range(len(normals)):
      progress.beat(f"cone, decoding image {q + 1} of {len(normals)}")
      out.append(decode(normals, coefs, q, layers, 4.0 * scale))
    return out

  normals, coefs = find_facets(rows, layers, starts, scale, rng, limit, mixed)
  # Where the random starts found fewer than half the facets, the images training weighted
  # least are most of what is left, and their facets sit at the noise (:func:`_add`).  Not
  # before: a facet kept so is less exact, and the other images' decoding uses its normal.
  noise = 0.0
  if exact_span and len(normals) < limit / 2:
    noise = coefficient_noise(star, init, basis, units, decay)
  # Images resemble the training images more than random points of the span do: at 50 + 50
  # faces the random starts find no facet and the held images' patterns find dozens (their
  # patience bounds what they cost where they find none).
  if held is not None and len(normals) < min(limit, basis.shape[1]):
    what = "starts from images held"
    normals, coefs = facets_from(
      rows, layers, held @ basis, limit, normals, coefs, what, mixed, noise
    )
  out = read_all(normals, coefs)
  if out and len(out) < limit:
    generators = [y * np.append(c, 1.0) for c, y in out]
    normals, coefs = peel(rows, normals, coefs, generators, PEEL_STARTS, rng, limit, mixed, noise)
    out = read_all(normals, coefs)
  # The images the facets' own images leave (:func:`one_image_seeds`, from those whose
  # pattern agrees with their facet), round after round while a round adds a facet.
  while out and len(out) < limit:
    exact = [c for (c, _), z in zip(out, coefs) if _agrees(layers, c, z)]
    seeds = one_image_seeds(rows, layers, exact) if exact else []
    before = len(normals)
    what = "images the others leave"
    normals, coefs = facets_from(rows, layers, seeds, limit, normals, coefs, what, mixed, noise)
    if len(normals) == before:
      break
    out = read_all(normals, coefs)
  return out, int(sum(sharpness(layers, c, z) >= SHARP for (c, _), z in zip(out, coefs)))


def sharpness(layers: Layers, c, coef) -> float:
  """How far the units image ``c`` leaves inactive at theta_0 and theta* and the units its
  facet (unit coefficients ``coef``) holds at 0 are one set: the smaller of the share of the
  first that the facet holds and the share of the second that the image leaves inactive.
  An image's facet holds every unit inactive on it throughout training and no other, so
  both are near 1 where the facet is the image's; where the program landed between facets
  the image is a blend, and one of the two falls (:data:`SHARP`): its image leaves inactive
  units the facet does not hold, or, where the other facets fix the image with no freedom
  left (every facet of the span found), it leaves active units the facet holds."""
  inactive, on = layers.inactive(c), zero_split(coef)[0]
  both = int((inactive & on).sum())
  return float(min(both / max(int(inactive.sum()), 1), both / max(int(on.sum()), 1)))


def _complement(vectors):
  """``[k + 1, r]``: an orthonormal basis of the directions the rows of ``vectors``
  ``[F, k + 1]`` leave (where the facets or generators not yet found must be)."""
  vectors = np.asarray(vectors)
  return numerics.svd(vectors)[2][len(vectors) :].T


def _pattern_agreement(layers: Layers, c, coef) -> float:
  """The share of the units on which image ``c`` is inactive exactly where its facet (unit
  coefficients ``coef``) holds them: near 1 for a facet's image, read right."""
  return float(np.mean(layers.inactive(c) == zero_split(coef)[0]))


def _agrees(layers: Layers, c, coef) -> bool:
  """Whether image ``c`` agrees with its facet on :data:`PATTERN_AGREES` of the units."""
  return _pattern_agreement(layers, c, coef) >= PATTERN_AGREES


def represent(net, images):
  """[N, h] the inputs of the last hidden layer of ``net`` (:func:`dense_layers`) for
  ``images`` [N, d]: the activations after every layer before it."""
  a = np.asarray(images, np.float64)
  for kernel, bias in net[:-2]:
    a = np.maximum(a @ kernel + bias, 0.0)
  return a


def invert(rep, net_head, basis):
  """``c [k]``: span coefficients of the image ``basis c`` whose activations after
  ``net_head`` (``[(kernel, bias), ...]``, ReLU after each) match ``rep`` on the units
  active in it, by least squares; the layers in between take their units' patterns from
  the previous estimate (Gauss-Newton on a piecewise-linear map, from 0)."""
  active = rep > ACTIVE * rep.max()
  c = np.zeros(basis.shape[1])
  for _ in range(INVERT_STEPS):
    a_map, off = basis.T, np.zeros(basis.shape[0])  # the image is c @ a_map + off
    for kernel, bias in net_head[:-1]:
      z_map, z_off = a_map @ kernel, off @ kernel + bias
      on = c @ z_map + z_off > 0
      a_map, off = z_map * on, z_off * on
    kernel, bias = net_head[-1]
    z_map, z_off = a_map @ kernel, off @ kernel + bias
    new = numerics.lstsq(z_map[:, active].T, rep[active] - z_off[active])
    if not np.all(np.isfinite(new)) or np.allclose(new, c):
      break
    c = new
  return c


def _ncc(a, b) -> float:
  a, b = a - a.mean(), b - b.mean()
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _read_deep(net_star, net_init, reading: Reading, n, scale, rng, starts, held=None, mixed=False):
  """``([(c [k], label), ...], read)``: the images of a network of two or more hidden layers,
  and how many of them are read exactly (first-layer facets).

  Its last hidden layer's change, signed by the output weights, is a cone of the training
  images' representations (the activations feeding that layer), as one hidden layer's is of
  the images: those move while training (by 20-25 % on the LFW fine-tuning victims), so the
  change spans more than n directions and its top n hold their average, which the same
  facet programs read to 0.98-1.0 normalised cross-correlation.  Each representation is
  inverted to an image of the first layer's span at the weights halfway (:func:`invert`),
  and that image seeds an unsigned facet program on the first layer's change
  (:func:`seeded_facet`: below the last hidden layer a unit's change mixes the images with
  either sign, but an image's facet still holds every unit inactive on it); where the image
  that facet decodes to agrees with its seed (:data:`SEED_AGREES`) both are candidates.
  The seeds no facet agreed with are moved where the agreed facets leave their generators
  (orthogonal to every agreed normal) and tried once more."""
  decay, basis = reading.decay, reading.basis
  n_eff = int(n) if n else int(reading.info.dim) + 1
  last = lambda net: (*net[-2], net[-1][0][:, 0])  # noqa: E731
  s_star, s_init = last(net_star), last(net_init)
  rep_change = {"params": {"layer_0": {"kernel": s_star[0] - decay * s_init[0]}}}
  rep_basis, _ = span.span_basis(rep_change, n=n_eff)
  rep_basis = rep_basis[:, :n_eff]  # the representations' average over training
  mid = [((a + b) / 2.0, (c + d) / 2.0) for (a, c), (b, d) in zip(net_star, net_init)]
  pool = held
  if pool is None:
    pool = (basis @ rng.normal(size=(basis.shape[1], 64))).T
    pool *= scale / np.linalg.norm(pool, axis=1, keepdims=True)
  reps_held = represent(mid, pool)
  rep_scale = float(np.median(np.linalg.norm(reps_held, axis=1)))
  read_reps, _ = _read_cone(
    s_star, s_init, rep_basis, decay, n_eff, rep_scale, rng, starts,
    reps_held if held is not None else None, mixed, exact_span=False,
  )  # fmt: skip
  seeds = []
  for i, (c, y) in enumerate(read_reps):
    progress.beat(f"cone, inverting representation {i + 1} of {len(read_reps)}")
    seeds.append((invert(rep_basis @ c, mid[:-2], basis), y))
  # The first layer's facets, one program per seed.
  rows, layers = _unsigned_first_layer(net_star, net_init, basis, decay)
  bound = 4.0 * scale
  normals, coefs, origin = _seeded_facets(rows, layers, [c for c, _ in seeds], rng)
  agreed = _agreeing(normals, coefs, origin, seeds, layers, basis, bound, SEED_AGREES)
  # Again with the facets that agreed only, for the seeds the first round left: each seed
  # projected where its generator must be, orthogonal to every agreed facet's normal.
  keep = [q for q, i in enumerate(origin) if i in agreed]
  normals, coefs, origin = normals[keep], coefs[keep], [origin[q] for q in keep]
  if len(normals) and len(agreed) < len(seeds):
    free = _complement(normals)  # [k + 1, r]
    moved = {}
    for i, (c, _) in enumerate(seeds):
      g = free @ (free.T @ np.append(c, 1.0))
      if i not in agreed and abs(g[-1]) > 1e-9:
        moved[i] = g[:-1] / g[-1]
    normals, coefs, more = _seeded_facets(rows, layers, moved, rng, normals, coefs)
    origin = origin + more
    seeds_moved = [(moved.get(i, c), y) for i, (c, y) in enumerate(seeds)]
    agreed = _agreeing(normals, coefs, origin, seeds_moved, layers, basis, bound, SEED_AGREES)
  # Where the agreed images are not, units active on one of the images left alone: their
  # rows, lifted back, seed those images' facets; again while a round adds one.
  normals, origin, agreed, tried = _deflated(
    rows, layers, normals, coefs, origin, agreed, seeds, basis, bound, rng, n_eff
  )
  # The facets no seed reached: where the agreed images' generators are not, the units'
  # rows mix the images left alone, in a few directions, where consensus finds their facets.
  found = _unseeded(rows, layers, normals[[origin.index(i) for i in agreed]], agreed, rng, n_eff)
  # Each seed, and beside it the image its facet decoded to where they agree (exact where
  # the facet is: the seed is its representation's inverse, to a few percent); the seeds
  # read where the agreed images are not whose facets agreed, beside their images; and the
  # images of the facets found without a seed.
  every = list(seeds) + tried
  out = (
    list(seeds)
    + [every[i] for i in sorted(agreed) if i >= len(seeds)]
    + [(c, every[i][1]) for i, c in sorted(agreed.items())]
    + [(c, 0.0) for c in found]
  )
  return out, len(agreed) + len(found)


def one_image_seeds(rows, layers: Layers, agreed: list, tries: int = DEFLATE_TRIES) -> list:
  """``[c, ...]``: images (span coefficients) read where the ``agreed`` images (span
  coefficients of images known exactly) are not, largest evidence first.

  In the complement of the agreed images' generators a unit's row mixes only the images left
  alone, so the units active on just one of them (a quarter of the units for four images,
  each active on about half) are parallel there (:data:`ONE_IMAGE`), and a group of them
  gives that image's direction.  What the complement lost, its multiple of each agreed
  image, comes back from the group's units that the agreed image leaves inactive at theta_0
  and theta*: their rows hold that image only through the missing one (the median ratio)."""
  gens = np.array([np.append(c, 1.0) for c in agreed])
  rest = _complement(gens)  # [k + 1, r]
  if rest.shape[1] == 0:
    return []
  projected = rows @ rest
  norms = np.linalg.norm(projected, axis=1)
  big = np.flatnonzero(norms > NEGLIGIBLE * np.median(np.linalg.norm(rows, axis=1)))
  if len(big) < ONE_IMAGE_ROWS:
    return []
  unit = projected[big] / norms[big, None]
  near = np.abs(unit @ unit.T) > ONE_IMAGE
  free = np.ones(len(big), bool)
  inactive = np.array([layers.inactive(c) for c in agreed])[:, big]  # [F, units]
  out = []
  while len(out) < tries:
    counts = (near & free[None, :]).sum(1) * free
    i = int(np.argmax(counts))
    if counts[i] < ONE_IMAGE_ROWS:
      break
    group = near[i] & free
    free &= ~group
    direction = rest @ np.sum(unit[group] * np.sign(unit[group] @ unit[i])[:, None], axis=0)
    basis = np.concatenate([direction[None], gens], 0).T  # [k + 1, 1 + F]
    parts = np.linalg.pinv(basis) @ rows[big[group]].T  # [1 + F, g]: exact, in the span
    share = np.zeros(len(gens))
    for f in range(len(gens)):
      off = inactive[f, group]
      if off.sum() >= 3:
        share[f] = np.median(parts[1 + f, off] / parts[0, off])
    g = direction + share @ gens
    if abs(g[-1]) > 1e-9 * np.linalg.norm(g):
      out.append(g[:-1] / g[-1])
  return out


def _deflated(rows, layers, normals, coefs, origin, agreed, seeds, basis, bound, rng, limit):
  """``(normals, origin, agreed, tried)``: :func:`one_image_seeds` tried as seeds, round after
  round while one agrees with its facet's image (:data:`SEED_AGREES`); each is numbered after
  the ``seeds`` in the order of ``tried`` (``[(c, 0.0), ...]``, its label unknown), and the
  images of those that agreed are added to ``agreed``."""
  keep = [q for q, i in enumerate(origin) if i in agreed]
  normals, origin = normals[keep], [origin[q] for q in keep]
  coefs = coefs[keep]
  agreed, extra = dict(agreed), []
  while agreed and len(agreed) < limit:
    before = len(agreed)
    for c in one_image_seeds(rows, layers, list(agreed.values())):
      i = len(seeds) + len(extra)
      extra.append((c, 0.0))
      normals, coefs, more = _seeded_facets(rows, layers, {i: c}, rng, normals, coefs)
      if not more:
        continue
      q = len(normals) - 1
      d = _seed_image(normals, coefs, q, c, layers, basis, bound, SEED_AGREES, agreed.values())
      if d is not None:
        agreed[i], origin = d, origin + more
      else:
        normals, coefs = normals[:-1], coefs[:-1]
    if len(agreed) == before:
      break
  return normals, origin, agreed, extra


def _unseeded(rows, layers: Layers, normals, agreed: dict, rng, limit: int) -> list:
  """``[c, ...]``: the images of the facets no seed reached, searched by consensus in the
  complement of the ``agreed`` images' generators, each kept where the units its decoded
  image leaves inactive are the facet's (:data:`PATTERN_AGREES`)."""
  if not agreed or len(agreed) >= limit:
    return []
  rest = _complement([np.append(c, 1.0) for c in agreed.values()])  # [k + 1, r]
  if rest.shape[1] < 2:
    return []
  projected = rows @ rest
  normals, coefs = list(normals), [np.abs(rows @ h) / np.linalg.norm(rows @ h) for h in normals]
  first, misses = len(normals), 0
  while len(normals) < limit and misses < CONSENSUS_MISSES:
    progress.beat(f"cone, the facets no seed reached: {len(normals) - first} found")
    h = consensus_facet(projected, np.ones(len(rows), bool), rng)
    before = len(normals)
    _add(rows, None if h is None else rest @ h, normals, coefs, False)
    misses = 0 if len(normals) > before else misses + 1
  if len(normals) == first:
    return []
  normals, coefs = _arrays(rows, normals, coefs)
  out = []
  for q in range(first, len(normals)):
    c, _ = decode(normals, coefs, q, layers, np.inf)
    agree = _pattern_agreement(layers, c, coefs[q])
    logging.info("cone: a facet no seed reached; its image's pattern agrees on %.3f", agree)
    if agree >= PATTERN_AGREES:
      out.append(c)
  return out


def _seeded_facets(rows, layers: Layers, seeds, rng, normals=(), coefs=()):
  """``(normals, coefficients, origin)``: the facets ``normals``/``coefs`` and those that
  :func:`seeded_facet` reaches from each of ``seeds`` (span coefficients: a list, or a dict
  by the seed's number), ``origin`` the number of the seed each new facet came from."""
  normals, coefs, origin = list(normals), list(coefs), []
  items = seeds.items() if isinstance(seeds, dict) else enumerate(seeds)
  for j, (i, c) in enumerate(items):
    progress.beat(f"cone, the first layer's facet of image {j + 1} of {len(seeds)}")
    before = len(normals)
    zero = layers.inactive(c)
    h = consensus_facet(rows, zero, rng)
    if h is not None:  # polished by the program, from the units it holds
      zero = zero_split(np.abs(rows @ h))[0]
    h = seeded_facet(rows, zero, np.append(c, 1.0))
    _add(rows, h, normals, coefs, False)
    if len(normals) > before:
      origin.append(i)
  return (*_arrays(rows, normals, coefs), origin)


def _agreeing(normals, coefs, origin, seeds, layers: Layers, basis, bound, threshold) -> dict:
  """``{seed number: c}``: the images the facets decode to (:func:`decode`, each facet
  against all the others) that agree with the seed they came from (normalised
  cross-correlation >= ``threshold``), one per seed, no two alike."""
  out = {}
  for q, i in enumerate(origin):
    progress.beat(f"cone, decoding image {q + 1} of {len(origin)}")
    c = _seed_image(normals, coefs, q, seeds[i][0], layers, basis, bound, threshold, out.values())
    if c is not None:
      out[i] = c
  return out


def _seed_image(normals, coefs, q, seed, layers: Layers, basis, bound, threshold, others):
  """``c``: the image facet ``q`` decodes to (:func:`decode`) where it agrees with ``seed``
  (normalised cross-correlation >= ``threshold``) and is none of the ``others`` (span
  coefficients, :data:`SAME_FACET`); else None."""
  c, _ = decode(normals, coefs, q, layers, bound)
  image = basis @ c
  if _ncc(image, basis @ seed) < threshold:
    return None
  if any(_ncc(image, basis @ other) > SAME_FACET for other in others):
    return None
  return c


def _theta_pair(setup: Setup):
  """``(theta*, theta_0)`` from the target: its params are at ``linearize`` between them and
  its reference is ``theta* - decay theta_0`` (:func:`recon_jax.victims.targets.known_init_target`)."""
  target, lin = setup.target, float(setup.common.linearize)
  c = float(target.decay)
  scale = 1.0 - lin + lin * c  # params = theta_0 (1 - lin + lin c) + lin reference
  init = jax.tree_util.tree_map(lambda p, r: (p - lin * r) / scale, target.params, target.reference)
  star = jax.tree_util.tree_map(lambda r, i: r + c * i, target.reference, init)
  return star, init


def _direct(setup: Setup, options: ConeOptions):
  star, init = _theta_pair(setup)
  images, labels, reading = cone_images(
    star,
    init,
    setup.input_shape,
    setup.target.box_lo,
    setup.target.box_hi,
    n=setup.n or None,
    starts=options.cone_starts,
    seed=setup.common.seed,
    public=setup.public if options.cone_public else None,
    decay=float(setup.target.decay),  # the job's target found it (victims.targets)
    mixed=setup.problem == "general",  # squared error on labels +-1
  )
  return images[None], labels.astype(np.float32), {"cone": reading.summary()}


def _reread(setup: Setup, options: ConeOptions, candidates):
  """The first layer's facets the search's ``candidates`` lead to, past one hidden layer
  (:func:`first_layer_images`); none on one hidden layer, whose cone the random starts read."""
  del options
  star, init = _theta_pair(setup)
  diagonal = np.broadcast_to(
    np.asarray(setup.target.box_hi) - np.asarray(setup.target.box_lo), tuple(setup.input_shape)
  )
  return first_layer_images(
    star,
    init,
    candidates,
    n=setup.n or None,
    decay=float(setup.target.decay),
    bound=float(np.linalg.norm(diagonal)),
  )


def _check(options: ConeOptions, setup: Setup) -> None:
  del options
  v = setup.victim
  two_classes = setup.problem == "binary" or (
    setup.problem == "general" and not setup.foreign and recipe.task_of(v) == "binary"
  )
  require(
    two_classes,
    "attack=cone reads a one-output victim trained for two classes (the logistic loss, or "
    "squared error on labels +-1).",
    "problem",
  )
  require(
    setup.common is None or bool(setup.common.known_init),
    "attack=cone reads theta* - theta_0: set threat.known_init=True (and threat.theta0 for "
    "an imported model).",
    "threat.known_init",
    ("attack=cone", "threat.known_init=True", "threat.theta0"),
  )
  if setup.foreign:
    return  # an imported model's layers are checked when its parameters are read
  require(
    v.arch in ("mlp", "one_hidden") and len(v.widths) >= 1,
    f"attack=cone reads a dense ReLU network, not arch={v.arch} (the KKT search in the "
    "change's span reads others: the finetune_kkt preset).",
    "attack",
  )
  require(
    len(v.widths) == 1 or v.bias == "all",
    f"attack=cone reads a network of {len(v.widths)} hidden layers through the biases of "
    f"every layer, which bias={v.bias} leaves out (the finetune_kkt preset reads it).",
    "attack",
  )
  require(
    v.activation == "relu",
    f"attack=cone reads ReLU units, not activation={v.activation}.",
    "attack",
  )
  require(
    v.bias != "none",
    "attack=cone reads the first layer's biases, which bias=none leaves out.",
    "attack",
  )


SPEC = register(
  AttackSpec(
    name="cone",
    build=lambda options, setup: None,
    check=_check,
    options=ConeOptions,
    hparams=(),
    state_arrays=lambda options, common: 0,
    direct=_direct,
    rerunnable=lambda options: False,
    first_order=lambda options: False,
    reads_init=True,
    hands_over=lambda options: float(options.cone_search_minutes),
    always_hands_over=lambda problem, hidden_layers: (
      unsure_of(problem == "general", hidden_layers) is not None
    ),
    reread=_reread,
    doc="the images off the cone of the first layer's change from a known theta_0: "
    "linear programs, no search",
    examples=(),  # nothing to run: the contract is for searches
  )
)


def consensus_facet(rows, pool, rng, trials: int = CONSENSUS_TRIALS):
  """The unit normal ``h`` of a facet found by consensus, or None: ``h`` orthogonal to
  k - 1 rows drawn from ``pool`` (a mask of the units; all of them, or those a seed's
  pattern says are on its facet), kept where at least :data:`MIN_ON_FACET` of all the units
  vanish on it with a clear gap, refined on the units it holds.  Where the pool is mostly
  on one facet (a seed's pattern 85 % right: 0.85^19, one draw in 20 for k = 20) or the
  rows span few directions (what the facets found leave), a few hundred draws find it."""
  u, k = rows.shape
  pool = np.flatnonzero(pool)
  if len(pool) < k - 1:
    return None
  for _ in range(int(trials)):
    pick = rng.choice(pool, k - 1, replace=False)
    h = numerics.svd(rows[pick])[2][-1]
    size = np.abs(rows @ h)
    on = size < CONSENSUS_TOL * np.median(size)
    if on.mean() < MIN_ON_FACET:
      continue
    for _ in range(CONSENSUS_REFINE):  # refined on every unit it holds
      h = numerics.svd(rows[on])[2][-1]
      on, gap = zero_split(np.abs(rows @ h))
    if on.mean() >= MIN_ON_FACET and gap >= MIN_GAP:
      return h
  return None
