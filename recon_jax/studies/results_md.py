"""The Markdown the harness and the reproduction write: RESULTS.md (the claims' table, the
criteria, each section's runs) and the efficacy harness's results.md (its variants over
draws, and the paired differences against the first).  Pure functions of the metrics
the binaries write; the verdicts come from :mod:`.claims`."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from recon_jax.studies.claims import CRITERIA, fmt

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
