"""How well a score ranks the real candidates first: ROC AUC (Mann-Whitney, ties averaged)
and precision@k.  This is the measurement side of the attacker's scores: it takes the
ground truth (which candidates the evaluation matched to a training image).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from recon_jax.errors import ConfigError


def _average_ranks(s: np.ndarray) -> np.ndarray:
  """1-based ranks of ``s`` in ascending order, ties given their average rank."""
  _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
  ends = np.cumsum(counts)  # rank of each distinct value's last member
  return (ends - (counts - 1) / 2.0)[inverse.reshape(-1)]


def auc_mann_whitney(scores, labels) -> float:
  """``P(s+ > s-) + 1/2 P(s+ = s-)`` over positive/negative pairs (Mann-Whitney U / n+ n-).

  From average ranks: ``AUC = (sum_{i+} rank_i - n+ (n+ + 1) / 2) / (n+ n-)``.
  NaN when either class is empty.
  """
  s = np.asarray(scores, np.float64).reshape(-1)
  y = np.asarray(labels, bool).reshape(-1)
  n_pos, n_neg = int(y.sum()), int((~y).sum())
  if n_pos == 0 or n_neg == 0:
    return float("nan")
  ranks = _average_ranks(s)
  return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def precision_at_k(scores, labels, k: int) -> float:
  """Fraction of real samples among the k highest scores, ties at the cut shared.

  With ``t`` the k-th highest score, ``a`` / ``a+`` the items (real items)
  scoring above t, ``b`` / ``b+`` those scoring exactly t::

    precision@k = (a+ + (k - a) b+ / b) / k

  (the expectation over random tie-breaking).  ``k`` is clipped to N; NaN for N = 0.
  """
  s = np.asarray(scores, np.float64).reshape(-1)
  y = np.asarray(labels, bool).reshape(-1)
  k = min(int(k), s.size)
  if k == 0:
    return float("nan")
  t = np.sort(s)[::-1][k - 1]
  above, tie = s > t, s == t
  hits = y[above].sum() + (k - above.sum()) * y[tie].sum() / tie.sum()
  return float(hits / k)


def identification_metrics(scores, is_recovered, k_list: Sequence[int] = (5, 10)) -> dict:
  """How well a score ranks the recovered candidates first: ROC AUC and precision@k.

  This is the measurement and the one function here that takes the ground
  truth: ``is_recovered[i]`` says whether the evaluation matched candidate i
  to a training sample.  NaN scores (e.g. a diverged restart) count as the
  lowest score.

  Returns:
    ``{'auc': Mann-Whitney AUC (ties half, NaN if a class is empty),
    'precision@k': for each k (see :func:`precision_at_k`), 'n': N,
    'n_recovered': N+, 'base_rate': N+/N (the precision of a random ranking)}``.
  """
  s = np.asarray(scores, np.float64).reshape(-1)
  y = np.asarray(is_recovered)
  if y.size != s.size:
    raise ConfigError(f"is_recovered must have one entry per score: {y.size} vs {s.size}.")
  y = y.reshape(-1).astype(bool)
  ks = [int(k) for k in k_list]
  if any(k <= 0 for k in ks):
    raise ConfigError(f"k_list must hold positive integers, got {list(k_list)}.")
  s = np.where(np.isnan(s), -np.inf, s)
  n, n_pos = int(s.size), int(y.sum())
  out = {"auc": auc_mann_whitney(s, y)}
  for k in ks:
    out[f"precision@{k}"] = precision_at_k(s, y, k)
  out.update(n=n, n_recovered=n_pos, base_rate=n_pos / n if n else float("nan"))
  return out
