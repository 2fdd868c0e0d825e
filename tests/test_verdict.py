"""The verdict's three states, on planted numbers: none contradicts the count."""

import pytest

from recon_jax.attacks import cone
from recon_jax.eval import identifiability, verdict


def _metrics(k, held=0, ratio=1.5, truth=0.01, flat=False, diverged=0, restarts=4, best_k=None):
  per = [truth * ratio * (1 + 0.0001 * i) for i in range(restarts)]
  return {
    "n_train": 6,
    "recovered_strict": k,
    "baseline_heldout_recovered_strict": held,
    "baseline_mean_image_recovered_strict": 0,
    "num_restarts": restarts,
    "selection": {"n_diverged": diverged},
    "identifiability": {
      "ratio": ratio,
      "truth_residual": truth,
      "per_restart_residual": per,
      "best_restart": 0,
      "family": {"confirmed": flat, "first_layer_rank": 2, "input_dim": 64},
    },
    "per_restart": [
      {"restart": i, "recovered_strict": k if best_k is None else best_k} for i in range(restarts)
    ],
    "regime": {"span": {"dim": 5}},
  }


def test_leaks_when_images_are_recovered_and_the_truth_fits_best():
  v = verdict.decide(_metrics(5, held=1, ratio=1.8))
  assert v.verdict == "leaks" and "5 of 6" in v.line


def test_the_ground_truth_start_reads_leaks():
  """Started at the training set: 6 of 6 recovered at SSIM 1.0, the attack a hair below the
  truth's residual (ratio 0.9999987): equal within the residuals' precision."""
  v = verdict.decide(_metrics(6, ratio=0.9999987))
  assert v.verdict == "leaks" and "as well as" in v.line
  # Below the band, but the better fit is the training set itself (its restart recovers 6).
  assert verdict.decide(_metrics(6, ratio=0.8, best_k=6)).verdict == "leaks"


def test_cannot_tell_when_the_objective_prefers_other_images_or_a_flat_family_runs():
  v = verdict.decide(_metrics(3, ratio=0.5, best_k=0))
  assert v.verdict == "cannot_tell" and "other images fit the equations better" in v.line
  v = verdict.decide(_metrics(3, ratio=2.0, flat=True))
  assert v.verdict == "cannot_tell" and "2 of 64" in v.line
  v = verdict.decide(_metrics(0, ratio=1.0004))  # nothing recovered, fits equal
  assert v.verdict == "cannot_tell"


def _with_membership(m, auc, p, testable=True):
  m["membership"] = {
    "auc": auc,
    "tpr_at_fpr": {"0.01": 0.5},
    "p_value": p,
    "level": 0.01,
    "smallest_p": 1e-4 if testable else 0.05,
    "testable": testable,
    "significant": p <= 0.01,
  }
  return m


def test_leaks_needs_the_membership_test_and_the_count():
  v = verdict.decide(_with_membership(_metrics(5, held=1, ratio=1.8), 0.97, 1e-4))
  assert v.verdict == "leaks" and "AUC 0.97" in v.line and "p = 0.0001" in v.line
  v = verdict.decide(_with_membership(_metrics(5, held=1, ratio=1.8), 0.55, 0.3))
  assert v.verdict == "cannot_tell" and "does not tell the training images" in v.line
  v = verdict.decide(_with_membership(_metrics(5, held=1, ratio=1.8), 1.0, 0.05, False))
  assert v.verdict == "cannot_tell" and "more held-out images" in v.line
  v = verdict.decide(_with_membership(_metrics(0, ratio=1.8), 0.8, 1e-3))
  assert v.verdict == "cannot_tell" and "none well enough" in v.line


@pytest.mark.parametrize("ratio", [0.12, 0.1552, 0.2309])
def test_a_training_set_that_fits_far_worse_than_the_candidates_is_not_called_leaking(ratio):
  """The issue's wrong-training-set audits: other images of the classes recovered 2-4 of 20
  against a baseline of 1, and even the best restart matched some of them."""
  m = _with_membership(_metrics(4, held=1, ratio=ratio, best_k=4), 0.6, 0.04)
  m["regime"]["known_init"] = True
  v = verdict.decide(m)
  assert v.verdict == "cannot_tell"
  assert "may not be the model's training set" in v.line and f"{ratio:.4g}" in v.line
  assert "theta* - theta_0" in v.line and f"{1 / ratio:.1f} times better" in v.line
  assert verdict.decide(_metrics(0, ratio=ratio)).verdict == "cannot_tell"


