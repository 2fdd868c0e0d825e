"""The Markdown the harness and the reproduction write: RESULTS.md (the claims' table, the
criteria, each section's runs) and the efficacy harness's results.md (its variants over
draws, and the paired differences against the first).  Pure functions of the runs' results
read typed (:mod:`.run_results`); the verdicts come from :mod:`.claims`."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from recon_jax.studies import efficacy
from recon_jax.studies.efficacy import fmt_or_dash
from reproduction.claims import CRITERIA


def _summary():
  """The harness's numbers in RESULTS.md's table of harness runs (read at each call, so a
  number added to :data:`efficacy.NUMBERS` shows up without a second edit)."""
  return [n for n in efficacy.NUMBERS if n.summary]


# The columns of each binary's table in the report (the harness's: :func:`heads`).
HEADS = {
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


def heads() -> dict:
  """The columns of each binary's table in RESULTS.md."""
  harness = " | ".join(["run", "data", "n", "draws"] + [n.column for n in _summary()])
  return {"efficacy": harness, **HEADS}


def table_rows(name: str, r: Mapping) -> list:
  """The rows of one run in its section's table (:func:`heads`); its results read typed
  (:mod:`.run_results`)."""
  if r["binary"] == "efficacy":
    m = r["results"][0]
    res = m.results
    a = [fmt_or_dash(res.variants["default"].get(n.key), n.digits) for n in _summary()]
    return [" | ".join([name, m.dataset, str(res.n_train), str(len(res.draws))] + a)]
  if r["binary"] == "toy_2d":
    return [
      f"{name} seed {s} | {m.recovered} / {m.n_train} | {m.recovered_best_restart}"
      f" | {m.recovered_pooled} | {m.at_init} | "
      f"{m.oracle_residual_rel:.3f} | {m.kink_fraction:.2f}"
      for s, m in enumerate(r["results"])
    ]
  out = []
  for s, m in enumerate(r["results"]):
    held = [
      f.reproduced for x in m.findings.values() for f in x.values() if f.reproduced is not None
    ]
    out.append(
      f"{name} | {s} | {m.n_train} {m.dataset} | {sum(held)} of {len(held)} | "
      f"{m.wall_s:.0f} | [summary.md]({name}/seed_{s}/summary.md)"
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
    for binary, head in heads().items():
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
