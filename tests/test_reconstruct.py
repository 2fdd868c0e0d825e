"""The main job end to end at tiny size, in-process, through ``run_reconstruction``."""

import json
import os

from conftest import fast_compile, reference_layout_safetensors
from flax import serialization
import numpy as np
import pytest
from test_metrics_json import assert_read_typed, assert_round_trip

from experiments.configs import reconstruct as configs
from recon_jax.job import planning
from recon_jax.job.run import run_reconstruction

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _run(settings, path, **kw):
  """The library's run of ``settings`` into ``path``: planned, then run (run_reconstruction
  takes a Plan)."""
  return run_reconstruction(planning.prepare(settings), path, **kw).to_dict()


def _tiny(**kw):
  cfg = configs.get_config("tiny")
  cfg.evaluation.identify = False  # covered by test_trusted and test_main_job_writes_its_report
  victim = kw.pop("victim", {})
  cfg.update(kw)
  cfg.victim.update(victim)
  return cfg


def _identifying(**kw):
  cfg = _tiny(**kw)
  cfg.evaluation.identify = True
  return cfg


def _npz(path):
  with np.load(path) as z:
    return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  """One tiny run, the attacker's own scores on, read by the tests below: (its workdir,
  metrics)."""
  path = tmp_path_factory.mktemp("tiny")
  return path, _run(_identifying(), str(path))


def test_main_job_writes_its_report(tiny_run):
  tmp_path, m = tiny_run
  assert m["identification"]["trusted_score"] == "agreement"
  assert len(m["identification"]["top"]) == 10
  assert os.path.getsize(tmp_path / "trusted.png") > 0
  for name in (
    "config.json",
    "metrics.json",
    "reconstructions.npz",
    "reconstructions.png",
    "ssim_vs_margin.png",
    "restarts.tsv",
    "state.msgpack",
  ):
    assert os.path.getsize(tmp_path / name) > 0, name
  saved = json.loads((tmp_path / "metrics.json").read_text())
  assert saved["n_train"] == 6 and 0 <= saved["recovered_strict"] <= 6
  assert_round_trip(m, (tmp_path / "metrics.json").read_text())  # the file of before
  assert_read_typed(saved)
  assert set(saved["baselines"]) == {"mean_image", "heldout"}
  assert 0.0 <= saved["oracle_residual_rel"] <= 1.0
  ident = saved["identifiability"]
  assert ident["truth_residual"] == saved["oracle_residual_rel"]
  assert ident["ratio"] == ident["attack_best_residual"] / ident["truth_residual"]
  assert ident["attack_median_residual"] >= ident["attack_best_residual"]
  assert ident["verdict"] and len(ident["per_restart_residual"]) == 2
  assert {"dimension", "first_layer_rank", "confirmed"} <= set(ident["family"])
  if ident["family"]["confirmed"]:
    assert os.path.getsize(tmp_path / "identifiability.png") > 0
  assert saved["victim_source"] in ("trained", "cache")
  assert _npz(tmp_path / "reconstructions.npz")["candidates"].shape == (2, 12, 8, 8, 1)
  assert m["timing"]["compile_s"] > 0
  stored = json.loads((tmp_path / "config.json").read_text())["config"]
  assert stored["search"]["steps"] == 20 and stored["victim"]["widths"] == [32, 32]
  assert (tmp_path / "restarts.tsv").read_text().count("\n") == 3  # header + 2 restarts


def test_the_candidates_written_and_scored_are_in_the_pixel_box(tiny_run):
  tmp_path, m = tiny_run
  z = _npz(tmp_path / "reconstructions.npz")
  pixels = z["candidates"] + z["mean"]
  assert pixels.min() >= 0.0 and pixels.max() <= 1.0
  assert 0.0 <= m["clipped_to_box"] <= 1.0
  stored = json.loads((tmp_path / "config.json").read_text())["config"]
  assert stored["clip_to_box"] is True


