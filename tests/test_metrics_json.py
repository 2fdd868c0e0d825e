"""metrics.json declared, read typed and written from its declaration: every attribute is the
key the file holds, an absent key or section reads as its default, the job's metrics typed
and written back are the file it wrote before they were typed (byte for byte), a key not
declared is refused naming its path, and what the verdict and the efficacy harness make of
the verdict tests' planted metrics is what they made of them when they read string keys
(tests/verdict_pinned.json holds what they said before)."""

import copy
import dataclasses
import hashlib
import json
import pathlib
import re
import sys
import types

import numpy as np
import pytest
from test_verdict import _cone_read, _metrics, _with_membership

from recon_jax.eval import metrics_json, verdict
from recon_jax.eval.metrics_json import Cone, Metrics, Restart, Undeclared, VictimReport
from recon_jax.io import workdir
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


def _file(metrics) -> str:
  """metrics.json's text of ``metrics`` as the job wrote it before it was typed."""
  return json.dumps(workdir.jsonable(metrics), indent=2, sort_keys=True, allow_nan=False)


def assert_round_trip(metrics, written: str = None) -> None:
  """The job's ``metrics`` (its typed report, or a metrics.json read back) typed strictly and
  written back are what they were: the same keys in the same order, the same values (so the
  same metrics.json text); ``written``: the metrics.json the job wrote, which is the text of
  that report."""
  plain = workdir.jsonable(metrics)
  typed = Metrics.from_job(plain)
  back = typed.to_dict()
  assert json.dumps(back) == json.dumps(plain)  # keys, order, values and nesting
  assert back == plain
  if written is not None:
    assert written == _file(metrics)


def assert_read_typed(metrics: dict) -> None:
  """Every attribute the readers use is the value ``metrics`` (a real run's) holds at its
  key, spelled out here by hand rather than through the fields' declarations; the verdict
  read typed is the one the run wrote; the report typed strictly writes ``metrics`` back as
  it was (:func:`assert_round_trip`); and the same dict without the sections and keys an
  earlier version did not write reads them as absent."""
  metrics = workdir.jsonable(metrics)  # the report's dict, as metrics.json holds it
  assert_round_trip(metrics)
  r, m = Metrics.from_metrics(metrics), metrics
  for name in ("attack", "n_train", "m", "num_restarts", "recovered_strict", "oracle_residual_rel"):
    assert getattr(r, name) == m[name], name
  assert r.n_ssim_gt_04 == m["n_ssim_gt_0.4"]
  assert r.baseline_mean_image_recovered_strict == m["baseline_mean_image_recovered_strict"]
  assert r.baseline_mean_image_n_ssim_gt_04 == m["baseline_mean_image_n_ssim_gt_0.4"]
  assert r.baseline_heldout_recovered_strict == m["baseline_heldout_recovered_strict"]
  assert r.baseline_heldout_n_ssim_gt_04 == m["baseline_heldout_n_ssim_gt_0.4"]
  assert r.total_s == m["timing"]["total_s"] and r.task_from_loss == m["assumed"]["task_from_loss"]
  assert r.assumes_stationary is m["assumes_stationary"]
  assert r.victim == VictimReport.of(m["victim"]) and r.victim.loss == m["victim"]["loss"]
  assert r.victim.train_error == m["victim"]["train_error"]
  regime = m["regime"]
  assert r.regime.known_init is regime["known_init"]
  assert r.regime.span_dim == (regime["span"]["dim"] if regime.get("span") else None)
  assert r.regime.handover_skipped == regime.get("handover_skipped")
  cone = regime.get("cone") or {}
  names = ("decay", "span_dim", "input_dim", "under_noise_floor", "cannot", "read", "short")
  assert r.regime.cone == Cone(**{k: cone.get(k) for k in names})
  assert r.cannot == cone.get("cannot")
  sel = m["selection"]
  assert r.selection.n_diverged == sel["n_diverged"]
  assert r.selection.best_by_loss_restart == sel["best_by_loss_restart"]
  assert r.selection.best_by_loss_recovered_strict == sel["best_by_loss_recovered_strict"]
  assert r.selection.best_true_restart == sel["best_true_restart"]
  ident = m["identifiability"]
  assert r.identifiability.ratio == ident["ratio"]
  assert r.identifiability.truth_residual == ident["truth_residual"]
  assert r.identifiability.per_restart_residual == ident["per_restart_residual"]
  assert r.identifiability.best_restart == ident["best_restart"]
  assert r.identifiability.family.confirmed is ident["family"]["confirmed"]
  assert r.identifiability.family.first_layer_rank == ident["family"]["first_layer_rank"]
  mem = m.get("membership") or {}
  assert r.membership.auc == mem.get("auc") and r.membership.p_value == mem.get("p_value")
  assert r.membership.tpr_at_1pct == (mem.get("tpr_at_fpr") or {}).get("0.01")
  assert r.membership.significant is mem.get("significant")
  handed = m.get("handover")
  assert (r.handover is None) is (not handed)
  if handed:
    assert r.handover.why == handed["why"]
    assert r.handover.direct_candidates == handed["direct_candidates"]
    assert r.handover.direct_recovered_strict == handed["direct_recovered_strict"]
    assert r.handover.reread_candidates == handed["reread_candidates"]
  assert [(x.restart, x.recovered_strict) for x in r.per_restart] == [
    (x["restart"], x["recovered_strict"]) for x in m["per_restart"]
  ]
  scores = (m.get("identification") or {}).get("scores") or {}
  assert {k: (v.auc, v.precision_at_10) for k, v in r.scores.items()} == {
    k: (v["auc"], v["precision@10"]) for k, v in scores.items()
  }
  assert r.span_ceiling_strict == (m.get("span_ceiling") or {}).get("recovered_strict")
  said = verdict.decide(m)
  assert said.verdict == m["verdict"] and list(said.reasons) == m["reasons"]
  newer = ("membership", "handover", "regime", "span_ceiling", "identification", "assumed")
  older = {k: v for k, v in m.items() if k not in newer}
  older["selection"] = {"n_diverged": sel["n_diverged"]}
  r = Metrics.from_metrics(older)
  assert r.membership.auc is None and r.handover is None and r.scores == {}
  assert r.regime.cone.cannot is None and r.regime.span_dim is None and r.cannot is None
  assert r.selection.best_true_restart is None and r.span_ceiling_strict is None
  assert r.task_from_loss == "logistic" and r.recovered_strict == m["recovered_strict"]
  assert verdict.decide(older).verdict in verdict.VERDICTS


