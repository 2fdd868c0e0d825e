"""Claims over the efficacy harness's numbers: verdicts from intervals.

Everything here is a pure function of the runs' results, read typed
(:mod:`.run_results`: an efficacy run's :class:`~.run_results.Harness`, a toy's or an init
study's seeds): :func:`evaluate` turns one claim's runs into its rows and verdict by a
criterion fixed before any run (:data:`CRITERIA`), :func:`claims` does so for a list of
claims (:mod:`.results_md` writes them as Markdown).  :data:`SECTIONS` and :data:`CLAIMS` are the papers' claims that
``experiments/reproduce.py`` checks, each with its criterion.
"""

from __future__ import annotations

import statistics
from typing import Mapping, Sequence

from recon_jax.studies.efficacy import fmt
from reproduction import readings
from reproduction.run_results import Harness, InitStudy
from reproduction.stats import LEAKS, best_baseline, interval, paired, per_draw, within, yes

NEW = "n/a (new measurement)"
CRITERIA = {
  "toy": "median over >= 3 seeds of the attacker-selected restart's count >= 0.9 n",
  "leak": "the interval of (strict pooled - the best baseline's strict count) per draw lies "
  "above 0; best baseline: held-out images or the mean image scored as reconstructions",
  "leak_quarter": "leak, and the mean strict pooled count >= n/4",
  "leak_most": "leak, and the mean strict pooled count >= 0.9 n (18 of 20)",
  "selected_most": "leak with the attacker-selected restart's strict count, and its mean "
  ">= 0.75 n (15 of 20)",
  "selected_leak": "leak, with the attacker-selected restart's strict count",
  "all_leak": "leak for every run",
  "n_trend": "the interval of (strict fraction at the smallest n - at the largest) per draw "
  "lies above 0",
  "lower_with_signal": "the intervals of (base - Kaiming) SSIM > 0.4 counts and of (Kaiming "
  "SSIM > 0.4 - its best baseline's) per draw both lie above 0",
  "fewer": "the interval of (KKT - the other attack) strict pooled per draw lies above 0",
  "similar": "the interval of (the longer-trained - the base victim's) strict pooled per draw "
  "lies within [-0.1 n, 0.1 n]",
  "known_theta0": "the interval of (strict pooled with theta_0 known - with theta* alone) per "
  "draw lies above 0, on the same victims",
  "findings": "the init study's own criterion holds in every one of >= 3 seeds",
  "identifiable": "on every draw the training set fits the stationarity equations at least "
  "as well as the attack's best restart (identifiability ratio >= 1) and no flat family of "
  "exact solutions runs through it (recon_jax.eval.identifiability)",
}
# section: (title, its runs), in the order they run and are reported
SECTIONS = {
  "toy": ("1. Haim et al. §4, Fig. 2: the 2-D toy", ("toy",)),
  "main": (
    "2. Haim et al. §5.2-5.3, Figs 3-4: their MNIST setting (odd vs even, d-1000-1000-1)",
    ("main_mnist50", "main_mnist100"),
  ),
  "supplement": (
    "3. The small-image supplement: LFW faces and scikit-learn digits",
    ("main_faces", "main_digits"),
  ),
  "ablations": (
    "4. Haim et al. §5.3 / App. C on their MNIST setting: n, width/depth, init, training "
    "length, biases, mini-batch SGD",
    (
      "abl_n_small",
      "main_mnist50",
      "main_mnist100",
      "abl_width",
      "abl_depth",
      "abl_kaiming",
      "abl_long",
      "abl_bias_all",
      "abl_sgd",
    ),
  ),
  "baselines": (
    "5. Haim et al. §5.4: model inversion and first-layer weights",
    ("main_mnist50", "inversion", "weights"),
  ),
  "decoreco": (
    "6. Buzaglo et al. (DecoReco): multiclass and regression with weight decay",
    ("multiclass_ce", "regression_mse_wd"),
  ),
  "init_study": ("7. Runkel et al. §4.3-4.5: the initialisation study", ("init_study",)),
  "attacker": (
    "8. The attacker's side: restart selection without ground truth",
    ("main_mnist50", "main_mnist100", "main_faces", "partition_init"),
  ),
  "identifiability": (
    "9. Identifiability: does the stationarity objective single out the training set?",
    ("main_mnist50", "main_faces", "main_faces_wd"),
  ),
  "leakage": (
    "10. Leakage with a known theta_0: a model fine-tuned from weights the attacker knows, "
    "and the leakage map",
    ("finetune", "finetune_blind", "leakage_map"),
  ),
}
# The papers' claims, fixed before any run: (section, criterion (CRITERIA), the runs it
# reads (roles of the reproduce config's runs), the claim ({ds}: the first run's dataset),
# the paper's result).
CLAIMS = (
  (
    "toy",
    "toy",
    ("toy",),
    "2-D toy: the KKT attack recovers all or nearly all training points (Fig. 2)",
    "all 20/20",
  ),
  (
    "main",
    "leak_quarter",
    ("main_mnist50",),
    "MNIST odd/even, n = 50: a substantial fraction of the training images is reconstructed, "
    "above the baselines (Figs 3-4)",
    "large portion (their n = 50 is shown on CIFAR-10, Fig. 1)",
  ),
  (
    "main",
    "leak_quarter",
    ("main_mnist100",),
    "MNIST odd/even, n = 100: as above",
    "large portion (their n = 100: CIFAR-10, Fig. 6)",
  ),
  (
    "main",
    "leak_quarter",
    ("main_mnist500",),
    "MNIST odd/even, n = 500, their whole sweep (100 restarts x 50,000 steps): as above",
    "large portion (MNIST n = 500, Fig. 3)",
  ),
  (
    "supplement",
    "leak_quarter",
    ("main_faces",),
    "{ds} (small-image supplement): as above",
    "large portion, n = 500",
  ),
  ("supplement", "leak_quarter", ("main_digits",), "{ds} (supplement): as above", "large portion"),
  (
    "ablations",
    "n_trend",
    ("abl_n_small", "main_mnist50", "main_mnist100"),
    "larger n makes reconstruction harder (Fig. 4 top)",
    "fewer good reconstructions as n grows",
  ),
  (
    "ablations",
    "all_leak",
    ("main_mnist50", "abl_width", "abl_depth"),
    "reconstruction works across widths and depths (Fig. 4 bottom: 1000-1000, 100-100, "
    "1000-500-100)",
    "good reconstructions for each",
  ),
  (
    "ablations",
    "lower_with_signal",
    ("main_mnist50", "abl_kaiming"),
    "Kaiming init in all "
    "layers: lower quality than a 1e-4 first layer, some signal left (App. C.3.1, Figs 17-18)",
    "lower quality, some correlation",
  ),
  (
    "ablations",
    "similar",
    ("main_mnist50", "abl_long"),
    "10^4 epochs of training reconstruct about as well as 10^5 (App. C.3.2, Fig. 20)",
    "very similar quality",
  ),
  (
    "ablations",
    "leak",
    ("abl_bias_all",),
    "a non-homogeneous victim (biases in all layers) still leaks (Fig. 4)",
    "high-quality reconstructions",
  ),
  (
    "ablations",
    "leak",
    ("abl_sgd",),
    "mini-batch SGD (batch 50) still reconstructs (App. C.3.3, Fig. 21)",
    "reconstructions",
  ),
  (
    "baselines",
    "fewer",
    ("main_mnist50", "inversion"),
    "model inversion recovers fewer training images than the KKT attack (§5.4, Fig. 5)",
    "class representatives",
  ),
  (
    "baselines",
    "fewer",
    ("main_mnist50", "weights"),
    "first-layer weights recover fewer training images than the KKT attack (§5.4)",
    "not training samples",
  ),
  (
    "decoreco",
    "leak",
    ("multiclass_ce",),
    "{ds}, 10-class CE victim: training images are reconstructed (DecoReco multiclass)",
    "reconstructions",
  ),
  (
    "decoreco",
    "leak",
    ("regression_mse_wd",),
    "{ds}, MSE regression with weight decay: "
    "training images are reconstructed (DecoReco general loss)",
    "reconstructions",
  ),
  ("init_study", "findings", ("init_study",), "", "Runkel et al. §4.3-4.5"),
  (
    "attacker",
    "selected_leak",
    ("main_mnist50",),
    "MNIST n = 50: the attacker's own pick (lowest-loss restart, no ground truth) beats the "
    "baselines",
    "not reported",
  ),
  ("attacker", "selected_leak", ("main_mnist100",), "MNIST n = 100: as above", "not reported"),
  (
    "attacker",
    "pick_rate",
    ("main_mnist50", "main_mnist100", "main_faces"),
    "the lowest-loss restart is the truly best one",
    "not reported",
  ),
  (
    "attacker",
    "partition",
    ("partition_init", "main_faces"),
    "{ds}: the KKT attack started from disjoint partition images (Runkel's setting) vs from noise",
    "argued, no number",
  ),
  (
    "identifiability",
    "identifiable",
    ("main_mnist50",),
    "MNIST n = 50, Haim et al.'s setting: the training set is what fits the equations best",
    "assumed (§3: theta* is near a KKT point of its training set)",
  ),
  (
    "identifiability",
    "identifiable",
    ("main_faces",),
    "{ds}, trained without weight decay: as above",
    "assumed",
  ),
  (
    "identifiability",
    "identifiable",
    ("main_faces_wd",),
    "{ds}, softplus victim at a stationary point of a weight-decay-regularised loss: as above",
    "weight decay helps (Buzaglo et al.)",
  ),
  # Fixed in the leakage issue before its runs: a fine-tuned model whose theta_0 is known.
  (
    "leakage",
    "leak_most",
    ("finetune",),
    "{ds}, fine-tuned from a theta_0 the attacker knows: the attack recovers most of the "
    "training set",
    "most of MNIST n = 200 at width 2048 (Loo et al. 2024)",
  ),
  (
    "leakage",
    "selected_most",
    ("finetune",),
    "{ds}, as above: the attacker's own pick (no ground truth) recovers most of them",
    "not reported",
  ),
  (
    "leakage",
    "identifiable",
    ("finetune",),
    "{ds}, as above: the training set is what fits theta* - theta_0 best",
    "the span of the first layer's change (Tansley et al. 2026)",
  ),
  (
    "leakage",
    "known_theta0",
    ("finetune", "finetune_blind"),
    "{ds}, the same victims: knowing theta_0 is what makes them leak (Haim et al.'s attack on "
    "theta* alone recovers fewer)",
    "argued, no number",
  ),
)
# A claim's run that a scale does not have: why, and what stands in for it.
UNRUN = {
  "main_mnist500": "needs a GPU (the paper scale runs it: 100 x 50,000 restart-steps, about 14 "
  "min on one H200, about 31 h on 2 CPU cores); the partial GPU run of 2026-11-27 (50 x 26,400, "
  "draw 0, 10^5 epochs): 0 of 500 strict against 163 held-out, 234 SSIM > 0.4, membership AUC "
  "0.56, verdict cannot tell (docs/log/leakage.md)",
}


