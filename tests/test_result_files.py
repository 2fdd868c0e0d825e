"""A finished draw's metrics.json as the efficacy harness and the reproduction read it back:
whatever the file holds, a result, a gap, or one line naming the file (never a traceback)."""

import copy
import json
import logging
import os

from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest

from experiments.configs import efficacy as configs
from recon_jax import cli
from recon_jax.errors import ConfigError, ResultFileError
from recon_jax.studies import efficacy, runner
from reproduction import claims, driver, results_md

# A small draw's report, with every key the harness and the reproduction read of one.
DRAW = {
  "attack": "kkt",
  "n_train": 6,
  "recovered_strict": 2,
  "n_ssim_gt_0.4": 3,
  "baseline_mean_image_recovered_strict": 0,
  "baseline_mean_image_n_ssim_gt_0.4": 1,
  "baseline_heldout_recovered_strict": 0,
  "baseline_heldout_n_ssim_gt_0.4": 1,
  "oracle_residual_rel": 0.1,
  "identifiability": {
    "ratio": 2.0,
    "per_restart_residual": [0.2, 0.3],
    "family": {"confirmed": False},
  },
  "regime": {"cone": {"cannot": None}},
  "selection": {
    "n_restarts": 2,
    "n_diverged": 0,
    "best_by_loss_restart": 1,
    "best_by_loss_recovered_strict": 1,
    "best_true_restart": 1,
  },
  "per_restart": [{"restart": 0, "recovered_strict": 1}, {"restart": 1, "recovered_strict": 2}],
  "identification": {"scores": {"lambda": {"auc": 0.7, "precision@10": 0.5}}},
  "handover": {"direct_recovered_strict": 1},
  "span_ceiling": {"span_dim": 5, "recovered_strict": 4, "missing": [0, 1]},
  "timing": {"total_s": 12.5},
}
FILE = ("file", "")  # a path: the file itself


def _paths(x, prefix=()):
  """Every path into ``x`` (keys and list indices), containers and leaves."""
  out = [prefix]
  items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
  for k, v in items:
    out += _paths(v, prefix + (k,))
  return out


def _parent(doc, path):
  for k in path[:-1]:
    doc = doc[k]
  return doc


def _mutate(doc, path, how):
  """``doc`` with the value at ``path`` removed, or replaced (how: "drop", or the value)."""
  if not path:
    return how
  parent, last = _parent(doc, path), path[-1]
  if how == "drop":
    del parent[last]
  else:
    parent[last] = how
  return doc


# What a value becomes: removed, a string, null, a list, an emptied container, a number.
CHANGES = st.sampled_from(["drop", "x", "12", None, [], {}, [1, "a"], -3, 1e300, True])


@st.composite
def mutated(draw, base=DRAW):
  """The text of a metrics.json: ``base`` changed at 1 to 3 places, or not JSON at all."""
  if draw(st.integers(0, 9)) == 0:
    return draw(st.sampled_from(["", "{", "[1, 2", "nul", "\x00\xff", "NaN", "[]", "{}"]))
  doc = copy.deepcopy(base)
  for _ in range(draw(st.integers(1, 3))):
    if not isinstance(doc, (dict, list)):
      break
    path = draw(st.sampled_from(_paths(doc)))
    how = draw(CHANGES)
    if how == "drop" and not path:
      how = {}
    doc = _mutate(doc, path, how)
  return json.dumps(doc)


def _write(folder, text):
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "metrics.json"), "w") as f:
    f.write(text)


def _is_number(x):
  return x is None or (isinstance(x, (int, float, np.floating)) and not isinstance(x, bool))