def test_an_older_metrics_json_reads_what_it_lacks_as_absent():
  """Sections absent, None or not dicts, and keys absent: defaults, never a KeyError."""
  for old in ({}, None, {"regime": None, "handover": {}, "per_restart": None, "selection": 3}):
    r = Metrics.from_metrics(old)
    assert r.n_train is None and r.recovered_strict is None and r.handover is None
    assert r.regime.cone == Cone() and r.cannot is None and not r.regime.not_dense
    assert r.selection.n_diverged is None and r.per_restart == () and r.scores == {}
    assert r.membership.level == 0.01 and r.membership.smallest_p == 1
    assert r.identifiability.family.confirmed is None and r.task_from_loss == "logistic"
  r = Metrics.from_metrics({"n_train": 6, "recovered_strict": 2, "assumed": {}})
  assert (r.n_train, r.recovered_strict, r.task_from_loss) == (6, 2, "logistic")
  # a key that holds None reads as None, not as the default
  assert Metrics.from_metrics({"assumed": {"task_from_loss": None}}).task_from_loss is None
  assert Metrics.from_metrics({"regime": {"span": None, "span_why": "conv"}}).regime.not_dense
  assert not Metrics.from_metrics({"regime": {"span": {"dim": 5}}}).regime.not_dense
  with pytest.raises(AttributeError):  # frozen: a reader cannot change what it read
    Metrics.from_metrics({}).n_train = 3


def test_each_section_reads_its_keys():
  """The verdict tests' planted metrics: a membership test, a cone reading and a hand-over."""
  m = _with_membership(_cone_read(60, 100), 0.97, 1e-4)
  m["handover"] = dict(why="read", direct_candidates=60, direct_recovered_strict=21)
  r = Metrics.from_metrics(m)
  assert (r.attack, r.n_train, r.m, r.num_restarts) == ("cone", 100, 60, 4)
  assert r.regime.cone.span_dim == 88 and r.regime.cone.under_noise_floor == 12
  assert r.regime.cone.short == m["regime"]["cone"]["short"] and r.regime.span_dim == 5
  assert r.membership.tpr_at_1pct == 0.5 and r.membership.p_value == 1e-4
  assert r.membership.testable is True and r.membership.significant is True
  assert r.handover.direct_recovered_strict == 21 and r.handover.reread_candidates is None
  assert r.identifiability.family.input_dim == 64 and r.identifiability.best_restart == 0
  assert [x.recovered_strict for x in r.per_restart] == [0] * 4


