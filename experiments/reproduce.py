r"""Regenerate the papers' experiments at one scale -> RESULTS.md and results.json.

Every run is its own process of another binary (efficacy, toy_2d, init_study), which sets
its own precision.  Each claim's verdict comes from intervals over data draws (seeds for the
toy and the init study) by a criterion fixed here before any run (CRITERIA).

  python -m experiments.reproduce --config=experiments/configs/reproduce.py:quick \
      --workdir=/tmp/repro_quick
  python -m experiments.reproduce --workdir=/tmp/repro                  # the default scale
  python -m experiments.reproduce --config=experiments/configs/reproduce.py:paper \
      --config.data_dir=~/data --workdir=/tmp/repro_paper               # on a GPU
  python -m experiments.reproduce --only=toy,baselines --workdir=/tmp/repro_some
  python -m experiments.reproduce --workdir=/tmp/repro --resume         # after an interruption

Writes RESULTS.md and results.json (the sections this command ran), a folder per run
(<run>/, seeds in <run>/seed_<s>/) and logs/<run>.log.  --resume keeps the finished runs and
continues an interrupted one with its binary's --resume.  A run that fails is FAILED in its
section, the others go on, and the exit code is 2.
"""
import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags, logging

from experiments import common
from experiments.configs.reproduce import CLAIMS, SECTIONS

FLAGS = flags.FLAGS
# The file that lets a binary's --resume continue an interrupted run.
STATE = {"efficacy": "config.json", "toy_2d": "state.msgpack", "init_study": "config.json"}
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
}


class Failed(Exception):
  """A run's process exited with an error (the message: its one-line error)."""


def _value(v) -> str:
  if isinstance(v, bool):
    return str(v).lower()
  return ",".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def jobs(cfg, name: str) -> list:
  """``[(folder, args)]`` of one run: one efficacy process, or one process per seed."""
  r = cfg.runs[name]
  pre, over = "base." if r.binary == "efficacy" else "", common._flatten(r.overrides.to_dict())
  if cfg.data_dir and r.binary != "toy_2d":
    over["data_dir"] = cfg.data_dir
  args = [f"--config=experiments/configs/{r.binary}.py:{r.preset}"]
  args += [f"--config.{pre}{k}={_value(v)}" for k, v in over.items()]
  if r.binary == "efficacy":
    return [(name, args + [f"--draws={r.draws or cfg.draws}", f"--first_draw={cfg.first_draw}"])]
  return [(f"{name}/seed_{s}", args + [f"--config.seed={s}"]) for s in range(r.draws or cfg.seeds)]


