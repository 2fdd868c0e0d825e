"""The Markdown the harness and the reproduction write: RESULTS.md (the claims' table, the
criteria, each section's runs) and the efficacy harness's results.md (its variants over
draws, and the paired differences against the first).  Pure functions of the runs' results
read typed (:mod:`.run_results`); the verdicts come from :mod:`.claims`."""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from recon_jax.studies import efficacy
from recon_jax.studies.efficacy import fmt_or_dash
from reproduction import readings
from reproduction.claims import CRITERIA
from reproduction.run_results import Harness, InitStudy


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
  written: str = "",
) -> str:
  """RESULTS.md: the claims' table, the criteria, then per section its runs' tables.

  ``cfg``: the reproduction config (scale, confidence, draws, first_draw,
  seeds, sections); ``titles``: per section, ``(title, ...)``; figures are
  linked once, when they exist under ``workdir``; ``written``: the commit of the code that
  writes the report (said where it is not the runs' own).
  """
  ran = [x for r in results.values() if "alias" not in r for x in r.get("ran", ())]
  several = len({x["commit"] for x in ran}) > 1  # then each run's line says its own
  lines = [
    f"# Reproduction report (scale: {cfg.scale})",
    "",
    f"Regenerate with `{command}`. {_provenance(ran, written)} Each run is its own process "
    "(commands below, settings in its config.json). Numbers are mean "
    f"[{cfg.confidence:.0%} t interval] over {cfg.draws} data draws (from draw "
    f"{cfg.first_draw}; each re-draws the training images and the victim), for the toy "
    f"and the init study over {cfg.seeds} seeds. Papers: Haim et al. 2022, Buzaglo et "
    "al. 2023 (DecoReco), Runkel et al. 2024.",
    "",
  ]
  if partial:
    lines += ["**Partial: the run is still going (or was stopped).**", ""]
  left = [titles[t][0] for t in titles if t not in sections]
  if left:
    lines += [f"**Not in this report** (not run, or not yet): {'; '.join(left)}.", ""]
  if cfg.scale == "quick":
    lines += ["**Quick scale: a wiring check; its numbers say nothing about the papers.**", ""]
  lines += [GUIDE, ""] + section_times(cfg, results, sections, titles, total_s)
  lines += claims_table(rows, titles)
  lines += ["", "Verdicts (fixed before any run):", "", f"- {readings.PAPER_SENSE}"]
  lines += [f"- {readings.EVIDENCE}", "", "Criteria:", ""]
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
        + _budget(workdir, where, r["binary"])
        + (_commits(r) if several else "")
        + ": "
        + "; ".join(f"`{c}`" for c in r["commands"])
      )
      figures = list(FIGURES[r["binary"]])
      if r["status"] == "ok" and r["binary"] == "efficacy" and not r["results"][0].results.map:
        figures += first_grid(os.path.join(workdir, where))
      lines += [
        f"  ![{where}/{f}]({where}/{f})"
        for f in figures
        if where not in shown and os.path.isfile(os.path.join(workdir, where, f))
      ]
      if where not in shown and r["status"] == "ok" and r["binary"] == "efficacy":
        lines += map_lines(r["results"][0], where)
      shown.add(where)
  return "\n".join(lines) + "\n"


def first_grid(folder: str) -> list:
  """``['default/draw_D/reconstructions.png']`` of an efficacy run's first draw D that has
  one (its reconstructions over their training images and nearest held-out images), or []."""
  base = os.path.join(folder, "default")
  draws = os.listdir(base) if os.path.isdir(base) else []
  numbered = sorted(int(d[5:]) for d in draws if d.startswith("draw_") and d[5:].isdigit())
  for d in numbered:
    rel = f"default/draw_{d}/reconstructions.png"
    if os.path.isfile(os.path.join(folder, rel)):
      return [rel]
  return []


def _commits(r: Mapping) -> str:
  """', at commit C' (or 'commits C, D') of the sessions that ran a run's processes, or ''."""
  got = list(dict.fromkeys(x["commit"] for x in r.get("ran", ())))
  return f", at commit{'s' if len(got) > 1 else ''} {', '.join(got)}" if got else ""


