"""init_study --resume: an interrupted study, resumed, equals the uninterrupted one."""
import dataclasses
import json

import jax
import numpy as np
import pytest

from experiments import common, init_study_lib


@pytest.fixture(autouse=True)
def _fast_compile():
  """Tiny, compile-bound programs: skip XLA's optimisation passes."""
  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", old)


CFG = init_study_lib.quick_config(n_per_class=2, width=8, kkt_width=8, steps=4, chunk_steps=2,
                                  kkt_steps=4, kkt_train_epochs=200, inner_maxiter=20,
                                  run_relu=False)
TIMING = ("compile_s", "run_s", "wall_s", "time_s")


class Interrupted(Exception):
  pass


def _strip_timing(m):
  """metrics.json without wall-clock times (at any depth)."""
  if isinstance(m, dict):
    return {k: _strip_timing(v) for k, v in m.items() if k not in TIMING}
  if isinstance(m, list):
    return [_strip_timing(v) for v in m]
  return m


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, monkeypatch):
  ref, wd = tmp_path / "ref", tmp_path / "resumed"
  init_study_lib.run(CFG, str(ref))

  # Interrupt the second attack (one-hidden softplus) right after its first save
  # (step 2 of 4): the affine attack has finished, the KKT one has not started.
  victim = "state_bilevel_one_hidden_softplus.msgpack"
  save = init_study_lib.resume.save

  def save_then_die(path, tree, meta):
    save(path, tree, meta)
    if path.endswith(victim):
      raise Interrupted(path)
  monkeypatch.setattr(init_study_lib.resume, "save", save_then_die)
  with pytest.raises(Interrupted):
    init_study_lib.run(CFG, str(wd))
  monkeypatch.setattr(init_study_lib.resume, "save", save)
  assert (wd / "done_bilevel_affine.json").exists()
  assert (wd / victim).exists() and not (wd / "metrics.json").exists()
  assert not (wd / "done_bilevel_one_hidden_softplus.json").exists()

  resumed_steps = []
  run_attack = init_study_lib._run_attack

  def spy(attack, *a, name, **kw):
    resumed_steps.append(name)
    return run_attack(attack, *a, name=name, **kw)
  monkeypatch.setattr(init_study_lib, "_run_attack", spy)
  init_study_lib.run(CFG, str(wd), resume_run=True)
  assert resumed_steps == ["bilevel_one_hidden_softplus", "kkt_mlp_relu"]  # affine loaded

  m_ref = json.loads((ref / "metrics.json").read_text())
  m_res = json.loads((wd / "metrics.json").read_text())
  assert _strip_timing(m_res) == _strip_timing(m_ref)
  with np.load(ref / "reconstructions.npz") as a, np.load(wd / "reconstructions.npz") as b:
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_resume_refuses_missing_or_different_config(tmp_path):
  with pytest.raises(common.UserError, match="config.json not found"):
    init_study_lib.check_resumable(CFG, str(tmp_path))
  (tmp_path / "config.json").write_text(json.dumps(dict(dataclasses.asdict(CFG), steps=5)))
  with pytest.raises(common.UserError, match="differs .* steps"):
    init_study_lib.check_resumable(CFG, str(tmp_path))
  with pytest.raises(common.UserError, match="--save_every"):
    init_study_lib.run(CFG, str(tmp_path / "x"), save_every=-1)