@settings(max_examples=50, deadline=None, derandomize=True)
@given(text=mutated())
def test_any_draw_file_reads_as_a_result_a_gap_or_one_line(tmp_path_factory, text):
  """The harness's reader (and the numbers it aggregates) and the reproduction's (a harness
  whose second draw holds ``text``): a draw read, with gaps, or the one-line error naming
  the file; the harness's aggregates, the claims and the report from what was read."""
  folder = str(tmp_path_factory.mktemp("h"))
  good = efficacy.read_draw(_write_draw(folder, 0, json.dumps(DRAW)))
  sub = _write_draw(folder, 1, text)
  try:
    draw = efficacy.read_draw(sub)
  except ResultFileError as e:
    assert str(e).startswith(os.path.join(sub, "metrics.json") + ": ")
    assert cli.error_line(e).count("\n") == 0
    draw = None
  if draw is not None:
    assert all(_is_number(v) for v in draw.numbers.values()), draw.numbers
    assert isinstance(draw.n_train, int) and draw.n_train >= 0
    per = [good.numbers, draw.numbers]
    efficacy.aggregate(per, 0.95, draw.n_train)
    efficacy.paired(per, per[::-1], n_train=6)
  _plant_harness(folder, [good.numbers] + ([draw.numbers] if draw else []))
  m = driver._condensed("efficacy", folder)  # a draw's file never fails the run
  assert m.dataset == "lfw" and len(m.pick_same) <= 2
  results = {"main_faces": {"binary": "efficacy", "status": "ok", "results": [m]}}
  rows = claims.claims(claims.CLAIMS, results, ["main", "attacker"], 0.95)
  assert rows and results_md.table_rows("main_faces", results["main_faces"])


def _write_draw(folder, d, text):
  sub = os.path.join(folder, "default", f"draw_{d}")
  _write(sub, text)
  return sub


def _plant_harness(folder, per_draw, **top):
  """A finished harness in ``folder``: its metrics.json from ``per_draw`` and its config."""
  out = {
    "draws": list(range(len(per_draw))),
    "n_train": 6,
    "variants": {"default": efficacy.aggregate(per_draw, 0.95, 6)},
    **top,
  }
  with open(os.path.join(folder, "metrics.json"), "w") as f:
    json.dump(json.loads(json.dumps(out).replace("NaN", "null")), f)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"config": {"base": {"victim": {"dataset": "lfw"}}}}, f)


TOP = {
  "draws": [0, 1],
  "n_train": 6,
  "variants": {"default": efficacy.aggregate([efficacy.draw_numbers(DRAW)] * 2, 0.95, 6)},
}
TOP = json.loads(json.dumps(TOP).replace("NaN", "null"))
CONFIG = {"config": {"base": {"victim": {"dataset": "lfw"}}, "variants": {}}}


@settings(max_examples=50, deadline=None, derandomize=True)
@given(top=mutated(TOP), config=st.one_of(st.just(json.dumps(CONFIG)), mutated(CONFIG)))
def test_any_harness_file_reads_as_its_results_or_one_line(tmp_path_factory, top, config):
  """The reproduction's reader of a harness's own metrics.json and config.json: what the
  claims and the report read, or the one-line error naming the file (the run is FAILED)."""
  folder = str(tmp_path_factory.mktemp("h"))
  for d in (0, 1):
    _write_draw(folder, d, json.dumps(DRAW))
  _write(folder, top)
  with open(os.path.join(folder, "config.json"), "w") as f:
    f.write(config)
  try:
    m = driver._condensed("efficacy", folder)
  except ResultFileError as e:
    assert os.path.basename(str(e).split(": ")[0]) in ("metrics.json", "config.json")
    assert cli.error_line(e).count("\n") == 0
    return
  results = {"main_faces": {"binary": "efficacy", "status": "ok", "results": [m]}}
  claims.claims(claims.CLAIMS, results, ["main", "attacker", "identifiability"], 0.95)
  results_md.table_rows("main_faces", results["main_faces"])


# --------------------------------------------------------------------------- the harness's resume


def _fake_runs(monkeypatch, calls):
  """run_reconstruction as a stub: writes DRAW as the draw's metrics.json; ``calls`` gets
  each folder it ran in."""

  def fake(plan, sub, resume=False, overwrite=False):
    calls.append(sub)
    _write(sub, json.dumps(DRAW))
    return copy.deepcopy(DRAW)

  monkeypatch.setattr(runner, "run_reconstruction", fake)
  monkeypatch.setattr(efficacy, "efficacy_figure", lambda *a, **k: None)


