"""The job's time estimate: its FLOP count and which measured rate each part divides by."""

import numpy as np
import pytest

from recon_jax.job import estimate


def _mlp(d=64, h=(32, 16)):
  sizes = (d, *h, 1)
  return {f"w{i}": np.zeros((a, b), np.float32) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))}


def test_search_flops_counts_the_first_layer_in_its_span():
  dims = estimate.layers(_mlp())
  assert dims == [(64, 32, 1), (32, 16, 1), (16, 1, 1)]
  full = 10 * 64 * 32 + 14 * (32 * 16 + 16)
  assert estimate.search_flops(dims, 5, None, 64) == 5 * full
  assert estimate.search_flops(dims, 5, 8, 64) == 5 * (full - 10 * 56 * 32)


def test_a_given_rate_divides_the_search_and_nothing_is_measured(monkeypatch):
  monkeypatch.setattr(estimate, "machine_flops", lambda *a, **k: pytest.fail("measured"))
  kw = dict(n=10, heldout=20, pixels=64, restarts=4, steps=100, m=20, searched=True)
  e = estimate.estimate(_mlp(), attack="kkt", flops=estimate.REFERENCE_FLOPS, **kw)
  work = 4 * 100 * estimate.search_flops(estimate.layers(_mlp()), 20, None, 64)
  expected = work / (estimate.SEARCH_EFFICIENCY * estimate.REFERENCE_FLOPS) + 3 * estimate.COMPILE_S
  assert e["attack_s"] == pytest.approx(expected)
  assert e["gflops"] == pytest.approx(estimate.REFERENCE_FLOPS / 1e9)


@pytest.mark.parametrize("backend, sizes", [("cpu", [384]), ("gpu", [384, 4096])])
def test_an_accelerator_measures_the_search_rate_on_a_large_product(monkeypatch, backend, sizes):
  # A 384-wide product on an H200 mostly measures its launch (1-2 TFLOP/s against the
  # search's 164): the search's rate there comes from a product of SEARCH_SIZE.
  seen = []
  rates = {384: 1e12, 4096: 4e14}
  monkeypatch.setattr(estimate.jax, "default_backend", lambda: backend)
  monkeypatch.setattr(
    estimate, "machine_flops", lambda size=384, **k: seen.append(size) or rates[size]
  )
  kw = dict(n=10, heldout=20, pixels=64, restarts=4, steps=100, m=20, searched=True)
  e = estimate.estimate(_mlp(), attack="kkt", **kw)
  assert seen == sizes
  assert e["gflops"] == pytest.approx(rates[sizes[-1]] / 1e9)
  cone = estimate.estimate(_mlp(), attack="cone", **{**kw, "searched": False})
  assert cone["gflops"] == pytest.approx(1e3)  # the cone's programs: the small product's rate


def test_the_membership_tests_are_counted_and_alone_in_a_membership_only_audit():
  """The weights' tests: the path's factors, the Gram matrix and the fit, by their FLOPs
  (none past a convolution); an attack=none audit's estimate is those tests alone."""
  from recon_jax.eval import weight_tests

  dims = [(784, 2048, 1), (2048, 1, 1)]
  given = 4500
  params_n = 784 * 2048 + 2048
  want = 6.0 * weight_tests.PATH_POINTS * given * params_n
  want += 2.0 * given**2 * (784 + 2048 + 2048 + 1) + 2.0 * weight_tests.FIT_ITERS * given**2
  assert estimate.weights_flops(dims, given) == pytest.approx(want)
  assert estimate.weights_flops([(9, 8, -1), (8, 1, 1)], given) == 0.0
  params = {"a": np.zeros((784, 2048)), "b": np.zeros((2048, 1))}
  kw = dict(n=500, heldout=4500, pixels=784, restarts=1, steps=1, m=0, searched=False)
  only = estimate.estimate(params, **kw, attack="none", flops=80e9)
  assert only["attack_s"] == 0.0
  assert only["total_s"] == pytest.approx(estimate.weights_seconds(dims, 500, 4500, 80e9))
  cone = estimate.estimate(params, **kw, attack="cone", flops=80e9)
  assert cone["scoring_s"] > only["scoring_s"]  # the reconstruction's scoring on top


RATE = estimate.REFERENCE_FLOPS
SEARCH = dict(n=10, heldout=20, pixels=64, restarts=4, steps=100, m=20, searched=True)
CONE = dict(SEARCH, searched=False, restarts=1, steps=0, span_dim=9)
THEN = dict(restarts=4, steps=100, m=30, span_dim=9, identify=True)
SCORING = ("identifiability_s", "evaluation_s", "membership_s", "files_s")