def _provenance(ran: Sequence[Mapping], written: str = "") -> str:
  """'Run on DATE(S) at commit C (...)': the sessions that ran the runs' processes; and the
  commit ``written`` that wrote the report where it is not theirs."""
  if not ran:
    return f"Written at commit {written}." if written else ""
  dates = sorted({x["date"] for x in ran})
  commits = list(dict.fromkeys(x["commit"] for x in ran))
  when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
  at = f"commit {commits[0]}" if len(commits) == 1 else "commits " + ", ".join(commits)
  at += " (each run's beside its command)" if len(commits) > 1 else ""
  out = f"Run {when} at {at}."
  if written and written not in commits:
    out += f" This report was written from them at commit {written}."
  return out


def run_seconds(r: Mapping) -> float:
  """The seconds one run's work took, from its own results: an efficacy run's time per draw
  summed over its variants and draws, the toy's and the init study's per seed.  A draw cut
  off by an interruption (and run again on resuming) is not in it."""
  total = 0.0
  for m in r.get("results", ()):
    if isinstance(m, Harness):
      for numbers in m.results.variants.values():
        per = numbers["time_s"].per_draw if "time_s" in numbers else ()
        total += sum(x for x in per if x is not None)
    elif isinstance(m, InitStudy):
      total += m.wall_s
    else:  # a toy's seed
      total += float(m.written.get("timing", {}).get("total_s", 0.0))
  return total


def section_times(cfg, results: Mapping, sections, titles: Mapping, total_s: float) -> list:
  """The minutes each section's runs took (:func:`run_seconds`; a run shared by sections
  counts where it first ran), and this command's own."""
  lines = ["| section | runs | minutes of its runs |", "|---|---|---|"]
  counted, total = set(), 0.0
  for sec in sections:
    names = [n for n in cfg.sections[sec] if n in results]
    own = [results[n].get("alias", n) for n in names]
    own = [n for n in dict.fromkeys(own) if n not in counted]
    counted.update(own)
    minutes = sum(run_seconds(results[n]) for n in own) / 60
    total += minutes
    lines.append(f"| {titles[sec][0]} | {len(own)} | {minutes:.0f} |")
  return lines + [
    f"| all sections | {len(counted)} | {total:.0f} |",
    f"| this command | | {total_s / 60:.0f} |",
    "",
    "A section's minutes are its runs' own, each draw or seed as timed when it ran (over every "
    "session a resumed run took); this command's are its wall time, which on a resume is only "
    "what it ran.",
    "",
  ]


CLAIM_COLUMNS = (
  ("ssim", "paper's count: SSIM > 0.4"),
  ("heldout_ssim", "held-out images at SSIM > 0.4"),
  ("strict", "strict (pooled; the attacker's pick where the claim is about it)"),
  ("heldout_strict", "held-out strict"),
  ("membership", "membership (weights): AUC; TPR at 0.1% FPR"),
)