def test_clipping_to_the_box_turns_a_candidate_with_a_few_bright_pixels_into_a_recovered_one():
  """A training image with two pixels far above the box: the evaluation stretches it to its
  own range, so the rest of it greys and it is not recovered; clipped, it is."""
  from recon_jax import data
  from recon_jax.attacks import search
  from recon_jax.eval import evaluation
  from recon_jax.job import pipeline
  from recon_jax.victims import targets

  ds = data.load_dataset("digits", n_per_class=5, seed=0, subtract_mean=True)
  cand = np.array(ds.x_train[:1], np.float32)
  cand[0, :2, 0, 0] = 4.0  # the box is [0, 1] less the mean: these pixels are 3 above it
  w, loss = np.ones((1, 1), np.float32), np.zeros(1)
  before = evaluation.evaluate_candidates(cand[None], w, loss, ds)
  assert before["attack"]["recovered_strict"] == 0
  target = targets.make_target({"params": {"w": np.zeros(2)}}, np.ones(1), ds.mean)
  att = pipeline.Attacked(search.Found(cand[None], w, loss, {}), None, target, {}, {}, True, 0, 0)
  att, moved = pipeline.on_box(att, 3)
  assert moved == pytest.approx(2 / 64)
  pixels = att.found.candidates + np.asarray(ds.mean)
  assert pixels.min() >= 0.0 and pixels.max() == 1.0
  after = evaluation.evaluate_candidates(att.found.candidates, w, loss, ds)
  assert after["attack"]["recovered_strict"] == 1


@pytest.mark.slow
def test_refinement_stage_runs_after_the_main_steps_and_resumes(tmp_path):
  a, b, c = tmp_path / "refined", tmp_path / "plain", tmp_path / "sharp"
  for d in (a, b, c):
    d.mkdir()
  # A refinement stage that changes nothing (same alpha, rates x 1) is 10 more plain steps.
  _run(
    _tiny(search=dict(alpha="25", refine_steps=10, refine_alpha=25.0, refine_lr_scale=1.0)), str(a)
  )
  _run(_tiny(search=dict(alpha="25", steps=30)), str(b))
  plain = _npz(b / "reconstructions.npz")["candidates"]
  np.testing.assert_allclose(
    _npz(a / "reconstructions.npz")["candidates"], plain, rtol=1e-6, atol=1e-7
  )
  # A sharper alpha at a lower rate does change the result.
  cfg = _tiny(search=dict(alpha="25", refine_steps=10, refine_alpha=150.0))
  m = _run(cfg, str(c))
  sharp = _npz(c / "reconstructions.npz")["candidates"]
  assert not np.allclose(sharp, plain)
  # The saved state is at the end of the refinement stage: resuming runs nothing more.
  again = _run(cfg, str(c), resume=True)
  np.testing.assert_array_equal(_npz(c / "reconstructions.npz")["candidates"], sharp)
  assert again["recovered_strict"] == m["recovered_strict"]


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["inversion", "weights"])
def test_baseline_attacks_go_through_the_same_evaluation(tmp_path, attack):
  m = _run(_tiny(attack=attack), str(tmp_path))
  assert m["attack"] == attack and "recovered_strict" in m["evaluation"]
  assert_round_trip(m, (tmp_path / "metrics.json").read_text())


@pytest.mark.slow
def test_multiclass_victim_runs_with_decoreco_margins(tmp_path):
  m = _run(_tiny(victim=dict(loss="ce"), search=dict(m=20, steps=10)), str(tmp_path))
  assert m["problem"] == "multiclass" and m["m"] == 20
  assert_round_trip(m, (tmp_path / "metrics.json").read_text())