def _read(*path):
  try:
    with open(os.path.join(*path)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def execute(binary: str, folder: str, args: list, log: str, resume: bool) -> None:
  """Runs one process, unless ``resume`` finds it finished; raises Failed with its error line."""
  env = (_read(folder, "config.json") or {}).get("environment", {})
  same = args == [a for a in env.get("argv", [])[1:]
                  if not a.startswith(("--workdir", "--resume", "--overwrite"))]
  if resume and same and os.path.isfile(os.path.join(folder, "metrics.json")):
    return
  mode = []
  if os.path.isdir(folder) and os.listdir(folder):
    keep = resume and same and os.path.isfile(os.path.join(folder, STATE[binary]))
    mode = ["--resume" if keep else "--overwrite"]
  cmd = [sys.executable, "-m", f"experiments.{binary}"] + args + [f"--workdir={folder}"] + mode
  logging.info("reproduce: %s", " ".join(cmd[1:]))
  with open(log, "a") as fh:
    fh.write("$ " + " ".join(cmd[1:]) + "\n")
    fh.flush()
    rc = subprocess.run(cmd, cwd=common.ROOT, stdout=fh, stderr=subprocess.STDOUT,
                        env=dict(os.environ, MPLBACKEND="Agg")).returncode
  if rc:
    with open(log) as fh:
      lines = [l.strip() for l in fh if l.strip()]
    err = [l for l in lines if l.startswith("error:")] or lines[-1:]
    raise Failed(f"{f'killed by signal {-rc}' if rc < 0 else f'exit code {rc}'}: {err[-1]}")


def run_one(cfg, workdir: str, name: str, resume: bool) -> dict:
  """One run's processes -> ``{binary, commands, status, results: [metrics per process]}``."""
  r, t0 = cfg.runs[name], time.time()
  out = {"binary": r.binary, "commands": [], "results": [], "status": "ok"}
  os.makedirs(os.path.join(workdir, "logs"), exist_ok=True)
  for rel, args in jobs(cfg, name):
    folder = os.path.join(workdir, rel)
    out["commands"].append(" ".join([f"python -m experiments.{r.binary}"] + args
                                    + [f"--workdir={folder}"]))
    try:
      execute(r.binary, folder, args, os.path.join(workdir, "logs", f"{name}.log"), resume)
    except Failed as e:
      out["status"] = f"FAILED ({e}; log: logs/{name}.log)"
      break
    m = _read(folder, "metrics.json")
    if m is None:
      out["status"] = f"FAILED ({rel}/metrics.json unreadable after the run)"
      break
    if r.binary == "toy_2d":
      m = {k: v for k, v in m.items() if k not in ("per_restart", "victim")}
    elif r.binary == "init_study":  # the findings, not every eq. (10) point
      m["sub_runs"] = {k: {"findings": x["findings"]} for k, x in m["sub_runs"].items()}
    else:  # + the dataset, and whether the attacker's pick was the truly best restart
      m["dataset"] = _read(folder, "config.json")["config"]["base"]["victim"]["dataset"]
      sel = [(_read(folder, "default", f"draw_{d}", "metrics.json") or {}).get("selection")
             or {} for d in m["draws"]]
      m["pick_same"] = [s["best_by_loss_restart"] == s["best_true_restart"] for s in sel
                        if "best_true_restart" in s]
    out["results"].append(m)
  out["wall_s"] = time.time() - t0
  return out


# ----------------------------------------------------------------------------- claims

def _iv(values, conf=0.95) -> dict:
  from recon_jax import efficacy
  return efficacy.interval(values, conf)


def _f(iv: dict, d: int = 1) -> str:
  lo_hi = f" [{iv['ci_low']:.{d}f}, {iv['ci_high']:.{d}f}]" if iv["n"] > 1 else ""
  return f"{iv['mean']:.{d}f}{lo_hi}"


def _yes(*above) -> str:
  """'yes' if every interval lies above 0 (or every check passed), 'too few draws' for n < 2."""
  oks = [a if isinstance(a, bool) else (None if a["n"] < 2 else a["ci_low"] > 0) for a in above]
  return "too few draws" if None in oks else ("yes" if all(oks) else "no")


def _pd(m: dict, key: str, per_n: bool = False) -> list:
  v = [float("nan") if x is None else x for x in m["variants"]["default"][key]["per_draw"]]
  return [x / m["n_train"] for x in v] if per_n else v


def _best(m: dict, what: str = "strict") -> list:
  """Per draw, the stronger baseline: held-out images or the mean image (as reconstructions)."""
  return [b if h != h else max(h, b) for h, b in zip(_pd(m, f"baseline_heldout_{what}"),
                                                     _pd(m, f"baseline_mean_{what}"))]


def _diff(a: list, b: list, conf: float) -> dict:
  return _iv([x - y for x, y in zip(a, b)], conf)


def _leak(m: dict, conf: float, key: str = "strict_pooled", quarter: bool = False) -> dict:
  n, d, a = m["n_train"], _diff(_pd(m, key), _best(m), conf), _iv(_pd(m, key), conf)
  return dict(attack=f"{key.replace('_', ' ')} {_f(a)} of {n}",
              baselines=f"held-out {_f(_iv(_pd(m, 'baseline_heldout_strict'), conf))}, mean "
                        f"image {_f(_iv(_pd(m, 'baseline_mean_strict'), conf))}",
              statistic=f"minus best baseline {_f(d)}" + (f"; n/4 = {n / 4:g}" if quarter else ""),
              verdict=_yes(d, *([bool(a["mean"] >= n / 4)] if quarter else [])))


def evaluate(kind: str, rs: list, conf: float) -> list:
  """The rows of one claim, ``[{attack, baselines, statistic, verdict}]``, from its runs."""
  e = lambda **k: [dict(dict(attack="-", baselines="-", statistic="-"), **k)]
  pooled = lambda m, per_n=False: _pd(m, "strict_pooled", per_n)
  if kind in ("fewer", "partition", "lower_with_signal") and rs[0]["draws"] != rs[1]["draws"]:
    raise ValueError(f"paired runs on different draws: {rs[0]['draws']} vs {rs[1]['draws']}")
  if kind == "toy":
    n, med = rs[0][0]["n_train"], lambda k: statistics.median(m[k] for m in rs[0])
    at_init = _iv([(m["at_init"] or {}).get("recovered", 0) for m in rs[0]], conf)
    return e(attack=f"{_f(_iv([m['recovered'] for m in rs[0]], conf))} of {n} (median "
                    f"{med('recovered'):g}; best restart {med('recovered_best_restart'):g}, "
                    f"pooled {med('recovered_pooled'):g})",
             baselines=f"its starting points {_f(at_init)}",
             statistic=f"median {med('recovered'):g}; 0.9 n = {0.9 * n:g}",
             verdict="too few seeds" if len(rs[0]) < 3 else _yes(med("recovered") >= 0.9 * n))
  if kind in ("leak", "leak_quarter", "selected_leak"):
    key = "strict_selected" if kind == "selected_leak" else "strict_pooled"
    return [_leak(rs[0], conf, key, kind == "leak_quarter")]
  if kind == "all_leak":
    rows = [_leak(m, conf) for m in rs]
    return e(**{k: "; ".join(r[k] for r in rows) for k in ("attack", "baselines", "statistic")},
             verdict=_yes(*[{"yes": True, "no": False}.get(r["verdict"]) for r in rows]))
  if kind == "n_trend":
    rs = sorted(rs, key=lambda m: m["n_train"])
    per_n = lambda key: "; ".join(f"n={m['n_train']}: {_f(_iv(_pd(m, key, True), conf), 2)}"
                                  for m in rs)
    d = _diff(pooled(rs[0], True), pooled(rs[-1], True), conf)
    return e(attack="strict fraction " + per_n("strict_pooled"),
             baselines="held-out " + per_n("baseline_heldout_strict"),
             statistic=f"smallest - largest n: {_f(d, 2)}", verdict=_yes(d))
  if kind in ("fewer", "partition"):
    d, (a, b) = _diff(pooled(rs[0]), pooled(rs[1]), conf), (_f(_iv(pooled(m), conf)) for m in rs)
    if kind == "partition":
      return e(attack=f"from the partition {a}", baselines=f"from noise {b}",
               statistic=f"partition - noise {_f(d)}", verdict=NEW)
    return e(attack=f"KKT {a}", baselines=b, statistic=f"KKT - baseline {_f(d)}", verdict=_yes(d))
  if kind == "lower_with_signal":
    (base, kai), s = rs, "ssim_gt_0.4"
    lower, sig = _diff(_pd(base, s), _pd(kai, s), conf), _diff(_pd(kai, s), _best(kai, s), conf)
    return e(attack=f"SSIM > 0.4: Kaiming {_f(_iv(_pd(kai, s), conf))}, base "
                    f"{_f(_iv(_pd(base, s), conf))}",
             baselines=f"Kaiming's best baseline {_f(_iv(_best(kai, s), conf))}",
             statistic=f"base - Kaiming {_f(lower)}; Kaiming - baseline {_f(sig)}",
             verdict=_yes(lower, sig))
  if kind == "pick_rate":
    same = [s for m in rs for s in m["pick_same"]]
    return e(attack=f"the same restart in {sum(same)}/{len(same)} draws", verdict=NEW)
  if kind != "findings":
    raise ValueError(f"no criterion {kind!r}")
  rows = []  # one row per (sub-run, finding), over seeds
  for sub, r in rs[0][0]["sub_runs"].items():
    for name, f in r["findings"].items():
      held = [m["sub_runs"][sub]["findings"][name]["reproduced"] for m in rs[0]]
      held = [h for h in held if h is not None]
      verdict = ("not run (no grid)" if not held else "too few seeds" if len(held) < 3
                 else _yes(all(held)))
      rows += e(attack=f"holds in {sum(held)}/{len(held)} seeds" if held else "-",
                statistic=f"seed 0: {f['evidence']}", verdict=verdict,
                claim=f"{sub}: {name.replace('_', ' ')}")
  return rows


def claims(cfg, results: dict, sections) -> list:
  """Every claim of ``sections``, its runs' numbers and its verdict."""
  out = []
  for sec, kind, names, text, paper in CLAIMS:
    if sec not in sections:
      continue
    row = dict(section=sec, criterion=kind, paper=paper, runs=list(names), attack="-",
               baselines="-", statistic="-")
    bad = [n for n in names if results.get(n, {}).get("status") != "ok"]
    first = (results.get(names[0]) or {}).get("results") or [{}]
    row["claim"] = text.format(ds=first[0].get("dataset", names[0])) or kind
    if bad:
      why = ", ".join(f"{n} {'FAILED' if n in results else 'not in the sections'}" for n in bad)
      out.append(dict(row, verdict=f"not run ({why})"))
      continue
    rs = [results[n]["results"][0] if results[n]["binary"] == "efficacy"
          else results[n]["results"] for n in names]
    try:
      out += [dict(row, **r) for r in evaluate(kind, rs, cfg.confidence)]
    except (KeyError, TypeError, ValueError, IndexError) as e:
      out.append(dict(row, verdict=f"not run (unreadable results: {type(e).__name__}: {e})"))
  return out


# ----------------------------------------------------------------------------- report

HEADS = {"efficacy": ("run | data | n | draws | strict pooled | strict attacker-selected | SSIM > "
                      "0.4 | mean-image baseline strict | held-out baseline strict | oracle "
                      "residual | s per draw"),
         "toy_2d": ("run | recovered (attacker-selected restart) | best restart | pooled | its "
                    "starting points | oracle residual | kinks on data"),
         "init_study": "run | seed | training images | findings that hold | wall (s) | summary"}
FIGURES = {"efficacy": ("efficacy.png",), "toy_2d": ("seed_0/toy_2d.png",),
           "init_study": ("seed_0/kkt_mlp_relu_settings.png", "seed_0/bilevel_affine_settings.png")}
EFFICACY_KEYS = ("strict_pooled", "strict_selected", "ssim_gt_0.4", "baseline_mean_strict",
                 "baseline_heldout_strict", "oracle_residual_rel", "time_s")


def table_rows(name: str, r: dict) -> list:
  """The rows of one run in its section's table (HEADS)."""
  if r["binary"] == "efficacy":
    m = r["results"][0]
    a = [_f(m["variants"]["default"][k], 3 if k == "oracle_residual_rel" else
            0 if k == "time_s" else 1) for k in EFFICACY_KEYS]
    return [" | ".join([name, m["dataset"], str(m["n_train"]), str(len(m["draws"]))] + a)]
  if r["binary"] == "toy_2d":
    return [f"{name} seed {s} | {m['recovered']} / {m['n_train']} | {m['recovered_best_restart']}"
            f" | {m['recovered_pooled']} | {(m['at_init'] or {}).get('recovered', 0)} | "
            f"{m['oracle_residual_rel']:.3f} | {m['kink_fraction']:.2f}"
            for s, m in enumerate(r["results"])]
  out = []
  for s, m in enumerate(r["results"]):
    held = [f["reproduced"] for x in m["sub_runs"].values() for f in x["findings"].values()
            if f["reproduced"] is not None]
    out.append(f"{name} | {s} | {m['n_train']} {m['dataset']} | {sum(held)} of {len(held)} | "
               f"{m['wall_s']:.0f} | [summary.md]({name}/seed_{s}/summary.md)")
  return out


def markdown(cfg, workdir, results, rows, sections, total_s, command, partial) -> str:
  lines = [f"# Reproduction report (scale: {cfg.scale})", "",
           f"Regenerate with `{command}` ({total_s / 60:.1f} min). Each run is its own process "
           "(commands below, settings in its config.json). Numbers are mean "
           f"[{cfg.confidence:.0%} t interval] over {cfg.draws} data draws (from draw "
           f"{cfg.first_draw}; each re-draws the training images and the victim), for the toy "
           f"and the init study over {cfg.seeds} seeds. Papers: Haim et al. 2022, Buzaglo et "
           "al. 2023 (DecoReco), Runkel et al. 2024.", ""]
  if partial:
    lines += ["**Partial: the run is still going (or was stopped).**", ""]
  if cfg.scale == "quick":
    lines += ["**Quick scale: a wiring check; its numbers say nothing about the papers.**", ""]
  lines += ["## Claims", "", "| # | claim | paper | attack | baselines | criterion's statistic | "
            "reproduced |", "|---|---|---|---|---|---|---|"]
  lines += [f"| {SECTIONS[r['section']][0].split('.')[0]} | {r['claim']} | {r['paper']} | "
            f"{r['attack']} | {r['baselines']} | {r['statistic']} | **{r['verdict']}** |"
            for r in rows]
  lines += ["", "Criteria (fixed before any run):", ""]
  lines += [f"- {c}: {CRITERIA[c]}" for c in dict.fromkeys(r["criterion"] for r in rows)
            if c in CRITERIA]
  shown = set()  # each run's figures once
  for sec in sections:
    lines += ["", f"## {SECTIONS[sec][0]}", ""]
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
      lines.append(f"- `{n}`" + (f" (the same run as `{where}`)" if where != n else "") + ": "
                   + "; ".join(f"`{c}`" for c in r["commands"]))
      lines += [f"  ![{where}/{f}]({where}/{f})" for f in FIGURES[r["binary"]]
                if where not in shown and os.path.isfile(os.path.join(workdir, where, f))]
      shown.add(where)
  return "\n".join(lines) + "\n"


def run(cfg, workdir: str, sections, *, resume: bool = False, command: str = "") -> dict:
  """Runs the ``sections``' runs (each once) into ``workdir``; writes RESULTS.md, results.json."""
  t0, results, seen, workdir = time.time(), {}, {}, os.path.abspath(workdir)
  command = command or (f"python -m experiments.reproduce --config=experiments/configs/"
                        f"reproduce.py:{cfg.scale} --workdir={workdir}")
  for i, sec in enumerate(sections):
    for name in (n for n in cfg.sections[sec] if n not in results):
      key = json.dumps([cfg.runs[name].binary] + [a for _, a in jobs(cfg, name)])
      if key in seen:  # the same run under two names runs once
        results[name] = dict(results[seen[key]], alias=seen[key])
        continue
      seen[key], results[name] = name, run_one(cfg, workdir, name, resume)
      logging.info("reproduce: %s %s (%.0f s)", name, results[name]["status"],
                   results[name]["wall_s"])
    rows, total = claims(cfg, results, sections[:i + 1]), time.time() - t0
    common.write_text(workdir, "RESULTS.md", markdown(
        cfg, workdir, results, rows, sections[:i + 1], total, command, i + 1 < len(sections)))
    out = {"scale": cfg.scale, "command": command, "sections": sections[:i + 1], "claims": rows,
           "total_s": total, "config": cfg, "runs": results}
    common.write_json(workdir, "results.json", out)
  return out


def check(cfg, only: str) -> list:
  """The sections to run, in report order; a bad setting is refused before any work."""
  want = [s.strip() for s in (only or "").split(",") if s.strip()] or list(cfg.sections)
  for s in want:
    if s not in SECTIONS or s not in cfg.sections:
      raise common.UserError(f"--only: no section {s!r}; choose from "
                             f"{', '.join(x for x in SECTIONS if x in cfg.sections)}.")
  names = sorted({n for s in want for n in cfg.sections[s]})
  for n in names:
    if n not in cfg.runs or cfg.runs[n].binary not in STATE:
      raise common.UserError(f"--config.runs.{n}: missing, or its binary is not one of "
                             f"{', '.join(STATE)}.")
  need = {v for n in names for k, v in common._flatten(cfg.runs[n].overrides.to_dict()).items()
          if k.endswith("dataset") and v in ("mnist", "cifar10", "cifar100")}
  need |= {"mnist", "cifar10"} if cfg.scale == "paper" else set()
  if need:
    path = os.path.abspath(common.expand(cfg.data_dir)) if cfg.data_dir else ""
    if not os.path.isdir(path):
      raise common.UserError(f"--config.data_dir: the {cfg.scale} scale reads "
                             f"{' and '.join(sorted(need))} from it; got {cfg.data_dir!r}.")
    cfg.data_dir = path  # the runs' processes start in the repository's root
  return [s for s in SECTIONS if s in want]


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.INFO)
  cfg = FLAGS.config

  def job():
    sections = check(cfg, FLAGS.only)
    if FLAGS.resume and not os.path.isdir(common.expand(FLAGS.workdir)):
      raise common.UserError(f"--resume: --workdir {FLAGS.workdir} does not exist.")
    workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
    command = " ".join(["python -m experiments.reproduce"] + [
        a for a in sys.argv[1:] if not a.startswith(("--resume", "--overwrite"))])
    out = run(cfg, workdir, sections, resume=FLAGS.resume, command=command)
    n_yes = sum(c["verdict"] == "yes" for c in out["claims"])
    print(f"wrote {os.path.join(workdir, 'RESULTS.md')}: {n_yes}/{len(out['claims'])} claims "
          f"reproduced ({out['total_s']:.0f} s)")
    failed = [n for n, r in out["runs"].items() if r["status"] != "ok"]
    if failed:
      raise common.RunFailed(f"runs FAILED: {', '.join(failed)} (see RESULTS.md and logs/)")

  common.main_guard(job, cfg, FLAGS.verbose)


if __name__ == "__main__":
  common.define_flags("reproduce", "default")
  flags.DEFINE_string("only", "", "Comma-separated sections to run (default: all): "
                      + ", ".join(SECTIONS) + ".")
  common.run_main(main)