def _leak(m: Harness, conf: float, key: str = "strict_pooled", share: float = 0.0) -> dict:
  """Leak: the count ``key`` above the best baseline per draw; with ``share``, its mean also
  at least ``share`` x n."""
  n = m.results.n_train
  d = paired(per_draw(m, key), best_baseline(m), conf, n)
  a = interval(per_draw(m, key), conf, (0, n))
  base = lambda k: fmt(interval(per_draw(m, f"baseline_{k}_strict"), conf, (0, n)))
  return dict(
    attack=f"{key.replace('_', ' ')} {fmt(a)} of {n}",
    baselines=f"held-out {base('heldout')}, mean image {base('mean')}",
    statistic=f"minus best baseline {fmt(d)}" + (f"; {share:g} n = {share * n:g}" if share else ""),
    verdict=yes(d, *([bool(a.mean >= share * n)] if share else [])),
  )


def _findings(seeds: Sequence[InitStudy], row) -> list:
  """One row per (sub-run, finding) of the init study, over seeds."""
  rows = []
  for sub, found in seeds[0].findings.items():
    for name, f in found.items():
      held = [m.findings[sub][name].reproduced for m in seeds]
      held = [h for h in held if h is not None]
      verdict = (
        "not run (no grid)" if not held else "too few seeds" if len(held) < 3 else yes(all(held))
      )
      rows += row(
        attack=f"holds in {sum(held)}/{len(held)} seeds" if held else "-",
        statistic=f"seed 0: {f.evidence}",
        verdict=verdict,
        claim=f"{sub}: {name.replace('_', ' ')}",
      )
  return rows


