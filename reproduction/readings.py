"""Two readings of each claim, fixed before any run: in the paper's sense and as evidence of
membership.

The papers read a reconstruction as good when its SSIM to the nearest training image
exceeds 0.4 (Haim et al., Figs 3-4), with no baseline.  This project counts a training image
only when a candidate is closer to it than to every held-out image and sharp enough (the
strict rule, docs/evaluation.md), and asks of a claim that images are reconstructed that the
weights also tell the training images apart from unseen ones.  So every row of the claims
table carries the paper's count, the same count for held-out images (look-alikes pass it by
chance), the strict count with its held-out baseline, and the weights' membership test, and
two verdicts: :data:`PAPER_SENSE` and :data:`EVIDENCE`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from recon_jax.studies.efficacy import fmt
from reproduction import stats
from reproduction.run_results import Harness

SSIM = "ssim_gt_0.4"
PAPER_SENSE = (
  "in the paper's sense: the claim's criterion read on the paper's count (training images "
  "whose best reconstruction reaches SSIM > 0.4) with no baseline; the toy and the init study "
  "keep their own criterion; 'n/a' where the paper reports no such number"
)
EVIDENCE = (
  "as evidence of membership: the claim's criterion on the strict count against the best "
  "baseline (the criteria below), and for a claim that training images are reconstructed, "
  "also the weights' membership test: the interval over draws of its AUC (the best test read "
  "off the weights) lies above 0.5"
)
# The claims that say training images are reconstructed: their evidence needs membership.
RECONSTRUCTS = ("leak", "leak_quarter", "leak_most", "selected_leak", "selected_most", "all_leak")
NOT_IN_PAPER = "n/a (not in the paper)"
DASH = "–"


def _harnesses(names: Sequence[str], rs: Sequence) -> list:
  return [(n, m) for n, m in zip(names, rs) if isinstance(m, Harness)]


def _count(m: Harness, key: str, conf: float) -> str:
  n = m.results.n_train
  return f"{fmt(stats.interval(stats.per_draw(m, key), conf, (0, n)))} of {n}"


def _membership(m: Harness, conf: float) -> str:
  variant = m.results.variants["default"]
  if "membership_weights_auc" not in variant:
    return "not measured"
  auc = stats.interval(stats.per_draw(m, "membership_weights_auc"), conf, (0, 1))
  if auc.mean != auc.mean:
    return "not measured"
  tpr = stats.interval(stats.per_draw(m, "membership_weights_tpr"), conf, (0, 1))
  rate = fmt(tpr, 2) if tpr.mean == tpr.mean else "not resolved (too few held-out images)"
  return f"AUC {fmt(auc, 3)}; TPR {rate}"


def columns(names: Sequence[str], rs: Sequence, conf: float, kind: str = "") -> dict:
  """The claim's numbers per efficacy run (labelled by run where it reads several): the
  paper's count, its held-out baseline, the strict count (the attacker's pick's for a claim
  about it, criterion ``kind``), its held-out baseline, membership."""
  hs = _harnesses(names, rs)
  keys = ("ssim", "heldout_ssim", "strict", "heldout_strict", "membership")
  if not hs:
    return dict.fromkeys(keys, DASH)
  label = (lambda n: f"{n}: ") if len(hs) > 1 else (lambda n: "")
  each = lambda f: "; ".join(label(n) + f(m) for n, m in hs)  # noqa: E731
  return dict(
    ssim=each(lambda m: _count(m, SSIM, conf)),
    heldout_ssim=each(lambda m: _count(m, f"baseline_heldout_{SSIM}", conf)),
    strict=each(lambda m: _count(m, stats.LEAKS.get(kind, ("strict_pooled",))[0], conf)),
    heldout_strict=each(lambda m: _count(m, "baseline_heldout_strict", conf)),
    membership=each(lambda m: _membership(m, conf)),
  )


def members_told_apart(m: Harness, conf: float):
  """Whether the weights' membership AUC's interval over draws lies above 0.5 (None: fewer
  than two draws measured it)."""
  if "membership_weights_auc" not in m.results.variants["default"]:
    return False
  auc = stats.interval(stats.per_draw(m, "membership_weights_auc"), conf)
  if auc.mean != auc.mean:  # never measured
    return False
  return None if auc.n < 2 else bool(auc.ci_low > 0.5)


def paper_sense(kind: str, rs: Sequence, conf: float, verdict: str) -> str:
  """The claim's verdict read on the paper's count (SSIM > 0.4), without baselines."""
  if kind in ("toy", "findings"):
    return verdict
  if kind in ("selected_leak", "selected_most", "pick_rate", "partition", "identifiable"):
    return NOT_IN_PAPER
  ssim = lambda m, per_n=False: stats.per_draw(m, SSIM, per_n)  # noqa: E731
  count = lambda m: stats.interval(ssim(m), conf, (0, m.results.n_train))  # noqa: E731
  if kind in stats.LEAKS:
    share, m = stats.LEAKS[kind][1], rs[0]
    a = count(m)
    return stats.yes(a, *([bool(a.mean >= share * m.results.n_train)] if share else []))
  if kind == "all_leak":
    return stats.yes(*[count(m) for m in rs])
  if kind == "n_trend":
    ordered = sorted(rs, key=lambda m: m.results.n_train)
    return stats.yes(stats.paired(ssim(ordered[0], True), ssim(ordered[-1], True), conf))
  n = rs[0].results.n_train
  if kind == "lower_with_signal":
    return stats.yes(stats.paired(ssim(rs[0]), ssim(rs[1]), conf, n), count(rs[1]))
  if kind == "similar":
    return stats.within(stats.paired(ssim(rs[1]), ssim(rs[0]), conf, n), 0.1 * n)
  if kind in ("fewer", "known_theta0"):
    return stats.yes(stats.paired(ssim(rs[0]), ssim(rs[1]), conf, n))
  raise ValueError(f"no criterion {kind!r}")


def evidence(kind: str, rs: Sequence, conf: float, verdict: str) -> str:
  """The claim's verdict on the strict count, and membership for a reconstruction claim."""
  if kind == "toy":
    return "n/a (no held-out points)"
  if kind == "findings":
    return "n/a (a claim about the starts)"
  if kind not in RECONSTRUCTS or verdict != "yes":
    return verdict
  told = [members_told_apart(m, conf) for m in rs]
  if None in told:
    return "too few draws"
  return "yes" if all(told) else "no (the weights' membership test does not tell them apart)"


def verdicts(kind: str, rs: Sequence, conf: float, row: Mapping) -> dict:
  """``{paper_verdict, verdict}`` of one row of the claim (``row``: :func:`stats.evaluate`'s,
  its ``verdict`` the criterion on the strict count)."""
  return dict(
    paper_verdict=paper_sense(kind, rs, conf, row["verdict"]),
    verdict=evidence(kind, rs, conf, row["verdict"]),
  )