def test_every_phase_is_counted_in_the_total():
  """The total is the sum of its phases, and the phases are the job's after the estimate:
  the attack, each part of the scoring (the attacker's own scores after a search that has
  them) and the files."""
  for kw, identify, want in [
    (SEARCH, True, {"attack_s", "identification_s", *SCORING}),
    (SEARCH, False, {"attack_s", *SCORING}),
    (CONE, True, {"attack_s", *SCORING}),  # no search: no attacker's scores of one
  ]:
    e = estimate.estimate(_mlp(), attack="kkt", identify=identify, flops=RATE, **kw)
    assert set(e["phases"]) == want
    assert e["total_s"] == pytest.approx(sum(e["phases"].values()))
    assert e["scoring_s"] == pytest.approx(e["total_s"] - e["attack_s"])
    assert all(v > 0 for v in e["phases"].values())


def test_the_search_grows_with_its_steps_and_candidates_by_their_flops():
  def attack(**kw):
    return estimate.estimate(_mlp(), attack="kkt", flops=RATE, **{**SEARCH, **kw})["attack_s"]

  compile_s = 3 * estimate.COMPILE_S
  assert attack(steps=200) - compile_s == pytest.approx(2 * (attack(steps=100) - compile_s))
  assert attack(m=40) - compile_s == pytest.approx(2 * (attack(m=20) - compile_s))
  assert attack(restarts=8) - compile_s == pytest.approx(2 * (attack(restarts=4) - compile_s))
  # at half the machine's rate, everything takes twice as long
  slow = estimate.estimate(_mlp(), attack="kkt", flops=RATE / 2, **SEARCH)
  fast = estimate.estimate(_mlp(), attack="kkt", flops=RATE, **SEARCH)
  assert slow["total_s"] == pytest.approx(2 * fast["total_s"])


def test_the_cone_and_the_scoring_grow_with_n():
  def phases(n, **kw):
    e = estimate.estimate(_mlp(), attack="cone", flops=RATE, **{**CONE, "n": n, **kw})
    return e["phases"]

  small, large = phases(20, span_dim=19), phases(100, span_dim=99)
  assert large["attack_s"] > 5 * small["attack_s"]  # more facets, each program larger
  for k in ("identifiability_s", "evaluation_s", "membership_s"):
    assert large[k] > small[k]
  # the cone's programs live in the span: its directions, not the pixels, set their size
  assert phases(20, span_dim=19, pixels=4096)["attack_s"] == small["attack_s"]


def test_the_hand_over_is_counted_where_the_plan_hands_over():
  base = estimate.estimate(_mlp(), attack="cone", flops=RATE, **CONE)
  maybe = estimate.estimate(_mlp(), attack="cone", flops=RATE, handover=THEN, **CONE)
  sure = estimate.estimate(_mlp(), attack="cone", flops=RATE, handover=THEN, certain=True, **CONE)
  search = estimate.estimate(
    _mlp(), attack="kkt", flops=RATE, **{**SEARCH, "restarts": 4, "m": 30, "span_dim": 9}
  )
  # always handing over (past one hidden layer): the search and its scoring are in the total
  assert sure["handover_s"] == pytest.approx(search["attack_s"])
  assert sure["total_s"] == pytest.approx(sum(sure["phases"].values()))
  assert sure["total_s"] > base["total_s"] + search["attack_s"]
  assert "identification_s" in sure["phases"]  # the attacker's scores of the search's
  assert sure["if_handover"] is None
  assert "KKT search it hands over to" in estimate.say(sure)
  # handing over only where the cone reads short: both paths are said, the total the cone's
  assert maybe["total_s"] == pytest.approx(base["total_s"])
  assert maybe["if_handover"]["total_s"] == pytest.approx(sure["total_s"])
  assert "if it reads short" in estimate.say(maybe)
  assert estimate.phases_of(maybe)["if_handover.handover_s"] == pytest.approx(sure["handover_s"])
  # a search over the budget is skipped by the job, and so by the estimate
  over = estimate.estimate(
    _mlp(), attack="cone", flops=RATE, handover=THEN, certain=True, budget_s=1e-3, **CONE
  )
  assert over["total_s"] == pytest.approx(base["total_s"]) and over["handover_s"] == 0.0


