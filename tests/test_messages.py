"""What the binaries and the report say to a user (Hardening V, items 4 and 7): each line
names what the user gave, in the user's own words, and says what is true of the run."""

import numpy as np
import pytest

from experiments.configs import reconstruct as recon_configs
from recon_jax.errors import ConfigError
from recon_jax.job import planning


def _config(preset, settings):
  """The main job's config ``preset`` with ``settings`` (dotted names) set."""
  from test_bad_input import R
  from test_bad_input import _config as binary_config

  return binary_config(R, preset, settings)


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
  """A 64-256-1 safetensors model of the digits' 8x8 inputs (the tiny preset says 32, 32)."""
  from safetensors.numpy import save_file

  rng = np.random.default_rng(0)
  path = tmp_path_factory.mktemp("model") / "model.safetensors"
  model = {
    "fc1.weight": rng.normal(size=(256, 64)).astype(np.float32) / 8,
    "fc1.bias": np.zeros(256, np.float32),
    "fc2.weight": rng.normal(size=(1, 256)).astype(np.float32) / 16,
    "fc2.bias": np.zeros(1, np.float32),
  }
  save_file(model, str(path))
  return path


def test_a_presets_widths_give_way_to_an_imported_model(wide_model):
  """The tiny preset's 32, 32 are not the user's: the file's 256 are used; widths the user
  set are still refused, named as the flag."""
  from recon_jax import cli

  given = {"threat.model": str(wide_model), "attack": "kkt"}
  cfg = _config("tiny", given)
  plan = planning.prepare(cfg, {}, given)
  assert plan.source.imported.module.widths == (256,)
  mine = dict(given, **{"victim.widths": (32, 32)})
  with pytest.raises(ConfigError, match="victim.widths=32,32 contradicts") as e:
    planning.prepare(_config("tiny", mine), {"widths": (32, 32)}, mine)
  line = cli.error_line(e.value, _config("tiny", {}))
  assert line.startswith("error: --config.victim.widths=32,32 contradicts"), line
  assert line.endswith("leave --config.victim.widths out)."), line


def test_the_audit_names_its_own_flags(wide_model, tmp_path):
  """A resume with other steps names --config.job.search.steps (the job's search.steps is
  the reconstruct binary's --config.search.steps); the cone without theta0 names
  --config.theta0."""
  import json

  from experiments.configs import audit as audit_configs
  from recon_jax import cli
  from recon_jax.io import workdir
  from recon_jax.job.audit import audit_job, threat_of
  from recon_jax.job.settings import JobConfig

  audit = audit_configs.get_config("default")
  audit.model, audit.heldout = str(wide_model), str(tmp_path / "heldout.npz")
  before = JobConfig().replace(**{"search.steps": 5})
  (tmp_path / "state.msgpack").write_bytes(b"")
  (tmp_path / "config.json").write_text(json.dumps({"config": workdir.jsonable(before)}))
  with pytest.raises(ConfigError) as e:
    workdir.check_resumable(JobConfig(), str(tmp_path), "state.msgpack")
  line = cli.error_line(e.value, audit)
  assert "differs from" in line and "in --config.job.search.steps;" in line, line
  line = cli.error_line(e.value, recon_configs.get_config("tiny"))
  assert "in --config.search.steps;" in line, line
  audit.job.attack = "cone"
  with pytest.raises(ConfigError) as e:
    planning.prepare(audit_job(threat_of(audit), audit.loss, JobConfig(**audit.job)))
  line = cli.error_line(e.value, audit)
  assert line.startswith("error: --config.theta0: --config.job.attack=cone reads"), line
  assert "threat." not in line and "known_init" not in line, line


