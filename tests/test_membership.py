"""Membership scoring and its statistics on cases whose answer is known by hand."""

import math

import numpy as np
import pytest

from recon_jax.data import load_dataset
from recon_jax.eval import membership


def test_the_score_is_the_reconstruction_less_the_nearest_other_image():
  sim = np.array([[1.0, 0.3, 0.6], [0.3, 1.0, 0.2], [0.6, 0.2, 1.0]])
  np.testing.assert_allclose(membership.nearest_other(sim), [0.6, 0.3, 0.6])
  s = membership.scores([1.0, 0.5, np.nan], membership.nearest_other(sim))
  np.testing.assert_allclose(s[:2], [0.4, 0.2])
  assert s[2] == -np.inf  # a non-finite similarity scores lowest


def test_perfect_separation_reversed_and_no_signal():
  member = np.r_[np.ones(10, bool), np.zeros(40, bool)]
  up = np.r_[np.linspace(1, 2, 10), np.linspace(0, 0.9, 40)]
  out = membership.separation(up, member, permutations=999)
  assert out["auc"] == 1.0 and out["tpr_at_fpr"] == {"0.01": 1.0, "0.001": 1.0}
  assert out["p_value"] == pytest.approx(1 / 1000) and out["significant"] and out["testable"]
  down = membership.separation(-up, member, permutations=999)
  assert down["auc"] == 0.0 and down["p_value"] == 1.0 and not down["significant"]
  assert down["tpr_at_fpr"]["0.01"] == 0.0
  flat = membership.separation(np.zeros(50), member, permutations=99)
  assert flat["auc"] == 0.5 and flat["p_value"] == 1.0  # every relabelling ties


def test_tpr_at_a_low_fpr_counts_members_above_every_held_out_score():
  member = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
  s = np.array([0.9, 0.7, 0.5, 0.1, 0.8, 0.3, 0.2, 0.0])
  assert membership.tpr_at_fpr(s, member, 0.01) == 0.25  # only 0.9 beats the 0.8 held out
  # one false positive in four allowed (the 0.8): 0.9, 0.7 and 0.5 are called members
  assert membership.tpr_at_fpr(s, member, 0.25) == 0.75
  fpr, tpr = membership.roc_curve(s, member)
  assert fpr[0] == tpr[0] == 0 and fpr[-1] == tpr[-1] == 1 and np.all(np.diff(fpr) >= 0)
  # the area under the curve drawn is the Mann-Whitney AUC: 11 of 16 pairs ordered
  assert np.trapezoid(tpr, fpr) == pytest.approx(11 / 16)


def test_the_permutation_p_value_matches_the_exact_one():
  """One member among four with the top score: 1 relabelling in 4 is as extreme; one with
  the second score: 2 in 4."""
  member = np.array([1, 0, 0, 0], bool)
  p = membership.permutation_p([3.0, 2.0, 1.0, 0.0], member, permutations=20000, seed=1)
  assert p == pytest.approx(0.25, abs=0.015)
  p = membership.permutation_p([2.0, 3.0, 1.0, 0.0], member, permutations=20000, seed=1)
  assert p == pytest.approx(0.5, abs=0.015)
  # 3 of 6: at best 1 in 20, never below the level of 0.01: the test cannot reach it
  assert membership.smallest_p(3, 3) == pytest.approx(1 / math.comb(6, 3))
  out = membership.separation(np.arange(6.0)[::-1], np.r_[np.ones(3), np.zeros(3)] > 0)
  assert not out["testable"] and not out["significant"] and out["auc"] == 1.0


def test_near_duplicates_are_copies_not_look_alikes():
  rng = np.random.default_rng(0)
  a = rng.uniform(size=(5, 4, 4, 1))
  b = np.concatenate([rng.uniform(size=(3, 4, 4, 1)), a[[2]] + 0.5 / 255, a[[4]] + 0.05])
  assert membership.near_duplicates(a, b) == [(2, 3)]
  assert membership.near_duplicates(a, b[:0]) == []


def test_reproduced_training_images_score_above_held_out_ones():
  """Candidates that are the training images themselves: every training image scores above
  every held-out image, whose best match is only a training image it resembles."""
  ds = load_dataset("digits", n_per_class=3, seed=0)
  train, held = np.asarray(ds.x_train), np.asarray(ds.x_test[:12])
  given = np.concatenate([train, held])
  out = membership.image_scores([train, train[::-1]], given)
  s, member = out["score"], np.arange(len(given)) < len(train)
  assert s[member].min() > s[~member].max() and s[member].min() > 0
  np.testing.assert_allclose(out["recon_ssim"][member], 1.0, atol=1e-6)


def test_many_images_seek_their_nearest_among_the_most_correlated():
  """Beyond the exact size, the nearest other image by SSIM is sought among the most
  correlated ones: on these digits it is the exact answer for every image."""
  ds = load_dataset("digits", n_per_class=3, seed=0)
  from recon_jax.eval import similarity

  x = np.asarray(similarity.stretch(np.asarray(ds.x_test[:60])))
  exact = membership.nearest_neighbour_ssim(x, 3, exact_up_to=100)
  sought = membership.nearest_neighbour_ssim(x, 3, exact_up_to=10)
  np.testing.assert_allclose(sought, exact, atol=1e-6)
  assert membership.smallest_p(500, 1000) == 1e-4  # C(1500, 500) is beyond any float


def test_the_permutation_p_value_is_uniform_when_the_members_are_drawn_at_random():
  """Under the null (which given images are called members is drawn at random, the scores
  fixed: ties among them included), P(p <= a) is a for every a the test can give: over 400
  random relabellings, the share at or below 0.05, 0.1 and 0.5 lies within four binomial
  standard deviations of it, and a Kolmogorov-Smirnov test does not reject uniformity."""
  import scipy.stats

  rng = np.random.default_rng(0)
  scores = np.round(rng.normal(size=80), 1)  # ties, as a fit's zeros give
  ps = []
  for trial in range(400):
    member = np.zeros(80, bool)
    member[rng.choice(80, 12, replace=False)] = True
    ps.append(membership.permutation_p(scores, member, permutations=199, seed=trial))
  ps = np.asarray(ps)
  for a in (0.05, 0.1, 0.5):
    share, sd = (ps <= a).mean(), np.sqrt(a * (1 - a) / len(ps))
    assert abs(share - a) <= 4 * sd + 1.0 / 200, (a, share)
  assert scipy.stats.kstest(ps, "uniform").pvalue > 1e-3