def test_no_evidence_says_why():
  v = verdict.decide(_metrics(0, ratio=0.5))
  assert v.verdict == "no_evidence" and "cannot test this model" in v.line
  v = verdict.decide(_metrics(0, ratio=1.0, truth=0.97))
  assert "97%" in v.line and v.verdict == "no_evidence"
  v = verdict.decide(_metrics(0, ratio=3.0, diverged=2))
  assert "2 of 4 restarts diverged" in v.line
  v = verdict.decide(_metrics(1, held=1, ratio=3.0))  # at the baseline: nothing shown
  assert v.verdict == "no_evidence" and "longer search" in v.line


@pytest.mark.parametrize("k, held", [(0, 0), (1, 1), (2, 0), (6, 0), (2, 3)])
@pytest.mark.parametrize("ratio", [0.3, 0.9995, 1.5])
@pytest.mark.parametrize("flat", [False, True])
def test_the_verdict_never_contradicts_the_count(k, held, ratio, flat):
  v = verdict.decide(_metrics(k, held=held, ratio=ratio, flat=flat, best_k=0))
  if v.verdict == "leaks":
    assert k >= 1 and k > held
  if v.verdict == "no_evidence":
    assert k <= held
  assert v.reasons


def test_the_band_of_equal_fits_comes_from_the_residuals():
  assert identifiability.tolerance([]) == identifiability.RESIDUAL_PRECISION
  assert identifiability.tolerance([1.0, 1.01, 1.02, 1.03, 5.0]) == pytest.approx(0.03)
  assert identifiability.tolerance([1.0, 9.0, 9.0, 9.0]) == 0.1  # capped
  assert identifiability.tolerance([1.0, 1.2, 1.3, 1.4]) == 0.1  # no band as wide as 0.62
  assert identifiability.verdict(0.9995, None, 1e-3) == identifiability.EQUAL_FIT
  assert identifiability.verdict(0.99, None, 1e-3) == identifiability.PREFERS_OTHER
  assert identifiability.verdict(1.01, None, 1e-3) == identifiability.TRUTH_FITS_BEST


def test_a_direct_attack_that_cannot_read_the_model_says_why_in_the_verdict_and_warnings():
  """The cone's gate (an Adam model's change spans more directions than images): the reason
  is the verdict's and a warning, not a count of 0 to read as 'safe'."""
  why = "the first layer's change theta* - theta_0 spans 164 of 625 input directions"
  m = _metrics(0, ratio=1.0)
  m.update(attack="cone", m=0, identifiability={}, per_restart=[])
  m["regime"]["cone"] = {"cannot": why, "span_dim": 164, "under_noise_floor": 0}
  v = verdict.decide(m)
  assert v.verdict == "no_evidence" and "this attack cannot test this model: " + why in v.line
  assert f"attack=cone did not run: {why}" in verdict.run_warnings(m, 2, searched=False)


def _cone_read(read, n, span_dim=88):
  """A cone run's metrics: ``read`` images for ``n`` training images, a span of ``span_dim``."""
  m = _metrics(0, ratio=1.0)
  m.update(attack="cone", m=read, n_train=n)
  summary = {"cannot": None, "span_dim": span_dim, "under_noise_floor": 12}
  m["regime"]["cone"] = dict(summary, short=cone.short(summary, read, n))
  return m


def _warned(m, text):
  return [w for w in verdict.run_warnings(m, 2, searched=False) if text in w]


def test_few_candidates_of_a_direct_attack_name_the_images_under_the_noise_floor():
  (w,) = _warned(_cone_read(6, 100), "candidates for")
  assert w.startswith("attack=cone read 6 candidates for 100 training images")
  assert "keeps 88 directions above its rounding noise, so 12 images have no facet" in w
  assert not _warned(_cone_read(60, 100), "candidates for")  # more than half: the span's


