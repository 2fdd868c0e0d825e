"""Models fine-tuned from weights the attacker knows: victims that record theta_0, the span
their training leaves in the first layer, theta_0 from a file, and the attack end to end."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

import recon_jax as rj
from recon_jax.attacks import span
from recon_jax.errors import ConfigError
from recon_jax.io import checkpoint
from recon_jax.job import pipeline, planning
from recon_jax.victims import recipe, sources, state_dicts, trained

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

# 3 + 3 digits, one hidden layer of 256 ReLU units from He's initialisation, 300 epochs of GD.
LAZY = dict(
  dataset="digits",
  n_per_class=3,
  arch="one_hidden",
  widths=(256,),
  init="kaiming",
  init_std=None,
  first_layer_std=None,
  lr=0.05,
  epochs=300,
)


def _outside_span(cfg):
  """The share of the first layer's change outside the span of the training inputs."""
  ds = trained.load_data(cfg)
  fitted = trained.fit(cfg, ds)
  change = np.asarray(fitted.params["params"]["layer_0"]["kernel"]) - np.asarray(
    fitted.init["params"]["layer_0"]["kernel"]
  )
  x = ds.x_train.reshape(len(ds.x_train), -1).astype(np.float64)
  inside = x.T @ np.linalg.lstsq(x.T, change, rcond=None)[0]
  return np.linalg.norm(change - inside) / np.linalg.norm(change)


def test_gradient_descent_keeps_the_change_in_the_span_and_adam_does_not():
  """Every gradient step adds outer products with the inputs to a dense first layer: full
  batch, mini-batch, momentum, logistic or squared loss.  Adam's per-entry scaling does not."""
  base = recipe.VictimConfig(**{**LAZY, "epochs": 40})
  with jax.enable_x64(True):
    for kw in ({}, {"momentum": 0.9}, {"batch_size": 2}, {"loss": "mse"}):
      assert _outside_span(dataclasses.replace(base, **kw)) < 1e-9, kw
    assert _outside_span(dataclasses.replace(base, optimizer="adam", lr=1e-3)) > 0.1


def test_a_pretrained_theta0_is_recorded_and_deterministic():
  cfg = recipe.VictimConfig(**{**LAZY, "epochs": 20, "pretrain_epochs": 30})
  ds = trained.load_data(cfg)
  fresh = trained.initial_params(dataclasses.replace(cfg, pretrain_epochs=0), ds)
  init = trained.initial_params(cfg, ds)
  again = trained.initial_params(cfg, ds)
  leaves = lambda t: [np.asarray(a) for a in jax.tree_util.tree_leaves(t)]
  assert all(np.array_equal(a, b) for a, b in zip(leaves(init), leaves(again)))
  assert not all(np.array_equal(a, b) for a, b in zip(leaves(init), leaves(fresh)))
  fitted = trained.fit(cfg, ds)
  assert all(np.array_equal(a, b) for a, b in zip(leaves(fitted.init), leaves(init)))
  assert "pretrained" in fitted.summary["init"]
  with pytest.raises(ConfigError, match="optimizer"):
    recipe.validate(dataclasses.replace(cfg, optimizer="lbfgs"))
  with pytest.raises(ConfigError, match="momentum"):
    recipe.validate(dataclasses.replace(cfg, optimizer="adam", momentum=0.9))
  with pytest.raises(ConfigError, match="pretrain_epochs"):
    recipe.validate(dataclasses.replace(cfg, pretrain_epochs=-1))