def _resumed(tmp_path, monkeypatch, change):
  """A harness over 2 draws, then ``change`` made to its draw 0's metrics.json (a function
  of the dict, returning what the file holds), then resumed: (its metrics, the folders run
  again)."""
  calls = []
  _fake_runs(monkeypatch, calls)
  cfg = configs.get_config("tiny")
  runner.run_efficacy(cfg, str(tmp_path), ["default"], draws=2)
  assert len(calls) == 2
  path = tmp_path / "default" / "draw_0" / "metrics.json"
  text = change(json.loads(path.read_text()))
  path.write_text(text if isinstance(text, str) else json.dumps(text))
  calls.clear()
  out = runner.run_efficacy(cfg, str(tmp_path), ["default"], draws=2, resume=True)
  return out, calls


def _without(*path):
  def change(m):
    del _parent(m, path)[path[-1]]
    return m

  return change


def _with(value, *path):
  def change(m):
    _parent(m, path)[path[-1]] = value
    return m

  return change


@pytest.mark.parametrize(
  "change, why",
  [
    (_without("n_train"), "no n_train"),
    (_with("six", "n_train"), 'n_train holds "six", not a whole number'),
    (_with(None, "n_train"), "no n_train"),
    (lambda m: [], "holds [], not a JSON object"),
    (lambda m: {}, "no n_train"),
    (lambda m: "{not json", "unreadable (JSONDecodeError"),
  ],
)
def test_a_draw_file_the_harness_cannot_read_is_run_again_on_resume(
  tmp_path, monkeypatch, caplog, change, why
):
  """Not a JSON object, or no count of its training images: nothing of it can be trusted,
  and --resume runs the draw again, saying so in one line naming the file."""
  with caplog.at_level(logging.WARNING):
    out, calls = _resumed(tmp_path, monkeypatch, change)
  assert calls == [str(tmp_path / "default" / "draw_0")]
  said = [r.getMessage() for r in caplog.records if "running that draw again" in r.getMessage()]
  path = str(tmp_path / "default" / "draw_0" / "metrics.json")
  assert len(said) == 1 and said[0].startswith(f"efficacy: {path}: ") and why in said[0]
  assert out.n_train == 6 and out.variants["default"]["strict_pooled"].per_draw == (2, 2)


@pytest.mark.parametrize(
  "change, key, why",
  [
    (_with("three", "recovered_strict"), "strict_pooled", 'recovered_strict holds "three"'),
    (
      _with("one", "selection", "best_by_loss_recovered_strict"),
      "strict_selected",
      'selection.best_by_loss_recovered_strict holds "one", not a whole number',
    ),
    (
      _with("2.0", "identifiability", "ratio"),
      "identifiability_ratio",
      'identifiability.ratio holds "2.0", not a number',
    ),
    (_with([1], "selection"), "strict_selected", "selection holds [1], not an object"),
  ],
)
def test_a_value_of_another_type_is_a_gap_said_in_one_line(
  tmp_path, monkeypatch, caplog, change, key, why
):
  """A number of another type than declared is that draw's gap (its interval over the
  others), the rest of the draw stands, and one warning line names the file and the key."""
  with caplog.at_level(logging.WARNING):
    out, calls = _resumed(tmp_path, monkeypatch, change)
  assert calls == []
  iv = out.variants["default"][key]
  assert iv.per_draw[0] is None and iv.per_draw[1] is not None and iv.n == 1
  assert out.variants["default"]["ssim_gt_0.4"].per_draw == (3, 3)
  said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  path = str(tmp_path / "default" / "draw_0" / "metrics.json")
  assert len(said) == 1 and said[0].startswith(f"efficacy: {path}: ") and why in said[0]


