"""Audit a model trained outside the project, from its files: an MLP and a small CNN trained
here with plain JAX, saved as safetensors in PyTorch's layout, their images written as an
ImageFolder (the formats README documents)."""

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image
import pytest
from safetensors.numpy import save_file
from test_metrics_json import assert_round_trip

from experiments import audit as binary
from experiments.configs import audit as configs
from recon_jax.data import load_dataset
from recon_jax.errors import ConfigError, Error

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _write_folder(root, x, y):
  """An ImageFolder: root/{neg,pos}/i.png (8x8 grey), pos the second class in sorted order."""
  for i, (img, label) in enumerate(zip(x, y)):
    d = os.path.join(root, "pos" if label > 0 else "neg")
    os.makedirs(d, exist_ok=True)
    Image.fromarray(np.round(img[..., 0] * 255).astype(np.uint8)).save(os.path.join(d, f"{i}.png"))


def _quantised(x):
  return np.round(np.asarray(x) * 255) / 255  # what the PNG files hold


def _train_mlp(x, y, width=256, epochs=300, lr=0.05, seed=0):
  """A 64-width-1 ReLU MLP from He's initialisation, full-batch GD on the logistic loss, in
  plain JAX: (theta_0, theta*) as PyTorch-layout state dicts."""
  k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
  d = x.shape[1]
  p0 = {
    "fc1.weight": jax.random.normal(k1, (width, d)) * np.sqrt(2.0 / d),
    "fc1.bias": jnp.zeros(width),
    "fc2.weight": jax.random.normal(k2, (1, width)) * np.sqrt(2.0 / width),
    "fc2.bias": jnp.zeros(1),
  }

  def loss(p):
    h = jax.nn.relu(x @ p["fc1.weight"].T + p["fc1.bias"][None])
    out = (h @ p["fc2.weight"].T + p["fc2.bias"][None])[:, 0]
    return jnp.mean(jnp.logaddexp(0.0, -y * out))

  step = jax.jit(lambda p: jax.tree_util.tree_map(lambda a, g: a - lr * g, p, jax.grad(loss)(p)))
  p = p0
  for _ in range(epochs):
    p = step(p)
  as_np = lambda t: {k: np.asarray(v, np.float32) for k, v in t.items()}
  return as_np(p0), as_np(p)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """The model owner's files: 3 + 3 digit images (train), 20 + 20 held-out, the MLP, its theta_0,
  a randomly initialised MLP and a small CNN; the training mean they subtracted."""
  root = tmp_path_factory.mktemp("owner")
  ds = load_dataset("digits", n_per_class=3, seed=0)
  x = _quantised(ds.x_train)
  pick = np.r_[np.flatnonzero(ds.y_test > 0)[:20], np.flatnonzero(ds.y_test < 0)[:20]]
  held = _quantised(ds.x_test[pick])
  _write_folder(root / "train", x, ds.y_train)
  _write_folder(root / "heldout", held, ds.y_test[pick])
  mean = x.mean(0)
  np.save(root / "mean.npy", mean.astype(np.float32))
  flat = jnp.asarray((x - mean).reshape(len(x), -1))
  init, star = _train_mlp(flat, jnp.asarray(ds.y_train, jnp.float32))
  save_file(star, str(root / "model.safetensors"))
  save_file(init, str(root / "init.safetensors"))
  save_file(init, str(root / "random.safetensors"))  # weights that never saw the data
  rng = np.random.default_rng(1)
  cnn = {
    "conv.weight": rng.normal(size=(4, 1, 3, 3)).astype(np.float32) * 0.5,
    "conv.bias": np.zeros(4, np.float32),
    "fc.weight": rng.normal(size=(1, 4 * 6 * 6)).astype(np.float32) * 0.1,
    "fc.bias": np.zeros(1, np.float32),
  }
  save_file(cnn, str(root / "cnn.safetensors"))
  # Other digits of the same two classes, never seen by the model: a wrong training set.
  rest = np.setdiff1d(np.arange(len(ds.y_test)), pick)
  other = np.r_[rest[ds.y_test[rest] > 0][:3], rest[ds.y_test[rest] < 0][:3]]
  _write_folder(root / "other", _quantised(ds.x_test[other]), ds.y_test[other])
  # An odd training set (4 + 3) and the model trained on it from the same theta_0.
  odd = np.r_[rest[ds.y_test[rest] > 0][3:7], rest[ds.y_test[rest] < 0][3:6]]
  x7, y7 = _quantised(ds.x_test[odd]), ds.y_test[odd]
  _write_folder(root / "train7", x7, y7)
  np.save(root / "mean7.npy", x7.mean(0).astype(np.float32))
  flat7 = jnp.asarray((x7 - x7.mean(0)).reshape(len(x7), -1))
  init7, star7 = _train_mlp(flat7, jnp.asarray(y7, jnp.float32))
  assert all(np.array_equal(init7[k], init[k]) for k in init)  # one theta_0 for both
  save_file(star7, str(root / "model7.safetensors"))
  return root


