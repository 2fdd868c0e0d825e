"""Can the attacker tell which reconstructions are real?  Attacker scores against the truth.

Runkel et al. (2024) argue that an adversary cannot tell whether a
reconstructed image was part of the training set.  :mod:`recon_jax.attacker.selection`
computes per-candidate scores from what the attacker has (theta*, the
candidates, the attack's own state); this module is the measurement: it marks
every candidate real or not with the ground truth (:func:`candidate_truth`)
and reports how well each score ranks the real ones first
(:func:`identification_report`: ROC AUC and precision@k per score, and the
candidates a fixed, a-priori chosen score trusts most).

A candidate is *real* (:func:`candidate_truth`) when, after stretching each
image to [0, 1] as the evaluation does, its best SSIM to a training image is
at least the strict threshold AND higher than its best SSIM to every held-out
image: the candidate-level version of strict recovery in
:func:`recon_jax.eval.images.evaluate` (which scores the voted
reconstruction of each training image instead).

Only this function and the report's final comparison read the training set;
the scores themselves never do.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from recon_jax import data
from recon_jax.attacker import selection, stability
from recon_jax.core.activations import surrogate_relu
from recon_jax.core.losses import batched_map
from recon_jax.errors import ConfigError
from recon_jax.eval import images, ranking, similarity
from recon_jax.types import Attack, HParams, Target, prepared

SCORES = ("lambda", "agreement", "leave_one_out", "stability", "margin")
# The score the attacker trusts, chosen before looking at any result (see
# identification_report); ties are broken by the next available score of this list.
TRUST_ORDER = ("agreement", "lambda", "margin")
DEFAULT_STABILITY_CANDIDATES = 64
STABILITY_SELECT = ("lambda", "random")
TOP_K = 10
LOO_BATCH = 64  # candidates whose parameter-sized terms the leave-one-out score holds at once


class CandidateTruth(NamedTuple):
  """Which candidates are real (ground truth), per candidate [N]."""

  real: np.ndarray  # bool: ssim_train >= threshold and ssim_train > ssim_heldout
  train_idx: np.ndarray  # int: the training image of highest SSIM (the one it matches)
  ssim_train: np.ndarray  # float: that SSIM
  # float: the highest SSIM to a held-out image (-inf: none given), exact where it decides
  # (see candidate_truth), else a lower bound
  ssim_heldout: np.ndarray


def candidate_truth(
  cands_pixel,
  x_train_pixel,
  x_heldout_pixel,
  ssim_threshold: float,
  *,
  filter_size: Optional[int] = None,
) -> CandidateTruth:
  """Marks each candidate real when it is a strict recovery of some training image.

  With ``s`` the per-image stretch to [0, 1] (:func:`recon_jax.eval.similarity.stretch`)::

    ssim_train_i   = max_j SSIM(s(c_i), s(x_j))           (train_idx_i = its argmax)
    ssim_heldout_i = max_k SSIM(s(c_i), s(h_k))           (-inf without held-out images)
    real_i         = ssim_train_i >= threshold  and  ssim_train_i > ssim_heldout_i

  So a copy of a training image is real; a held-out image (a plausible face
  or digit that was never trained on) is not, since it matches itself better;
  noise or a class prototype is not, since it stays below the threshold.

  The held-out maximum is the evaluation's
  (:func:`recon_jax.eval.similarity.best_ssim`): beyond
  :data:`~recon_jax.eval.similarity.EXACT_PAIRS` pairs, each candidate is first compared
  with its :data:`~recon_jax.eval.similarity.PREFILTER_K` most correlated held-out images,
  and with every one only where that can still decide ``real`` (``ssim_train_i`` at the
  threshold and above that first maximum).  ``real`` and ``train_idx`` are the exhaustive
  ones; ``ssim_heldout_i`` is exact where the candidate is real, elsewhere it may be a lower
  bound (one that already makes the candidate not real, or one that did not matter).

  Args:
    cands_pixel: [N, H, W, C] candidates in pixel space (training mean added).
    x_train_pixel: [n, H, W, C] training images in pixel space.
    x_heldout_pixel: [h, H, W, C] held-out images in pixel space, or None.
    ssim_threshold: the strict SSIM threshold (e.g.
      :func:`recon_jax.eval.images.strict_threshold_for`).
    filter_size: SSIM window (default by image size, as the evaluation).

  Returns:
    A :class:`CandidateTruth` of numpy arrays [N].
  """
  cands = np.asarray(cands_pixel)
  x_train = np.asarray(x_train_pixel)
  if cands.ndim != 4 or x_train.ndim != 4:
    raise ConfigError(
      f"cands_pixel and x_train_pixel must be images [N, H, W, C], got shapes "
      f"{cands.shape} and {x_train.shape}."
    )
  if cands.shape[1:] != x_train.shape[1:]:
    raise ConfigError(
      f"cands_pixel images are {cands.shape[1:]}, the training images {x_train.shape[1:]}."
    )
  if len(x_train) == 0:
    raise ConfigError("x_train_pixel holds no training image.")
  thr = float(ssim_threshold)
  if not 0.0 < thr <= 1.0:
    raise ConfigError(f"ssim_threshold must lie in (0, 1], got {ssim_threshold}.")
  held = None if x_heldout_pixel is None else np.asarray(x_heldout_pixel)
  if held is not None and (held.ndim != 4 or held.shape[1:] != x_train.shape[1:]):
    raise ConfigError(
      f"x_heldout_pixel must be images [h, *{x_train.shape[1:]}] like the "
      f"training images, got shape {held.shape}."
    )
  n = len(cands)
  if n == 0:
    empty = np.zeros((0,))
    return CandidateTruth(np.zeros((0,), bool), np.zeros((0,), np.int64), empty, empty)
  fs = similarity.resolve_filter_size(filter_size, x_train.shape[1], x_train.shape[2])
  c = similarity.stretch(cands)
  s_train = np.asarray(similarity.ssim_matrix(c, similarity.stretch(x_train), fs), np.float64)
  train_idx = np.argmax(s_train, axis=1)
  ssim_train = s_train[np.arange(n), train_idx]
  if held is not None and len(held):
    # As the evaluation's strict rule: only a candidate at the threshold that no correlated
    # held-out image matches as well can still be real, so only its row is compared with
    # every held-out image; the others are decided by the lower bound.
    ssim_heldout, _ = similarity.best_ssim(
      c, similarity.stretch(held), fs, need=lambda top: (ssim_train >= thr) & (ssim_train > top)
    )
  else:
    ssim_heldout = np.full(n, -np.inf)
  real = (ssim_train >= thr) & (ssim_train > ssim_heldout)
  return CandidateTruth(real, train_idx.astype(np.int64), ssim_train, ssim_heldout)


# --------------------------------------------------------------------------
# Scores over all restarts of a run
# --------------------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("apply_fn", "problem", "normalize", "surrogate"))
def _leave_one_out_restarts(apply_fn, problem, target, x, lam, alpha, normalize, surrogate):
  """[R', m] leave-one-out scores, one restart at a time (lax.map bounds the memory)."""

  def one(args):
    xr, lr, ar = args
    act = functools.partial(surrogate_relu, alpha=ar) if surrogate else None
    return selection.leave_one_out_score(
      apply_fn, problem, target, xr, lr, act, normalize=normalize, batch_size=LOO_BATCH
    )

  return jax.lax.map(one, (x, lam, alpha))


STABILITY_BATCH = 4  # stability re-runs vmapped at once (each holds a parameter-sized target)


@functools.partial(jax.jit, static_argnames=("attack", "steps", "noise_scale"))
def _stability_pairs(attack, inner, hparams, target, rows, cols, keys, steps, noise_scale):
  """Stability of candidate ``cols[k]`` of restart ``rows[k]``.

  The batched state is indexed inside the map, so it is held once, not once per pair.
  Where the kicked candidate steps alone (:func:`recon_jax.attacker.stability.alone_applies`),
  what the candidates of a restart share is computed once for each restart of ``inner``
  and the pairs run :data:`STABILITY_BATCH` at a time (``inner`` holds only the restarts
  scored); else each pair re-runs its whole restart, one at a time.
  """
  target = prepared(attack, target)

  def state_of(r):
    return jax.tree_util.tree_map(lambda a: a[r], inner), {n: v[r] for n, v in hparams.items()}

  if not stability.alone_applies(attack, "x"):

    def whole(args):
      r, i, k = args
      state, hp = state_of(r)
      return stability.rerun(attack, state, hp, target, None, i, k, steps, noise_scale, "x", True)

    return jax.lax.map(whole, (rows, cols, keys))
  restarts = jax.tree_util.tree_leaves(inner)[0].shape[0]
  totals = jax.lax.map(
    lambda r: stability.shared(attack, *state_of(r), target, "x"), jnp.arange(restarts)
  )

  def one(r, i, k):
    state, hp = state_of(r)
    total = jax.tree_util.tree_map(lambda a: a[r], totals)
    return stability.rerun(attack, state, hp, target, total, i, k, steps, noise_scale, "x", True)

  return batched_map(one, (rows, cols, keys), STABILITY_BATCH)


def _order(primary: np.ndarray, *tie_breaks: np.ndarray) -> np.ndarray:
  """Indices by descending ``primary``, ties by descending ``tie_breaks``, then by index.

  NaN ranks lowest.
  """
  keys = [np.arange(len(primary))]  # np.lexsort: last key is primary
  for s in reversed((primary,) + tie_breaks):
    s = np.asarray(s, np.float64)
    keys.append(-np.where(np.isnan(s), -np.inf, s))
  return np.lexsort(keys)


# --------------------------------------------------------------------------
# The report: what it reads, each score, and how they are compared
# --------------------------------------------------------------------------
class AttackerRun(NamedTuple):
  """One run as the attacker holds it: everything the scores read (never the training set)."""

  attack: Attack  # the attack that ran (recon_jax.job.pipeline.make_attack)
  run: Any  # its recon_jax.engine.loop.AttackRun (the final state of every process's restarts)
  # the per-restart hyperparameters {name: [R]} the run ended with (the last stage's:
  # planning.sweep_for(cfg, spec)[1][-1][1])
  hparams: HParams
  target: Target  # what the attack saw (theta*, labels, box)
  apply_fn: Callable  # apply_fn(params, x, act) -> [m, C], the victim
  problem: str  # 'binary', 'multiclass' or 'general'


@dataclasses.dataclass(frozen=True)
class IdentifyOptions:
  """How :func:`identification_report` scores a run; each setting is checked when the
  options are built (a ConfigError naming it).  Fix them before looking at the results."""

  ssim_threshold: Optional[float] = None  # strict SSIM threshold (None: by image height)
  k_list: Sequence[int] = (5, 10)  # the k of precision@k
  stability_steps: int = 30  # attack steps of each stability re-run
  # cap on the candidates scored for stability (None: DEFAULT_STABILITY_CANDIDATES)
  stability_candidates: Optional[int] = None
  # which candidates the stability score runs on: 'lambda' the largest lambda (those an
  # attacker would check first; ties by pool order; an attack without multipliers falls
  # back to 'random'), 'random' a uniform draw seeded by key (an unbiased sample)
  stability_select: str = "lambda"
  stability_noise: float = 0.05  # per-entry std of the stability kick (attack input space)
  # NCC above which two candidates are the same image
  agreement_threshold: float = selection.DEFAULT_NCC_THRESHOLD
  # the stationarity scaling of the leave-one-out score (None: 'sum' for closed_form, else
  # 'mean'; pass cfg.normalize for kkt)
  normalize: Optional[str] = None
  filter_size: Optional[int] = None  # SSIM window (None: by image size)
  # int seed or PRNG key: k_pick, k_kick = jax.random.split(key); the random selection is
  # jax.random.permutation(k_pick, N)[:K] (sorted), and the k-th selected candidate (pool
  # order) is kicked with jax.random.split(k_kick, K)[k]
  key: Any = 0
  # the trusted score and its tie-breakers, in order (scores of SCORES; 'stability' only
  # covers its subset, so it is refused here)
  trust_order: Sequence[str] = TRUST_ORDER

  def __post_init__(self):
    if self.stability_select not in STABILITY_SELECT:
      raise ConfigError(
        f"stability_select must be one of {STABILITY_SELECT}, got {self.stability_select!r}."
      )
    cap = self.stability_cap
    if isinstance(cap, bool) or not isinstance(cap, (int, np.integer)) or cap < 0:
      raise ConfigError(
        f"stability_candidates must be an integer >= 0 or None, got {self.stability_candidates!r}."
      )
    object.__setattr__(self, "trust_order", tuple(self.trust_order))
    bad = [s for s in self.trust_order if s not in SCORES or s == "stability"]
    if not self.trust_order or bad:
      raise ConfigError(
        f"trust_order must name scores of {SCORES} other than 'stability', got "
        f"{list(self.trust_order)}."
      )
    if self.normalize not in (None, "mean", "sum"):
      raise ConfigError(f"normalize must be 'mean', 'sum' or None, got {self.normalize!r}.")

  @property
  def stability_cap(self):
    """The most candidates the stability score runs on."""
    given = self.stability_candidates
    return DEFAULT_STABILITY_CANDIDATES if given is None else given


def _normalize_for(attack: Attack, normalize: Optional[str]) -> str:
  """The stationarity scaling of ``attack``: closed_form uses the paper's sum, kkt the mean."""
  return normalize or ("sum" if attack.name.startswith("closed_form") else "mean")


class _Pool(NamedTuple):
  """The candidates of the non-diverged restarts, pooled restart-major (N = R' m)."""

  cands: np.ndarray  # [R, m, ...] every restart's candidates, as the truth tells them
  ok: np.ndarray  # [R] bool: the restart did not diverge and its loss is finite
  valid: np.ndarray  # [R'] the indices of those restarts
  rows: np.ndarray  # [N] the restart of each pooled candidate
  cols: np.ndarray  # [N] its index within its restart

  n = property(lambda self: len(self.rows))
  img_shape = property(lambda self: self.cands.shape[2:])


def _pool_of(run, candidates) -> _Pool:
  """The pool of ``run``'s valid restarts, of ``candidates`` (None: the run's own)."""
  cands = np.asarray(run.candidates if candidates is None else candidates)
  if cands.shape != np.shape(run.candidates):
    raise ConfigError(
      f"candidates must have the run's shape {np.shape(run.candidates)}, got {cands.shape}.",
      "candidates",
    )
  m = cands.shape[1]
  ok = ~np.asarray(run.diverged, bool) & np.isfinite(np.asarray(run.final_loss, np.float64))
  valid = np.flatnonzero(ok)
  return _Pool(cands, ok, valid, np.repeat(valid, m), np.tile(np.arange(m), len(valid)))


def _truth_of(pool: _Pool, ds: data.Dataset, thr: float, filter_size) -> CandidateTruth:
  """:func:`candidate_truth` of the pool in pixel space (the training mean added), against
  the training images and the test split as the held-out reference."""
  mean = np.asarray(ds.mean, np.float32)
  pixel = pool.cands[pool.ok].reshape(-1, *pool.img_shape).astype(np.float32) + mean
  return candidate_truth(
    pixel,
    np.asarray(ds.x_train, np.float32) + mean,
    np.asarray(ds.x_test, np.float32) + mean if len(ds.x_test) else None,
    thr,
    filter_size=filter_size,
  )


class _Scoring(NamedTuple):
  """What every score reads: the run, its pool, its hyperparameters as arrays, the options."""

  ran: AttackerRun
  pool: _Pool
  hp: dict
  options: IdentifyOptions
  normalize: str  # the leave-one-out's, resolved for the attack


# Each score returns why it is skipped, or its computation and the pool indices it covers.


def _lambda_score(c: _Scoring, scores: dict):
  """``lambda``: :func:`~recon_jax.attacker.selection.lambda_score` (signed lambda;
  ``||lambda_i||`` for 'general'); attacks without multipliers skip it."""
  if not hasattr(c.ran.run.inner, "lam"):
    return f"the attack {c.ran.attack.name} has no multipliers"
  lam = jnp.asarray(c.ran.run.inner.lam)[c.pool.valid]
  return (lambda: jax.vmap(selection.lambda_score)(lam)), None


def _agreement_score(c: _Scoring, scores: dict):
  """``agreement``: :func:`~recon_jax.attacker.selection.agreement_score`, the fraction of the
  other valid restarts holding a candidate of NCC > ``agreement_threshold``, on the
  candidates in the attack's input space (training mean subtracted: the shared mean face
  would otherwise dominate the NCC); needs >= 2 valid restarts."""
  valid = c.pool.valid
  if len(valid) < 2:
    return f"needs >= 2 valid restarts, got {len(valid)}"
  threshold = c.options.agreement_threshold
  return (lambda: selection.agreement_score(c.pool.cands, threshold, valid=c.pool.ok)[valid]), None


def _leave_one_out_score(c: _Scoring, scores: dict):
  """``leave_one_out``: :func:`~recon_jax.attacker.selection.leave_one_out_score` without
  refit, per restart, with the surrogate ReLU at that restart's final ``alpha`` (the
  residual the attack minimised) and the attack's normalisation; needs multipliers."""
  run, valid = c.ran.run, c.pool.valid
  if not hasattr(run.inner, "lam"):
    return f"the attack {c.ran.attack.name} has no multipliers"
  surrogate = "alpha" in c.hp
  alpha = c.hp["alpha"][valid] if surrogate else jnp.zeros(len(valid))
  args = (jnp.asarray(c.pool.cands)[valid], jnp.asarray(run.inner.lam)[valid], alpha)
  ran = c.ran
  victim = (ran.apply_fn, ran.problem, ran.target)
  return (lambda: _leave_one_out_restarts(*victim, *args, c.normalize, surrogate)), None


def _stability_select(options: IdentifyOptions, scores: dict) -> str:
  """How the stability score picks its candidates: by lambda where asked and computed."""
  return "lambda" if options.stability_select == "lambda" and "lambda" in scores else "random"


def _stability_score(c: _Scoring, scores: dict):
  """``stability``: :func:`~recon_jax.attacker.stability.stability_scores` (only the kicked
  ``x_i`` moves, ``stability_steps`` steps of the attack at the restart's final
  hyperparameters, kick ``N(0, stability_noise^2)`` per input entry), on at most
  ``stability_candidates`` candidates chosen by ``stability_select``
  (:class:`IdentifyOptions`).  Its cost is ``K * stability_steps`` steps of one candidate
  (each kicked candidate steps alone against its restart's sum, computed once per restart
  scored, where the attack says how: :class:`recon_jax.types.Alone`), else of one restart."""
  o, pool = c.options, c.pool
  k = int(min(o.stability_cap, pool.n))
  if k == 0:
    return "stability_candidates = 0"
  key = jax.random.PRNGKey(int(o.key)) if isinstance(o.key, (int, np.integer)) else o.key
  k_pick, k_kick = jax.random.split(key)
  if _stability_select(o, scores) == "lambda":
    pick = np.sort(_order(scores["lambda"])[:k])
  else:
    pick = np.sort(np.asarray(jax.random.permutation(k_pick, pool.n))[:k])
  keys = jax.random.split(k_kick, k)
  # only the restarts scored travel (each pair indexes them by its place among them)
  scored, place = np.unique(pool.rows[pick], return_inverse=True)
  inner = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[scored], c.ran.run.inner)
  hp = {name: v[scored] for name, v in c.hp.items()}
  pairs = (jnp.asarray(place.reshape(-1)), jnp.asarray(pool.cols[pick]), keys)
  steps, noise = int(o.stability_steps), float(o.stability_noise)
  return (
    lambda: _stability_pairs(c.ran.attack, inner, hp, c.ran.target, *pairs, steps, noise)
  ), pick


