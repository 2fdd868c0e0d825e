"""init_study resume: an interrupted study, resumed, equals the uninterrupted one bit for bit."""

import json
import os

import numpy as np
import pytest
from test_init_study import run_tiny, tiny_run  # the session's uninterrupted tiny study

from experiments.configs import init_study as configs
from recon_jax.engine import loop, resume
from recon_jax.errors import ConfigError
from recon_jax.io import workdir as wd

INTERRUPTED = "kkt_mlp_relu"  # the last sub-run of the tiny preset


class Interrupted(Exception):
  """Stands in for a kill right after a state file was written."""


def _without_timing(m):
  """metrics.json without wall-clock times (keys ending in _s, at any depth)."""
  if isinstance(m, dict):
    return {k: _without_timing(v) for k, v in m.items() if not k.endswith("_s")}
  if isinstance(m, list):
    return [_without_timing(v) for v in m]
  return m


def _json(path):
  with open(path) as f:
    return json.load(f)


@pytest.mark.slow
def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, monkeypatch):
  ref = tiny_run()
  wd = str(tmp_path / "resumed")
  state = f"state_{INTERRUPTED}.msgpack"

  # Kill the run right after the first save of the KKT sub-run (step 2 of 4): the
  # affine sub-run has finished, the KKT one is half done.
  save = resume.Saver.save

  def save_then_die(self, *args):
    save(self, *args)
    if self.path.endswith(state):
      raise Interrupted(self.path)

  monkeypatch.setattr(resume.Saver, "save", save_then_die)
  with pytest.raises(Interrupted):
    run_tiny(wd)
  monkeypatch.undo()
  files = set(os.listdir(wd))
  assert {"config.json", "done_bilevel_affine.json", "done_bilevel_affine.npz", state} <= files
  assert f"done_{INTERRUPTED}.json" not in files and "metrics.json" not in files

  calls = []
  run_attack = loop.run_attack  # the study calls the loop as a user does

  def spy(attack, *args, state_file=None, **kw):
    calls.append((os.path.basename(state_file.path), state_file.resume))
    out = run_attack(attack, *args, state_file=state_file, **kw)
    calls.append([c["step"] for c in out.chunks])
    return out

  monkeypatch.setattr(loop, "run_attack", spy)
  run_tiny(wd, resume=True)
  # The affine sub-run was loaded, not rerun; the KKT one continued from step 2 and
  # reports both chunks.
  assert calls == [(state, True), [2, 4]]

  assert _without_timing(_json(os.path.join(wd, "metrics.json"))) == _without_timing(
    _json(os.path.join(ref, "metrics.json"))
  )
  with (
    np.load(os.path.join(ref, "reconstructions.npz")) as a,
    np.load(os.path.join(wd, "reconstructions.npz")) as b,
  ):
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  with open(os.path.join(ref, "summary.md")) as f, open(os.path.join(wd, "summary.md")) as g:
    strip = lambda text: [l for l in text.splitlines() if "wall" not in l]
    assert strip(f.read()) == strip(g.read())


def test_resume_refuses_missing_or_different_config(tmp_path):
  cfg = configs.get_config("tiny")
  from recon_jax.studies import runner

  with pytest.raises(ConfigError, match="does not exist"):
    runner.run_init_study(cfg, str(tmp_path / "nowhere"), resume=True)
  with pytest.raises(ConfigError, match="config.json not found"):
    runner.run_init_study(cfg, str(tmp_path), resume=True)
  wd.write_json(str(tmp_path), "config.json", {"config": dict(cfg.to_dict(), kkt_steps=5)})
  with pytest.raises(ConfigError, match="differs .* kkt_steps"):
    runner.run_init_study(cfg, str(tmp_path), resume=True)
  assert os.listdir(tmp_path) == ["config.json"]


def test_resume_refuses_an_unreadable_finished_sub_run(tmp_path):
  cfg = configs.get_config("tiny")
  from recon_jax.studies import runner

  wd.write_json(str(tmp_path), "config.json", {"config": cfg})
  (tmp_path / "done_bilevel_affine.json").write_text("{not json")
  with pytest.raises(ConfigError, match="done_bilevel_affine.json"):
    runner.run_init_study(cfg, str(tmp_path), resume=True)