def test_every_planted_report_is_written_back_as_it_was():
  """The verdict tests' planted metrics (a cone's readings and hand-overs, a known theta_0, a
  blind run, what an older metrics.json or a bare victim summary holds): typed strictly and
  written, each is the dict it was, key for key and in order, and so the same file."""
  for name, m in _planted().items():
    assert_round_trip(m)
    assert json.dumps(Metrics.from_job(m).to_dict(), indent=2) == json.dumps(m, indent=2), name


def test_an_absent_key_stays_absent_and_a_none_stays_none():
  """A key the dict did not hold is not written, though it reads as its default; a key that
  held None, or an empty section, is written as it was."""
  for m in (
    {},
    {"attack": "kkt"},
    {"assumed": {}, "regime": {"span": None, "span_why": "a convolution"}},
    {"handover": None, "span_ceiling": {}, "identification": {"scores": {}, "top": []}},
    {"per_restart": [{}, {"restart": 1, "final_loss": None}], "selection": {}},
    {"membership": {"tpr_at_fpr": {"0.01": None}}, "victim": {"imported": None}},
  ):
    typed = Metrics.from_job(m)
    assert typed.to_dict() == m and json.dumps(typed.to_dict()) == json.dumps(m)
  typed = Metrics.from_job({"assumed": {}, "membership": {}})
  assert typed.task_from_loss == "logistic" and typed.membership.level == 0.01  # defaults
  assert typed.to_dict() == {"assumed": {}, "membership": {}}  # not written
  typed = Metrics.from_job({"handover": {}, "regime": {"span": None}})
  assert typed.handover == metrics_json.Handover() and typed.regime.span is None
  # what a reader reads of the same dict leniently is what it read before: no hand-over
  assert Metrics.from_metrics({"handover": {}}).handover is None
  # equality is of the values, not of which keys were held
  assert metrics_json.read(Cone, {}) == Cone() == metrics_json.read(Cone, {"read": None})
  # a section built directly, not read, writes every key it declares
  assert Cone(read=3).to_dict() == dict.fromkeys(
    ("decay", "span_dim", "input_dim", "under_noise_floor", "cannot", "read", "short")
  ) | {"read": 3}


def _with(m: dict, path: tuple, value) -> dict:
  """A copy of ``m`` with ``value`` at ``path`` (keys, and an int for a row)."""
  m = copy.deepcopy(m)
  node = m
  for part in path[:-1]:
    node = node[part] if isinstance(part, int) else node.setdefault(part, {})
  node[path[-1]] = value
  return m


def _dotted(path: tuple) -> str:
  """``("a", 0, "b")`` -> ``a[0].b``, as the error names a key."""
  return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def test_a_key_that_is_not_declared_is_refused_naming_its_path():
  """The job refuses a number no reader knows of: a key of a section, of a row or of a named
  score that metrics_json does not declare, or a value not of its declared shape, raises
  naming its full path; read leniently (an earlier version's file), it is left out."""
  base = _planted()["handed over, read again"]
  base["identification"] = {"scores": {"lambda": {"auc": 0.7}}, "top": [{"rank": 0}]}
  base["victim"] = {"imported": {"arch": {"convs": [{"features": 4}]}}}
  Metrics.from_job(base)  # declared, every key
  for path in (
    ("foo",),
    ("regime", "cone", "foo"),
    ("regime", "span", "foo"),
    ("identifiability", "family", "foo"),
    ("membership", "tpr_at_fpr", "0.05"),
    ("handover", "foo"),
    ("identification", "scores", "lambda", "foo"),
    ("identification", "top", 0, "foo"),
    ("victim", "imported", "arch", "convs", 0, "foo"),
  ):
    bad = _with(base, path, 1)
    with pytest.raises(Undeclared) as e:
      Metrics.from_job(bad)
    assert str(e.value) == (
      f"metrics.json key {_dotted(path)} is not declared in recon_jax.eval.metrics_json"
    )
    assert Metrics.from_metrics(bad) == Metrics.from_metrics(base)  # leniently: left out
  for path, value in (
    (("regime", "cone"), [1]),
    (("regime",), None),
    (("per_restart",), {"restart": 0}),
    (("identification", "scores"), [1]),
    (("identification", "top", 0), 3),
  ):
    where = re.escape(_dotted(path))
    with pytest.raises(Undeclared, match=rf"^metrics.json key {where} holds "):
      Metrics.from_job(_with(base, path, value))
    Metrics.from_metrics(_with(base, path, value))  # leniently: read as absent


