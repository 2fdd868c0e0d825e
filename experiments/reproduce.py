r"""Regenerate the papers' experiments at one scale -> RESULTS.md and results.json.

Every run is its own process of another binary (efficacy, toy_2d, init_study), which sets
its own precision (``reproduction.driver``).  Each claim's verdict comes from intervals
over data draws (seeds for the toy and the init study) by a criterion fixed before any run
(``reproduction.claims``).

  python -m experiments.reproduce --config=experiments/configs/reproduce.py:quick \
      --workdir=/tmp/repro_quick
  python -m experiments.reproduce --workdir=/tmp/repro                  # the default scale
  python -m experiments.reproduce --config=experiments/configs/reproduce.py:paper \
      --config.data_dir=~/data --workdir=/tmp/repro_paper               # on a GPU
  python -m experiments.reproduce --only=toy,baselines --workdir=/tmp/repro_some
  python -m experiments.reproduce --workdir=/tmp/repro --resume         # after an interruption
  python -m experiments.reproduce --workdir=/tmp/repro --resume --publish=.  # into the checkout

Writes RESULTS.md and results.json (the sections this command ran), a folder per run
(<run>/, seeds in <run>/seed_<s>/) and logs/<run>.log.  --resume keeps the finished runs (runs
again one whose metrics.json cannot be read) and continues an interrupted one with its binary's
--resume.  A run that fails is FAILED in its section, the others go on, and the exit code is 2.
--publish=CHECKOUT then copies RESULTS.md to that checkout's root and the files it links to its
docs/results/ (replaced), the links rewritten (``reproduction.publish``).
"""

from experiments import starting

starting("reproduce")  # SIGINT and SIGTERM heard from here on, before JAX loads

import os  # noqa: E402
import sys  # noqa: E402

from absl import flags  # noqa: E402

from experiments import configs  # noqa: E402
from recon_jax import cli  # noqa: E402
from recon_jax.errors import RunFailed  # noqa: E402
from reproduction import driver, publish  # noqa: E402
from reproduction.claims import SECTIONS  # noqa: E402

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout
PROGRAMS = driver.Programs("experiments.{}", "experiments/configs/{}.py:{}", ROOT)


def job(cfg, workdir, *, only="", resume=False, overwrite=False, argv=(), publish_to=""):
  """Checks -> the runs -> one line of results (-> the report in checkout ``publish_to``).
  ``argv``: the command line, for RESULTS.md."""
  sections = driver.sections_to_run(cfg, only)
  driver.check_settings(cfg, sections, PROGRAMS)
  if publish_to:  # refused before hours of runs, not after
    publish.checkout_of(publish_to)
  workdir = driver.open_run(cfg, workdir, resume=resume, overwrite=overwrite)
  command = " ".join(
    ["python -m experiments.reproduce"]
    + [a for a in argv if not a.startswith(("--resume", "--overwrite", "--publish"))]
  )
  out = driver.run(cfg, workdir, sections, programs=PROGRAMS, resume=resume, command=command)
  rows = out["claims"]
  paper = sum(c.get("paper_verdict") == "yes" for c in rows)
  evidence = sum(c["verdict"] == "yes" for c in rows)
  print(
    f"wrote {os.path.join(workdir, 'RESULTS.md')}: of {len(rows)} claims, {paper} hold in the "
    f"paper's sense, {evidence} as evidence of membership ({out['total_s']:.0f} s)"
  )
  if publish_to:
    files = publish.publish(workdir, publish_to)
    print(f"published RESULTS.md and {len(files)} files it links into {publish_to}")
  failed = [n for n, r in out["runs"].items() if r["status"] != "ok"]
  if failed:
    raise RunFailed(f"runs FAILED: {', '.join(failed)} (see RESULTS.md and logs/)")


def main(cfg):
  kw = dict(resume=FLAGS.resume, overwrite=FLAGS.overwrite, argv=sys.argv[1:])
  kw["publish_to"] = FLAGS.publish
  job(cfg, FLAGS.workdir, only=FLAGS.only, **kw)


if __name__ == "__main__":
  flags.DEFINE_string(  # before the shared flags, so that --help lists it
    "only", "", "Comma-separated sections to run (default: all): " + ", ".join(SECTIONS) + "."
  )
  flags.DEFINE_string(
    "publish", "", "A checkout to copy the finished RESULTS.md and its figures into."
  )
  cli.run(main, configs.path("reproduce"), "default")
