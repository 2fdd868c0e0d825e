"""What the verdict and the efficacy harness make of metrics.json, pinned on the planted
metrics of the verdict's tests: reading the report by typed attribute instead of by
string key changes none of it (tests/verdict_pinned.json holds what they said before)."""

import copy
import hashlib
import json
import pathlib
import sys

from test_verdict import _cone_read, _metrics, _with_membership

from recon_jax.eval import verdict
from recon_jax.studies import efficacy

PINNED = pathlib.Path(__file__).with_name("verdict_pinned.json")
# The numbers the efficacy harness reads that the verdict's planted metrics leave out.
SCORED = {
  "n_ssim_gt_0.4": 3,
  "baseline_mean_image_n_ssim_gt_0.4": 1,
  "baseline_heldout_n_ssim_gt_0.4": 2,
  "oracle_residual_rel": 0.01,
  "selection": {
    "n_diverged": 0,
    "best_by_loss_restart": 1,
    "best_by_loss_recovered_strict": 4,
    "best_true_restart": 1,
  },
  "span_ceiling": {"span_dim": 5, "recovered_strict": 6, "missing": []},
  "identification": {"scores": {"lambda": {"auc": 0.7, "precision@10": 0.5}}},
  "timing": {"total_s": 12.5},
}


def _planted() -> dict:
  """Named metrics dicts: the verdict tests' planted runs over their grid, with a
  membership test, a known theta_0, the cone's readings and hand-overs, a blind run and
  what an older metrics.json or a bare victim summary holds."""
  out = {}
  for k, held in ((0, 0), (1, 1), (5, 1), (2, 3)):
    for ratio in (0.12, 0.8, 0.9999987, 1.0004, 3.0):
      for flat in (False, True):
        for best_k in (None, 0):
          out[f"k{k} held{held} ratio{ratio} flat{flat} best{best_k}"] = _metrics(
            k, held=held, ratio=ratio, flat=flat, best_k=best_k
          )
  out["far from the assumption"] = _metrics(0, ratio=1.0, truth=0.97)
  for div in (1, 2, 4):
    out[f"diverged {div}"] = _metrics(0, ratio=3.0, diverged=div)
  for auc, p, testable in ((0.97, 1e-4, True), (0.55, 0.3, True), (1.0, 0.05, False)):
    for k in (0, 5):
      out[f"membership {k} {auc} {p}"] = _with_membership(
        _metrics(k, held=1 if k else 0, ratio=1.8), auc, p, testable
      )
  for ratio in (0.12, 0.1552, 0.2309):
    m = _with_membership(_metrics(4, held=1, ratio=ratio, best_k=4), 0.6, 0.04)
    m["regime"]["known_init"] = True
    out[f"known init {ratio}"] = m
  m = _metrics(0, ratio=1.0)
  m.update(attack="cone", m=0, identifiability={}, per_restart=[])
  m["regime"]["cone"] = {"cannot": "the change spans 164 of 625", "span_dim": 164}
  out["cone cannot"] = m
  for read, n, k in ((6, 100, 88), (60, 100, 88), (80, 100, 88), (16, 20, 19)):
    out[f"cone read {read} of {n}"] = _cone_read(read, n, k)
  m = _cone_read(60, 100)
  m["regime"]["handover_skipped"] = "it would take about 90 minutes here"
  out["handover skipped"] = m
  m = _cone_read(60, 100)
  del m["regime"]["cone"]
  out["no cone reading"] = m
  m = _cone_read(60, 100)
  m["handover"] = dict(why="attack=cone read", direct_candidates=60, direct_recovered_strict=21)
  out["handed over"] = m
  m = copy.deepcopy(m)
  m["handover"].update(reread_candidates=22, reread_recovered_strict=18)
  out["handed over, read again"] = m
  m = _metrics(0, ratio=1.0)
  m["regime"] = {"span": None, "span_why": "a convolution"}
  out["not dense"] = m
  m = _metrics(3, ratio=1.5)
  m.update(
    victim={"loss": 0.6931, "train_error": 0.0, "stationary": False, "grad_norm_rel": 2.3e-3},
    assumed={"task_from_loss": "logistic"},
    assumes_stationary=True,
    precision_warning="float32 on a ratio near 1",
  )
  out["victim untrained, not stationary"] = m
  m = _metrics(3, ratio=1.5)
  m.update(victim={"loss": 0.2, "train_error": 0.25}, assumed={"task_from_loss": "ce"})
  out["victim misclassifies"] = m
  out["blind"] = {
    "attack": "kkt",
    "n_train": 0,
    "m": 12,
    "num_restarts": 2,
    "recovered_strict": None,
    "identifiability": {"skipped": "no training images (a blind attack)", "ratio": None},
    "selection": {"n_restarts": 2, "n_diverged": 0, "best_by_loss_restart": 0},
  }
  out["older, bare"] = {"n_train": 6, "recovered_strict": 2}
  out["convergence only"] = {"victim": {"stationary": False, "grad_norm_rel": 2.3e-3}}
  out["few candidates"] = {"attack": "cone", "m": 3, "n_train": 100}
  return out


def _said(m: dict) -> dict:
  """Everything the verdict and the harness say of ``m``: the verdict and warnings searched or
  read off theta*, and (where ``m`` has the counts) the harness's per-draw numbers."""
  out = {}
  for searched in (True, False):
    warned = copy.deepcopy(m)
    out[f"warnings searched={searched}"] = verdict.run_warnings(warned, 2, searched)
    out[f"victim_warning searched={searched}"] = warned["victim_warning"]
    out[f"decide searched={searched}"] = verdict.decide(copy.deepcopy(m), searched)
  concluded = copy.deepcopy(m)
  verdict.conclude(concluded, 2)
  out["concluded"] = {k: v for k, v in concluded.items() if k not in m}  # what it added
  if "baseline_mean_image_recovered_strict" in m:  # what the harness needed before
    out["draw"] = efficacy.draw_numbers({**copy.deepcopy(m), **SCORED})
  return out


def _rounded(x):
  """``x`` with its floats to 12 digits: a last bit of a platform's log10 is not a change."""
  if isinstance(x, float):
    return float(f"{x:.12g}")
  if isinstance(x, dict):
    return {k: _rounded(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_rounded(v) for v in x]
  return x


def _dump(said) -> str:
  return json.dumps(_rounded(said), sort_keys=True)


def _pin(said: dict) -> dict:
  """The verdicts, searched and not, and a digest of everything else said."""
  return {
    "verdicts": [said[f"decide searched={s}"]["verdict"] for s in (True, False)],
    "sha256": hashlib.sha256(_dump(said).encode()).hexdigest(),
  }


def test_the_verdict_and_the_harness_say_what_they_said_before_the_report_was_typed():
  """A difference here is a change in words or numbers: ``python tests/test_metrics_json.py
  FILE`` writes everything said, to compare with the same command at an earlier commit."""
  pinned = json.loads(PINNED.read_text())
  said = {name: _pin(_said(m)) for name, m in _planted().items()}
  assert sorted(said) == sorted(pinned)
  for name in said:
    assert said[name] == pinned[name], name


if __name__ == "__main__":  # the pin, rewritten only when the words change on purpose
  said = {name: _said(m) for name, m in _planted().items()}
  if len(sys.argv) > 1:
    pathlib.Path(sys.argv[1]).write_text(json.dumps(said, sort_keys=True, indent=1) + "\n")
  else:
    lines = (f"{json.dumps(k)}: {json.dumps(_pin(v))}" for k, v in said.items())
    PINNED.write_text("{\n" + ",\n".join(lines) + "\n}\n")