def test_a_value_of_another_type_reads_as_absent_and_is_said():
  """With ``problems``, each value read is of its declared type: one that is not reads as
  absent (a gap, never a string in a reader's arithmetic), and its path is said; every
  planted report (what the job writes) has none."""
  for name, m in _planted().items():
    problems = []
    assert Metrics.from_metrics(m, problems=problems) == Metrics.from_metrics(m), name
    assert problems == [], name
  base = _planted()["blind"]
  for path, value, said in (
    (("n_train",), "6", 'n_train holds "6", not a whole number'),
    (("n_train",), 2.5, "n_train holds 2.5, not a whole number"),
    (("n_train",), True, "n_train holds true, not a whole number"),
    (("identifiability", "ratio"), [1.0], "identifiability.ratio holds [1.0], not a number"),
    (("selection",), "x", 'selection holds "x", not an object'),
    (("per_restart",), {"restart": 0}, 'per_restart holds {"restart": 0}, not a list of objects'),
    (("per_restart",), [3], "per_restart[0] holds 3, not an object"),
    (("warnings",), [1], "warnings holds [1], not a list of strings"),
  ):
    problems = []
    r = Metrics.from_metrics(_with(base, path, value), problems=problems)
    assert problems == [said]
    if path == ("n_train",):
      assert r.n_train is None and "n_train" not in r.to_dict()
  problems = []
  r = Metrics.from_metrics(_with(base, ("n_train",), 6.0), problems=problems)
  assert problems == [] and r.n_train == 6.0  # a whole number written as a float
  assert Metrics.from_metrics(_with(base, ("n_train",), None), problems=problems).n_train is None
  assert problems == []  # null: absent, never a problem


def test_the_open_parts_keep_what_they_do_not_declare():
  """A restart's hyperparameters (named after the sweep's settings) and a victim summary's
  keys of another version are kept as they are, in their places."""
  m = {
    "per_restart": [{"restart": 0, "lr_x": 0.1, "diverged": False, "alpha": 25.0}],
    "victim": {"loss": 0.1, "test_error": 0.2, "margins_old": [1.0]},
  }
  typed = Metrics.from_job(m)
  assert typed.per_restart[0].hparams == {"lr_x": 0.1, "alpha": 25.0}
  assert typed.per_restart[0] == Restart(
    restart=0, diverged=False, hparams=typed.per_restart[0].hparams
  )
  assert typed.victim.other == {"test_error": 0.2, "margins_old": [1.0]}
  assert json.dumps(typed.to_dict()) == json.dumps(m)


def test_a_stage_that_states_an_undeclared_key_is_refused_before_any_file_is_written(tmp_path):
  """A stage's part of the report is typed where it is made (the job's
  :func:`recon_jax.job.assembly.typed`): a key not declared is the library's fault, named with
  its path there, so metrics.json is never written untyped; the report written is the typed
  one, key for key."""
  from recon_jax.job import assembly, run

  bad = _with(_planted()["handed over"], ("regime", "cone", "foo"), 1)
  with pytest.raises(Undeclared, match="regime.cone.foo is not declared"):
    assembly.typed(Metrics, bad)
  with pytest.raises(Undeclared, match="^metrics.json key regime.cone.foo is not declared"):
    assembly.typed(metrics_json.Regime, bad["regime"], "regime")
  good = Metrics.from_job(_planted()["handed over"])
  ds = types.SimpleNamespace(mean=np.zeros((2, 2, 1)), x_train=np.zeros((0, 2, 2, 1)))
  out = types.SimpleNamespace(
    report=good, arrays={}, dataset=ds, eval_result=None, victim=types.SimpleNamespace(summary={})
  )
  written = run.write_reconstruction(str(tmp_path), out)
  on_disk = json.loads((tmp_path / "metrics.json").read_text())
  assert on_disk == written.to_dict() and list(on_disk) == sorted(written.keys())  # sort_keys
  assert written.timing.files_s is not None and good.timing.files_s is None  # a new report
  assert {k: v for k, v in on_disk.items() if k != "timing"} == {
    k: v for k, v in good.to_dict().items() if k != "timing"
  }