def _audit(files, tmp_path, name, job=(), **settings):
  cfg = configs.get_config("quick")
  cfg.job.search.update(num_restarts=2, steps=240, chunk_steps=240, anneal_stages=4)
  cfg.job.evaluation.identify = False
  cfg.job.update(dict(job))
  cfg.update(train=str(files / "train"), heldout=str(files / "heldout"))
  cfg.update(data_mean=str(files / "mean.npy"))
  cfg.update(settings)
  written = binary.job(cfg, str(tmp_path / name))
  text = (tmp_path / name / "metrics.json").read_text()
  assert_round_trip(written, text)  # the file the job wrote before its report was typed
  return json.loads(text)


def test_a_model_fine_tuned_from_known_weights_leaks(files, tmp_path):
  m = _audit(
    files,
    tmp_path,
    "known",
    model=str(files / "model.safetensors"),
    theta0=str(files / "init.safetensors"),
  )
  assert m["verdict"] == "leaks", m["reasons"]
  k, held = m["recovered_strict"], m["baseline_heldout_recovered_strict"]
  assert k >= 4 and k > held
  mem = m["membership"]
  assert mem["significant"] and mem["p_value"] <= mem["level"] and mem["auc"] > 0.9
  assert mem["n_members"] == 6 and mem["n_others"] == 40
  # every sentence of the report agrees with the numbers of metrics.json
  report = (tmp_path / "known" / "report.md").read_text()
  assert "**leaks**" in report and "reconstructions.png" in report and "roc.png" in report
  assert (tmp_path / "known" / "roc.png").stat().st_size > 0
  assert f"| {k} of 6 |" in report and f"| held-out baseline | {held} |" in report
  assert f"| membership ROC AUC | {mem['auc']:.3f} |" in report
  assert f"| membership p-value | {mem['p_value']:.2g} (level 0.01) |" in report
  assert "pooled over 2 restarts" in report and "None" not in report
  ratio = m["identifiability"]["ratio"]
  tol = m["identifiability"]["tolerance"]
  assert f"{ratio:.4g} (equal within ±{tol:.2g})" in report and "at most 0.1" in report
  assert f"AUC {mem['auc']:.2f}" in m["verdict_line"] and f"{k} of 6" in m["verdict_line"]
  assert m["assumed"]["dataset"] == m["dataset"] == "user:train"  # not the job's lfw default
  # every test beside the reconstruction's; 40 held-out images resolve no rate under 1/40
  tests = mem["tests"]
  assert set(tests) == {"reconstruction", "loss", "confidence", "change_fit"}
  for t in tests.values():
    assert t["tpr_at_fpr"]["0.001"] is None and t["too_few_heldout_for"] == [
      "0.01",
      "0.001",
      "0.0001",
    ]
  assert "| membership test `change_fit` | AUC" in report
  # the regime and what the change's span holds, as for a victim trained here (test_finetune)
  assert m["baseline_heldout_recovered_strict"] == m["baseline_mean_image_recovered_strict"] == 0
  assert m["selection"]["best_by_loss_recovered_strict"] >= 4
  regime = m["regime"]
  assert regime["known_init"] and regime["n_train"] == 6
  assert regime["span"]["dim"] in (5, 6) and regime["span"]["input_dim"] == 64
  ceiling = m["span_ceiling"]
  assert ceiling["span_dim"] == regime["span"]["dim"]
  assert k <= ceiling["recovered_strict"] + 1
  assert ceiling["recovered_strict"] + len(ceiling["missing"]) == 6
  missed = m["identifiability"]["missed"]  # one entry per image not recovered
  assert len(missed["images"]) == len(missed["weakness_rank"]) == 6 - k
  assert len(m["identifiability"]["truth_leave_one_out"]) == 6


@pytest.mark.parametrize("attack", ["kkt", pytest.param("cone", marks=pytest.mark.slow)])
def test_the_wrong_training_set_never_reads_leaks(files, tmp_path, attack):
  """Other digits of the model's two classes passed as its training set: the attack's own
  candidates fit theta* - theta_0 far better than they do, and the verdict says so."""
  m = _audit(
    files,
    tmp_path,
    "wrong",
    model=str(files / "model.safetensors"),
    theta0=str(files / "init.safetensors"),
    train=str(files / "other"),
    job={"attack": attack},
  )
  ratio = m["identifiability"]["ratio"]
  assert m["verdict"] == "cannot_tell" and m["wrong_data"], m["reasons"]
  assert ratio < 0.5 and "may not be the model's training set" in m["verdict_line"]
  assert f"{ratio:.4g}" in m["verdict_line"]
  report = (tmp_path / "wrong" / "report.md").read_text()
  assert "may not be the model's training set" in report and "candidates.png" in report


def test_held_out_copies_of_training_images_are_refused_before_any_work(files, tmp_path):
  held = tmp_path / "heldout"
  shutil.copytree(files / "heldout", held)
  for name in ("neg", "pos"):  # one training image of each class among the held-out ones
    first = sorted((files / "train" / name).iterdir())[0]
    shutil.copy(first, held / name / f"copy_{first.name}")
  with pytest.raises(ConfigError, match="2 of its 42 images are copies of training images"):
    _audit(files, tmp_path, "copies", model=str(files / "model.safetensors"), heldout=str(held))
  assert not (tmp_path / "copies").exists()