def _margin_score(c: _Scoring, scores: dict):
  """``margin``: :func:`~recon_jax.attacker.selection.margin_score` of the whole pool (one
  gamma); 'general' has no margin and skips it."""
  ran, pool = c.ran, c.pool
  if ran.problem == "general":
    return "problem 'general' has no margin"
  labels = jnp.tile(jnp.asarray(ran.target.labels), len(pool.valid))
  x = jnp.asarray(pool.cands)[pool.valid].reshape(pool.n, *pool.img_shape)
  return (lambda: selection.margin_score(ran.apply_fn, ran.problem, ran.target, x, labels)), None


_SCORERS = {
  "lambda": _lambda_score,
  "agreement": _agreement_score,
  "leave_one_out": _leave_one_out_score,
  "stability": _stability_score,
  "margin": _margin_score,
}


def _attacker_scores(c: _Scoring, timing: dict, t_all: float):
  """Every applicable score of the pool, in :data:`SCORES` order, each timed into
  ``timing``: ``({name: [N] or [K] float64}, {name: why skipped}, {name: the K pool indices
  of a score run on a subset})``."""
  scores, skipped, subsets = {}, {}, {}
  if c.pool.n == 0:
    return scores, {name: "every restart diverged" for name in SCORES}, subsets
  for name in SCORES:
    planned = _SCORERS[name](c, scores)
    if isinstance(planned, str):
      skipped[name] = planned
      continue
    fn, subset = planned
    t = time.time()
    scores[name] = np.asarray(fn(), np.float64).reshape(-1)
    timing[name] = time.time() - t
    so_far = time.time() - t_all  # this score's time included
    logging.info("attacker's scores: %s in %.0fs (%.0fs so far)", name, timing[name], so_far)
    if subset is not None:
      subsets[name] = subset
  return scores, skipped, subsets