def evaluate(kind: str, rs: list, conf: float) -> list:
  """The rows of one claim, ``[{attack, baselines, statistic, verdict}]``, from its runs.

  ``rs``: per run of the claim, an efficacy run (:class:`~.run_results.Harness`), or
  (toy, init study) the list of its seeds' results (:mod:`.run_results`).  Raises ValueError for an unknown
  ``kind`` or paired runs on different draws.
  """
  e = lambda **k: [dict(dict(attack="-", baselines="-", statistic="-"), **k)]
  pooled = lambda m, per_n=False: per_draw(m, "strict_pooled", per_n)
  if (
    kind in ("fewer", "partition", "known_theta0", "lower_with_signal", "similar")
    and rs[0].results.draws != rs[1].results.draws
  ):
    a, b = (list(r.results.draws) for r in rs[:2])
    raise ValueError(f"paired runs on different draws: {a} vs {b}")
  if kind == "toy":
    n, med = rs[0][0].n_train, lambda k: statistics.median(getattr(m, k) for m in rs[0])
    at_init = interval([m.at_init for m in rs[0]], conf, (0, n))
    return e(
      attack=f"{fmt(interval([m.recovered for m in rs[0]], conf, (0, n)))} of {n} (median "
      f"{med('recovered'):g}; best restart {med('recovered_best_restart'):g}, "
      f"pooled {med('recovered_pooled'):g})",
      baselines=f"its starting points {fmt(at_init)}",
      statistic=f"median {med('recovered'):g}; 0.9 n = {0.9 * n:g}",
      verdict="too few seeds" if len(rs[0]) < 3 else yes(med("recovered") >= 0.9 * n),
    )
  if kind in LEAKS:
    key, share = LEAKS[kind]
    return [_leak(rs[0], conf, key, share)]
  if kind == "all_leak":
    rows = [_leak(m, conf) for m in rs]
    return e(
      **{k: "; ".join(r[k] for r in rows) for k in ("attack", "baselines", "statistic")},
      verdict=yes(*[{"yes": True, "no": False}.get(r["verdict"]) for r in rows]),
    )
  if kind == "n_trend":
    rs = sorted(rs, key=lambda m: m.results.n_train)
    per_n = lambda key: "; ".join(
      f"n={m.results.n_train}: {fmt(interval(per_draw(m, key, True), conf, (0, 1)), 2)}" for m in rs
    )
    d = paired(pooled(rs[0], True), pooled(rs[-1], True), conf)
    return e(
      attack="strict fraction " + per_n("strict_pooled"),
      baselines="held-out " + per_n("baseline_heldout_strict"),
      statistic=f"smallest - largest n: {fmt(d, 2)}",
      verdict=yes(d),
    )
  if kind in ("fewer", "partition", "known_theta0"):
    d = paired(pooled(rs[0]), pooled(rs[1]), conf, rs[0].results.n_train)
    a, b = (fmt(interval(pooled(m), conf, (0, m.results.n_train))) for m in rs)
    if kind == "partition":
      return e(
        attack=f"from the partition {a}",
        baselines=f"from noise {b}",
        statistic=f"partition - noise {fmt(d)}",
        verdict=NEW,
      )
    if kind == "known_theta0":
      return e(
        attack=f"theta_0 known {a}",
        baselines=f"theta* alone {b}",
        statistic=f"known - theta* alone {fmt(d)}",
        verdict=yes(d),
      )
    return e(
      attack=f"KKT {a}", baselines=b, statistic=f"KKT - the other attack {fmt(d)}", verdict=yes(d)
    )
  if kind == "similar":
    n = rs[0].results.n_train
    d = paired(pooled(rs[1]), pooled(rs[0]), conf, n)
    return e(
      attack=f"longer {fmt(interval(pooled(rs[1]), conf, (0, n)))}",
      baselines=f"base {fmt(interval(pooled(rs[0]), conf, (0, n)))}",
      statistic=f"longer - base {fmt(d)}; 0.1 n = {0.1 * n:g}",
      verdict=within(d, 0.1 * n),
    )
  if kind == "lower_with_signal":
    (base, kai), s = rs, "ssim_gt_0.4"
    counts = lambda v, m: fmt(interval(v, conf, (0, m.results.n_train)))  # noqa: E731
    lower = paired(per_draw(base, s), per_draw(kai, s), conf)
    sig = paired(per_draw(kai, s), best_baseline(kai, s), conf)
    return e(
      attack=f"SSIM > 0.4: Kaiming {counts(per_draw(kai, s), kai)}, base "
      f"{counts(per_draw(base, s), base)}",
      baselines=f"Kaiming's best baseline {counts(best_baseline(kai, s), kai)}",
      statistic=f"base - Kaiming {fmt(lower)}; Kaiming - baseline {fmt(sig)}",
      verdict=yes(lower, sig),
    )
  if kind == "identifiable":
    m = rs[0]
    ratios = per_draw(m, "identifiability_ratio")
    has_flat = "truth_not_unique" in m.results.variants["default"]
    flat = per_draw(m, "truth_not_unique") if has_flat else []
    flat = flat or [float("nan")] * len(ratios)
    best = [r >= 1 and f != 1 for r, f in zip(ratios, flat) if r == r]
    logs = interval(per_draw(m, "log10_identifiability_ratio"), conf)
    return e(
      attack=f"the training set fits best on {sum(best)} of {len(best)} draws; other images "
      f"fit exactly as well on {int(sum(f for f in flat if f == f))}",
      statistic=f"log10 identifiability ratio {fmt(logs, 2)}",
      verdict="too few draws" if len(best) < 2 else yes(all(best)),
    )
  if kind == "pick_rate":
    same = [s for m in rs for s in m.pick_same]
    return e(attack=f"the same restart in {sum(same)}/{len(same)} draws", verdict=NEW)
  if kind != "findings":
    raise ValueError(f"no criterion {kind!r}")
  return _findings(rs[0], e)