def test_weights_written_in_out_are_refused_saying_the_orientation(files, tmp_path):
  from safetensors.numpy import load_file

  flipped = {
    k: np.ascontiguousarray(v.T) for k, v in load_file(files / "model.safetensors").items()
  }
  save_file(flipped, str(tmp_path / "flipped.safetensors"))
  with pytest.raises(Error, match=r"read as PyTorch.s \[out, in\]"):
    _audit(files, tmp_path, "flipped", model=str(tmp_path / "flipped.safetensors"))
  assert not (tmp_path / "flipped").exists()


def test_a_training_set_of_odd_size_is_audited(files, tmp_path):
  """7 images with theta_0: 3 candidates per image would be 21, rounded up to 22 (m even)."""
  m = _audit(
    files,
    tmp_path,
    "odd",
    model=str(files / "model7.safetensors"),
    theta0=str(files / "init.safetensors"),
    train=str(files / "train7"),
    data_mean=str(files / "mean7.npy"),
  )
  assert m["n_train"] == 7 and m["m"] == 22 and m["verdict"] == "leaks", m["reasons"]


def test_a_model_with_random_weights_gives_no_evidence_with_a_reason(files, tmp_path, capsys):
  """No theta_0 given: the verdict says the audit's --config.theta0 would let the attack fit
  the change, as printed and in report.md; metrics.json keeps the library's threat.theta0."""
  m = _audit(files, tmp_path, "random", model=str(files / "random.safetensors"))
  assert m["verdict"] in ("no_evidence", "cannot_tell") and m["reasons"]
  assert "; threat.theta0 would fit theta* - theta_0" in m["verdict_line"], m["verdict_line"]
  printed = capsys.readouterr().out
  assert "; --config.theta0 would fit theta* - theta_0" in printed and "threat." not in printed
  k, held = m["recovered_strict"], m["baseline_heldout_recovered_strict"]
  assert k <= max(1, held)
  report = (tmp_path / "random" / "report.md").read_text()
  said = m["verdict"].replace("_", " ")
  assert f"**{said}**" in report and m["verdict_line"].startswith(said)
  assert f"| {k} of 6 |" in report and f"| held-out baseline | {held} |" in report
  assert f"({k} vs {max(held, m['baseline_mean_image_recovered_strict'])})" in report
  assert "None" not in report and "pooled over 2 restarts" in report
  assert "; --config.theta0 would fit" in report and "threat.theta0" not in report
  mem = m["membership"]
  assert f"| membership ROC AUC | {mem['auc']:.3f} |" in report


def test_a_small_cnn_is_audited_and_warned_about(files, tmp_path):
  m = _audit(files, tmp_path, "cnn", model=str(files / "cnn.safetensors"))
  assert m["verdict"] in ("no_evidence", "cannot_tell")
  assert any("not dense" in w for w in m["warnings"])


def test_bad_files_are_refused_before_any_work_naming_the_setting(files, tmp_path):
  with pytest.raises(ConfigError, match="heldout"):
    _audit(files, tmp_path, "a", model=str(files / "model.safetensors"), heldout="")
  with pytest.raises(Exception, match="nowhere"):
    _audit(
      files, tmp_path, "b", model=str(files / "model.safetensors"), train=str(files / "nowhere")
    )
  assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_without_training_images_a_blind_attack_says_it_cannot_tell(files, tmp_path):
  m = _audit(files, tmp_path, "blind", model=str(files / "model.safetensors"), theta0="", train="")
  assert m["blind"] and m["verdict"] == "cannot_tell" and m["recovered_strict"] is None
  assert "blind" in m["verdict_line"]
  report = (tmp_path / "blind" / "report.md").read_text()
  assert "None" not in report and "of 0" not in report and "SSIM >= –" not in report
  assert (tmp_path / "blind" / "candidates.png").stat().st_size > 0


def test_a_membership_only_audit_of_a_users_files_reads_the_weight_change(files, tmp_path):
  """--config.job.attack=none on the owner's files with theta_0: no reconstruction, the
  change's fit and the baselines scored against the 40 held-out images (too few to resolve
  any rate, so the weights alone cannot say `leaks`), the verdict saying what it rests on."""
  m = _audit(
    files,
    tmp_path,
    "none",
    job={"attack": "none"},
    model=str(files / "model.safetensors"),
    theta0=str(files / "init.safetensors"),
  )
  assert m["membership_only"] and m["recovered_strict"] is None and m["m"] == 0
  tests = m["membership"]["tests"]
  assert set(tests) == {"loss", "confidence", "change_fit"}
  assert tests["change_fit"]["auc"] > 0.9  # the 6 members carry the change
  assert m["verdict"] == "cannot_tell" and "attack=none" in m["verdict_line"]
  assert "strongest: change_fit" in m["verdict_line"]