def _trusted_top(scores: dict, trust_order, pool: _Pool, truth: CandidateTruth):
  """The trusted score (the first of ``trust_order`` computed; None: none is) and the
  :data:`TOP_K` candidates it ranks highest, ties broken by the later scores of the order."""
  trusted = next((s for s in trust_order if s in scores), None)
  if trusted is None:
    return None, []
  ties = [scores[s] for s in trust_order[trust_order.index(trusted) + 1 :] if s in scores]
  return trusted, [
    {
      "rank": rank,
      "restart": int(pool.rows[j]),
      "index": int(pool.cols[j]),
      "score": float(scores[trusted][j]),
      "lambda": float(scores["lambda"][j]) if "lambda" in scores else None,
      "recovered_strict": bool(truth.real[j]),
      "train_idx": int(truth.train_idx[j]),
      "ssim": float(truth.ssim_train[j]),
    }
    for rank, j in enumerate(_order(scores[trusted], *ties)[:TOP_K])
  ]


def _candidate_arrays(pool: _Pool, truth: CandidateTruth, scores: dict, subsets: dict) -> dict:
  """The per-candidate arrays [N] of the report (a score NaN where not computed)."""
  arrays = {"restart": pool.rows, "index": pool.cols, **truth._asdict()}
  for name, v in scores.items():
    full = np.full(pool.n, np.nan)
    full[subsets.get(name, slice(None))] = v
    arrays[name] = full
  return arrays