def test_the_verdict_and_the_warnings_name_the_binarys_flags(monkeypatch, capsys):
  """What the reconstruct binary and the audit print of the job's verdict and warnings names
  the settings as their flags (--config.threat.theta0; the audit's --config.theta0 and
  --config.job.attack=none), report.md's too (the spelling handed to the job); the library's
  words stay in metrics.json.  Words that only look like names are left as they are."""
  from experiments.configs import audit as audit_configs
  from recon_jax import cli
  from recon_jax.eval.metrics_json import Metrics
  from recon_jax.job import run as job_run

  said = "threat.theta0 would fit (attack=none, m=4, e.g. victim.msgpack; known_init)"
  spelled = {}

  def job(cfg, path, *, warn, spell, **kw):
    warn(said)
    spelled["report"] = spell(said)
    return "/w", Metrics.stating(verdict_line=f"no evidence: {said}")

  monkeypatch.setattr(job_run, "main_job", job)
  audit = audit_configs.get_config("default")
  for spoken, theta0, attack, m in [
    (None, "--config.threat.theta0", "--config.attack=none", "--config.search.m=4"),
    (audit, "--config.theta0", "--config.job.attack=none", "--config.job.search.m=4"),
  ]:
    out = cli.main_job(recon_configs.get_config("tiny"), "w", spoken=spoken)
    words = f"{theta0} would fit ({attack}, {m}, e.g. victim.msgpack; known_init)"
    printed = capsys.readouterr()
    assert printed.err == f"warning: {words}\n" and spelled["report"] == words, printed.err
    assert printed.out == f"wrote /w: no evidence: {words}\n", printed.out
    assert out.verdict_line == f"no evidence: {said}"  # metrics.json's: the library's


def test_report_md_says_the_reasons_and_warnings_as_it_is_told():
  from recon_jax.job import report

  m = {"n_train": 2, "verdict": "no_evidence", "reasons": ["a threat.theta0"], "warnings": ["b"]}
  loud = report.report(m, spell=str.upper)
  assert "\n- A THREAT.THETA0\n" in loud and "\n- B\n" in loud
  assert "\n- a threat.theta0\n" in report.report(m)


class _Clocks:
  """Stand-ins for the ``time`` module of the job's stages, on one clock: real time plus the
  seconds the stages' calls add (``tick``: per call, by module)."""

  def __init__(self):
    import time

    self.real, self.offset = time.time, 0.0

  def module(self, tick=0.0):
    import types

    def now():
      self.offset += tick
      return self.real() + self.offset

    return types.SimpleNamespace(time=now)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  """The tiny preset's job with the attacker's own scores, its phases on a clock on which
  each of the attacker's scores takes 10 s and each step of the scoring 100 s; returns
  (workdir, metrics, the log's lines)."""
  import logging

  from recon_jax.eval import scoring, trusted
  from recon_jax.job import pipeline
  from recon_jax.job.run import run_reconstruction

  cfg = _config("tiny", {})
  cfg.evaluation.identify = True
  work = tmp_path_factory.mktemp("tiny")
  clocks = _Clocks()
  records = []

  class Keep(logging.Handler):
    def emit(self, record):
      records.append(record.getMessage())

  keep = Keep(logging.INFO)
  root = logging.getLogger()
  old_level = root.level
  root.addHandler(keep)
  root.setLevel(logging.INFO)
  try:
    with pytest.MonkeyPatch.context() as mp:
      mp.setattr(pipeline, "time", clocks.module())
      mp.setattr(trusted, "time", clocks.module(10.0))
      mp.setattr(scoring, "time", clocks.module(100.0))
      m = run_reconstruction(planning.prepare(cfg), str(work)).to_dict()
  finally:
    root.removeHandler(keep)
    root.setLevel(old_level)
  return work, m, records


