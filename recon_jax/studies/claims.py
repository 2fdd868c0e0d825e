"""Claims over the efficacy harness's numbers: verdicts from intervals, and the Markdown reports.

Everything here is a pure function of metrics dicts (as the binaries write them
to metrics.json): :func:`evaluate` turns one claim's runs into its rows and
verdict by a criterion fixed before any run (:data:`CRITERIA`), :func:`claims`
does so for a list of claims, :func:`condense` keeps what the claims read of a
run's metrics, and :func:`report` / :func:`efficacy_table` write the Markdown
of ``experiments/reproduce.py`` (RESULTS.md) and ``experiments/efficacy.py``
(results.md).  :data:`SECTIONS` and :data:`CLAIMS` are the papers' claims that
``experiments/reproduce.py`` checks, each with its criterion.
"""

from __future__ import annotations

import os
import statistics
from typing import Mapping, Sequence

from recon_jax.studies import efficacy

NEW = "n/a (new measurement)"
CRITERIA = {
  "toy": "median over >= 3 seeds of the attacker-selected restart's count >= 0.9 n",
  "leak": "the interval of (strict pooled - the best baseline's strict count) per draw lies "
  "above 0; best baseline: held-out images or the mean image scored as reconstructions",
  "leak_quarter": "leak, and the mean strict pooled count >= n/4",
  "selected_leak": "leak, with the attacker-selected restart's strict count",
  "all_leak": "leak for every run",
  "n_trend": "the interval of (strict fraction at the smallest n - at the largest) per draw "
  "lies above 0",
  "lower_with_signal": "the intervals of (base - Kaiming) SSIM > 0.4 counts and of (Kaiming "
  "SSIM > 0.4 - its best baseline's) per draw both lie above 0",
  "fewer": "the interval of (KKT - baseline attack) strict pooled per draw lies above 0",
  "findings": "the init study's own criterion holds in every one of >= 3 seeds",
  "identifiable": "on every draw the training set fits the stationarity equations at least "
  "as well as the attack's best restart (identifiability ratio >= 1) and no flat family of "
  "exact solutions runs through it (recon_jax.eval.identifiability)",
}
# section: (title, its runs)
SECTIONS = {
  "toy": ("1. Haim et al. §4, Fig. 2: the 2-D toy", ("toy",)),
  "main": ("2. Haim et al. §5.2-5.3, Figs 3-4: the main attack", ("main_faces", "main_digits")),
  "ablations": (
    "3. Haim et al. §5.3 / App. C: n, width/depth, init, training length, biases",
    (
      "abl_base",
      "abl_n_small",
      "abl_n_large",
      "abl_width",
      "abl_depth",
      "abl_kaiming",
      "abl_short",
      "abl_bias_all",
    ),
  ),
  "baselines": (
    "4. Haim et al. §5.4: model inversion and first-layer weights",
    ("main_faces", "inversion", "weights"),
  ),
  "decoreco": (
    "5. Buzaglo et al. (DecoReco): multiclass and regression with weight decay",
    ("multiclass_ce", "regression_mse_wd"),
  ),
  "init_study": ("6. Runkel et al. §4.3-4.5: the initialisation study", ("init_study",)),
  "attacker": (
    "7. The attacker's side: restart selection without ground truth",
    ("main_faces", "main_digits", "partition_init"),
  ),
  "identifiability": (
    "8. Identifiability: does the stationarity objective single out the training set?",
    ("main_faces", "main_faces_wd"),
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
)


# The columns of each binary's table in the report, and the figures it links.
HEADS = {
  "efficacy": (
    "run | data | n | draws | strict pooled | strict attacker-selected | SSIM > "
    "0.4 | mean-image baseline strict | held-out baseline strict | oracle "
    "residual | log10 identifiability ratio | s per draw"
  ),
  "toy_2d": (
    "run | recovered (attacker-selected restart) | best restart | pooled | its "
    "starting points | oracle residual | kinks on data"
  ),
  "init_study": "run | seed | training images | findings that hold | wall (s) | summary",
}
FIGURES = {
  "efficacy": ("efficacy.png",),
  "toy_2d": ("seed_0/toy_2d.png",),
  "init_study": ("seed_0/kkt_mlp_relu_settings.png", "seed_0/bilevel_affine_settings.png"),
}
EFFICACY_KEYS = (
  "strict_pooled",
  "strict_selected",
  "ssim_gt_0.4",
  "baseline_mean_strict",
  "baseline_heldout_strict",
  "oracle_residual_rel",
  "log10_identifiability_ratio",
  "time_s",
)


def interval(values: Sequence[float], conf: float = 0.95) -> dict:
  """:func:`recon_jax.studies.efficacy.interval` of ``values``."""
  return efficacy.interval(values, conf)


def fmt(iv: Mapping, digits: int = 1) -> str:
  """``mean [low, high]`` of an interval (just the mean for a single value)."""
  lo_hi = f" [{iv['ci_low']:.{digits}f}, {iv['ci_high']:.{digits}f}]" if iv["n"] > 1 else ""
  return f"{iv['mean']:.{digits}f}{lo_hi}"


def _yes(*above) -> str:
  """'yes' if every interval lies above 0 (or every check passed), 'too few draws' for n < 2."""
  oks = [a if isinstance(a, bool) else (None if a["n"] < 2 else a["ci_low"] > 0) for a in above]
  return "too few draws" if None in oks else ("yes" if all(oks) else "no")


def per_draw(m: Mapping, key: str, per_n: bool = False) -> list:
  """The default variant's per-draw ``key`` (None as NaN), divided by n with ``per_n``."""
  v = [float("nan") if x is None else x for x in m["variants"]["default"][key]["per_draw"]]
  return [x / m["n_train"] for x in v] if per_n else v


def best_baseline(m: Mapping, what: str = "strict") -> list:
  """Per draw, the stronger baseline: held-out images or the mean image (as reconstructions)."""
  return [
    b if h != h else max(h, b)
    for h, b in zip(per_draw(m, f"baseline_heldout_{what}"), per_draw(m, f"baseline_mean_{what}"))
  ]


def paired(a: Sequence[float], b: Sequence[float], conf: float) -> dict:
  """The interval of the per-draw differences ``a - b`` (the lists paired draw by draw)."""
  return interval([x - y for x, y in zip(a, b)], conf)


def _leak(m: Mapping, conf: float, key: str = "strict_pooled", quarter: bool = False) -> dict:
  n, d = m["n_train"], paired(per_draw(m, key), best_baseline(m), conf)
  a = interval(per_draw(m, key), conf)
  base = lambda k: fmt(interval(per_draw(m, f"baseline_{k}_strict"), conf))
  return dict(
    attack=f"{key.replace('_', ' ')} {fmt(a)} of {n}",
    baselines=f"held-out {base('heldout')}, mean image {base('mean')}",
    statistic=f"minus best baseline {fmt(d)}" + (f"; n/4 = {n / 4:g}" if quarter else ""),
    verdict=_yes(d, *([bool(a["mean"] >= n / 4)] if quarter else [])),
  )


def _findings(seeds: Sequence[Mapping], row) -> list:
  """One row per (sub-run, finding) of the init study, over seeds."""
  rows = []
  for sub, r in seeds[0]["sub_runs"].items():
    for name, f in r["findings"].items():
      held = [m["sub_runs"][sub]["findings"][name]["reproduced"] for m in seeds]
      held = [h for h in held if h is not None]
      verdict = (
        "not run (no grid)" if not held else "too few seeds" if len(held) < 3 else _yes(all(held))
      )
      rows += row(
        attack=f"holds in {sum(held)}/{len(held)} seeds" if held else "-",
        statistic=f"seed 0: {f['evidence']}",
        verdict=verdict,
        claim=f"{sub}: {name.replace('_', ' ')}",
      )
  return rows


def evaluate(kind: str, rs: list, conf: float) -> list:
  """The rows of one claim, ``[{attack, baselines, statistic, verdict}]``, from its runs.

  ``rs``: per run of the claim, an efficacy metrics dict, or (toy, init study)
  the list of its seeds' metrics dicts.  Raises ValueError for an unknown
  ``kind`` or paired runs on different draws.
  """
  e = lambda **k: [dict(dict(attack="-", baselines="-", statistic="-"), **k)]
  pooled = lambda m, per_n=False: per_draw(m, "strict_pooled", per_n)
  if kind in ("fewer", "partition", "lower_with_signal") and rs[0]["draws"] != rs[1]["draws"]:
    raise ValueError(f"paired runs on different draws: {rs[0]['draws']} vs {rs[1]['draws']}")
  if kind == "toy":
    n, med = rs[0][0]["n_train"], lambda k: statistics.median(m[k] for m in rs[0])
    at_init = interval([(m["at_init"] or {}).get("recovered", 0) for m in rs[0]], conf)
    return e(
      attack=f"{fmt(interval([m['recovered'] for m in rs[0]], conf))} of {n} (median "
      f"{med('recovered'):g}; best restart {med('recovered_best_restart'):g}, "
      f"pooled {med('recovered_pooled'):g})",
      baselines=f"its starting points {fmt(at_init)}",
      statistic=f"median {med('recovered'):g}; 0.9 n = {0.9 * n:g}",
      verdict="too few seeds" if len(rs[0]) < 3 else _yes(med("recovered") >= 0.9 * n),
    )
  if kind in ("leak", "leak_quarter", "selected_leak"):
    key = "strict_selected" if kind == "selected_leak" else "strict_pooled"
    return [_leak(rs[0], conf, key, kind == "leak_quarter")]
  if kind == "all_leak":
    rows = [_leak(m, conf) for m in rs]
    return e(
      **{k: "; ".join(r[k] for r in rows) for k in ("attack", "baselines", "statistic")},
      verdict=_yes(*[{"yes": True, "no": False}.get(r["verdict"]) for r in rows]),
    )
  if kind == "n_trend":
    rs = sorted(rs, key=lambda m: m["n_train"])
    per_n = lambda key: "; ".join(
      f"n={m['n_train']}: {fmt(interval(per_draw(m, key, True), conf), 2)}" for m in rs
    )
    d = paired(pooled(rs[0], True), pooled(rs[-1], True), conf)
    return e(
      attack="strict fraction " + per_n("strict_pooled"),
      baselines="held-out " + per_n("baseline_heldout_strict"),
      statistic=f"smallest - largest n: {fmt(d, 2)}",
      verdict=_yes(d),
    )
  if kind in ("fewer", "partition"):
    d = paired(pooled(rs[0]), pooled(rs[1]), conf)
    a, b = (fmt(interval(pooled(m), conf)) for m in rs)
    if kind == "partition":
      return e(
        attack=f"from the partition {a}",
        baselines=f"from noise {b}",
        statistic=f"partition - noise {fmt(d)}",
        verdict=NEW,
      )
    return e(attack=f"KKT {a}", baselines=b, statistic=f"KKT - baseline {fmt(d)}", verdict=_yes(d))
  if kind == "lower_with_signal":
    (base, kai), s = rs, "ssim_gt_0.4"
    lower = paired(per_draw(base, s), per_draw(kai, s), conf)
    sig = paired(per_draw(kai, s), best_baseline(kai, s), conf)
    return e(
      attack=f"SSIM > 0.4: Kaiming {fmt(interval(per_draw(kai, s), conf))}, base "
      f"{fmt(interval(per_draw(base, s), conf))}",
      baselines=f"Kaiming's best baseline {fmt(interval(best_baseline(kai, s), conf))}",
      statistic=f"base - Kaiming {fmt(lower)}; Kaiming - baseline {fmt(sig)}",
      verdict=_yes(lower, sig),
    )
  if kind == "identifiable":
    m = rs[0]
    ratios = per_draw(m, "identifiability_ratio")
    flat = per_draw(m, "truth_not_unique") if "truth_not_unique" in m["variants"]["default"] else []
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
    same = [s for m in rs for s in m["pick_same"]]
    return e(attack=f"the same restart in {sum(same)}/{len(same)} draws", verdict=NEW)
  if kind != "findings":
    raise ValueError(f"no criterion {kind!r}")
  return _findings(rs[0], e)


def claims(specs: Sequence, results: Mapping, sections: Sequence[str], conf: float) -> list:
  """Every claim of ``sections``, its runs' numbers and its verdict.

  ``specs``: ``(section, criterion, run names, claim text, paper's statement)``
  per claim; ``results``: per run, ``{binary, status, results: [metrics]}``.
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
    first = (results.get(names[0]) or {}).get("results") or [{}]
    row["claim"] = text.format(ds=first[0].get("dataset", names[0])) or kind
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
    except (KeyError, TypeError, ValueError, IndexError) as e:
      out.append(dict(row, verdict=f"not run (unreadable results: {type(e).__name__}: {e})"))
  return out


def condense(binary: str, m: dict, dataset: str = "", selections: Sequence = ()) -> dict:
  """What the claims and the report read of one process's metrics.json.

  The toy drops its per-restart rows and victim, the init study keeps its
  findings (not every eq. (10) point); an efficacy run gains its ``dataset``
  and, per draw, whether the attacker's pick was the truly best restart
  (``selections``: each draw's ``selection`` dict, or None).
  """
  if binary == "toy_2d":
    return {k: v for k, v in m.items() if k not in ("per_restart", "victim")}
  if binary == "init_study":
    return dict(m, sub_runs={k: {"findings": x["findings"]} for k, x in m["sub_runs"].items()})
  sel = [s or {} for s in selections]
  return dict(
    m,
    dataset=dataset,
    pick_same=[
      s["best_by_loss_restart"] == s["best_true_restart"] for s in sel if "best_true_restart" in s
    ],
  )


def table_rows(name: str, r: Mapping) -> list:
  """The rows of one run in its section's table (:data:`HEADS`)."""
  if r["binary"] == "efficacy":
    m = r["results"][0]
    digits = {"oracle_residual_rel": 3, "log10_identifiability_ratio": 2, "time_s": 0}
    a = [_fmt_or_dash(m["variants"]["default"].get(k), digits.get(k, 1)) for k in EFFICACY_KEYS]
    return [" | ".join([name, m["dataset"], str(m["n_train"]), str(len(m["draws"]))] + a)]
  if r["binary"] == "toy_2d":
    return [
      f"{name} seed {s} | {m['recovered']} / {m['n_train']} | {m['recovered_best_restart']}"
      f" | {m['recovered_pooled']} | {(m['at_init'] or {}).get('recovered', 0)} | "
      f"{m['oracle_residual_rel']:.3f} | {m['kink_fraction']:.2f}"
      for s, m in enumerate(r["results"])
    ]
  out = []
  for s, m in enumerate(r["results"]):
    held = [
      f["reproduced"]
      for x in m["sub_runs"].values()
      for f in x["findings"].values()
      if f["reproduced"] is not None
    ]
    out.append(
      f"{name} | {s} | {m['n_train']} {m['dataset']} | {sum(held)} of {len(held)} | "
      f"{m['wall_s']:.0f} | [summary.md]({name}/seed_{s}/summary.md)"
    )
  return out


def report(
  cfg,
  workdir: str,
  results: Mapping,
  rows: Sequence[Mapping],
  sections: Sequence[str],
  titles: Mapping,
  total_s: float,
  command: str,
  partial: bool,
) -> str:
  """RESULTS.md: the claims' table, the criteria, then per section its runs' tables.

  ``cfg``: the reproduction config (scale, confidence, draws, first_draw,
  seeds, sections); ``titles``: per section, ``(title, ...)``; figures are
  linked once, when they exist under ``workdir``.
  """
  lines = [
    f"# Reproduction report (scale: {cfg.scale})",
    "",
    f"Regenerate with `{command}` ({total_s / 60:.1f} min). Each run is its own process "
    "(commands below, settings in its config.json). Numbers are mean "
    f"[{cfg.confidence:.0%} t interval] over {cfg.draws} data draws (from draw "
    f"{cfg.first_draw}; each re-draws the training images and the victim), for the toy "
    f"and the init study over {cfg.seeds} seeds. Papers: Haim et al. 2022, Buzaglo et "
    "al. 2023 (DecoReco), Runkel et al. 2024.",
    "",
  ]
  if partial:
    lines += ["**Partial: the run is still going (or was stopped).**", ""]
  if cfg.scale == "quick":
    lines += ["**Quick scale: a wiring check; its numbers say nothing about the papers.**", ""]
  lines += [
    "## Claims",
    "",
    "| # | claim | paper | attack | baselines | criterion's statistic | reproduced |",
    "|---|---|---|---|---|---|---|",
  ]
  lines += [
    f"| {titles[r['section']][0].split('.')[0]} | {r['claim']} | {r['paper']} | "
    f"{r['attack']} | {r['baselines']} | {r['statistic']} | **{r['verdict']}** |"
    for r in rows
  ]
  lines += ["", "Criteria (fixed before any run):", ""]
  lines += [
    f"- {c}: {CRITERIA[c]}" for c in dict.fromkeys(r["criterion"] for r in rows) if c in CRITERIA
  ]
  shown = set()  # each run's figures once
  for sec in sections:
    lines += ["", f"## {titles[sec][0]}", ""]
    names = [n for n in cfg.sections[sec] if n in results]
    for binary, head in HEADS.items():
      ok = [n for n in names if results[n]["binary"] == binary and results[n]["status"] == "ok"]
      if ok:
        lines += [f"| {head} |", "|" + "---|" * (head.count("|") + 1)]
        lines += [f"| {row} |" for n in ok for row in table_rows(n, results[n])] + [""]
    for n in names:
      r, where = results[n], results[n].get("alias", n)
      if r["status"] != "ok":
        lines += [f"**FAILED**: `{n}`: {r['status']}", ""]
      lines.append(
        f"- `{n}`"
        + (f" (the same run as `{where}`)" if where != n else "")
        + ": "
        + "; ".join(f"`{c}`" for c in r["commands"])
      )
      lines += [
        f"  ![{where}/{f}]({where}/{f})"
        for f in FIGURES[r["binary"]]
        if where not in shown and os.path.isfile(os.path.join(workdir, where, f))
      ]
      shown.add(where)
  return "\n".join(lines) + "\n"


def _fmt_or_dash(iv, digits: int) -> str:
  return "–" if not iv or not iv["n"] else fmt(iv, digits)


def _truth_best(a: Mapping) -> str:
  """``k of K``: draws whose identifiability ratio is >= 1 (the truth fits at least as well
  as anything the attack found) and through whose training set runs no flat family."""
  ratios = (a.get("identifiability_ratio") or {}).get("per_draw", [])
  flat = (a.get("truth_not_unique") or {}).get("per_draw", [None] * len(ratios))
  pairs = [(r, f) for r, f in zip(ratios, flat) if r is not None]
  return f"{sum(r >= 1 and not f for r, f in pairs)} of {len(pairs)}" if pairs else "–"


def _count(a: Mapping, key: str) -> str:
  """``k of K``: draws whose 0/1 number ``key`` is 1."""
  v = [x for x in (a.get(key) or {}).get("per_draw", []) if x is not None]
  return f"{int(sum(v))} of {len(v)}" if v else "–"


def efficacy_table(out: Mapping, variants: Sequence[str]) -> str:
  """results.md of the efficacy harness: means and 95% intervals over draws, attack next to
  its baselines, then the paired differences against the first variant."""
  n = out["n_train"]
  lines = [
    f"Draws {out['draws'][0]}..{out['draws'][-1]} ({len(out['draws'])}), n = {n}; "
    "mean [95% t interval] over draws.",
    "",
    "| variant | strict pooled | strict attacker-selected | SSIM > 0.4 | mean-image "
    "baseline strict | held-out baseline strict | oracle residual | identifiability ratio "
    "(log10) | draws where the truth fits best | draws where other images fit exactly as "
    "well | time per draw (s) |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for v in variants:
    a = out["variants"][v]
    lines.append(
      f"| {v} | {fmt(a['strict_pooled'])} | {fmt(a['strict_selected'])} | "
      f"{fmt(a['ssim_gt_0.4'])} | {fmt(a['baseline_mean_strict'])} | "
      f"{fmt(a['baseline_heldout_strict'])} | {fmt(a['oracle_residual_rel'], 3)} | "
      f"{_fmt_or_dash(a.get('log10_identifiability_ratio'), 2)} | {_truth_best(a)} | "
      f"{_count(a, 'truth_not_unique')} | "
      f"{fmt(a['time_s'], 0)} |"
    )
  paired_ = out.get("paired_vs_" + variants[0], {})
  if paired_:
    lines += [
      "",
      f"Paired differences against `{variants[0]}` (same draws):",
      "",
      "| variant | strict pooled | strict attacker-selected | verdict (pooled) |",
      "|---|---|---|---|",
    ]
    for v, d in paired_.items():
      lines.append(
        f"| {v} | {fmt(d['strict_pooled'])} | {fmt(d['strict_selected'])} | "
        f"{d['strict_pooled']['verdict']} |"
      )
  return "\n".join(lines) + "\n"