@pytest.mark.slow
def test_general_problem_on_a_multiclass_victim_has_one_multiplier_per_output(tmp_path):
  """problem=general on a CE victim: lambda is [m, C] with C the victim's output width.

  An earlier version derived the width from the problem (1 unless multiclass),
  so lambda was [m, 1] and broadcast silently against the 10 outputs.
  """
  m = _run(
    _tiny(victim=dict(loss="ce"), problem="general", search=dict(m=20, steps=10)), str(tmp_path)
  )
  assert m["problem"] == "general"
  with open(tmp_path / "state.msgpack", "rb") as f:
    blob = serialization.msgpack_restore(f.read())
  assert np.asarray(blob["state"]["run"]["inner"]["lam"]).shape == (2, 20, 10)


@pytest.mark.slow
def test_regression_victim_with_weight_decay_runs(tmp_path):
  m = _run(_tiny(victim=dict(loss="mse", weight_decay=1e-3), search=dict(steps=10)), str(tmp_path))
  assert m["problem"] == "general"
  assert_round_trip(m, (tmp_path / "metrics.json").read_text())


def test_a_workdir_written_before_the_config_files_still_resumes(tiny_run, tmp_path):
  """config.json of the dataclass era: no x64/matmul_precision/save_every/distributed keys,
  unset paths as null. Resuming it must be accepted and change nothing."""
  import shutil

  tmp_path = tmp_path / "w"
  shutil.copytree(tiny_run[0], tmp_path)  # the tiny run's workdir, rewritten as of before
  before = _npz(tmp_path / "reconstructions.npz")["candidates"]
  stored = json.loads((tmp_path / "config.json").read_text())
  stored["config"].pop("runtime")  # then x64, matmul_precision, save_every, distributed
  stored["config"]["data_dir"] = None
  stored.update(problem="binary", m=12)
  (tmp_path / "config.json").write_text(json.dumps(stored))
  _run(_identifying(), str(tmp_path), resume=True)
  np.testing.assert_array_equal(_npz(tmp_path / "reconstructions.npz")["candidates"], before)
  with pytest.raises(ValueError, match="seed"):
    _run(_identifying(search=dict(seed=3)), str(tmp_path), resume=True)


def test_a_safetensors_victim_is_attacked_and_the_assumptions_reported(tmp_path):
  tensors = reference_layout_safetensors(tmp_path / "model.safetensors", d=64)
  mean = np.full((8, 8, 1), 0.25, np.float32)
  np.save(tmp_path / "mean.npy", mean)
  cfg = _tiny(search=dict(steps=10))
  cfg.threat.model = str(tmp_path / "model.safetensors")
  cfg.threat.data_mean = str(tmp_path / "mean.npy")
  work = tmp_path / "work"
  work.mkdir()
  m = _run(cfg, str(work))
  assert_round_trip(m, (work / "metrics.json").read_text())
  assert m["victim_source"] == str(tmp_path / "model.safetensors")
  assert m["victim"]["imported"]["format"] == "safetensors"
  assert m["assumed"]["data_mean_file"] == str(tmp_path / "mean.npy")
  assert m["assumed"]["training_mean_subtracted"] is True
  # The imported network is the reference forward pass: relu(W0 x + b0), then W1, W2 (no bias).
  from recon_jax import data
  from recon_jax.victims import recipe, sources

  ds = data.load_dataset("digits", n_per_class=3, subtract_mean=False)
  ds = sources.shift_dataset(ds, mean)
  vic = sources.import_victim(
    str(tmp_path / "model.safetensors"), recipe.VictimConfig(dataset="digits", n_per_class=3), ds
  )
  x = ds.x_train.reshape(len(ds.x_train), -1)
  h = np.maximum(x @ tensors["layers.0.weight"].T + tensors["layers.0.bias"], 0)
  h = np.maximum(h @ tensors["layers.1.weight"].T, 0)
  want = (h @ tensors["layers.2.weight"].T)[:, 0] * ds.y_train
  np.testing.assert_allclose(vic.summary["margins"], want, rtol=1e-5, atol=1e-6)
  assert 0.0 <= m["oracle_residual_rel"] <= 1.0