def test_a_draw_without_a_selection_is_a_gap_not_zero():
  """A report with no ``selection`` (nothing says the restarts ran) has no attacker's pick:
  a gap.  Restarts that ran with none scored recover 0 (as before)."""
  bare = {k: v for k, v in DRAW.items() if k != "selection"}
  assert efficacy.draw_numbers(bare)["strict_selected"] is None
  assert efficacy.draw_numbers(dict(DRAW, selection={}))["strict_selected"] is None
  unscored = dict(DRAW, selection={"n_restarts": 2, "n_diverged": 2})
  assert efficacy.draw_numbers(unscored)["strict_selected"] == 0
  per = [efficacy.draw_numbers(DRAW), efficacy.draw_numbers(bare)]
  assert efficacy.paired(per, per[::-1])["strict_selected"]["per_draw"] == [None, None]


# ------------------------------------------------------------------------- the reproduction


def test_a_harness_without_draws_or_its_data_set_is_refused_in_one_line(tmp_path):
  """The reproduction's reader of a finished harness: its metrics.json without ``draws`` or
  its config.json without ``config.base`` is one line naming the file, and the run FAILED."""
  for d in (0, 1):
    _write_draw(str(tmp_path), d, json.dumps(DRAW))
  _plant_harness(str(tmp_path), [efficacy.draw_numbers(DRAW)] * 2)
  assert driver._condensed("efficacy", str(tmp_path)).pick_same == (True, True)
  top = json.loads((tmp_path / "metrics.json").read_text())
  (tmp_path / "metrics.json").write_text(json.dumps({k: v for k, v in top.items() if k != "draws"}))
  with pytest.raises(ResultFileError) as e:
    driver._condensed("efficacy", str(tmp_path))
  assert (
    cli.error_line(e.value)
    == f"error: {tmp_path / 'metrics.json'}: draws holds nothing, not a list of draws"
  )
  (tmp_path / "metrics.json").write_text(json.dumps(top))
  (tmp_path / "config.json").write_text(json.dumps({"config": {"variants": {}}}))
  with pytest.raises(ConfigError, match=r"config\.json: has no config\.base\.victim\.dataset"):
    driver._condensed("efficacy", str(tmp_path))


def test_a_run_whose_results_cannot_be_read_is_failed_naming_the_file(tmp_path, monkeypatch):
  """run_one: a harness that finished but whose config.json lacks its data set is FAILED in
  its section with that one line; the reproduction goes on."""
  from experiments import reproduce
  from experiments.configs import reproduce as rconfigs

  cfg = rconfigs.get_config("quick")
  monkeypatch.setattr(driver, "launch", lambda *a, **k: None)  # "finished before"
  folder = tmp_path / "main_faces"
  for d in (0, 1):
    _write_draw(str(folder), d, json.dumps(DRAW))
  _plant_harness(str(folder), [efficacy.draw_numbers(DRAW)] * 2)
  (folder / "config.json").write_text("[]")
  out = driver.run_one(cfg, str(tmp_path), "main_faces", reproduce.PROGRAMS)
  assert out["status"] == f"FAILED ({folder / 'config.json'}: holds [], not a JSON object)"


@pytest.mark.parametrize(
  "text, why", [("{not json", "unreadable (JSONDecodeError"), ("[]", "holds []"), ("{}", "n_train")]
)
def test_a_resume_runs_again_a_finished_run_whose_results_cannot_be_read(
  tmp_path, monkeypatch, caplog, text, why
):
  """reproduce --resume: a finished toy whose metrics.json is readable is not run again; one
  whose metrics.json cannot be read runs again (not FAILED until the file is removed), said
  in one warning line naming the file."""
  import subprocess

  from experiments import reproduce
  from experiments.configs import reproduce as rconfigs

  cfg = rconfigs.get_config("quick")
  cfg.seeds = 1
  calls = []

  def process(cmd, **kw):  # the toy's binary: its config.json, then its metrics.json
    folder = next(a for a in cmd if a.startswith("--workdir=")).split("=", 1)[1]
    calls.append(cmd[-1])
    os.makedirs(folder, exist_ok=True)
    env = {"environment": {"argv": [cmd[2]] + cmd[3:]}}
    for name, data in (("config.json", env), ("metrics.json", TOY)):
      with open(os.path.join(folder, name), "w") as f:
        json.dump(data, f)
    return subprocess.CompletedProcess(cmd, 0)

  monkeypatch.setattr(driver.subprocess, "run", process)
  first = driver.run_one(cfg, str(tmp_path), "toy", reproduce.PROGRAMS)
  again = driver.run_one(cfg, str(tmp_path), "toy", reproduce.PROGRAMS, resume=True)
  assert first["status"] == again["status"] == "ok" and len(calls) == 1
  path = tmp_path / "toy" / "seed_0" / "metrics.json"
  path.write_text(text)
  with caplog.at_level(logging.WARNING):
    out = driver.run_one(cfg, str(tmp_path), "toy", reproduce.PROGRAMS, resume=True)
  assert out["status"] == "ok" and out["results"] == first["results"] and len(calls) == 2
  said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert len(said) == 1 and said[0].startswith(f"reproduce: {path}: ") and why in said[0], said
  assert said[0].endswith("running it again")


