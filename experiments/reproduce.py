r"""Regenerate the papers' experiments at one scale -> RESULTS.md and results.json.

Every run is its own process of another binary (efficacy, toy_2d, init_study), which sets
its own precision.  Each claim's verdict comes from intervals over data draws (seeds for the
toy and the init study) by a criterion fixed before any run (``recon_jax.claims``).

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
import subprocess
import sys
import time

from absl import flags, logging

from experiments import common
from recon_jax import claims
from recon_jax import workdir as wd
from recon_jax.claims import CLAIMS, SECTIONS
from recon_jax.errors import RunFailed

FLAGS = flags.FLAGS
# The file that lets a binary's --resume continue an interrupted run.
STATE = {"efficacy": "config.json", "toy_2d": "state.msgpack", "init_study": "config.json"}


class Failed(Exception):
  """A run's process exited with an error (the message: its one-line error)."""


def _value(v) -> str:
  if isinstance(v, bool):
    return str(v).lower()
  return ",".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def jobs(cfg, name: str) -> list:
  """``[(folder, args)]`` of one run: one efficacy process, or one process per seed."""
  r = cfg.runs[name]
  pre, over = "base." if r.binary == "efficacy" else "", wd.flatten(r.overrides.to_dict())
  if cfg.data_dir and r.binary != "toy_2d":
    over["data_dir"] = cfg.data_dir
  args = [f"--config=experiments/configs/{r.binary}.py:{r.preset}"]
  args += [f"--config.{pre}{k}={_value(v)}" for k, v in over.items()]
  if r.binary == "efficacy":
    return [(name, args + [f"--draws={r.draws or cfg.draws}", f"--first_draw={cfg.first_draw}"])]
  return [(f"{name}/seed_{s}", args + [f"--config.seed={s}"]) for s in range(r.draws or cfg.seeds)]


def execute(binary: str, folder: str, args: list, log: str, resume: bool) -> None:
  """Runs one process, unless ``resume`` finds it finished; raises Failed with its error line."""
  env = (wd.read_json(folder, "config.json") or {}).get("environment", {})
  same = args == [
    a for a in env.get("argv", [])[1:] if not a.startswith(("--workdir", "--resume", "--overwrite"))
  ]
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
    rc = subprocess.run(
      cmd,
      cwd=common.ROOT,
      stdout=fh,
      stderr=subprocess.STDOUT,
      env=dict(os.environ, MPLBACKEND="Agg"),
    ).returncode
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
    out["commands"].append(
      " ".join([f"python -m experiments.{r.binary}"] + args + [f"--workdir={folder}"])
    )
    try:
      execute(r.binary, folder, args, os.path.join(workdir, "logs", f"{name}.log"), resume)
    except Failed as e:
      out["status"] = f"FAILED ({e}; log: logs/{name}.log)"
      break
    m = wd.read_json(folder, "metrics.json")
    if m is None:
      out["status"] = f"FAILED ({rel}/metrics.json unreadable after the run)"
      break
    if r.binary == "efficacy":  # + the dataset, and whether the pick was the truly best restart
      m = claims.condense(
        r.binary,
        m,
        wd.read_json(folder, "config.json")["config"]["base"]["victim"]["dataset"],
        [
          (wd.read_json(folder, "default", f"draw_{d}", "metrics.json") or {}).get("selection")
          for d in m["draws"]
        ],
      )
    else:
      m = claims.condense(r.binary, m)
    out["results"].append(m)
  out["wall_s"] = time.time() - t0
  return out