def test_a_cone_that_reads_fewer_images_than_its_span_holds_says_so_and_names_the_search():
  (w,) = _warned(_cone_read(60, 100), "directions above")
  assert w.startswith("attack=cone read 60 images for 100 training images")
  assert "keeps 88 directions above its rounding noise (12 of the images under it): the " in w
  assert "the facets of 28 more" in w and "finetune_kkt" in w and "did not run" not in w
  m = _cone_read(60, 100)
  m["regime"]["handover_skipped"] = "it would take about 90 minutes here"
  (w,) = _warned(m, "did not run")
  assert (
    w
    == "the KKT search in the change's span did not run after the cone: it would take about 90 minutes here"
  )
  for read, n, k in ((80, 100, 88), (19, 20, 20), (18, 20, 19)):  # most of what the span holds
    assert not _warned(_cone_read(read, n, k), "directions above")
  assert _warned(_cone_read(16, 20, 19), "the facets of 3 more")  # 10 + 10, 16 read of 19
  m = _cone_read(60, 100)
  del m["regime"]["cone"]  # another direct attack: no span to compare with
  assert not _warned(m, "directions above")


def test_a_cone_that_handed_over_says_why_and_what_it_read_alone():
  m = _cone_read(60, 100)
  m["handover"] = dict(
    why="attack=cone " + m["regime"]["cone"]["short"],
    to="kkt",
    direct_candidates=60,
    direct_recovered_strict=21,
  )
  (w,) = [w for w in verdict.run_warnings(m, 2, searched=True) if "took over" in w]
  assert w.startswith("attack=cone read 60 images for 100 training images")
  assert "started from the cone's 60 images" in w and "the cone's alone: 21 strictly)" in w
  assert not [w for w in verdict.run_warnings(m, 2, searched=True) if "may read more" in w]
  m["handover"].update(reread_candidates=22, reread_recovered_strict=18)
  (w,) = [w for w in verdict.run_warnings(m, 2, searched=True) if "took over" in w]
  assert "best restart led to: 22 images, 18 strictly)" in w


def test_a_direct_attack_that_read_nothing_is_not_told_a_longer_search_may_help():
  m = _metrics(0, ratio=3.0)
  m.update(attack="cone", m=0)
  assert "longer search" in verdict.decide(m).line
  line = verdict.decide(m, searched=False).line
  assert "longer search" not in line and "attack=cone read 0 candidates for 6 training" in line


def test_a_reading_off_theta_star_that_holds_no_training_image_says_why_in_the_verdict():
  """The cone read as many candidates as training images and none is one: the verdict gives
  the reason itself (the warning's words), never a pointer to warnings, whatever the
  reading was: sharp facets, blends that fell short, or too few candidates."""
  m = _metrics(0, ratio=3.0)  # the training set fits best
  m.update(attack="cone", m=100, n_train=100)
  m["regime"]["cone"] = {"cannot": None, "span_dim": 99, "read": 100, "short": None}
  (w,) = _warned(m, "none is a training image")
  assert w.startswith("attack=cone read 100 candidates off theta*, 100 of them on sharp facets")
  assert "may not be the model's training set" in w
  said = verdict.decide(m, searched=False)
  assert said.verdict == verdict.NO_EVIDENCE and w in said.reasons, said.line
  summary = {"cannot": None, "span_dim": 99, "under_noise_floor": 1}
  short = cone.short(summary, 0, 100, blends=100)
  m["regime"]["cone"] = dict(summary, read=0, short=short)
  (w,) = _warned(m, "blends")  # blends: the reading falls short, and says so, alone
  assert w.startswith("attack=cone read 0 images for 100 training images") and "100 of the" in w
  assert not _warned(m, "none is a training image")
  said = verdict.decide(m, searched=False)
  assert w in said.reasons and short in said.line, said.line
  for read in (6, 100):  # too few candidates; and no reading of the cone at all
    m.update(m=read)
    m["regime"]["cone"] = {} if read == 100 else dict(summary, read=read, short=None)
    line = verdict.decide(m, searched=False).line
    said = verdict.run_warnings(m, 2, searched=False)
    assert said and said[-1] in line, (line, said)
    assert "warnings say" not in line and "attack=cone read" in line