def identification_report(
  ran: AttackerRun,
  ds: data.Dataset,
  options: Optional[IdentifyOptions] = None,
  *,
  candidates=None,
  with_arrays: bool = False,
) -> dict:
  """How well each attacker score picks out the real reconstructions of one run.

  The candidates of the non-diverged restarts of ``ran`` are pooled (N = R' m, restart
  major) and scored by every applicable score of :mod:`recon_jax.attacker.selection`, each
  documented where it is computed: ``lambda`` (the multipliers), ``agreement`` (the other
  restarts holding the same image), ``leave_one_out`` (the residual without it),
  ``stability`` (whether a kicked candidate comes back; on a capped subset, whose ``n``
  its metrics say) and ``margin`` (the victim's margin at it).  Then
  :func:`recon_jax.eval.ranking.identification_metrics` of each score against
  :func:`candidate_truth`.

  The trusted score is fixed a priori, not chosen by its AUC on this run (which the
  attacker cannot know): ``agreement``, ties (it takes only R' values) broken by
  ``lambda``, then by ``margin`` (:data:`TRUST_ORDER`; a skipped score is passed over).
  Why agreement: a training sample the attack can recover is a solution that independent
  restarts from different starting points converge to, while a spurious stationary point
  depends on its start; it needs no scale of lambda or of the margin, which vary with the
  victim.  Its blind spots: a deterministic initialisation shared by all restarts
  ('partition', 'ground_truth'), where candidates that stay near a common start agree
  whether or not they are real; and class prototypes (smooth, mean-like images) that many
  restarts converge to, which agree more readily than noisy reconstructions of one
  training image.  The report measures how much these matter; set
  ``options.trust_order`` to fix another choice (before looking).  ``top`` lists the
  ``TOP_K`` = 10 candidates it ranks highest.

  Args:
    ran: the run as the attacker holds it (:class:`AttackerRun`).
    ds: the dataset (ground truth: x_train, x_test as the held-out reference, mean).
    options: how to score (:class:`IdentifyOptions`; None: its defaults).
    candidates: the candidates [R, m, ...] told real or not against the truth, where the
      caller scores others than the run's state holds (the job's, clipped to the pixel box:
      ``clip_to_box``); None: ``run.candidates``.  The scores are the state's.
    with_arrays: also return the per-candidate arrays under ``'_arrays'`` (not
      JSON: pop it before writing), ``{'restart', 'index', 'real', 'train_idx',
      'ssim_train', 'ssim_heldout', name: [N] score (NaN where not computed)}``.

  Returns:
    JSON-able dict (NaN where undefined, e.g. the AUC without a real candidate; the
    ``precision@k`` keys follow ``options.k_list``)::

      {"scores": {name: {"auc", "precision@k"..., "n", "n_recovered", "base_rate"}},
       "skipped": {name: why}, "trusted_score": name,
       "top": [{"rank", "restart", "index", "score", "lambda", "recovered_strict",
                "train_idx", "ssim"}, ...],
       "top_distinct_recovered": distinct training images strictly recovered in top,
       "truth": {"n_candidates", "n_real", "n_distinct_real", "ssim_threshold"},
       "settings": {...}, "timing_s": {name: seconds}}
  """
  o = IdentifyOptions() if options is None else options
  normalize = _normalize_for(ran.attack, o.normalize)
  t_all = time.time()
  pool = _pool_of(ran.run, candidates)
  thr = (
    float(o.ssim_threshold)
    if o.ssim_threshold is not None
    else images.strict_threshold_for(pool.img_shape[0])
  )
  t0 = time.time()
  truth = _truth_of(pool, ds, thr, o.filter_size)
  timing = {"truth": time.time() - t0}
  hp = {k: jnp.asarray(v) for k, v in ran.hparams.items()}
  scores, skipped, subsets = _attacker_scores(_Scoring(ran, pool, hp, o, normalize), timing, t_all)
  results = {
    name: ranking.identification_metrics(
      scores[name], truth.real[subsets.get(name, slice(None))], o.k_list
    )
    for name in SCORES
    if name in scores
  }
  trusted, top = _trusted_top(scores, o.trust_order, pool, truth)
  timing["total"] = time.time() - t_all
  out = {
    "scores": results,
    "skipped": skipped,
    "trusted_score": trusted,
    "top": top,
    "top_distinct_recovered": len({t["train_idx"] for t in top if t["recovered_strict"]}),
    "truth": {
      "n_candidates": int(pool.n),
      "n_real": int(truth.real.sum()),
      "n_distinct_real": int(len(np.unique(truth.train_idx[truth.real]))),
      "n_restarts_valid": int(len(pool.valid)),
      "ssim_threshold": thr,
    },
    "settings": {
      "stability_steps": int(o.stability_steps),
      "stability_candidates": int(len(subsets.get("stability", ()))),
      "stability_select": (
        _stability_select(o, scores) if "stability" in subsets else o.stability_select
      ),
      "stability_noise": float(o.stability_noise),
      "agreement_threshold": float(o.agreement_threshold),
      "leave_one_out_normalize": normalize,
      "trust_order": list(o.trust_order),
    },
    "timing_s": timing,
  }
  if with_arrays:
    out["_arrays"] = _candidate_arrays(pool, truth, scores, subsets)
  return out