def test_a_foreign_victim_of_the_wrong_width_is_refused(tmp_path):
  reference_layout_safetensors(tmp_path / "model.safetensors", d=48)
  with pytest.raises(ValueError, match="model.safetensors"):
    _run(_tiny(threat=dict(model=str(tmp_path / "model.safetensors"))), str(tmp_path))


@pytest.mark.slow
def test_a_checkpoint_trained_on_other_data_is_refused(tmp_path):
  """MNIST and Fashion-MNIST share file names: the data fingerprint tells them apart."""
  from experiments.configs import victim as victim_configs
  from recon_jax import data
  from recon_jax.victims import training_run

  for name, seed in (("a", 0), ("b", 1)):
    rng = np.random.default_rng(seed)
    d = tmp_path / name
    d.mkdir()
    for prefix, n in (("train", 60), ("t10k", 20)):
      data.write_idx(
        d / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
      )
      data.write_idx(d / f"{prefix}-labels-idx1-ubyte", np.arange(n, dtype=np.uint8) % 10)
  vcfg = victim_configs.get_config("tiny")
  vcfg.victim.dataset, vcfg.data_dir, vcfg.victim.epochs = "mnist", str(tmp_path / "a"), 50
  (tmp_path / "victim").mkdir()
  training_run.run_training(vcfg, str(tmp_path / "victim"))
  cfg = _tiny(
    threat=dict(model=str(tmp_path / "victim" / "victim.msgpack")),
    search=dict(steps=4, chunk_steps=4),
    data_dir=str(tmp_path / "b"),
    victim=dict(dataset="mnist"),
  )
  with pytest.raises(ValueError, match="trained on other data"):
    _run(cfg, str(tmp_path / "w1"))
  assert not (tmp_path / "w1" / "metrics.json").exists()
  cfg.threat.allow_data_mismatch = True
  assert _run(cfg, str(tmp_path / "w1"))["n_train"] == 6


@pytest.mark.slow
def test_the_bilevel_attack_runs_as_the_main_job_on_a_weight_decay_victim(tmp_path):
  """attack=bilevel registers itself: the main job builds it from its spec (m = n, the
  victim's own loss and weight decay) and runs it through the same loop and evaluation."""
  cfg = _tiny(
    attack="bilevel",
    search=dict(m_per_sample=1, steps=4, chunk_steps=2),
    bilevel=dict(bilevel_inner_maxiter=10),
    victim=dict(activation="softplus", weight_decay=1e-2),
  )
  with fast_compile():  # compile-bound: 4 steps of a nested L-BFGS
    m = _run(cfg, str(tmp_path))
  assert (m["attack"], m["problem"], m["m"], m["n_train"]) == ("bilevel", "binary", 6, 6)
  assert m["selection"]["n_diverged"] == 0 and np.all(np.isfinite(m["final_stat_rel"]))
  assert_round_trip(m, (tmp_path / "metrics.json").read_text())
  assert _npz(tmp_path / "reconstructions.npz")["candidates"].shape == (2, 6, 8, 8, 1)


def test_every_preset_and_variant_is_planned_under_the_names_of_today():
  """The presets, the efficacy variants and the audit's presets name settings as they are
  since 0.2.0, which reads no former name (the audit's quick preset gave ``steps``)."""
  from experiments.configs import audit as audit_configs
  from experiments.configs import efficacy as efficacy_configs
  from recon_jax.data import DataError
  from recon_jax.job import planning
  from recon_jax.job.settings import JobConfig
  from recon_jax.studies import efficacy

  for preset in configs.PRESETS:
    try:
      planning.prepare(configs.get_config(preset))
    except DataError as e:  # the paper presets' files are not here
      assert "data_dir" in str(e), (preset, str(e))
  eff = efficacy_configs.get_config("finetune_kkt")
  for name in eff.variants:
    planning.prepare(efficacy.variant_config(eff, name))
  assert JobConfig(**audit_configs.get_config("quick").job).search.steps == 1000
