"""The KKT equations of a trained network, as functions of candidates and multipliers.

A margin-maximising (or weight-decay) stationary point satisfies
``reference = grad_theta (1/m) sum_i lambda_i g_i(theta; x_i)`` (``reference``: theta*,
or theta* - theta_0 when theta_0 is known).  This module holds that equation in the
forms the attacks take: the weighted output whose gradient is the sum, its squared
residual (:func:`stationarity`) for a first-order search, and the residual pytrees
with free or tied multipliers for a least-squares solver
(:func:`recon_jax.attacks.gauss_newton.lm_attack`).

The sum is a gradient of the network, taken by autodiff; an attack whose network
:func:`one_hidden` marks (one dense hidden layer, ``Phi(x) = act(x K + b) a + c``) takes
it in closed form instead (:func:`one_hidden_sum`): with ``delta_i = w_i act'(z_i) * a``
and ``w_i = lambda_i y_i``, the first layer's part is ``X^T delta`` and the output
layer's ``act(Z)^T w``, two matmuls over the m candidates with no backward pass through
the network.  The value is the same function of the candidates (the derivative
``act'`` is the one a backward pass through ``act`` takes, the surrogate's
``sigmoid(alpha z)`` included), so the objective's gradient in the candidates is too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from recon_jax.core.losses import margins, tree_dot, tree_sq_norm
from recon_jax.types import Alone, Target


class OneHidden:
  """A victim's ``apply_fn`` marked as a one-hidden-layer dense network: callable as the
  ``apply_fn`` it wraps, and read by :func:`kkt_sum` in closed form.

  ``activation``: the network's own elementwise activation (what ``act=None`` applies).
  """

  def __init__(self, apply_fn, activation):
    self.apply_fn = apply_fn
    self.activation = activation

  def __call__(self, params, x, act=None):
    return self.apply_fn(params, x, act)


LAYERS = ("layer_0", "layer_1")


def one_hidden(apply_fn, params, activation, input_shape, problem: str = "binary"):
  """``apply_fn`` as a :class:`OneHidden` where ``params`` is a one-hidden-layer dense
  network with one output (``layer_0`` [d, h], ``layer_1`` [h, 1], each with or without a
  bias) that ``apply_fn`` computes as ``activation(x K + b) a + c`` (checked on two
  random inputs), and the problem binary; else ``apply_fn`` itself (so with ``activation``
  None)."""
  inner = params.get("params", {}) if hasattr(params, "get") else {}
  if activation is None or problem != "binary" or set(inner) != set(LAYERS):
    return apply_fn
  k0, k1 = (inner[name].get("kernel") for name in LAYERS)
  if k0 is None or k1 is None or k0.ndim != 2 or k1.ndim != 2 or k1.shape[1] != 1:
    return apply_fn
  if k0.shape[1] != k1.shape[0] or int(np.prod(tuple(input_shape))) != k0.shape[0]:
    return apply_fn
  x = jax.random.normal(jax.random.PRNGKey(0), (2, *tuple(input_shape)), k0.dtype)
  marked = OneHidden(apply_fn, activation)
  want = apply_fn(params, x)
  got = _forward(marked, params, x, None)[0]
  scale = jnp.maximum(jnp.max(jnp.abs(want)), 1.0)
  if want.shape != got.shape or not bool(jnp.max(jnp.abs(want - got)) <= 1e-4 * scale):
    return apply_fn
  return marked


def _forward(net: OneHidden, params, x, act):
  """``(Phi [m, 1], Z [m, h], act)`` of :class:`OneHidden` ``net`` on ``x`` (``act`` None:
  the network's own activation)."""
  p = params["params"]
  act = net.activation if act is None else act
  z = x.reshape(x.shape[0], -1) @ p["layer_0"]["kernel"]
  if "bias" in p["layer_0"]:
    z = z + p["layer_0"]["bias"][None, :]
  out = act(z) @ p["layer_1"]["kernel"]
  if "bias" in p["layer_1"]:
    out = out + p["layer_1"]["bias"][None, :]
  return out, z, act


def _activations(net: OneHidden, params, x, act):
  """``(act(Z), act'(Z))`` [m, h] of the hidden layer on ``x``: the derivative is the one a
  backward pass through ``act`` takes (the surrogate's ``sigmoid(alpha z)`` included)."""
  _, z, act = _forward(net, params, x, act)
  h, pull = jax.vjp(act, z)
  return h, pull(jnp.ones_like(z))[0]


def one_hidden_sum(net: OneHidden, params, x, w, act, normalize="mean"):
  """``grad_theta (1/m) sum_i w_i Phi(params; x_i)`` of :class:`OneHidden` ``net`` in closed
  form (a pytree shaped like ``params``): ``X^T delta`` and ``sum_i delta_i`` for the first
  layer, ``act(Z)^T w`` and ``sum_i w_i`` for the output, ``delta_i = w_i act'(z_i) * a``,
  ``act'`` the derivative a backward pass through ``act`` takes."""
  p = params["params"]
  h, slope = _activations(net, params, x, act)
  w = w / x.shape[0] if normalize == "mean" else w
  delta = (w[:, None] * slope) * p["layer_1"]["kernel"][None, :, 0]
  first = {"kernel": x.reshape(x.shape[0], -1).T @ delta}
  if "bias" in p["layer_0"]:
    first["bias"] = jnp.sum(delta, axis=0)
  second = {"kernel": (h.T @ w)[:, None]}
  if "bias" in p["layer_1"]:
    second["bias"] = jnp.sum(w)[None]
  return {**params, "params": {"layer_0": first, "layer_1": second}}


def one_hidden_gram(net: OneHidden, params, fit, x, labels, act):
  """``(Q [m, m], q [m])``: the Gram matrix of the candidates' margin gradients
  ``v_i = y_i grad_theta Phi(x_i)`` of :class:`OneHidden` ``net`` and their inner products
  with ``fit``, in closed form (``<c_i delta_i^T, c_j delta_j^T> = (c_i . c_j)(delta_i .
  delta_j)``), so ``||fit - sum_i mu_i v_i||^2 = ||fit||^2 - 2 q.mu + mu^T Q mu``."""
  p, f = params["params"], fit["params"]
  h, slope = _activations(net, params, x, act)
  flat = x.reshape(x.shape[0], -1)
  s = labels[:, None] * slope * p["layer_1"]["kernel"][None, :, 0]  # y_i act'(z_i) * a
  r = labels[:, None] * h  # y_i act(z_i)
  ss = s @ s.T
  q_mat = (flat @ flat.T) * ss + r @ r.T
  q_vec = jnp.sum((flat @ f["layer_0"]["kernel"]) * s, axis=1) + r @ f["layer_1"]["kernel"][:, 0]
  if "bias" in p["layer_0"]:
    q_mat = q_mat + ss
    q_vec = q_vec + s @ f["layer_0"]["bias"]
  if "bias" in p["layer_1"]:
    q_mat = q_mat + labels[:, None] * labels[None, :]
    q_vec = q_vec + labels * f["layer_1"]["bias"][0]
  return q_mat, q_vec


def fitted_multipliers(
  net: OneHidden, params, fit, x, labels, act, normalize="mean", iters: int = 500
):
  """The multipliers ``lam >= 0`` that fit ``fit`` best with the candidates ``x`` held
  (nonnegative least squares on :func:`one_hidden_gram`, by accelerated projected gradient
  steps ``iters`` times), in the attack's normalisation (``'mean'``: m times the sum's)."""
  q_mat, q_vec = one_hidden_gram(net, params, fit, x, labels, act)

  def power(_, v):  # power iteration: the largest eigenvalue, the step's Lipschitz bound
    v = q_mat @ v
    return v / jnp.maximum(jnp.linalg.norm(v), jnp.finfo(v.dtype).tiny)

  v = jax.lax.fori_loop(0, 30, power, jnp.ones_like(q_vec))
  lip = 1.1 * jnp.maximum(v @ q_mat @ v, jnp.finfo(v.dtype).tiny)

  def body(carry, _):
    mu, prev, t = carry
    nxt = jnp.maximum(mu - (q_mat @ mu - q_vec) / lip, 0.0)
    t_new = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
    return (nxt + ((t - 1.0) / t_new) * (nxt - prev), nxt, t_new), None

  zero = jnp.zeros_like(q_vec)
  (_, mu, _), _ = jax.lax.scan(body, (zero, zero, jnp.ones((), q_vec.dtype)), None, iters)
  return mu * x.shape[0] if normalize == "mean" else mu


def kkt_sum(apply_fn, problem, params, x, lam, labels, act, normalize="mean"):
  """``grad_theta weighted_output``, the KKT sum: in closed form where ``apply_fn`` is a
  :class:`OneHidden` (binary), else by autodiff."""
  if isinstance(apply_fn, OneHidden) and problem == "binary":
    return one_hidden_sum(apply_fn, params, x, lam * labels, act, normalize)
  return jax.grad(weighted_output, argnums=2)(
    apply_fn, problem, params, x, lam, labels, act, normalize
  )


def weighted_output(apply_fn, problem: str, params, x, lam, labels, act, normalize="mean"):
  """``(1/m) sum_i lambda_i g_i(params; x_i)``: its gradient in params is the KKT sum."""
  g = margins(problem, apply_fn(params, x, act), labels)
  total = jnp.sum(lam * g)
  return total / x.shape[0] if normalize == "mean" else total


def stationarity(apply_fn, problem, params, x, lam, labels, act, normalize="mean", reference=None):
  """``||reference - grad_theta weighted_output(params)||^2`` summed over parameter leaves.

  ``reference`` defaults to ``params`` (theta*); a known-initialisation attack
  passes ``theta* - theta_0``.
  """
  grads = kkt_sum(apply_fn, problem, params, x, lam, labels, act, normalize)
  ref = params if reference is None else reference
  residual = jax.tree_util.tree_map(jnp.subtract, ref, grads)
  return tree_sq_norm(residual)


def relative(stat, target: Target):
  """The squared residual ``stat`` as a fraction of ``||reference||^2``; in a span's
  coordinates both include what lies outside the span (a constant no step moves)."""
  if target.span is None:
    return stat / tree_sq_norm(target.fit)
  out = target.span.outside
  return (stat + out) / (tree_sq_norm(target.fit) + out)


MULTIPLIERS = ("free", "tied")


def tied_residual(apply_fn, target: Target, x, act, normalize="mean"):
  """The tied residual ``reference - c sum_i sigma(-g_i) grad g_i`` (a pytree) and ``lam``.

  ``g_i = y_i Phi(x_i)``.  At a stationary point of ``mean_i log(1 + exp(-g_i)) +
  wd/2 ||theta||^2`` the training set makes it 0 with ``c = 1/(n wd)`` (times m
  under ``normalize='mean'``).  The scale is eliminated in closed form,
  ``c = |<ref, u>| / ||u||^2`` with ``u`` the sum: the least-squares scale where
  the cosine of ``ref`` and ``u`` is positive, so the squared residual is
  ``||ref||^2 (1 - cos^2)``; where it is negative the same formula gives
  ``||ref||^2 (1 + 3 cos^2)``, so the squared residual is C^1 and decreases with
  the cosine everywhere (a start pointing away from the reference still has a
  gradient), and ``c >= 0`` always.  The gradient in ``x`` flows through ``c``
  and through the multipliers ``sigma(-g_i)``.

  Returns:
    ``(residual pytree, lam [m] = c sigma(-g))``.
  """
  g = margins("binary", apply_fn(target.params, x, act), target.labels)
  w = jax.nn.sigmoid(-g)
  u = kkt_sum(apply_fn, "binary", target.params, x, w, target.labels, act, normalize)
  ref = target.fit
  uu = tree_sq_norm(u)
  uu = jnp.maximum(uu, jnp.finfo(uu.dtype).tiny)
  c = jnp.abs(tree_dot(ref, u)) / uu
  return jax.tree_util.tree_map(lambda r, v: r - c * v, ref, u), c * w


def free_residual(apply_fn, target: Target, x, lam, act, normalize="mean"):
  """The binary KKT residual ``reference - grad_theta (1/m) sum_i lam_i y_i Phi(x_i)`` (a
  pytree) and ``lam``: the equations of the first-order attack, for a least-squares solver."""
  grads = kkt_sum(apply_fn, "binary", target.params, x, lam, target.labels, act, normalize)
  return jax.tree_util.tree_map(jnp.subtract, target.fit, grads), lam


def lm_residual(multipliers: str):
  """The equations of :func:`recon_jax.attacks.gauss_newton.lm_attack` for ``multipliers``:
  ``(apply_fn, target, x, lam, act, normalize) -> (residual pytree, lam)``."""
  if multipliers == "free":
    return free_residual
  return lambda apply_fn, target, x, lam, act, normalize: tied_residual(
    apply_fn, target, x, act, normalize
  )


def tied_stationarity(apply_fn, target: Target, x, act, normalize="mean"):
  """``||tied_residual||^2`` and the multipliers (see :func:`tied_residual`)."""
  r, lam = tied_residual(apply_fn, target, x, act, normalize)
  return tree_sq_norm(r), lam


def alone(apply_fn, problem, normalize, activation) -> Alone:
  """One candidate's problem of a KKT attack with free multipliers
  (:class:`recon_jax.types.Alone`): its state is ``x``, ``lam`` and ``opt_state``, its
  activation ``activation(hparams)``."""

  def shared(state, hp, target):
    """The whole KKT sum of ``state``: every candidate's problem subtracts its own term."""
    return kkt_sum(
      apply_fn, problem, target.params, state.x, state.lam, target.labels, activation(hp), normalize
    )

  def one(state, hp, target, total, index):
    """Candidate ``index`` alone: the held candidates' part of the sum, a constant, moves
    into the reference, so the one-candidate residual is the whole state's."""
    m = state.x.shape[0]

    def row(a):
      return jax.lax.dynamic_slice_in_dim(a, index, 1, axis=0)

    # Its multiplier scaled so that the one-candidate sum (1/1 under 'mean') is its term.
    lam = row(state.lam) / m if normalize == "mean" else row(state.lam)
    x, labels = row(state.x), row(target.labels)
    own = kkt_sum(apply_fn, problem, target.params, x, lam, labels, activation(hp), normalize)
    held = jax.tree_util.tree_map(lambda f, t, o: f - (t - o), target.fit, total, own)
    shapes = {state.x.shape, state.lam.shape}
    opt_state = jax.tree_util.tree_map(
      lambda a: row(a) if hasattr(a, "shape") and tuple(a.shape) in shapes else a,
      state.opt_state,
    )
    return (
      state._replace(x=x, lam=lam, opt_state=opt_state),
      target._replace(labels=labels, reference=held),
    )

  return Alone(shared, one)
