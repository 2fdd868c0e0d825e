"""The linear programs that find one facet: the signed reweighted L1 program
(:func:`solve_facet`), its unsigned twin normalised on a seed image (:func:`solve_seeded_facet`),
the consensus of k - 1 rows (:func:`consensus_facet`), and the split of a facet's
coefficients into those at 0 and the rest (:func:`zero_split`).

Each program goes through the run's memo (:func:`recon_jax.engine.resume.remembered`, under
the names ``cone.facet`` and ``cone.seeded_facet``): a resumed run replays the programs it
solved before it was stopped, so the names and the inputs hashed stay as they are.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from recon_jax.core import numerics
from recon_jax.engine import resume

# A unit's coefficient below 0 costs this many times the largest weight: under the logistic
# loss the cone is exact, so a violation is priced out (10 + 10 faces, draw 10: 20 images read
# with it; squared error's facets, whose coefficients mix signs, are never reached with it).
VIOLATION_COST = 20.0
# Under squared error a negative coefficient costs this many times its own unit's weight (an
# image whose output overshot its label mixes both signs): chosen among 5, 10 and 20 on draws
# 10-12 (16.7, 15.3 and 14.7 images at ncc > 0.95, against 12.3 with the strict program).
MIXED_VIOLATION_COST = 5.0
# Reweighted L1 rounds of one facet's program.  The reweighting reaches no fixed point in
# six (successive normals differ by 0.3-8 %); three give facets at cosine 0.999 to six's and
# half the time at 50 + 50 faces, but a different set of images (51 read against 54), so six
# stays until paired draws say which reads more.
REWEIGHTS = 6
# The first round's weight of the units active on the start's image, against 1 for those
# inactive on it: the start's pattern is a guess at a facet, so the program is pushed to hold
# the inactive units at 0 while the active ones cost little.  Set when the program was built;
# no sweep of it is recorded.
START_WEIGHT = 0.01
# A facet holds at least this share of the units: an image's facet holds about half (0.44-0.50
# at 10 + 10 and 25 + 25 faces, 50 + 50 digits), a program's vertex on no facet about k of
# them (91 units at 50 + 50 faces); with 0.3 every facet kept on the 10 + 10 face draws the
# cone was built on was a training image's.
MIN_ON_FACET = 0.3
# Decades between a facet's zero and nonzero coefficients (:func:`zero_split`): the facets of
# exact images show 2.2-8.3, the random starts' vertices on no facet 0.8 (50 + 50 faces).
MIN_GAP = 1.0
# Draws of k - 1 rows in :func:`consensus_facet`: from a seed's pattern 85 % right
# (two hidden layers) one draw in 20 lands on the facet for k = 20, and 200 draws take
# milliseconds.
CONSENSUS_TRIALS = 200
# A unit is on a drawn hyperplane below this fraction of the median unit's size on it (the
# hyperplane through k - 1 rows of one facet holds that facet's other units near 0), and the
# rounds of refinement on the units it holds (the null vector of their rows, split again).
# Both set when the consensus was built on two hidden layers (draws 10-12: 16, 16, 16 images
# of 20 at ncc > 0.95 with consensus and the polish, 15, 15, 12 with the programs alone); no
# sweep of either is recorded.
CONSENSUS_TOL = 1e-2
CONSENSUS_REFINE = 3
# Each reweighting round weighs a unit by 1 / (its coefficient's size + this fraction of the
# median size): the floor keeps the units at 0 from taking all the weight, so the program
# still moves off a vertex; set when the program was built, no sweep recorded.
REWEIGHT_FLOOR = 1e-2


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
    weights = 1.0 / (size + REWEIGHT_FLOOR * np.median(np.abs(coef)) + 1e-30)
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
    weights = 1.0 / (size + REWEIGHT_FLOOR * np.median(size) + 1e-30)
  return h / np.linalg.norm(h)


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
