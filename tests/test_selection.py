"""Tests for recon_jax.attacker.selection: each identification score on a planted case with a known answer."""

import functools

from helpers import linear_apply, mlp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from recon_jax.attacker import selection, stability
from recon_jax.attacks import equations, kkt, span
from recon_jax.core import activations
from recon_jax.engine import loop
from recon_jax.errors import ConfigError
from recon_jax.eval import ranking, similarity
from recon_jax.types import Target, prepared
from recon_jax.victims import models

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile


def _planted_linear(m=6, d=12, used=4, seed=0, normalize="mean"):
  """theta = s sum_{i < used} lam_i y_i x_i: a KKT point of candidates 0..used-1 only."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(m, d))
  y = np.where(np.arange(m) % 2 == 0, 1.0, -1.0)
  lam = rng.uniform(1.0, 1.5, size=(m,))
  lam[used:] = 0.0
  s = 1.0 / m if normalize == "mean" else 1.0
  w = s * (x.T @ (lam * y))[:, None]
  target = Target(
    {"params": {"w": jnp.asarray(w)}}, jnp.asarray(y), jnp.asarray(-10.0), jnp.asarray(10.0)
  )
  return target, jnp.asarray(x), jnp.asarray(lam)


_mlp = functools.partial(mlp, widths=(6,), d=5, std=0.5)


def _is_config_error(excinfo, argument):
  assert isinstance(excinfo.value, ConfigError)
  assert str(excinfo.value).startswith(argument), str(excinfo.value)


# ---------------------------------------------------------------- lambda


def test_lambda_score():
  np.testing.assert_array_equal(
    selection.lambda_score(jnp.array([0.5, -2.0, 1.0])), [0.5, -2.0, 1.0]
  )
  np.testing.assert_array_equal(
    selection.lambda_score(jnp.array([0.5, -2.0]), signed=False), [0.5, 2.0]
  )
  np.testing.assert_allclose(
    selection.lambda_score(jnp.array([[3.0, -4.0], [0.0, 1.0]])), [5.0, 1.0]
  )
  with pytest.raises(ConfigError) as e:
    selection.lambda_score(jnp.zeros((2, 3, 4)))
  _is_config_error(e, "lam")


# ---------------------------------------------------------------- agreement


def _restarts(num_restarts=4, m=5, shape=(6, 6, 1), seed=0):
  rng = np.random.default_rng(seed)
  c = rng.uniform(size=(num_restarts, m) + shape)  # all distinct, unrelated images
  common = rng.uniform(size=shape)  # found by every restart
  pair = rng.uniform(size=shape)  # found by restarts 0 and 1
  local = rng.uniform(size=shape)  # found twice, but only inside restart 2
  for r in range(num_restarts):  # a different contrast, brightness and noise each time
    c[r, 0] = (0.5 + 0.2 * r) * common + 0.1 * r + 0.01 * rng.normal(size=shape)
  c[0, 1] = pair
  c[1, 3] = 2.0 * pair - 0.3
  c[2, 2] = local
  c[2, 4] = local + 0.01 * rng.normal(size=shape)
  return c


def test_ncc_scores_constant_samples_zero_and_checks_shapes():
  c = _restarts().reshape(20, 6, 6, 1)
  assert float(similarity.ncc(np.ones((1, 2, 2)), c[:1, :2, :2, 0])[0, 0]) == 0.0
  with pytest.raises(ConfigError):
    similarity.ncc(c[:1], c[:1, :2])


def test_agreement_duplicates_across_restarts_cluster():
  c = _restarts()
  frac = np.asarray(selection.agreement_score(c))
  want = np.zeros((4, 5))
  want[:, 0] = 1.0  # the common one: every other restart has it
  want[0, 1] = want[1, 3] = 1 / 3  # the pair: one other restart of three
  np.testing.assert_allclose(frac, want)  # the within-restart duplicate scores 0
  count = np.asarray(selection.agreement_score(c, fraction=False))
  np.testing.assert_allclose(count, 3 * want)
  # Restart 3 diverged: it no longer votes, but its own candidates are scored.
  valid = np.array([True, True, True, False])
  frac = np.asarray(selection.agreement_score(c, valid=valid, batch_size=2))
  np.testing.assert_allclose(frac[:3, 0], 1.0)
  np.testing.assert_allclose(frac[3, 0], 1.0)
  np.testing.assert_allclose(frac[0, 1], 0.5)
  np.testing.assert_allclose(
    np.asarray(selection.agreement_score(c, valid=valid, fraction=False))[:3, 0], 2.0
  )
  # Only one valid voter left: the voter itself has no one to agree with.
  only = np.asarray(selection.agreement_score(c, valid=[True, False, False, False]))
  assert np.all(np.isnan(only[0])) and np.all(only[1:, 0] == 1.0)


def test_agreement_threshold_and_l2_metric():
  c = _restarts()
  # Near 1 only the exact affine copy of the pair still matches; at -0.99 everything does.
  strict = np.asarray(selection.agreement_score(c, threshold=0.99999))
  assert strict[0, 1] == strict[1, 3] == 1 / 3 and np.sum(strict > 0) == 2
  assert float(jnp.min(selection.agreement_score(c, threshold=-0.99))) == 1.0
  rng = np.random.default_rng(1)
  pts = rng.uniform(-1, 1, size=(3, 4, 2))
  pts[1, 2] = pts[0, 0] + 0.01
  pts[2, 3] = pts[0, 0] - 0.01
  got = np.asarray(selection.agreement_score(pts, 0.05, metric="l2", fraction=False))
  want = np.zeros((3, 4))
  want[0, 0], want[1, 2], want[2, 3] = 2, 2, 2
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
  "kwargs, argument",
  [
    (dict(candidates=np.zeros((4, 3))), "candidates"),
    (dict(candidates=np.zeros((1, 3, 4))), "candidates"),
    (dict(candidates=np.zeros((2, 3, 4)), threshold=1.5), "threshold"),
    (dict(candidates=np.zeros((2, 3, 4)), metric="ssim"), "metric"),
    (dict(candidates=np.zeros((2, 3, 4)), valid=[True]), "valid"),
  ],
)
def test_agreement_bad_input(kwargs, argument):
  with pytest.raises(ConfigError) as e:
    selection.agreement_score(**kwargs)
  _is_config_error(e, argument)


# ---------------------------------------------------------------- leave one out


@pytest.mark.parametrize("normalize", ["mean", "sum"])
def test_leave_one_out_planted_linear(normalize):
  target, x, lam = _planted_linear(normalize=normalize)
  score = np.asarray(
    selection.leave_one_out_score(linear_apply, "binary", target, x, lam, normalize=normalize)
  )
  # At the planted point r = 0: removing a planted term raises the residual by ||v_i||^2.
  w = np.asarray(target.params["params"]["w"])
  s = 1 / 6 if normalize == "mean" else 1.0
  want = np.sum((s * np.asarray(lam)[:, None] * np.asarray(x)) ** 2, 1) / np.sum(w**2)
  np.testing.assert_allclose(score, want, rtol=1e-12, atol=1e-15)
  assert np.all(score[:4] > 1e-3) and np.all(np.abs(score[4:]) < 1e-15)
  # An unused candidate the attack gave a multiplier anyway: removing it helps (score < 0).
  score = selection.leave_one_out_score(
    linear_apply, "binary", target, x, lam.at[5].set(0.3), normalize=normalize
  )
  assert float(score[5]) < 0 and np.all(np.asarray(score[:4]) > 0)


@pytest.mark.parametrize("problem, out_dim", [("binary", 1), ("multiclass", 3), ("general", 2)])
def test_leave_one_out_matches_masked_stationarity(problem, out_dim):
  apply_fn, params = _mlp(out_dim=out_dim)
  m, d = 5, 5
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.normal(size=(m, d)))
  if problem == "general":
    lam, labels = jnp.asarray(rng.normal(size=(m, out_dim))), jnp.zeros(m)
  else:
    lam = jnp.asarray(rng.uniform(0.5, 2.0, size=(m,)))
    labels = (
      jnp.asarray([1.0, -1.0, 1.0, -1.0, 1.0])
      if problem == "binary"
      else jnp.asarray([0, 2, 1, 0, 1])
    )
  target = Target(params, labels, jnp.asarray(-10.0), jnp.asarray(10.0))
  act = functools.partial(activations.surrogate_relu, alpha=3.0)
  got = selection.leave_one_out_score(apply_fn, problem, target, x, lam, act, batch_size=2)

  stat = jax.jit(lambda lm: equations.stationarity(apply_fn, problem, params, x, lm, labels, act))
  norm = sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(params))
  brute = [(stat(lam.at[i].set(0.0)) - stat(lam)) / norm for i in range(m)]
  np.testing.assert_allclose(got, brute, rtol=1e-9, atol=1e-13)


def test_leave_one_out_with_a_known_init_reference():
  """A reference theta* - theta_0 replaces theta* in the residual, as in the attack."""
  apply_fn, params = _mlp(out_dim=1)
  rng = np.random.default_rng(4)
  x, lam = jnp.asarray(rng.normal(size=(4, 5))), jnp.asarray(rng.uniform(0.5, 2.0, size=4))
  labels = jnp.asarray([1.0, -1.0, 1.0, -1.0])
  reference = jax.tree_util.tree_map(lambda a: 0.5 * a + 0.1, params)
  target = Target(params, labels, jnp.asarray(-10.0), jnp.asarray(10.0), reference)
  got = selection.leave_one_out_score(apply_fn, "binary", target, x, lam)
  stat = jax.jit(
    lambda lm: equations.stationarity(
      apply_fn, "binary", params, x, lm, labels, None, reference=reference
    )
  )
  norm = sum(jnp.sum(a**2) for a in jax.tree_util.tree_leaves(reference))
  np.testing.assert_allclose(
    got, [(stat(lam.at[i].set(0.0)) - stat(lam)) / norm for i in range(4)], rtol=1e-9, atol=1e-13
  )


def test_leave_one_out_never_holds_every_candidates_term():
  """In batches of 8 of 64 candidates, the score's working memory is far below the [m, P]
  per-candidate terms (the one-gradient-per-candidate sum used to keep them all), and the
  scores are the batched and unbatched ones alike."""
  m, d = 64, 4000
  rng = np.random.default_rng(5)
  params = {"params": {"w": jnp.asarray(rng.normal(size=(d, 1)))}}
  x, lam = jnp.asarray(rng.normal(size=(m, d))), jnp.asarray(rng.uniform(size=m))
  labels = jnp.asarray(np.where(np.arange(m) % 2 == 0, 1.0, -1.0))
  args = (linear_apply, "binary", params, params, x, lam, labels, None, "mean", False, 1e-8)
  compiled = selection._leave_one_out.lower(*args, 8).compile()
  assert compiled.memory_analysis().temp_size_in_bytes < m * d * 8 / 4
  target = Target(params, labels, jnp.asarray(-10.0), jnp.asarray(10.0))
  np.testing.assert_allclose(
    selection.leave_one_out_score(linear_apply, "binary", target, x, lam, batch_size=8),
    selection.leave_one_out_score(linear_apply, "binary", target, x, lam),
    rtol=1e-12,
  )


def _ridge_min(a, theta, eps):
  """min_beta ||theta - a^T beta||^2 + eps ||beta||^2 by a direct solve."""
  beta = np.linalg.solve(a @ a.T + eps * np.eye(a.shape[0]), a @ theta)
  return np.sum((theta - a.T @ beta) ** 2) + eps * np.sum(beta**2)


def test_leave_one_out_refit_planted_and_brute_force():
  target, x, lam = _planted_linear(m=6, d=12, used=4)
  wrong_lam = jnp.ones(6)  # ignored by the refit
  score = np.asarray(
    selection.leave_one_out_score(
      linear_apply, "binary", target, x, wrong_lam, refit=True, ridge=1e-12
    )
  )
  assert np.all(score[:4] > 1e-3) and np.all(np.abs(score[4:]) < 1e-9)
  # Exact rise of the ridge objective against removing each row and solving again.
  ridge = 1e-3
  score = np.asarray(
    selection.leave_one_out_score(
      linear_apply, "binary", target, x, wrong_lam, refit=True, ridge=ridge
    )
  )
  a = np.asarray(target.labels)[:, None] * np.asarray(x)  # grad_w of y_i x_i w
  theta = np.asarray(target.params["params"]["w"])[:, 0]
  eps = ridge * np.trace(a @ a.T) / 6
  full = _ridge_min(a, theta, eps)
  want = [(_ridge_min(np.delete(a, i, 0), theta, eps) - full) / np.sum(theta**2) for i in range(6)]
  np.testing.assert_allclose(score, want, rtol=1e-8)


def test_leave_one_out_refit_general_blocks():
  """'general': removing a candidate removes its C rows together (block elimination)."""
  m, d, c = 4, 10, 2
  rng = np.random.default_rng(5)
  x = rng.normal(size=(m, d))
  theta = rng.normal(size=(d, c))
  target = Target(
    {"params": {"w": jnp.asarray(theta)}}, jnp.zeros(m), jnp.asarray(-10.0), jnp.asarray(10.0)
  )
  ridge = 1e-2
  got = np.asarray(
    selection.leave_one_out_score(
      linear_apply, "general", target, jnp.asarray(x), jnp.ones((m, c)), refit=True, ridge=ridge
    )
  )
  # Rows: grad_W Phi_c(x_i) = x_i e_c^T, flattened like W [d, c].
  a = np.stack([np.outer(x[i], np.eye(c)[k]).reshape(-1) for i in range(m) for k in range(c)])
  eps = ridge * np.trace(a @ a.T) / (m * c)
  full = _ridge_min(a, theta.reshape(-1), eps)
  want = [
    (_ridge_min(np.delete(a, [c * i, c * i + 1], 0), theta.reshape(-1), eps) - full)
    / np.sum(theta**2)
    for i in range(m)
  ]
  np.testing.assert_allclose(got, want, rtol=1e-8)


def test_leave_one_out_bad_input():
  target, x, lam = _planted_linear()
  for kwargs, argument in (
    (dict(problem="svm"), "problem"),
    (dict(lam=lam[:3]), "lam"),
    (dict(normalize="max"), "normalize"),
    (dict(labels=jnp.ones(2)), "labels"),
  ):
    args = dict(apply_fn=linear_apply, problem="binary", target=target, x=x, lam=lam)
    args.update(kwargs)
    with pytest.raises(ConfigError) as e:
      selection.leave_one_out_score(**args)
    _is_config_error(e, argument)


# ---------------------------------------------------------------- stability


def _linear_attack_state(target, x, lam):
  attack = kkt.kkt_attack(linear_apply, "binary", steps=kkt.Steps("sgd", momentum=0.0))
  # x_i-only Hessian of the stationarity is 2 (lam_i / m)^2 I, 0.125..0.28 for lam in [1, 1.5]
  # and m = 4: one step at lr 4 multiplies the error by 1 - 4 H, between -0.125 and 0.5.
  hp = {
    "lr_x": jnp.asarray(4.0),
    "lr_lam": jnp.asarray(0.1),
    "alpha": jnp.asarray(3.0),
    "lam_min": jnp.asarray(0.0),
  }
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)._replace(lam=lam)
  return attack, state, hp


def test_stability_planted_kkt_point_is_stable_and_elsewhere_is_not():
  target, x, lam = _planted_linear(m=4, d=6, used=4)
  attack, state, hp = _linear_attack_state(target, x, lam)
  key = jax.random.PRNGKey(1)
  scores = np.asarray(
    stability.stability_scores(attack, state, hp, target, key, steps=40, noise_scale=0.05)
  )
  np.testing.assert_allclose(scores, 1.0, atol=1e-6)
  # The same run with candidate 3 moved off its planted point: it drifts back towards it.
  x_off = x.at[3].set(x[3] + jnp.asarray(np.random.default_rng(9).normal(size=6)))
  state_off = state._replace(x=x_off)
  off = float(
    stability.stability_scores(attack, state_off, hp, target, key, steps=40, noise_scale=0.05)[3]
  )
  assert off < 0.0
  # All free (at a rate stable for the joint Hessian, 2 sum_j lam_j^2 / m^2 <= 0.57): the
  # others absorb part of the kick, so the kicked candidate comes back part of the way.
  free = stability.stability_scores(
    attack,
    state,
    {**hp, "lr_x": jnp.asarray(1.0)},
    target,
    key,
    steps=40,
    noise_scale=0.05,
    free="all",
    indices=[0, 1],
  )
  assert np.all(np.asarray(free) > 0.0) and np.all(np.asarray(free) < 1.0 - 1e-3)


def test_stability_batched_equals_single_and_jits():
  apply_fn, params = _mlp(d=4)
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(4, 4)))
  target = Target(
    params, jnp.asarray([1.0, -1.0, 1.0, -1.0]), jnp.asarray(-10.0), jnp.asarray(10.0)
  )
  attack = kkt.kkt_attack(apply_fn, "binary", steps=kkt.Steps("adam"))
  hp = {
    "lr_x": jnp.asarray(0.01),
    "lr_lam": jnp.asarray(0.01),
    "alpha": jnp.asarray(3.0),
    "lam_min": jnp.asarray(0.0),
  }
  state = attack.init(jax.random.PRNGKey(0), hp, target, x)
  key = jax.random.PRNGKey(4)
  kw = dict(steps=5, noise_scale=0.1, free="x_lam")
  batched = stability.stability_scores(
    attack, state, hp, target, key, indices=[0, 2], batch_size=1, **kw
  )
  keys = jax.random.split(key, 2)
  single = jax.jit(lambda s, i, k: stability.stability_score(attack, s, hp, target, i, k, **kw))
  np.testing.assert_allclose(
    batched, [single(state, 0, keys[0]), single(state, 2, keys[1])], rtol=1e-10
  )
  assert np.all(np.isfinite(batched))


def _moved_state(attack, hp, target, x0, steps=20):
  """The attack's state after ``steps`` steps from ``x0``: off any KKT point, its optimiser
  buffers not zero (what a re-run kept with ``reset_optimizer=False`` starts from)."""
  t = prepared(attack, target)
  state = attack.init(jax.random.PRNGKey(0), hp, t, x0)
  return jax.lax.scan(lambda s, _: (attack.step(s, hp, t)[0], None), state, None, steps)[0]


def _one_hidden_span():
  """A 12-16-1 ReLU network moved in the span of 3 inputs from a known theta_0, and a span
  attack in its coefficients (the main job's kkt.subspace) with the closed-form sum."""
  rng = np.random.default_rng(1)
  module = models.build_model("one_hidden", widths=(16,), init="kaiming")
  apply_fn = models.make_apply_fn(module)
  theta0 = models.init_params(module, jax.random.PRNGKey(0), (12,), jnp.float64)
  star = jax.tree_util.tree_map(lambda a: a + 0.1 * rng.normal(size=a.shape), theta0)
  x = rng.normal(size=(3, 12))
  star["params"]["layer_0"]["kernel"] = theta0["params"]["layer_0"]["kernel"] + x.T @ rng.normal(
    size=(3, 16)
  )
  change = jax.tree_util.tree_map(jnp.subtract, star, theta0)
  labels = jnp.asarray([1.0, -1.0, 1.0, -1.0, 1.0])
  target = Target(star, labels, jnp.asarray(-5.0), jnp.asarray(5.0), reference=change)
  basis, _ = span.span_basis(change, n=3)
  net = equations.one_hidden(apply_fn, star, jax.nn.relu, (12,))
  assert isinstance(net, equations.OneHidden)
  attack = kkt.kkt_attack(
    net,
    "binary",
    steps=kkt.Steps("adam"),
    subspace=kkt.Subspace(basis, (12,)),
    multipliers=kkt.Multipliers(refit_every=7),
  )
  x0 = jnp.asarray(rng.normal(size=(5, 12)))
  return attack, target, x0, dict(lr_x=0.05, lr_lam=0.05, alpha=5.0, lam_min=0.1)


def _mlp_problem(problem, out_dim, normalize):
  apply_fn, params = mlp((6, 5), out_dim=out_dim, d=4, std=0.6, bias_shift=0.1)
  rng = np.random.default_rng(3)
  labels = {"binary": [1.0, -1.0] * 3, "multiclass": [0, 1, 2, 0, 1, 2], "general": [0.0] * 6}
  target = Target(params, jnp.asarray(labels[problem]), jnp.asarray(-1.0), jnp.asarray(1.0))
  attack = kkt.kkt_attack(
    apply_fn,
    problem,
    objective=kkt.Objective(normalize=normalize),
    multipliers=kkt.Multipliers(outputs=out_dim),
    steps=kkt.Steps("sgd"),
  )
  x0 = jnp.asarray(rng.normal(size=(6, 4)))
  return attack, target, x0, dict(lr_x=0.2, lr_lam=0.05, alpha=4.0, lam_min=0.5)


@pytest.mark.parametrize(
  "make, reset",
  [
    (_one_hidden_span, True),
    (_one_hidden_span, False),
    (functools.partial(_mlp_problem, "binary", 1, "sum"), True),
    (functools.partial(_mlp_problem, "multiclass", 3, "mean"), False),
    (functools.partial(_mlp_problem, "general", 2, "mean"), True),
  ],
  ids=["span_adam_refit", "span_adam_kept", "binary_sum", "multiclass_kept", "general"],
)
def test_stability_of_the_candidate_alone_is_the_whole_reruns(make, reset):
  """With every other candidate and multiplier held (free='x'), the kicked candidate stepped
  alone against the others' part of the sum moves as in the re-run of the whole state: the
  same scores (float64), in pixels and in the span, sum and mean, every problem, with the
  optimiser reset or kept."""
  attack, target, x0, hp = make()
  hp = {k: jnp.asarray(v) for k, v in hp.items()}
  state = _moved_state(attack, hp, target, x0)
  assert stability.alone_applies(attack, "x")
  kw = dict(steps=15, noise_scale=0.3, reset_optimizer=reset)
  key = jax.random.PRNGKey(5)
  alone = np.asarray(stability.stability_scores(attack, state, hp, target, key, **kw))
  whole = np.asarray(
    stability.stability_scores(attack._replace(alone=None), state, hp, target, key, **kw)
  )
  np.testing.assert_allclose(alone, whole, rtol=1e-9, atol=1e-12)
  assert np.all(np.isfinite(alone)) and np.ptp(alone) > 0.05  # scores that tell apart


def test_stability_alone_only_where_the_candidates_meet_in_the_sum():
  """Tied multipliers share one scale, a split moves two slots, and 'x_lam' or 'all' move
  more than one candidate: those re-run the whole state."""
  tied = kkt.Multipliers(kind="tied")
  assert kkt.kkt_attack(linear_apply, "binary", multipliers=tied).alone is None
  assert kkt.kkt_attack(linear_apply, "binary", splitting=kkt.Splitting(every=3)).alone is None
  attack = kkt.kkt_attack(linear_apply, "binary")
  assert stability.alone_applies(attack, "x")
  assert not stability.alone_applies(attack, "x_lam") and not stability.alone_applies(attack, "all")


def test_stability_of_a_diverging_rerun_is_nan_and_the_others_are_not():
  """A step rate that blows the kicked copies up scores them NaN, not a number, and leaves a
  calm re-run of the same candidates finite."""
  target, x, lam = _planted_linear(m=4, d=6, used=4)
  attack, state, hp = _linear_attack_state(target, x, lam)
  key = jax.random.PRNGKey(1)
  kw = dict(steps=40, noise_scale=0.05, free="all", indices=[0, 1])
  blown = stability.stability_scores(
    attack, state, {**hp, "lr_x": jnp.asarray(1e6)}, target, key, **kw
  )
  assert np.all(np.isnan(np.asarray(blown)))
  calm = stability.stability_scores(attack, state, hp, target, key, **kw)
  assert np.all(np.isfinite(np.asarray(calm)))


def test_stability_reruns_through_the_loops_step_a_non_finite_loss_is_divergence():
  """The re-run is the engine's step (core.stepping.scan_one): a step whose loss turns
  non-finite while its candidates stay finite diverges there, as it would in the loop, so
  the score is NaN, not the distance its frozen candidates happen to hold."""
  target, x, lam = _planted_linear(m=4, d=6, used=4)
  attack, state, hp = _linear_attack_state(target, x, lam)

  def step(s, h, t):  # the attack's own step, its candidates finite, its loss lost
    new, metrics = attack.step(s, h, t)
    return new, {**metrics, "loss": jnp.inf * metrics["loss"]}

  lossy = attack._replace(step=step)
  key = jax.random.PRNGKey(1)
  kw = dict(steps=10, noise_scale=0.05, indices=[0, 1])
  assert np.all(
    np.isnan(np.asarray(stability.stability_scores(lossy, state, hp, target, key, **kw)))
  )
  assert np.all(
    np.isfinite(np.asarray(stability.stability_scores(attack, state, hp, target, key, **kw)))
  )
  run, _ = loop.scan_one(
    lossy, loop.init_one(lossy, lambda k, h: x, key, hp, target), hp, target, 10
  )
  assert bool(run.diverged) and all(
    np.all(np.isfinite(a)) for a in jax.tree_util.tree_leaves(run.inner)
  )


@pytest.mark.parametrize(
  "kwargs, argument",
  [
    (dict(steps=0), "steps"),
    (dict(noise_scale=0.0), "noise_scale"),
    (dict(free="lam"), "free"),
    (dict(state=(1, 2)), "state"),
  ],
)
def test_stability_bad_input(kwargs, argument):
  target, x, lam = _planted_linear(m=4, d=6, used=4)
  attack, state, hp = _linear_attack_state(target, x, lam)
  args = dict(
    attack=attack, state=state, hparams=hp, target=target, index=0, key=jax.random.PRNGKey(0)
  )
  args.update(kwargs)
  with pytest.raises(ConfigError) as e:
    stability.stability_score(**args)
  _is_config_error(e, argument)


# ---------------------------------------------------------------- margin


def test_margin_score_by_hand():
  g = np.array([1.0, 1.1, 0.9, 3.0, -0.5, 1.05])
  y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
  # x w = g y with w = e_1: the margins are exactly g.
  x = np.zeros((6, 3))
  x[:, 0] = g * y
  target = Target(
    {"params": {"w": jnp.asarray(np.eye(3)[:, :1])}},
    jnp.asarray(y),
    jnp.asarray(0.0),
    jnp.asarray(1.0),
  )
  got = np.asarray(selection.margin_score(linear_apply, "binary", target, jnp.asarray(x)))
  # Positive margins 0.9 1.0 1.05 1.1 3.0: the lowest ceil(0.25 * 5) = 2 have median 0.95.
  np.testing.assert_allclose(got, -np.abs(g - 0.95) / 0.95, rtol=1e-12)
  order = list(np.argsort(-got, kind="stable"))
  assert set(order[:2]) == {0, 2} and order[2:] == [5, 1, 4, 3]
  got = selection.margin_score(linear_apply, "binary", target, jnp.asarray(x), reference=1.0)
  np.testing.assert_allclose(got, -np.abs(g - 1.0), rtol=1e-12)
  got = selection.margin_score(linear_apply, "binary", target, jnp.asarray(x), quantile=1.0)
  np.testing.assert_allclose(got, -np.abs(g - 1.05) / 1.05, rtol=1e-12)
  # No positive margin, no gamma.
  got = selection.margin_score(linear_apply, "binary", target, jnp.zeros((6, 3)))
  assert np.all(np.isnan(got))


def test_margin_score_multiclass_by_hand():
  out = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 1.0, 5.0], [0.0, 4.0, 1.0]])
  labels = np.array([0, 1, 2, 0])
  # Margins Phi_y - max_{j != y} Phi_j: 1, 2, 4, -4; positive 1 2 4, lowest ceil(0.75): [1].
  target = Target(
    {"params": {"w": jnp.eye(3)}}, jnp.asarray(labels), jnp.asarray(0.0), jnp.asarray(1.0)
  )
  got = selection.margin_score(linear_apply, "multiclass", target, jnp.asarray(out))
  np.testing.assert_allclose(got, [0.0, -1.0, -3.0, -5.0], atol=1e-12)


