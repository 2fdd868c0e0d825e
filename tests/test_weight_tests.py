"""Membership from the weights: planted members (a model trained here on a few images) score
above non-members, every score is invariant to the images' order, and the gradients' Gram
matrix of the dense stack is what finite sums of per-image gradients give."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import recon_jax as rj
from recon_jax.eval import membership
from recon_jax.eval import weight_tests as wt
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _mlp(widths=(16,), seed=0, d=12, out=1):
  module = models.MLP(widths=tuple(widths), out_dim=out, bias="all")
  params = module.init(jax.random.PRNGKey(seed), jnp.zeros((1, d)))
  return module, params


def test_the_gram_matrix_of_the_layers_factors_is_that_of_the_full_gradients():
  module, params = _mlp((8, 6), d=5)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(7, 5)).astype(np.float32)
  y = np.where(rng.random(7) < 0.5, -1.0, 1.0).astype(np.float32)
  layers = wt.dense_stack(params)
  factors = wt.layer_factors(layers, jnp.asarray(x), jnp.asarray(y))
  K, b = wt.gram_and_projection(layers, layers, factors)

  def phi(p, xi, yi):
    return yi * module.apply(p, xi[None])[0, 0]

  g = jax.vmap(jax.grad(phi), (None, 0, 0))(params, jnp.asarray(x), jnp.asarray(y))
  flat = jnp.concatenate([v.reshape(7, -1) for v in jax.tree_util.tree_leaves(g)], axis=1)
  ref = jnp.concatenate([v.reshape(-1) for v in jax.tree_util.tree_leaves(params)])
  np.testing.assert_allclose(K, flat @ flat.T, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(b, flat @ ref, rtol=1e-4, atol=1e-5)


def test_a_convolution_is_not_a_dense_stack():
  module = models.SmallCNN()
  params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 6, 6, 1)))
  assert wt.dense_stack(params) is None


@pytest.fixture(scope="module")
def planted():
  """A 64-256-1 network fine-tuned from a known start on 10 + 10 digits; 60 held-out digits."""
  ds = rj.load_dataset("digits", n_per_class=10, subtract_mean=True, seed=3)
  cfg = rj.VictimConfig(
    dataset="digits", n_per_class=10, widths=(256,), bias="all", init="kaiming",
    init_std=None, first_layer_std=None, lr=0.01, epochs=1500, data_seed=3,
  )  # fmt: skip
  vic = rj.load_or_train_victim(cfg, ds, use_cache=False)
  x = np.concatenate([ds.x_train, ds.x_test[:60]])
  y = np.concatenate([ds.y_train, ds.y_test[:60]])
  return vic, x, y, np.arange(len(x)) < len(ds.x_train)


def test_planted_members_carry_the_change_and_the_fit_beats_the_loss(planted):
  vic, x, y, is_member = planted
  scores, skipped = wt.weight_scores(vic.apply_fn, vic.params, x, y, init=vic.init)
  assert not skipped and set(scores) == {"loss", "confidence", "change_fit"}
  fit = membership.separation(scores["change_fit"], is_member, permutations=199)
  loss = membership.separation(scores["loss"], is_member, permutations=199)
  assert fit["auc"] > 0.9 and fit["auc"] > loss["auc"]
  alone = wt.kkt_fit_scores(vic.params, x, y)  # theta* alone scores too, if weaker
  assert np.all(np.isfinite(alone)) and np.all(alone >= 0)


def test_every_weight_score_is_invariant_to_the_order_of_the_images(planted):
  vic, x, y, _ = planted
  perm = np.random.default_rng(1).permutation(len(x))
  a, _ = wt.weight_scores(vic.apply_fn, vic.params, x, y, init=vic.init)
  b, _ = wt.weight_scores(vic.apply_fn, vic.params, x[perm], y[perm], init=vic.init)
  for name in a:
    np.testing.assert_allclose(a[name][perm], b[name], rtol=1e-3, atol=1e-6, err_msg=name)


def test_labels_and_images_of_different_lengths_are_refused():
  _, params = _mlp()
  with pytest.raises(rj.ConfigError, match="x has 3 images but y has 2 labels"):
    wt.kkt_fit_scores(params, np.zeros((3, 12)), np.ones(2))


def _with_tests(fit_tpr, loss_tpr, significant=True, **extra):
  tests = {
    "loss": {"kind": "baseline", "auc": 0.6, "tpr_at_fpr": {"0.001": loss_tpr}, "p_value": 0.2},
    "change_fit": {
      "kind": "weights",
      "auc": 0.98,
      "tpr_at_fpr": {"0.001": fit_tpr},
      "p_value": 1e-4 if significant else 0.3,
      "significant": significant,
    },
  }
  return {
    "n_train": 20,
    "recovered_strict": 0,
    "baseline_heldout_recovered_strict": 0,
    "baseline_mean_image_recovered_strict": 0,
    "identifiability": {"ratio": 1.2, "per_restart_residual": [0.1]},
    "membership": {"tests": tests},
    **extra,
  }


def test_the_weights_alone_give_leaks_only_above_the_loss_baseline_at_a_tenth_of_a_percent():
  from recon_jax.eval import verdict

  said = verdict.decide(_with_tests(0.8, 0.01))
  assert said.verdict == "leaks" and said.membership_only
  assert "told apart by the weight change" in said.line and "no image reconstructed" in said.line
  assert verdict.decide(_with_tests(0.05, 0.05)).verdict != "leaks"  # no better than the loss
  assert verdict.decide(_with_tests(0.8, 0.01, significant=False)).verdict != "leaks"
  assert verdict.decide(_with_tests(None, None)).verdict != "leaks"  # too few held-out images
  wrong = _with_tests(0.8, 0.01, identifiability={"ratio": 0.1, "per_restart_residual": [0.1]})
  assert verdict.decide(wrong).verdict == "cannot_tell"  # the images given may not be its own


def test_a_membership_only_audit_concludes_on_the_weights_tests_alone():
  from recon_jax.eval import verdict

  only = dict(membership_only=True, recovered_strict=None, identifiability={"ratio": None})
  said = verdict.decide(_with_tests(0.8, 0.01, **only))
  assert said.verdict == "leaks" and said.membership_only
  assert said.line.endswith(verdict.NOT_ATTEMPTED), said.line
  weak = verdict.decide(_with_tests(0.05, 0.05, **only))
  assert weak.verdict == "cannot_tell"
  assert "no membership test from the weights told the training images apart" in weak.line
  assert "strongest: change_fit (AUC 0.98, TPR 5% at 0.1% FPR)" in weak.line, weak.line


def test_attack_none_runs_the_membership_tests_alone_and_reports_them(tmp_path):
  """The tiny preset's victim (3 + 3 digits) audited with attack=none: no candidate, no
  reconstruction counted, every test of the weights and both baselines scored against the
  held-out digits, and report.md and roc.png say so."""
  from test_metrics_json import assert_round_trip

  from experiments.configs import reconstruct as configs
  from recon_jax.job import planning
  from recon_jax.job import run as job_run

  cfg = configs.get_config("tiny")
  cfg.attack = "none"
  work = tmp_path / "w"
  m = job_run.run_reconstruction(planning.prepare(cfg), str(work)).to_dict()
  assert_round_trip(m, (work / "metrics.json").read_text())
  assert m["m"] == 0 and m["recovered_strict"] is None and "handover" not in m
  tests = m["membership"]["tests"]
  assert set(tests) == {"loss", "confidence", "kkt_fit"}
  for t in tests.values():
    assert len(t["scores_train"]) == 6 and len(t["scores_heldout"]) > 1000
    assert t["tpr_at_fpr"]["0.0001"] is None  # fewer than 10,000 held-out digits
  assert tests["kkt_fit"]["auc"] > 0.9  # the 6 members are told apart from the weights
  assert m["verdict"] in ("leaks", "cannot_tell")
  assert verdict_line_ok(m)
  report = (work / "report.md").read_text()
  assert "| reconstruction | not attempted |" in report and "`kkt_fit`" in report
  assert (work / "roc.png").stat().st_size > 0


def verdict_line_ok(m) -> bool:
  """The membership-only verdict names the attack that was not run, and leaks only on the
  weights' tests."""
  line = m["verdict_line"]
  return "attack=none" in line and (m["verdict"] != "leaks" or "told apart by" in line)