@pytest.mark.slow  # the tiny job with the attacker's own scores (about 35 s)
def test_the_total_time_holds_every_phase(tiny_run):
  """timing.total_s includes the attacker's own scores: report.md's total is not less than
  its time for the attack and the scoring; each score's "so far" includes the score."""
  import re

  work, m, records = tiny_run
  t = m["timing"]
  assert t["identification_s"] >= 100
  assert t["total_s"] >= t["since_estimate_s"] >= t["identification_s"], t
  row = next(r for r in (work / "report.md").read_text().splitlines() if r.startswith("| time"))
  total, part = map(float, re.findall(r"\| time \| (\d+) s \|.*; (\d+) s for the attack", row)[0])
  assert total >= part, row
  lines = [r for r in records if r.startswith("attacker's scores:") and "so far" in r]
  assert len(lines) >= 2, records
  spent = 0.0
  for line in lines:
    took, so_far = map(float, re.findall(r" in (\d+)s \((\d+)s so far\)", line)[0])
    spent += took
    assert so_far >= spent, (line, lines)


def test_an_imported_models_training_error_is_not_blamed_on_its_training():
  """A model trained elsewhere that misclassifies the images given as its training set is
  told they may not be its training set, not to train it longer."""
  from recon_jax.eval import verdict
  from recon_jax.eval.metrics_json import VictimReport

  imported = {"format": "safetensors", "arch": {"kind": "mlp"}}
  said = verdict.victim_warning(
    VictimReport.of({"loss": 0.4, "train_error": 0.1, "imported": imported}), "logistic", 2
  )
  assert "may not be the images it was trained on" in said and "longer" not in said, said
  said = verdict.victim_warning(
    VictimReport.of({"loss": 0.6931, "train_error": 0.5, "imported": imported}), "logistic", 2
  )
  assert "may not be the images it was trained on" in said and "longer" not in said, said
  own = verdict.victim_warning(VictimReport.of({"loss": 0.4, "train_error": 0.1}), "logistic", 2)
  assert "train it longer" in own


def test_a_transposed_weight_file_is_said_to_look_transposed(tmp_path):
  """A dense model written [in, out] reads as 64 outputs of 256 inputs; 8x8 images have 64
  values: the file looks transposed, not a matter of image_size."""
  from safetensors.numpy import save_file

  from experiments.configs import audit as audit_configs
  from recon_jax import cli
  from recon_jax.errors import Error
  from recon_jax.job.audit import audit_job, threat_of
  from recon_jax.job.settings import JobConfig

  rng = np.random.default_rng(0)
  model = {
    "fc1.weight": rng.normal(size=(64, 256)).astype(np.float32) / 8,  # [in, out]
    "fc1.bias": np.zeros(256, np.float32),
    "fc2.weight": rng.normal(size=(256, 1)).astype(np.float32) / 16,
    "fc2.bias": np.zeros(1, np.float32),
  }
  save_file(model, str(tmp_path / "model.safetensors"))
  x = rng.uniform(size=(8, 8, 8)).astype(np.float32)
  np.savez(tmp_path / "images.npz", x=x, y=np.arange(8) % 2)
  audit = audit_configs.get_config("default")
  audit.model = str(tmp_path / "model.safetensors")
  for given in ("images.npz", "folder"):
    if given == "folder":  # image files: their size is read before the layer is matched
      from PIL import Image

      for i, img in enumerate(x):
        d = tmp_path / "folder" / str(i % 2)
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.round(img * 255).astype(np.uint8)).save(d / f"{i}.png")
    audit.train = audit.heldout = str(tmp_path / given)
    with pytest.raises(Error) as e:
      planning.prepare(audit_job(threat_of(audit), audit.loss, JobConfig(**audit.job)))
    line = cli.error_line(e.value, audit)
    assert "model.safetensors" in line and "looks transposed" in line, line
    assert "image_size" not in line, line