def claims(specs: Sequence, results: Mapping, sections: Sequence[str], conf: float) -> list:
  """Every claim of ``sections``, its runs' numbers and its verdict.

  ``specs``: ``(section, criterion, run names, claim text, paper's statement)``
  per claim; ``results``: per run, ``{binary, status, results: [its results]}`` (each read
  typed, :mod:`.run_results`).
  """
  out = []
  for sec, kind, names, text, paper in specs:
    if sec not in sections:
      continue
    row = dict(
      section=sec,
      criterion=kind,
      paper=paper,
      runs=list(names),
      attack="-",
      baselines="-",
      statistic="-",
    )
    bad = [n for n in names if results.get(n, {}).get("status") != "ok"]
    first = (results.get(names[0]) or {}).get("results") or [None]
    row["claim"] = text.format(ds=getattr(first[0], "dataset", names[0])) or kind
    unrun = [UNRUN[n] for n in bad if n not in results and n in UNRUN]
    if unrun:
      out.append(dict(row, verdict="not run: " + "; ".join(unrun), paper_verdict="not run"))
      continue
    if bad:
      why = ", ".join(f"{n} {'FAILED' if n in results else 'not in the sections'}" for n in bad)
      out.append(dict(row, verdict=f"not run ({why})"))
      continue
    rs = [
      results[n]["results"][0] if results[n]["binary"] == "efficacy" else results[n]["results"]
      for n in names
    ]
    try:
      out += [
        {
          **row,
          **r,
          **readings.columns(names, rs, conf, kind),
          **readings.verdicts(kind, rs, conf, r),
        }
        for r in evaluate(kind, rs, conf)
      ]
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
      out.append(dict(row, verdict=f"not run (unreadable results: {type(e).__name__}: {e})"))
  return out