def test_a_loaded_machine_judges_the_hand_over_budget_as_the_reference_machine():
  """Whether the cone hands over must not move with the load: a machine measured slower
  than the reference is judged at the reference rate (the same command once gave 21 or 75
  strict at 50 + 50 faces as the rate measured 39 or 66 GFLOP/s); the time it says is still
  the measured rate's, and a machine faster than the reference judges at its own."""
  ref = estimate.REFERENCE_FLOPS
  at_ref = estimate.estimate(_mlp(), attack="cone", flops=ref, handover=THEN, **CONE)
  need = at_ref["if_handover"]["total_s"] - at_ref["attack_s"]
  for slowdown in (1.0, 3.0, 10.0):
    e = estimate.estimate(
      _mlp(), attack="cone", flops=ref / slowdown, handover=THEN, budget_s=1.01 * need, **CONE
    )
    assert e["if_handover"] is not None, slowdown
    assert e["if_handover"]["total_s"] == pytest.approx(slowdown * at_ref["if_handover"]["total_s"])
    assert estimate.steady_rate(e) == ref
  kw = dict(attack="cone", handover=THEN, budget_s=0.99 * need, **CONE)
  assert estimate.estimate(_mlp(), flops=ref / 10, **kw)["if_handover"] is None
  fast = estimate.estimate(_mlp(), flops=ref * 10, **kw)
  assert fast["if_handover"] is not None and estimate.steady_rate(fast) == pytest.approx(ref * 10)


def test_the_jobs_estimate_counts_the_hand_over_its_plan_makes(monkeypatch):
  """The job's estimate before the cone: with one hidden layer the search it hands over to
  is said beside the total (it runs where the cone reads short); past one hidden layer it
  always runs, and the total counts it; without a hand-over (cone_search_minutes 0) neither."""
  import dataclasses
  import types

  from experiments.configs.victim import PRESETS
  from recon_jax.job import pipeline, planning
  from recon_jax.victims import recipe

  monkeypatch.setattr(estimate, "machine_flops", lambda *a, **k: RATE)
  one = recipe.VictimConfig(**dict(PRESETS["finetune"], dataset="digits", n_per_class=4))
  base = dict(attack="cone", threat={"known_init": True}, victim=dataclasses.asdict(one))
  ds = types.SimpleNamespace(x_train=np.zeros((8, 8, 8, 1)), x_test=np.zeros((20, 8, 8, 1)))
  seen = {"span": {"dim": 7}}

  def said(job, widths):
    sizes = (64, *widths, 1)
    params = {f"w{i}": np.zeros((a, b)) for i, (a, b) in enumerate(zip(sizes, sizes[1:]))}
    vic = types.SimpleNamespace(params=params)
    return pipeline._estimate(planning.prepare(job), vic, ds, seen)

  shallow = said(base, (256,))
  assert shallow["handover_s"] == 0.0 and shallow["if_handover"]["phases"]["handover_s"] > 0
  deep_job = dict(base, victim=dict(base["victim"], widths=[64, 64]))
  deep = said(deep_job, (64, 64))
  assert deep["handover_s"] > 0 and deep["if_handover"] is None
  assert deep["total_s"] == pytest.approx(sum(deep["phases"].values()))
  # under squared error the cone's zeros are soft: it always hands over, as past one layer
  mse = said(dict(base, victim=dict(base["victim"], loss="mse")), (256,))
  assert mse["handover_s"] > 0 and mse["if_handover"] is None
  alone = said(dict(base, **{"cone.cone_search_minutes": 0.0}), (256,))
  assert alone["handover_s"] == 0.0 and alone["if_handover"] is None


def test_a_cone_whose_one_program_outlasts_its_patience_is_said_to_give_up():
  """At n = 500 one facet program takes minutes: a search that finds no facet stops after
  one program of its random starts and one of its held images' (the cone's patience), so
  the estimate is two programs and two patiences, not a reading of every facet."""
  from recon_jax.attacks import cone

  params = {"a": np.zeros((784, 2048)), "b": np.zeros((2048, 1))}
  dims = estimate.layers(params)
  small = estimate.cone_seconds(dims, 20, 19, 1.0)
  assert small == pytest.approx(estimate.CONE_S)  # the reference model
  program = estimate.CONE_LP_S * (422 / 19) ** 2
  assert program > cone.PATIENCE_S
  large = estimate.cone_seconds(dims, 500, 422, 1.0)
  assert large == pytest.approx(2 * (program + cone.FIRST_PATIENCE_S))
  assert large < estimate.CONE_S * (422 / 19) ** estimate.CONE_POWER


def test_the_attackers_truth_compares_only_the_undecided_candidates_with_every_held_out():
  def identification(heldout):
    e = estimate.estimate(
      _mlp(), attack="kkt", identify=True, flops=RATE, **{**SEARCH, "heldout": heldout}
    )
    return e["phases"]["identification_s"]

  # 5 x 20 candidates: each against the n = 10 training images and 16 correlated held-out
  # ones, and as many as there are training images against every held-out image
  per_pair = estimate.TRUTH_SSIM_PIXEL_S * SEARCH["pixels"]
  assert identification(1020) - identification(20) == pytest.approx(10 * 1000 * per_pair)
