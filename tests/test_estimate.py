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
