r"""The efficacy harness: one attack configuration (or several, paired) over K data draws.

Each draw re-draws the training images and the victim (``victim.data_seed`` =
``victim.seed`` = the draw's number) and runs the same restart sweep; every
variant runs on the same draws, so variants are compared pair by pair.

  python -m experiments.efficacy --workdir=/tmp/eff                        # LFW, 5 draws
  python -m experiments.efficacy --variants=default,refine --workdir=/tmp/eff_refine
  python -m experiments.efficacy --config=experiments/configs/efficacy.py:tiny --draws=2 \
      --workdir=/tmp/eff_tiny

Writes metrics.json ({variant: {number: {mean, ci_low, ci_high, per_draw}}} and
paired differences against the first variant), results.md (the table),
efficacy.png (per-draw counts, attack vs baselines) and one reconstruction
workdir per variant and draw.  --resume keeps finished draws and continues an
interrupted one.
"""

import json
import os

from absl import flags, logging

from experiments import common

FLAGS = flags.FLAGS


def variant_config(cfg, name: str):
  """The reconstruction config of one variant: the base with the variant's overrides."""
  import copy

  if name not in cfg.variants:
    raise common.UserError(
      f"--variants: unknown variant {name!r}; the config has {', '.join(cfg.variants)}."
    )
  out = copy.deepcopy(cfg.base)
  for key, value in cfg.variants[name].items():
    target, leaf = out, key
    while "." in leaf:
      head, leaf = leaf.split(".", 1)
      target = target[head]
    if leaf not in target:
      raise common.UserError(f"variant {name!r} sets {key}, which the job has no setting for.")
    target[leaf] = value
  return out


def run(cfg, workdir: str, variants, draws: int, first_draw: int, *, resume: bool = False) -> dict:
  """Runs every variant on draws ``first_draw .. first_draw + draws - 1``; writes the report."""
  from experiments import reconstruct
  from recon_jax import claims, efficacy, plotting

  if draws < 1:
    raise common.UserError(f"--draws must be >= 1, got {draws}.")
  if first_draw < 0:
    raise common.UserError(f"--first_draw must be >= 0, got {first_draw}.")
  configs = {v: variant_config(cfg, v) for v in variants}
  for v, vcfg in configs.items():
    reconstruct.prepare(vcfg)
    if vcfg.x64 != cfg.base.x64:
      raise common.UserError(f"variant {v!r} changes x64: run float32 and float64 separately.")
  common.write_json(
    workdir,
    "config.json",
    {
      "config": cfg,
      "variants": list(variants),
      "draws": draws,
      "first_draw": first_draw,
      "environment": common.environment(),
    },
  )
  per_draw = {v: [] for v in variants}
  for draw in range(first_draw, first_draw + draws):
    for v in variants:
      sub = common.inside(workdir, os.path.join(v, f"draw_{draw}"))
      done = os.path.join(sub, "metrics.json")
      if resume and os.path.isfile(done):
        with open(done) as f:
          m = json.load(f)
      else:
        again = resume and os.path.isfile(os.path.join(sub, reconstruct.STATE_FILE))
        os.makedirs(sub, exist_ok=True)
        m = reconstruct.run(efficacy.draw_config(configs[v], draw), sub, resume=again)
      per_draw[v].append(efficacy.draw_numbers(m))
      logging.info(
        "efficacy: %s draw %d: strict pooled %d, selected %d",
        v,
        draw,
        per_draw[v][-1]["strict_pooled"],
        per_draw[v][-1]["strict_selected"],
      )
  out = {
    "draws": list(range(first_draw, first_draw + draws)),
    "n_train": m["n_train"],
    "variants": {v: efficacy.aggregate(per_draw[v], cfg.confidence) for v in variants},
    "paired_vs_" + variants[0]: {
      v: {
        k: dict(d, verdict=efficacy.verdict(d))
        for k, d in efficacy.paired(
          per_draw[v], per_draw[variants[0]], confidence=cfg.confidence
        ).items()
      }
      for v in variants[1:]
    },
  }
  common.write_json(workdir, "metrics.json", out)
  common.write_text(workdir, "results.md", claims.efficacy_table(out, variants))
  plotting.efficacy_figure(common.inside(workdir, "efficacy.png"), out, variants)
  return out


def main(cfg):
  """The command line: flags -> checks -> run -> one line of results."""
  common.configure_precision(cfg.base.x64, cfg.base.matmul_precision)
  variants = [v.strip() for v in FLAGS.variants.split(",") if v.strip()]
  for v in variants:
    variant_config(cfg, v)
  workdir = common.prepare_workdir(FLAGS.workdir, FLAGS.overwrite or FLAGS.resume)
  out = run(cfg, workdir, variants, FLAGS.draws, FLAGS.first_draw, resume=FLAGS.resume)
  from recon_jax import claims

  print(claims.efficacy_table(out, variants))
  print(f"wrote {workdir}")


if __name__ == "__main__":
  common.define_flags("efficacy", "lfw")
  flags.DEFINE_integer("draws", 5, "Data draws K (training images and victim re-drawn).")
  flags.DEFINE_integer("first_draw", 0, "Number of the first draw; draws are consecutive.")
  flags.DEFINE_string(
    "variants",
    "default",
    "Comma-separated variants of the config to run "
    "on the same draws; the first is the reference of the paired differences.",
  )
  common.run_main(main)