def claims_table(rows: Sequence[Mapping], titles: Mapping) -> list:
  """The claims, each with the paper's count beside the strict one, and both verdicts."""
  head = ["#", "claim", "paper"] + [h for _, h in CLAIM_COLUMNS]
  head += ["criterion's statistic", "in the paper's sense", "as evidence of membership"]
  lines = ["## Claims", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [r.get(k, readings.DASH) for k, _ in CLAIM_COLUMNS]
    stat = r["statistic"]
    if cells[0] == readings.DASH and r["attack"] != "-":  # the toy, the init study, the picks
      stat = f"{r['attack']}; {stat}" if stat != "-" else r["attack"]
    number = titles[r["section"]][0].split(".")[0]
    lines.append(
      "| "
      + " | ".join([number, r["claim"], r["paper"], *cells, stat])
      + f" | **{r.get('paper_verdict', readings.DASH)}** | **{r['verdict']}** |"
    )
  return lines


def _in_unit(iv):
  """A rate's interval (AUC, TPR) clipped to [0, 1] (reports before the harness clipped it)."""
  if iv is None or iv.ci_low != iv.ci_low:
    return iv
  return iv._replace(ci_low=max(0.0, iv.ci_low), ci_high=min(1.0, iv.ci_high))


def map_lines(m, where: str) -> list:
  """A leakage map's cells (an efficacy run with a map): each cell's strict counts, what the
  change's span holds, the held-out baseline, membership and time, over its draws."""
  res = m.results
  if not res.map:
    return []
  n_of = res.n_train_of or {}
  keys = ("strict_pooled", "strict_selected", "span_ceiling", "baseline_heldout_strict")
  keys += ("membership_weights_auc", "membership_weights_tpr", "membership_loss_tpr", "time_s")
  rates = dict(membership_weights_auc=3, membership_weights_tpr=2, membership_loss_tpr=2)
  lines = [
    "",
    f"The leakage map (`{where}`): one thing changed at a time from the base model.",
    "",
    "| axis | value | n | strict pooled | attacker's pick | the span holds | held-out strict | "
    "membership AUC (weights) | TPR at 0.1% FPR: weights / loss | s a draw |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for cell in res.map:
    agg = res.variants.get(cell["variant"], {})
    v = {k: fmt_or_dash(agg.get(k), 0 if k == "time_s" else 1) for k in keys}
    v.update({k: fmt_or_dash(_in_unit(agg.get(k)), d) for k, d in rates.items()})
    lines.append(
      f"| {cell['axis']} | {cell['label']} | {n_of.get(cell['variant'], '?')} | "
      f"{v['strict_pooled']} | {v['strict_selected']} | {v['span_ceiling']} | "
      f"{v['baseline_heldout_strict']} | {v['membership_weights_auc']} | "
      f"{v['membership_weights_tpr']} / {v['membership_loss_tpr']} | {v['time_s']} |"
    )
  return lines + [f"  ![{where}/leakage_map.png]({where}/leakage_map.png)", ""]


GUIDE = (
  "What the numbers say is in [docs/findings.md](docs/findings.md) and, for models fine-tuned "
  "from weights the attacker knows, [docs/leakage.md](docs/leakage.md); how a recovery is "
  "counted in [docs/evaluation.md](docs/evaluation.md), how membership is tested in "
  "[docs/membership.md](docs/membership.md)."
)


def _budget(workdir: str, where: str, binary: str) -> str:
  """' (R restarts x S steps a draw)' of an efficacy run's KKT search (its config.json), or ''."""
  if binary != "efficacy":
    return ""
  try:
    with open(os.path.join(workdir, where, "config.json")) as fh:
      base = json.load(fh)["config"]["base"]
    search, attack = base["search"], base["attack"]
  except (OSError, ValueError, KeyError, TypeError):
    return ""
  trained = _victims(os.path.join(workdir, where, "default"))
  if attack not in ("kkt", "closed_form", "inversion"):
    return f" ({attack}{trained})"
  steps = f"{search['num_restarts']} restarts x {search['steps']:,} steps a draw"
  return f" ({attack}: {steps}{trained})"


def _victims(folder: str) -> str:
  """'; victims: train loss LO-HI, test accuracy LO-HI' over the draws' metrics.json."""
  got = []
  for d in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
    try:
      with open(os.path.join(folder, d, "metrics.json")) as fh:
        v = json.load(fh)["victim"]
      got.append((float(v["loss"]), float(v["test_accuracy"])))
    except (OSError, ValueError, KeyError, TypeError):
      continue
  if not got:
    return ""
  span = lambda xs, f: f"{f(min(xs))} to {f(max(xs))}" if min(xs) != max(xs) else f(xs[0])  # noqa: E731
  loss = span([g[0] for g in got], lambda x: f"{x:.1e}")
  acc = span([g[1] for g in got], lambda x: f"{x:.2f}")
  return f"; victims: train loss {loss}, test accuracy {acc}"