def _torch_layout(params):
  """A one-hidden-layer flax network as a PyTorch-layout state dict (weights [out, in])."""
  p = params["params"]
  return {
    "fc1.weight": np.asarray(p["layer_0"]["kernel"], np.float32).T.copy(),
    "fc1.bias": np.asarray(p["layer_0"]["bias"], np.float32),
    "fc2.weight": np.asarray(p["layer_1"]["kernel"], np.float32).T.copy(),
    "fc2.bias": np.asarray(p["layer_1"]["bias"], np.float32),
  }


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A lazy victim trained for 50 epochs, and its weights and theta_0 saved as safetensors."""
  cfg = recipe.VictimConfig(**{**LAZY, "epochs": 50})
  ds = trained.load_data(cfg)
  fitted = trained.fit(cfg, ds)
  root = tmp_path_factory.mktemp("saved")
  model, init = root / "model.safetensors", root / "init.safetensors"
  save_file(_torch_layout(fitted.params), str(model))
  save_file(_torch_layout(fitted.init), str(init))
  return cfg, ds, fitted, model, init


def test_an_imported_model_with_its_theta0_file(saved, tmp_path):
  """A model and its initial weights saved as safetensors: the import reads theta_0 in the
  model's own layout; a theta_0 of another shape, with NaN, or missing is refused before
  any work, in one line naming the file or the setting."""
  cfg, ds, fitted, model, init = saved
  imp = sources.import_victim(str(model), cfg, ds, init_path=str(init))
  for a, b in zip(jax.tree_util.tree_leaves(imp.init), jax.tree_util.tree_leaves(fitted.init)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)

  threat = rj.Threat(model=str(model), known_init=True)
  job = rj.JobConfig(victim=dict(dataset="digits", n_per_class=3), threat=threat)
  with pytest.raises(ConfigError, match="threat.theta0"):
    planning.prepare(job)
  with_theta0 = lambda path: job.replace(threat=dataclasses.replace(threat, theta0=path))
  planning.prepare(with_theta0(str(init)))
  bad = _torch_layout(fitted.init)
  bad["fc1.weight"] = bad["fc1.weight"][:, :10].copy()
  save_file(bad, str(tmp_path / "narrow.safetensors"))
  with pytest.raises(checkpoint.CheckpointError, match="narrow.safetensors"):
    planning.prepare(with_theta0(str(tmp_path / "narrow.safetensors")))
  nan = _torch_layout(fitted.init)
  nan["fc2.bias"] = np.full_like(nan["fc2.bias"], np.nan)
  save_file(nan, str(tmp_path / "nan.safetensors"))
  with pytest.raises(checkpoint.CheckpointError, match="nan.safetensors.*NaN"):
    planning.prepare(with_theta0(str(tmp_path / "nan.safetensors")))
  with pytest.raises(checkpoint.CheckpointError, match="missing.safetensors"):
    planning.prepare(with_theta0(str(tmp_path / "missing.safetensors")))
  with pytest.raises(ConfigError, match="linearize"):
    planning.prepare(rj.JobConfig(linearize=0.5))  # a setting of known_init only
  with pytest.raises(ConfigError, match="linearize"):
    planning.prepare(rj.JobConfig(threat=rj.Threat(known_init=True), linearize=2.0))


def test_a_job_reads_each_file_of_its_victim_once(saved, tmp_path, monkeypatch):
  """Planning reads the model, its theta_0 and a recon_jax checkpoint once each, and the run
  builds the victim from what was read: no file is read again (one read each, counted)."""
  cfg, ds, fitted, model, init = saved
  own = str(tmp_path / "victim.msgpack")
  trained.save(own, cfg, ds, fitted.params, fitted.summary, init=fitted.init)
  reads = []
  for module in (state_dicts, checkpoint):
    real = module.read
    monkeypatch.setattr(module, "read", lambda p, real=real: reads.append(str(p)) or real(p))

  job = rj.JobConfig(victim=dict(dataset="digits", n_per_class=3), threat={"known_init": True})
  plan = planning.prepare(job.replace(**{"threat.model": str(model), "threat.theta0": str(init)}))
  vic = pipeline.load_victim(plan)[1]
  assert sorted(reads) == sorted([str(model), str(init)])
  assert vic.init is not None

  reads.clear()
  own_job = rj.JobConfig(threat={"model": own, "known_init": True})
  vic = pipeline.load_victim(planning.prepare(own_job))[1]
  assert reads == [own]
  for a, b in zip(jax.tree_util.tree_leaves(vic.init), jax.tree_util.tree_leaves(fitted.init)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # theta_0 stored with it


@pytest.mark.slow  # the default tier's check: test_audit's model fine-tuned from known weights
def test_the_attack_recovers_a_model_fine_tuned_from_known_weights():
  """The preset's attack on a lazy digits victim: every training image strictly, none of
  the baselines, the truth fitting at least as well as what the attack found, and the
  report says which regime the model is in (the change's span has about n directions).
  The default tier asserts the same of the audit's 3 + 3 digits model of this recipe, fine
  tuned from known weights and imported (test_audit)."""
  cfg = rj.JobConfig(
    victim=LAZY,
    threat={"known_init": True},
    linearize=0.5,
    kkt={"subspace": True},
    search=dict(
      optimizer="adam",
      lr_x="3e-3:1e-1:log",
      lr_lam="3e-3:1e-1:log",
      anneal_alpha=200.0,
      anneal_stages=4,
      num_restarts=2,
      steps=240,
      chunk_steps=240,
    ),
    evaluation={"identify": False},
  )
  m = pipeline.reconstruct(cfg).metrics
  assert m["recovered_strict"] >= 5, m["recovered_strict"]
  assert m["baseline_heldout_recovered_strict"] == 0
  assert m["baseline_mean_image_recovered_strict"] == 0
  assert m["selection"]["best_by_loss_recovered_strict"] >= 5
  regime = m["regime"]
  assert regime["known_init"] and regime["n_train"] == 6
  assert regime["span"]["dim"] in (5, 6) and regime["span"]["input_dim"] == 64
  assert np.isfinite(m["identifiability"]["truth_residual"])
  # what the span holds bounds what a reader of the change recovers
  ceiling = m["span_ceiling"]
  assert ceiling["span_dim"] == regime["span"]["dim"]
  assert m["recovered_strict"] <= ceiling["recovered_strict"] + 1
  assert ceiling["recovered_strict"] + len(ceiling["missing"]) == 6
  missed = m["identifiability"]["missed"]  # one entry per image not recovered
  assert len(missed["images"]) == len(missed["weakness_rank"]) == 6 - m["recovered_strict"]
  assert len(m["identifiability"]["truth_leave_one_out"]) == 6


def test_the_span_of_a_victim_fine_tuned_by_gradient_descent_has_n_minus_1_directions():
  """In float32, as victims train by default: the mean-subtracted images sum to zero up to
  float32 rounding, so their span has n - 1 directions above the noise floor."""
  cfg = recipe.VictimConfig(**LAZY)
  ds = trained.load_data(cfg)
  fitted = trained.fit(cfg, ds, jnp.float32)
  change = jax.tree_util.tree_map(jnp.subtract, fitted.params, fitted.init)
  _, info = span.span_basis(change, n=len(ds.x_train))
  assert info.dim == len(ds.x_train) - 1  # mean-subtracted: the images sum to zero