def test_blank_and_copied_heldout_images_are_left_out_with_a_sentence_saying_so():
  """One digit copied 40 times (with both labels) and 40 blank images among 30 real held-out
  digits: 39 copies and the 40 blanks go, the first copy and the 30 stay, and the sentence
  names the file and the counts (with them, the copies' scores would be one block of ties
  that the membership tests count as 40 images)."""
  from recon_jax.data import load_dataset
  from recon_jax.victims import sources

  ds = load_dataset("digits", n_per_class=5, seed=0, subtract_mean=False)
  real, copies = ds.x_test[:30], np.repeat(ds.x_test[30:31], 40, axis=0)
  blank = np.full((40, *ds.x_test.shape[1:]), 0.3, np.float32)
  held = np.concatenate([real, copies, blank])
  labels = np.concatenate([ds.y_test[:30], np.where(np.arange(40) % 2, 1.0, -1.0), ds.y_test[:40]])
  mixed = ds._replace(x_test=held, y_test=labels.astype(ds.y_test.dtype))
  kept, why = sources.drop_degenerate(mixed, "held.npz")
  assert len(kept.x_test) == 31 and np.array_equal(kept.x_test[:30], real)
  assert why.startswith("heldout: 79 of the 110 images of held.npz were left out (40 blank ")
  assert "39 copies of another held-out image" in why and why.endswith("31 remain")
  same, none = sources.drop_degenerate(ds, "held.npz")  # real digits: nothing goes
  assert none is None and same is ds