def run(cfg, workdir: str, sections, *, resume: bool = False, command: str = "") -> dict:
  """Runs the ``sections``' runs (each once) into ``workdir``; writes RESULTS.md, results.json."""
  t0, results, seen, workdir = time.time(), {}, {}, os.path.abspath(workdir)
  command = command or (
    f"python -m experiments.reproduce --config=experiments/configs/"
    f"reproduce.py:{cfg.scale} --workdir={workdir}"
  )
  for i, sec in enumerate(sections):
    for name in (n for n in cfg.sections[sec] if n not in results):
      key = json.dumps([cfg.runs[name].binary] + [a for _, a in jobs(cfg, name)])
      if key in seen:  # the same run under two names runs once
        results[name] = dict(results[seen[key]], alias=seen[key])
        continue
      seen[key], results[name] = name, run_one(cfg, workdir, name, resume)
      logging.info(
        "reproduce: %s %s (%.0f s)", name, results[name]["status"], results[name]["wall_s"]
      )
    rows = claims.claims(CLAIMS, results, sections[: i + 1], cfg.confidence)
    total = time.time() - t0
    wd.write_text(
      workdir,
      "RESULTS.md",
      claims.report(
        cfg,
        workdir,
        results,
        rows,
        sections[: i + 1],
        SECTIONS,
        total,
        command,
        i + 1 < len(sections),
      ),
    )
    out = {
      "scale": cfg.scale,
      "command": command,
      "sections": sections[: i + 1],
      "claims": rows,
      "total_s": total,
      "config": cfg,
      "runs": results,
    }
    wd.write_json(workdir, "results.json", out)
  return out


def check(cfg, only: str) -> list:
  """The sections to run, in report order; a bad setting is refused before any work."""
  want = [s.strip() for s in (only or "").split(",") if s.strip()] or list(cfg.sections)
  for s in want:
    if s not in SECTIONS or s not in cfg.sections:
      raise common.UserError(
        f"--only: no section {s!r}; choose from "
        f"{', '.join(x for x in SECTIONS if x in cfg.sections)}."
      )
  names = sorted({n for s in want for n in cfg.sections[s]})
  for n in names:
    if n not in cfg.runs or cfg.runs[n].binary not in STATE:
      raise common.UserError(
        f"--config.runs.{n}: missing, or its binary is not one of {', '.join(STATE)}."
      )
  need = {
    v
    for n in names
    for k, v in wd.flatten(cfg.runs[n].overrides.to_dict()).items()
    if k.endswith("dataset") and v in ("mnist", "cifar10", "cifar100")
  }
  need |= {"mnist", "cifar10"} if cfg.scale == "paper" else set()
  if need:
    path = os.path.abspath(wd.expand(cfg.data_dir)) if cfg.data_dir else ""
    if not os.path.isdir(path):
      raise common.UserError(
        f"--config.data_dir: the {cfg.scale} scale reads "
        f"{' and '.join(sorted(need))} from it; got {cfg.data_dir!r}."
      )
    cfg.data_dir = path  # the runs' processes start in the repository's root
  return [s for s in SECTIONS if s in want]


def main(cfg):
  """The command line: flags -> checks -> run -> one line of results."""
  sections = check(cfg, FLAGS.only)
  if FLAGS.resume and not os.path.isdir(wd.expand(FLAGS.workdir)):
    raise common.UserError(f"--resume: --workdir {FLAGS.workdir} does not exist.")
  workdir = wd.prepare(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
  command = " ".join(
    ["python -m experiments.reproduce"]
    + [a for a in sys.argv[1:] if not a.startswith(("--resume", "--overwrite"))]
  )
  out = run(cfg, workdir, sections, resume=FLAGS.resume, command=command)
  n_yes = sum(c["verdict"] == "yes" for c in out["claims"])
  print(
    f"wrote {os.path.join(workdir, 'RESULTS.md')}: {n_yes}/{len(out['claims'])} claims "
    f"reproduced ({out['total_s']:.0f} s)"
  )
  failed = [n for n, r in out["runs"].items() if r["status"] != "ok"]
  if failed:
    raise RunFailed(f"runs FAILED: {', '.join(failed)} (see RESULTS.md and logs/)")


if __name__ == "__main__":
  common.define_flags("reproduce", "default")
  flags.DEFINE_string(
    "only", "", "Comma-separated sections to run (default: all): " + ", ".join(SECTIONS) + "."
  )
  common.run_main(main)