def test_margin_score_bad_input():
  target, x, _ = _planted_linear()
  for kwargs, argument in (
    (dict(problem="general"), "problem"),
    (dict(reference=0.0), "reference"),
    (dict(quantile=0.0), "quantile"),
    (dict(labels=jnp.ones(3)), "labels"),
  ):
    args = dict(apply_fn=linear_apply, problem="binary", target=target, x=x)
    args.update(kwargs)
    with pytest.raises(ConfigError) as e:
      selection.margin_score(**args)
    _is_config_error(e, argument)


# ---------------------------------------------------------------- the measurement


def test_identification_metrics_separating_and_random():
  y = np.array([True] * 6 + [False] * 14)
  s = np.where(y, 2.0, 1.0) + 0.01 * np.arange(20)
  res = ranking.identification_metrics(s, y)
  assert res["auc"] == 1.0 and res["precision@5"] == 1.0 and res["precision@10"] == 0.6
  assert res["n"] == 20 and res["n_recovered"] == 6 and res["base_rate"] == 0.3
  assert ranking.identification_metrics(-s, y)["auc"] == 0.0
  rng = np.random.default_rng(0)
  y = rng.uniform(size=4000) < 0.3
  res = ranking.identification_metrics(rng.normal(size=4000), y, k_list=(100,))
  assert abs(res["auc"] - 0.5) < 0.04 and abs(res["precision@100"] - 0.3) < 0.15


