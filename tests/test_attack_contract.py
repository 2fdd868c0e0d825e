"""Every registered attack through the same checks (as optax tests every optimizer alike).

A small softplus victim trained by L-BFGS to a stationary point of its weight-decay-
regularised logistic loss (every attack is defined on it: the KKT variants, the closed
form, inversion, the bilevel attack).  For each attack the main job can select
(:func:`recon_jax.attacks.specs`), in each run its spec asks for (``AttackSpec.examples``:
settings of the tiny preset), built by its spec from that job config:

* ``init`` and ``step`` keep the state's structure, shapes and dtypes, the candidates
  are [m, *input_shape] with m weights, and the step's metrics hold a finite ``loss``;
* from candidates near the training set the loss goes down over the run;
* restarts batched with ``vmap`` give what ``lax.map`` gives;
* a run stopped half-way and resumed from its state ends where the uninterrupted run does.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.configs import reconstruct as configs
from recon_jax import attacks, implicit
from recon_jax.engine import loop, sweep
from recon_jax.job import pipeline
from recon_jax.job.settings import JobConfig, nested
from recon_jax.types import Target, prepared
from recon_jax.victims import models, recipe

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

N, D, WD = 4, 6, 0.05
# (attack, example): every run each registered attack's spec asks for (AttackSpec.examples),
# the KKT attack once per search option.
CASES = [
  (name, example)
  for name, spec in sorted(attacks.specs().items())
  if spec.direct is None
  for example in spec.examples
]


def test_every_registered_attack_is_covered():
  for name, spec in attacks.specs().items():
    assert bool(spec.examples) == (spec.direct is None), name  # a search has a run to check
  assert attacks.specs()["weights"].direct is not None
  assert {name for name, _ in CASES} >= {"kkt", "closed_form", "inversion", "bilevel"}


@pytest.fixture(scope="module")
def problem():
  jax.config.update("jax_enable_x64", True)
  rng = np.random.default_rng(0)
  x = rng.uniform(0.1, 0.9, size=(N, D))
  y = np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
  vcfg = recipe.VictimConfig(
    arch="mlp", widths=(8,), activation="softplus", weight_decay=WD, loss="logistic"
  )
  module = models.build_model(
    "mlp", widths=(8,), init="normal", init_std=0.5, activation="softplus"
  )
  apply_fn = models.make_apply_fn(module)
  params = models.init_params(module, jax.random.PRNGKey(0), (D,), jnp.float64)
  params, _ = implicit.train_to_convergence(
    apply_fn, params, jnp.asarray(x), jnp.asarray(y), "logistic", WD, tol=1e-10, maxiter=2000
  )
  return vcfg, apply_fn, params, x, y


def _setup(name, overrides, problem):
  vcfg, apply_fn, params, x, y = problem
  cfg = configs.get_config("tiny")
  cfg.attack = name
  cfg.update(nested(overrides))
  m = cfg.search.m or cfg.search.m_per_sample * N
  labels = jnp.asarray(np.resize(y, m))
  target = Target(params, labels, jnp.asarray(0.0), jnp.asarray(1.0))
  job = JobConfig(**cfg)
  attack = pipeline.make_attack(
    job,
    apply_fn,
    "binary",
    1,
    victim_config=vcfg,
    input_shape=(D,),
    n=N,
    target=target,
  )
  r = 2
  hp = {
    "lr_x": jnp.full(r, 0.01),
    "lr_lam": jnp.full(r, 0.01),
    "alpha": jnp.full(r, 10.0),
    "lam_min": jnp.full(r, 0.0),
    "sigma_x": jnp.full(r, 0.05),
  }
  for own in attacks.get(name).ranges:  # the attack's own per-restart ranges: their low ends
    hp[own] = jnp.full(r, sweep.parse_range(own, getattr(job, own), "log")[0])
  start = np.resize(x, (m, D))
  noise = np.random.default_rng(1).normal(size=(r, m, D)) * 0.05

  def x_init(key, h):
    i = jax.random.randint(key, (), 0, r)  # a fixed start per restart, from its key
    return jnp.clip(jnp.asarray(start) + jnp.asarray(noise)[i], 0.0, 1.0)

  keys = jax.random.split(jax.random.PRNGKey(2), r)
  return cfg, attack, x_init, keys, hp, target, m


@pytest.mark.parametrize(
  "name, example",
  [pytest.param(n, e, marks=pytest.mark.slow) if e.slow else (n, e) for n, e in CASES],
  ids=[f"{n}{sorted(e.settings)}" for n, e in CASES],
)
def test_attack_contract(name, example, problem):
  cfg, attack, x_init, keys, hp, target, m = _setup(name, example.settings, problem)
  one = jax.tree_util.tree_map(lambda a: a[0], hp)
  seen = prepared(attack, target)  # what init and step take (the loop prepares it too)
  state = attack.init(keys[0], one, seen, x_init(keys[0], one))
  new, metrics = jax.jit(attack.step)(state, one, seen)
  same = jax.tree_util.tree_map(lambda a, b: (a.shape, a.dtype) == (b.shape, b.dtype), state, new)
  assert all(jax.tree_util.tree_leaves(same)), name
  assert np.isfinite(float(metrics["loss"]))
  cands, weights = attack.candidates(new)
  assert cands.shape == (m, D) and weights.shape[0] == m

  steps = example.steps
  stages = [(steps, hp)]
  run = lambda **kw: loop.run_stages(
    attack, x_init, keys, stages, target, chunk_steps=steps // 2, log=False, **kw
  )
  mapped = run(batching="map")
  first = mapped.history[0]["loss"]
  last = mapped.history[-1]["loss"]
  assert np.all(np.isfinite(last)) and not np.any(np.asarray(mapped.state.diverged))
  assert np.all(last < first), (name, first, last)  # the loss goes down from near the truth

  # vmap and lax.map reduce in other orders (CG solves too): the same candidates up to that.
  vmapped = run(batching="vmap")
  cand = lambda res: np.asarray(jax.vmap(attack.candidates)(res.state.inner)[0])
  np.testing.assert_allclose(cand(mapped), cand(vmapped), rtol=1e-5, atol=1e-8)

  half = loop.run_stages(
    attack, x_init, keys, [(steps // 2, hp)], target, chunk_steps=steps // 2, log=False
  )
  resumed = run(batching="map", state=half.state)
  for a, b in zip(
    jax.tree_util.tree_leaves(mapped.state.inner), jax.tree_util.tree_leaves(resumed.state.inner)
  ):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)