def test_a_report_is_built_by_stating_its_keys_never_by_editing_it():
  """A stage states its keys in order (``stating``); a later key is added after them and a
  key stated again keeps its place (``with_``, ``joined``: as ``{**a, **b}`` of the dicts);
  each returns a new report and leaves the one it started from as it was; the verdict
  completes a report the same way."""
  head = Metrics.stating(attack="kkt", problem="binary", dataset="digits")
  blind = Metrics.stating(dataset="user:x", n_train=0, blind=True, recovered_strict=None)
  joined = Metrics.joined(head, blind)
  assert joined.to_dict() == {"attack": "kkt", "problem": "binary", "dataset": "user:x"} | {
    "n_train": 0,
    "blind": True,
    "recovered_strict": None,
  }
  assert list(joined.to_dict()) == ["attack", "problem", "dataset", "n_train", "blind"] + [
    "recovered_strict"
  ]
  assert head.to_dict() == {"attack": "kkt", "problem": "binary", "dataset": "digits"}
  later = joined.with_(n_ssim_gt_04=3, attack="cone")
  assert list(later.to_dict())[-1] == "n_ssim_gt_0.4" and later.to_dict()["attack"] == "cone"
  assert joined.attack == "kkt" and "n_ssim_gt_0.4" not in joined.to_dict()
  concluded = verdict.conclude(joined, 2)
  assert list(concluded.to_dict())[-6:] == [
    "victim_warning",
    "warnings",
    "verdict",
    "reasons",
    "verdict_line",
    "wrong_data",
  ]
  assert concluded.verdict == verdict.CANNOT_TELL and joined.verdict is None
  with pytest.raises(TypeError, match="declares no key for the field 'nope'"):
    Metrics.stating(nope=1)


def test_the_victims_part_states_the_oracle_only_where_one_started_the_search():
  """The victim's part of the report (the job's :func:`recon_jax.job.assembly.victim_part`):
  its summary less margins and outputs, then ``oracle_starts`` after it where a search
  started from an oracle's training images, and no such key elsewhere."""
  from recon_jax.job import assembly

  vic = types.SimpleNamespace(summary={"loss": 0.1, "margins": [1.0]}, source="cache")
  regime = metrics_json.Regime.stating(known_init=False)
  said = assembly.victim_part(vic, regime, 0.0, "mix").to_dict()
  assert list(said) == ["clipped_to_box", "regime", "victim", "victim_source", "oracle_starts"]
  assert said["victim"] == {"loss": 0.1} and said["oracle_starts"] == "mix"
  assert "oracle_starts" not in assembly.victim_part(vic, regime, None).to_dict()
  assert list(assembly.victim_part(vic).to_dict()) == ["victim", "victim_source"]


def test_every_field_says_what_it_means():
  """Each declared key has a comment: on its line, or on the lines just above it (which then
  speak for the fields under them); every section dataclass says where it sits."""
  lines = pathlib.Path(metrics_json.__file__).read_text().splitlines()
  commented = False
  for line in lines:
    text = line.strip()
    if text.startswith("#"):
      commented = True
    elif " = key(" in text:
      assert "#" in text or commented, text
    else:
      commented = False
  sections = [
    v
    for v in vars(metrics_json).values()
    if isinstance(v, type) and issubclass(v, metrics_json.Section) and v is not metrics_json.Section
  ]
  assert len(sections) >= 20
  for cls in sections:
    assert cls.__doc__ and dataclasses.is_dataclass(cls), cls


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


def _decided(said: verdict.Said) -> dict:
  """The verdict as the pin holds it (the dict it was: ``membership_only`` only where set)."""
  out = said._asdict()
  if not out["membership_only"]:
    del out["membership_only"]
  return out


def _said(m: dict) -> dict:
  """Everything the verdict and the harness say of ``m``: the verdict and warnings searched or
  read off theta*, and (where ``m`` has the counts) the harness's per-draw numbers."""
  out = {}
  typed = Metrics.from_metrics(m)
  for searched in (True, False):
    warned = verdict.run_warnings(typed, 2, searched)
    out[f"warnings searched={searched}"] = warned
    victim = verdict.victim_warning(typed.victim, typed.task_from_loss, 2)
    out[f"victim_warning searched={searched}"] = victim
    out[f"decide searched={searched}"] = _decided(verdict.decide(typed, searched))
  concluded = verdict.conclude(typed, 2).to_dict()
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
