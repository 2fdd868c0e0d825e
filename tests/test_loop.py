"""Tests for recon_jax.engine.loop: batched restarts, chunked scans, NaN freezing, resuming."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from recon_jax.attacks import kkt
from recon_jax.engine import inits, loop, sweep
from recon_jax.types import Attack, Target
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

M, D = 3, 4


# ---------------------------------------------------------------- a toy attack


class ToyState(NamedTuple):
  x: jax.Array  # [m, d]


def toy_attack(counter=None):
  """Gradient descent on 0.5 ||x - p||^2, p = target.params: x_t = p + (1 - lr)^t (x_0 - p)."""

  def init(key, hp, target, x0):
    del key, hp, target
    return ToyState(x0)

  def step(state, hp, target):
    if counter is not None:
      counter.append(1)  # runs at trace time only
    g = state.x - target.params
    loss = 0.5 * jnp.sum(jnp.square(g))
    return ToyState(state.x - hp["lr_x"].astype(g.dtype) * g), {"loss": loss, "gnorm": loss}

  return Attack(init, step, lambda s: (s.x, jnp.ones(s.x.shape[0])), name="toy")


def _toy_target(seed=0):
  p = np.random.default_rng(seed).normal(size=(M, D))
  return Target(jnp.asarray(p), jnp.ones(M), jnp.asarray(-1.0), jnp.asarray(1.0))


def _x0s(keys, hp):
  """The x-initialisations the loop draws (it splits each restart key into x and attack)."""
  x_init = inits.gaussian(M, (D,), jnp.float64)
  return np.stack(
    [
      np.asarray(x_init(jax.random.split(k)[0], {"sigma_x": hp["sigma_x"][i]}))
      for i, k in enumerate(keys)
    ]
  )


def _states_equal(a, b, exact=True):
  for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
    if exact:
      np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    else:
      np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-12, atol=1e-14)


def _slice(tree, idx):
  return jax.tree_util.tree_map(lambda a: a[np.asarray(idx)], tree)


def test_toy_run_matches_closed_form():
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  hp = {"lr_x": jnp.array([0.1, 0.2, 0.5]), "sigma_x": jnp.array([1.0, 2.0, 0.5])}
  res = loop.run_stages(
    toy_attack(),
    inits.gaussian(M, (D,), jnp.float64),
    keys,
    [(20, hp)],
    target,
    chunk_steps=7,
    log=False,
  )
  x0, p = _x0s(keys, hp), np.asarray(target.params)
  lr = np.asarray(hp["lr_x"])[:, None, None]
  want = p + (1 - lr) ** 20 * (x0 - p)
  np.testing.assert_allclose(np.asarray(res.state.inner.x), want, rtol=1e-12, atol=1e-14)
  assert [r["step"] for r in res.history] == [7, 14, 20]
  np.testing.assert_array_equal(np.asarray(res.state.step), [20, 20, 20])
  assert not np.any(np.asarray(res.state.diverged))
  np.testing.assert_array_equal(np.asarray(res.state.diverged_at), [-1, -1, -1])
  # The metrics of a chunk are those of its last step, taken before that step's update.
  x19 = p + (1 - lr) ** 19 * (x0 - p)
  want_loss = 0.5 * np.sum((x19 - p) ** 2, axis=(1, 2))
  np.testing.assert_allclose(res.history[-1]["loss"], want_loss, rtol=1e-8)
  np.testing.assert_allclose(np.asarray(res.state.loss), want_loss, rtol=1e-8)
  assert res.history[-1]["loss"].shape == (3,)


def test_stages_continue_with_each_stages_hyperparameters():
  """Two stages: 6 steps at lr a, then 5 at lr b: x = p + (1-b)^5 (1-a)^6 (x0 - p)."""
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  hp1 = {"lr_x": jnp.array([0.1, 0.3]), "sigma_x": jnp.array([1.0, 2.0])}
  hp2 = {"lr_x": jnp.array([0.5, 0.05]), "sigma_x": hp1["sigma_x"]}
  x_init = inits.gaussian(M, (D,), jnp.float64)
  res = loop.run_stages(
    toy_attack(), x_init, keys, [(6, hp1), (5, hp2)], target, chunk_steps=4, log=False
  )
  x0, p = _x0s(keys, hp1), np.asarray(target.params)
  a, b = (np.asarray(h["lr_x"])[:, None, None] for h in (hp1, hp2))
  want = p + (1 - b) ** 5 * (1 - a) ** 6 * (x0 - p)
  np.testing.assert_allclose(np.asarray(res.state.inner.x), want, rtol=1e-12, atol=1e-14)
  assert [r["step"] for r in res.history] == [4, 6, 10, 11]  # chunks restart at a stage edge
  # Resuming after the first stage skips it and runs only the second.
  mid = loop.run_stages(toy_attack(), x_init, keys, [(6, hp1)], target, chunk_steps=6, log=False)
  again = loop.run_stages(
    toy_attack(),
    x_init,
    keys,
    [(6, hp1), (5, hp2)],
    target,
    state=mid.state,
    chunk_steps=4,
    log=False,
  )
  np.testing.assert_allclose(np.asarray(again.state.inner.x), want, rtol=1e-12, atol=1e-14)
  assert [r["step"] for r in again.history] == [10, 11]
  with pytest.raises(ValueError, match="stage"):
    loop.run_stages(toy_attack(), x_init, keys, [], target)
  with pytest.raises(ValueError, match="stage"):
    loop.run_stages(toy_attack(), x_init, keys, [(0, hp1)], target)


def test_refine_sets_alpha_and_scales_rates():
  hp = {
    "lr_x": np.array([0.1, 0.2], np.float32),
    "lr_lam": np.array([1e-2, 2e-2], np.float32),
    "alpha": np.array([5.0, 9.0], np.float32),
    "lam_min": np.array([0.3, 0.4], np.float32),
  }
  out = sweep.refine(hp, alpha=200.0, lr_scale=0.1)
  np.testing.assert_allclose(out["alpha"], [200.0, 200.0])
  np.testing.assert_allclose(out["lr_x"], [0.01, 0.02], rtol=1e-6)
  np.testing.assert_allclose(out["lr_lam"], [1e-3, 2e-3], rtol=1e-6)
  np.testing.assert_array_equal(out["lam_min"], hp["lam_min"])
  np.testing.assert_allclose(hp["alpha"], [5.0, 9.0])  # the input is not modified
  assert out["alpha"].dtype == np.float32
  with pytest.raises(ValueError, match="refine_alpha"):
    sweep.refine(hp, alpha=0.0, lr_scale=0.1)
  with pytest.raises(ValueError, match="refine_lr_scale"):
    sweep.refine(hp, alpha=10.0, lr_scale=-1.0)


def test_jit_equals_no_jit():
  target = _toy_target()
  key = jax.random.PRNGKey(3)
  hp = {"lr_x": jnp.asarray(0.3), "sigma_x": jnp.asarray(1.0)}
  x_init = inits.gaussian(M, (D,), jnp.float64)
  s0 = loop.init_one(toy_attack(), x_init, key, hp, target)
  jitted, _ = jax.jit(lambda s: loop.scan_one(toy_attack(), s, hp, target, 5))(s0)
  with jax.disable_jit():
    plain, _ = loop.scan_one(toy_attack(), s0, hp, target, 5)
  _states_equal(jitted, plain, exact=False)
  res = loop.run_stages(
    toy_attack(),
    x_init,
    key[None],
    [(5, jax.tree_util.tree_map(lambda a: a[None], hp))],
    target,
    chunk_steps=5,
    log=False,
  )
  _states_equal(_slice(res.state, 0), jitted, exact=False)


def test_nan_restart_is_frozen_at_its_last_finite_state():
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  hp = {"lr_x": jnp.array([0.1, 1e30, 0.2]), "sigma_x": jnp.ones(3)}
  res = loop.run_stages(
    toy_attack(),
    inits.gaussian(M, (D,), jnp.float64),
    keys,
    [(30, hp)],
    target,
    chunk_steps=10,
    log=False,
  )
  # Simulate the bad restart in numpy: it is frozen at the first step whose loss or
  # new state is non-finite.
  x, p = _x0s(keys, hp)[1], np.asarray(target.params)
  with np.errstate(over="ignore", invalid="ignore"):
    for t in range(30):
      loss = 0.5 * np.sum((x - p) ** 2)
      new = x - 1e30 * (x - p)
      if not (np.isfinite(loss) and np.all(np.isfinite(new))):
        break
      x, last_loss = new, loss
  assert 0 < t < 30
  np.testing.assert_array_equal(np.asarray(res.state.diverged), [False, True, False])
  np.testing.assert_array_equal(np.asarray(res.state.diverged_at), [-1, t, -1])
  np.testing.assert_allclose(np.asarray(res.state.inner.x[1]), x, rtol=1e-12)
  assert np.all(np.isfinite(np.asarray(res.state.inner.x)))
  np.testing.assert_allclose(float(res.state.loss[1]), last_loss, rtol=1e-12)
  assert list(res.history[0]["diverged"]) == [False, True, False]
  np.testing.assert_array_equal(np.asarray(res.state.step), [30, 30, 30])


def test_trace_once_per_chunk_size():
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  hp = {"lr_x": jnp.array([0.1, 0.2]), "sigma_x": jnp.ones(2)}
  x_init = inits.gaussian(M, (D,), jnp.float64)
  counts = {}
  for steps, chunk in ((10, 10), (20, 10), (40, 10), (15, 10)):
    calls = []
    res = loop.run_stages(
      toy_attack(calls), x_init, keys, [(steps, hp)], target, chunk_steps=chunk, log=False
    )
    counts[steps] = len(calls)
    assert len(res.history) == -(-steps // chunk)
  assert counts[10] >= 1
  assert counts[20] == counts[40] == counts[10]  # more chunks of one size: no retrace
  assert counts[15] == 2 * counts[10]  # a second size (10 + 5): one more trace


def test_runner_chunk_fn_reuses_its_compilation():
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  hp = {"lr_x": jnp.array([0.1, 0.2]), "sigma_x": jnp.ones(2)}
  calls = []
  init_fn, chunk_fn = loop.make_runner(toy_attack(calls), inits.gaussian(M, (D,), jnp.float64))
  state = init_fn(keys, hp, target)
  state, _ = chunk_fn(state, hp, target, num_steps=4)
  first = len(calls)
  state, _ = chunk_fn(state, hp, target, num_steps=4)
  assert first >= 1 and len(calls) == first
  np.testing.assert_array_equal(np.asarray(state.step), [8, 8])


def test_bad_arguments():
  target = _toy_target()
  keys = jax.random.split(jax.random.PRNGKey(0), 1)
  hp = {"lr_x": jnp.array([0.1]), "sigma_x": jnp.ones(1)}
  x_init = inits.gaussian(M, (D,), jnp.float64)
  with pytest.raises(ValueError, match="steps"):
    loop.run_stages(toy_attack(), x_init, keys, [(0, hp)], target)
  with pytest.raises(ValueError, match="chunk_steps"):
    loop.run_stages(toy_attack(), x_init, keys, [(5, hp)], target, chunk_steps=0)
  with pytest.raises(ValueError, match="batching"):
    loop.run_stages(toy_attack(), x_init, keys, [(5, hp)], target, batching="pmap")


# ---------------------------------------------------------------- the KKT attack in the loop


def _kkt_problem():
  module = models.build_model(
    "mlp", widths=(8,), bias="first", init="normal", init_std=0.5, first_layer_std=0.5
  )
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (D,), jnp.float64)
  target = Target(params, jnp.asarray([1.0, -1.0, 1.0]), jnp.asarray(-1.0), jnp.asarray(1.0))
  attack = kkt.kkt_attack(apply_fn, "binary")
  x_init = inits.gaussian(M, (D,), jnp.float64)
  return attack, x_init, target


def _kkt_hp(lr_x):
  r = len(lr_x)
  return {
    "lr_x": jnp.asarray(lr_x),
    "lr_lam": jnp.full(r, 0.05),
    "alpha": jnp.full(r, 5.0),
    "lam_min": jnp.full(r, 0.1),
    "sigma_x": jnp.full(r, 0.5),
  }


KEYS = jax.random.split(jax.random.PRNGKey(42), 3)
STEPS = 20
COMMON = dict(chunk_steps=10, log=False)


@pytest.fixture(scope="module")
def kkt_full():
  """Three clean KKT restarts, 20 steps in two chunks (shared by several tests)."""
  attack, x_init, target = _kkt_problem()
  hp = _kkt_hp([0.05, 0.1, 0.02])
  return (
    attack,
    x_init,
    target,
    hp,
    loop.run_stages(attack, x_init, KEYS, [(STEPS, hp)], target, **COMMON),
  )


def test_vmapped_restarts_equal_single_runs(kkt_full):
  attack, x_init, target, hp, res = kkt_full
  assert not np.any(np.asarray(res.state.diverged))
  assert np.all(res.history[-1]["stat"] < res.history[0]["stat"])  # the steps do something
  init_fn, chunk_fn = loop.make_runner(attack, x_init)  # one compile for the R=1 runs
  for i in range(3):
    hp_i = _slice(hp, [i])
    one = init_fn(KEYS[i : i + 1], hp_i, target)
    for _ in range(2):
      one, _ = chunk_fn(one, hp_i, target, num_steps=10)
    _states_equal(_slice(res.state, [i]), one, exact=False)
  # Distinct keys give distinct restarts.
  x = np.asarray(res.state.inner.x)
  assert not np.allclose(x[0], x[1])


def test_map_equals_vmap(kkt_full):
  attack, x_init, target, hp, res = kkt_full
  mapped = loop.run_stages(attack, x_init, KEYS, [(STEPS, hp)], target, batching="map", **COMMON)
  _states_equal(res.state, mapped.state, exact=False)
  for k in ("loss", "stat", "stat_rel"):
    np.testing.assert_allclose(res.history[-1][k], mapped.history[-1][k], rtol=1e-12)


@pytest.mark.slow
def test_nan_restart_leaves_others_untouched():
  attack, x_init, target = _kkt_problem()
  res = loop.run_stages(
    attack, x_init, KEYS, [(STEPS, _kkt_hp([0.05, 1e30, 0.02]))], target, **COMMON
  )
  clean = loop.run_stages(
    attack, x_init, KEYS[np.array([0, 2])], [(STEPS, _kkt_hp([0.05, 0.02]))], target, **COMMON
  )
  np.testing.assert_array_equal(np.asarray(res.state.diverged), [False, True, False])
  at = int(res.state.diverged_at[1])
  assert 0 < at < 20
  assert all(np.all(np.isfinite(np.asarray(a))) for a in jax.tree_util.tree_leaves(res.state))
  _states_equal(_slice(res.state, [0, 2]), clean.state, exact=False)
  # Frozen where it failed: the same restart run alone for diverged_at steps ends there.
  alone = loop.run_stages(
    attack, x_init, KEYS[1:2], [(at, _kkt_hp([1e30]))], target, chunk_steps=at, log=False
  )
  assert not bool(alone.state.diverged[0])
  _states_equal(_slice(res.state.inner, [1]), alone.state.inner, exact=False)


def test_resume_continues_to_the_same_result(kkt_full):
  attack, x_init, target, hp, full = kkt_full
  half = loop.run_stages(attack, x_init, KEYS, [(10, hp)], target, chunk_steps=10, log=False)
  np.testing.assert_array_equal(np.asarray(half.state.step), [10, 10, 10])
  resumed = loop.run_stages(
    attack, x_init, KEYS, [(20, hp)], target, chunk_steps=10, state=half.state, log=False
  )
  assert [r["step"] for r in resumed.history] == [20]
  _states_equal(full.state, resumed.state)
  # Nothing left to do: the state comes back unchanged, with no chunks run.
  keep = jax.tree_util.tree_map(np.array, resumed.state)
  again = loop.run_stages(attack, x_init, KEYS, [(20, hp)], target, state=resumed.state, log=False)
  assert again.history == []
  _states_equal(again.state, keep)


def test_chunks_are_sized_so_the_host_answers_within_seconds():
  """A long chunk starts with a probe of an eighth (the first chunk also compiles); once the
  rate is known, chunks are halved until one runs within max_s, and the halving reaches the
  probe's length, so a slow network compiles no program beyond the probe's."""
  from recon_jax.engine.loop import _chunk_length

  assert _chunk_length(1000, None, 20.0) == 125
  assert _chunk_length(240, None, 20.0) == 240  # short chunks: no probe
  assert _chunk_length(1000, None, None) == 1000  # no limit asked
  assert _chunk_length(1000, 20.0, 20.0) == 250  # 50 s at 20 steps/s: halved twice
  assert _chunk_length(1000, 1000.0, 20.0) == 1000
  assert _chunk_length(1000, 0.5, 20.0) == 7