def test_identification_metrics_by_hand():
  s = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
  y = np.array([True, False, True, False, True])
  res = ranking.identification_metrics(s, y, k_list=(1, 2, 3, 10))
  # Pairs (pos, neg): (.9,.8)=1 (.9,.3)=1 (.8,.8)=1/2 (.8,.3)=1 (.1,.8)=0 (.1,.3)=0.
  assert res["auc"] == pytest.approx(3.5 / 6, abs=1e-15)
  assert res["precision@1"] == 1.0
  assert res["precision@2"] == pytest.approx(0.75)  # the 0.8 tie shares the last slot
  assert res["precision@3"] == pytest.approx(2 / 3)
  assert res["precision@10"] == pytest.approx(3 / 5)  # k clipped to N
  # NaN scores rank lowest; one class empty: AUC is NaN.
  s_nan = np.array([np.nan, 0.5, 0.2])
  assert ranking.identification_metrics(s_nan, [False, True, False])["auc"] == 1.0
  assert np.isnan(ranking.identification_metrics(s, np.ones(5, bool))["auc"])
  assert np.isnan(ranking.identification_metrics(s, np.zeros(5, bool))["auc"])


def test_auc_matches_sklearn_with_ties():
  rng = np.random.default_rng(1)
  s = rng.integers(0, 5, size=300).astype(float)
  y = rng.uniform(size=300) < 0.4
  np.testing.assert_allclose(
    ranking.identification_metrics(s, y)["auc"], roc_auc_score(y, s), rtol=1e-12
  )


def test_identification_metrics_bad_input():
  with pytest.raises(ConfigError) as e:
    ranking.identification_metrics(np.zeros(3), np.zeros(4, bool))
  _is_config_error(e, "is_recovered")
  with pytest.raises(ConfigError) as e:
    ranking.identification_metrics(np.zeros(3), np.zeros(3, bool), k_list=(0,))
  _is_config_error(e, "k_list")