def test_a_model_the_attack_cannot_read_without_theta0_is_told_theta0_would():
  """theta* of a He-initialised model leaves most of it unexplained by its training set;
  without theta_0 the verdict says that theta_0 would let the attack fit the change."""
  from recon_jax.eval import verdict

  metrics = {
    "n_train": 6,
    "recovered_strict": 0,
    "baseline_heldout_recovered_strict": 0,
    "num_restarts": 4,
    "selection": {"n_diverged": 0},
    "identifiability": {"ratio": 1.0, "truth_residual": 0.9},
    "regime": {"known_init": False},
    "victim": {"imported": {"format": "safetensors", "arch": {"kind": "mlp"}}},
  }
  v = verdict.decide(metrics)
  assert v.verdict == "no_evidence" and "threat.theta0 would fit" in v.line, v.line
  v = verdict.decide(dict(metrics, victim={}))
  assert "threat.known_init=True would fit" in v.line, v.line
  v = verdict.decide(dict(metrics, regime={"known_init": True}))
  assert "would fit" not in v.line, v.line


def test_candidates_are_labelled_by_what_tells_them_apart(tmp_path, monkeypatch):
  """Equal multipliers (every tile "lambda 1") give way to the rank; multipliers that differ
  label their tiles."""
  from recon_jax.io import plots
  from recon_jax.job import figures

  seen = []
  monkeypatch.setattr(plots, "image_grid", lambda path, rows, **kw: seen.append(kw["col_titles"]))
  cands = np.zeros((5, 4, 4, 1), np.float32)
  figures.candidates_figure(tmp_path / "a.png", cands, np.ones(5))
  figures.candidates_figure(tmp_path / "b.png", cands, [0.5, 2.0, 1.0, 0.25, 3.0])
  assert seen[0] == ["#1", "#2", "#3", "#4", "#5"], seen
  assert seen[1] == ["lambda 3", "lambda 2", "lambda 1", "lambda 0.5", "lambda 0.25"], seen


def test_many_missed_images_are_summarised_in_the_report():
  """62 missed of 100: how many rank in the lowest tenth and the median, not 62 numbers."""
  from recon_jax.job import report

  ranks = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] + list(range(40, 90))
  m = {
    "n_train": 100,
    "recovered_strict": 38,
    "identifiability": {
      "ratio": 1.2,
      "truth_residual": 0.01,
      "missed": {"images": list(range(62)), "weakness_rank": ranks},
    },
  }
  row = next(r for r in report.report(m).splitlines() if "missed images rank" in r)
  assert "62 missed: 10 in ranks 1-10 (the lowest 10%), median rank 58.5 of 100" in row, row
  m["identifiability"]["missed"] = {"images": [1, 2], "weakness_rank": [5, 3]}
  row = next(r for r in report.report(m).splitlines() if "missed images rank" in r)
  assert "| 3, 5 of 100 |" in row, row


def test_the_help_lists_what_a_user_needs_first_and_says_what_runs():
  """audit --help: model, train, heldout and theta0 before the job's settings, quick as a
  sixteenth of the steps (4 x 1,000 of 16 x 4,000), as README says; reconstruct --help: the
  cone is the default, report.md and roc.png are written, 143 is an exit code."""
  import pathlib

  from experiments import configs
  import experiments.reconstruct
  from recon_jax import cli

  text = cli.help_text(configs.path("audit"), "default")
  rows = [line.split(" = ")[0].strip() for line in text.splitlines() if " = " in line]
  assert rows[:4] == ["model", "train", "heldout", "theta0"], rows[:6]
  assert "a sixteenth of the steps" in text and "quarter" not in text
  readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
  assert "`quick` runs a\nsixteenth of the steps" in readme
  text = cli.help_text(configs.path("reconstruct"), "finetune")
  assert "the cone by default" in text and "KKT attack sweep" not in text
  doc = experiments.reconstruct.__doc__
  assert "report.md" in doc and "roc.png" in doc and "143" in doc, doc
  row = next(r for r in readme.splitlines() if r.startswith("| `trusted.png`"))
  assert "not the cone" in row, row


@pytest.mark.slow  # it reads the same run's log
def test_the_regime_line_is_grammatical(tiny_run):
  """The first layer's weights span (the change spans) its input directions."""
  _, _, records = tiny_run
  line = next(r for r in records if r.startswith("regime: the first layer's"))
  assert line.startswith("regime: the first layer's weights span "), line