def test_a_draw_whose_pick_cannot_be_read_is_a_gap_in_the_picks(tmp_path, caplog):
  """A draw's restarts of another type than declared (``best_true_restart`` as a string) say
  nothing of the attacker's pick: that draw is left out of pick_same, in one warning line."""
  for d in (0, 1):
    _write_draw(str(tmp_path), d, json.dumps(DRAW))
  bad = copy.deepcopy(DRAW)
  bad["selection"]["best_true_restart"] = "1"
  _write_draw(str(tmp_path), 1, json.dumps(bad))
  _plant_harness(str(tmp_path), [efficacy.draw_numbers(DRAW)] * 2)
  with caplog.at_level(logging.WARNING):
    m = driver._condensed("efficacy", str(tmp_path))
  assert m.pick_same == (True,)
  said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert len(said) == 1 and "draw_1/metrics.json: selection.best_true_restart holds" in said[0]


TOY = {
  "n_train": 4,
  "recovered": 3,
  "recovered_best_restart": 3,
  "recovered_pooled": 4,
  "at_init": {"recovered": 0},
  "oracle_residual_rel": 0.01,
  "kink_fraction": 0.0,
  "per_restart": [],
}
STUDY = {
  "n_train": 10,
  "dataset": "mnist",
  "wall_s": 3.0,
  "sub_runs": {"kkt": {"findings": {"grid": {"reproduced": True, "evidence": "e"}}}},
}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
  binary=st.sampled_from(["toy_2d", "init_study"]),
  data=st.data(),
)
def test_a_toy_or_init_study_file_reads_as_its_results_or_one_line(tmp_path_factory, binary, data):
  """The reproduction's reader of a toy's or an init study's metrics.json: what the claims
  and the report read, or one line naming the file."""
  text = data.draw(mutated(TOY if binary == "toy_2d" else STUDY))
  folder = str(tmp_path_factory.mktemp("s"))
  _write(folder, text)
  try:
    m = driver._condensed(binary, folder)
  except ResultFileError as e:
    assert str(e).startswith(os.path.join(folder, "metrics.json") + ": ")
    return
  run = {"binary": binary, "status": "ok", "results": [m] * 3}
  claims.claims(claims.CLAIMS, {n: run for n in ("toy", "init_study")}, ["toy", "init_study"], 0.95)
  results_md.table_rows(binary, run)


@pytest.mark.parametrize("text", ['"x"', "5", "[]", '{"variants": 5}', '{"variants": [1]}'])
def test_a_harness_whose_config_json_is_damaged_is_refused_on_resume_in_one_line(
  tmp_path, monkeypatch, text
):
  calls = []
  _fake_runs(monkeypatch, calls)
  cfg = configs.get_config("tiny")
  runner.run_efficacy(cfg, str(tmp_path), ["default"], draws=1)
  (tmp_path / "config.json").write_text(text)
  with pytest.raises(ConfigError) as e:
    runner.run_efficacy(cfg, str(tmp_path), ["default"], draws=1, resume=True)
  assert "config.json" in cli.error_line(e.value) and "\n" not in cli.error_line(e.value)
