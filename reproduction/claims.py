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

from recon_jax.studies import efficacy
from recon_jax.studies.efficacy import fmt
from recon_jax.studies.efficacy_results import Interval
from reproduction.run_results import Harness, InitStudy

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
  "fewer": "the interval of (KKT - baseline attack) strict pooled per draw lies above 0",
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
    ("main_faces",),
    "{ds}: a substantial fraction of the training "
    "images is reconstructed, above the baselines (Figs 3-4)",
    "large portion, n = 500",
  ),
  ("main", "leak_quarter", ("main_digits",), "{ds}: as above", "large portion, n = 500"),
  (
    "ablations",
    "n_trend",
    ("abl_n_small", "abl_base", "abl_n_large"),
    "larger n makes reconstruction harder (Fig. 4 top)",
    "fewer good reconstructions as n grows",
  ),
  (
    "ablations",
    "all_leak",
    ("abl_base", "abl_width", "abl_depth"),
    "reconstruction works across widths and depths (Fig. 4 bottom)",
    "good reconstructions for each",
  ),
  (
    "ablations",
    "lower_with_signal",
    ("abl_base", "abl_kaiming"),
    "Kaiming init in all "
    "layers: lower quality than a 1e-4 first layer, some signal left (App. C, Figs 17-18)",
    "lower quality, some correlation",
  ),
  (
    "ablations",
    "leak",
    ("abl_short",),
    "shorter training still reconstructs (App. C, Fig. 16)",
    "reconstructions remain",
  ),
  (
    "ablations",
    "leak",
    ("abl_bias_all",),
    "a non-homogeneous victim (biases in all layers) still leaks (Fig. 4)",
    "high-quality reconstructions",
  ),
  (
    "baselines",
    "fewer",
    ("main_faces", "inversion"),
    "model inversion recovers fewer training images than the KKT attack (§5.4, Fig. 5)",
    "class representatives",
  ),
  (
    "baselines",
    "fewer",
    ("main_faces", "weights"),
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
    ("main_faces",),
    "{ds}: the attacker's own pick (lowest-loss restart, no ground truth) beats the baselines",
    "not reported",
  ),
  ("attacker", "selected_leak", ("main_digits",), "{ds}: as above", "not reported"),
  (
    "attacker",
    "pick_rate",
    ("main_faces", "main_digits"),
    "the lowest-loss restart is the truly best one",
    "not reported",
  ),
  (
    "identifiability",
    "identifiable",
    ("main_faces",),
    "{ds}, trained without weight decay: the training set is what fits the equations best",
    "assumed (§3: theta* is near a KKT point of its training set)",
  ),
  (
    "identifiability",
    "identifiable",
    ("main_faces_wd",),
    "{ds}, softplus victim at a stationary point of a weight-decay-regularised loss: as above",
    "weight decay helps (Buzaglo et al.)",
  ),
  (
    "attacker",
    "partition",
    ("partition_init", "main_faces"),
    "{ds}: the KKT attack started from disjoint partition images (Runkel's setting) vs from noise",
    "argued, no number",
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


# The leak criteria: (the count they read, the share of n its mean must reach (0: none)).
LEAKS = {
  "leak": ("strict_pooled", 0.0),
  "leak_quarter": ("strict_pooled", 0.25),
  "leak_most": ("strict_pooled", 0.9),
  "selected_leak": ("strict_selected", 0.0),
  "selected_most": ("strict_selected", 0.75),
}


def interval(values: Sequence[float], conf: float = 0.95, bounds=None) -> Interval:
  """:func:`recon_jax.studies.efficacy.interval` of ``values`` (clipped to ``bounds``)."""
  return Interval.of(efficacy.interval(values, conf, bounds))


def _yes(*above) -> str:
  """'yes' if every interval lies above 0 (or every check passed), 'too few draws' for n < 2."""
  oks = [a if isinstance(a, bool) else (None if a.n < 2 else a.ci_low > 0) for a in above]
  return "too few draws" if None in oks else ("yes" if all(oks) else "no")


def per_draw(m: Harness, key: str, per_n: bool = False) -> list:
  """The default variant's per-draw ``key`` (None as NaN), divided by n with ``per_n``."""
  v = [float("nan") if x is None else x for x in m.results.variants["default"][key].per_draw]
  return [x / m.results.n_train for x in v] if per_n else v


def best_baseline(m: Harness, what: str = "strict") -> list:
  """Per draw, the stronger baseline: held-out images or the mean image (as reconstructions)."""
  return [
    b if h != h else max(h, b)
    for h, b in zip(per_draw(m, f"baseline_heldout_{what}"), per_draw(m, f"baseline_mean_{what}"))
  ]


def paired(a: Sequence[float], b: Sequence[float], conf: float, n=None) -> Interval:
  """The interval of the per-draw differences ``a - b`` (the lists paired draw by draw);
  with ``n``, differences of counts of n images, clipped to [-n, n]."""
  return interval([x - y for x, y in zip(a, b)], conf, None if n is None else (-n, n))


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
    verdict=_yes(d, *([bool(a.mean >= share * n)] if share else [])),
  )


def _findings(seeds: Sequence[InitStudy], row) -> list:
  """One row per (sub-run, finding) of the init study, over seeds."""
  rows = []
  for sub, found in seeds[0].findings.items():
    for name, f in found.items():
      held = [m.findings[sub][name].reproduced for m in seeds]
      held = [h for h in held if h is not None]
      verdict = (
        "not run (no grid)" if not held else "too few seeds" if len(held) < 3 else _yes(all(held))
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
    kind in ("fewer", "partition", "known_theta0", "lower_with_signal")
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
      verdict="too few seeds" if len(rs[0]) < 3 else _yes(med("recovered") >= 0.9 * n),
    )
  if kind in LEAKS:
    key, share = LEAKS[kind]
    return [_leak(rs[0], conf, key, share)]
  if kind == "all_leak":
    rows = [_leak(m, conf) for m in rs]
    return e(
      **{k: "; ".join(r[k] for r in rows) for k in ("attack", "baselines", "statistic")},
      verdict=_yes(*[{"yes": True, "no": False}.get(r["verdict"]) for r in rows]),
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
      verdict=_yes(d),
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
        verdict=_yes(d),
      )
    return e(attack=f"KKT {a}", baselines=b, statistic=f"KKT - baseline {fmt(d)}", verdict=_yes(d))
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
      verdict=_yes(lower, sig),
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
      verdict="too few draws" if len(best) < 2 else _yes(all(best)),
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
    if bad:
      why = ", ".join(f"{n} {'FAILED' if n in results else 'not in the sections'}" for n in bad)
      out.append(dict(row, verdict=f"not run ({why})"))
      continue
    rs = [
      results[n]["results"][0] if results[n]["binary"] == "efficacy" else results[n]["results"]
      for n in names
    ]
    try:
      out += [dict(row, **r) for r in evaluate(kind, rs, conf)]
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as e:
      out.append(dict(row, verdict=f"not run (unreadable results: {type(e).__name__}: {e})"))
  return out
