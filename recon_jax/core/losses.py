"""The task vocabulary: per-sample losses, margins, the training energy, tree norms.

One place for what the victim's training and every attack agree on:

* a victim is trained with a ``loss``: ``logistic`` (binary, labels +-1),
  ``ce`` (multiclass, integer labels) or ``mse`` (regression);
* the KKT attack reads the same victim as a ``problem``: ``binary``,
  ``multiclass`` (DecoReco margins) or ``general`` (free real multipliers:
  regression, or any loss with weight decay); :func:`problem_for_loss` maps
  one to the other;
* the training energy ``E(theta; x, y) = mean_i loss(Phi(x_i), y_i) + wd/2 ||theta||^2``
  is minimised by :mod:`recon_jax.victims.descent` (gradient descent),
  :mod:`recon_jax.implicit` (L-BFGS to convergence) and the inner problem of
  the bilevel attack.

And :func:`unit_centred`, the rows whose dot product is their normalised cross-correlation
(the evaluation's NCC and the attacker's agreement score both read it).
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from recon_jax.errors import ConfigError

LOSSES = ("logistic", "ce", "mse")
PROBLEMS = ("binary", "multiclass", "general")
_PROBLEM_OF_LOSS = {"logistic": "binary", "ce": "multiclass", "mse": "general"}


def check_loss(loss: str) -> None:
  if loss not in LOSSES:
    raise ConfigError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}.")


def problem_for_loss(loss: str) -> str:
  """The KKT problem that matches a victim trained with ``loss``."""
  check_loss(loss)
  return _PROBLEM_OF_LOSS[loss]


def num_outputs(loss: str, num_classes: int) -> int:
  """Width of the network's output layer: C for ``ce``, else 1."""
  return num_classes if loss == "ce" else 1


def tree_sq_norm(tree) -> jax.Array:
  """``sum of squares`` over every leaf of a pytree."""
  return sum(jnp.sum(jnp.square(a)) for a in jax.tree_util.tree_leaves(tree))


def tree_dot(a, b) -> jax.Array:
  """``<a, b>`` summed over the leaves of two pytrees of the same structure."""
  return sum(
    jnp.vdot(u, v) for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


def tree_sq_dist(a, b) -> jax.Array:
  """``||a - b||^2`` over two pytrees of the same structure."""
  return sum(
    jnp.sum(jnp.square(u - v))
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
  )


def per_sample_loss(loss: str, out: jax.Array, y: jax.Array) -> jax.Array:
  """Per-sample loss for outputs ``out`` [m, C] and labels ``y`` [m].

  ``logistic``: ``softplus(-y f(x))``; ``ce``: softmax cross-entropy with
  integer labels (float labels are cast); ``mse``: ``0.5 ||f(x) - y||^2``.
  """
  if loss == "logistic":
    return jax.nn.softplus(-y * out[:, 0])
  if loss == "ce":
    return optax.softmax_cross_entropy_with_integer_labels(out, y.astype(jnp.int32))
  if loss == "mse":
    target = y.reshape(out.shape) if y.ndim == out.ndim else y[:, None]
    return 0.5 * jnp.sum((out - target) ** 2, axis=-1)
  check_loss(loss)


def energy(
  apply_fn: Callable, loss: str, weight_decay: float = 0.0, act: Optional[Callable] = None
) -> Callable:
  """``E(theta, x, y) = mean_i loss(Phi(theta; x_i), y_i) + wd/2 ||theta||^2``.

  ``act`` replaces the network's activation (e.g. a smooth one for the
  bilevel attack); ``None`` keeps the model's own.
  """
  check_loss(loss)

  def e(params, x, y):
    data = jnp.mean(per_sample_loss(loss, apply_fn(params, x, act), y))
    return data + 0.5 * weight_decay * tree_sq_norm(params)

  return e


def margins(problem: str, out: jax.Array, labels: jax.Array) -> jax.Array:
  """Per-sample margins ``g_i`` from outputs ``out`` [m, C].

  ``binary``: ``y_i Phi(x_i)`` (Haim et al. eq. 6); ``multiclass``:
  ``Phi_{y_i}(x_i) - max_{j != y_i} Phi_j(x_i)`` (Buzaglo et al.); ``general``:
  the outputs themselves, ``[m, C]``.  A loss name is accepted for
  ``problem`` and mapped by :func:`problem_for_loss`.
  """
  if problem in LOSSES:
    problem = problem_for_loss(problem)
  if problem == "binary":
    return labels * out[:, 0]
  if problem == "multiclass":
    onehot = jax.nn.one_hot(labels.astype(jnp.int32), out.shape[1], dtype=bool)
    fy = jnp.sum(jnp.where(onehot, out, 0), axis=1)
    return fy - jnp.max(jnp.where(onehot, -jnp.inf, out), axis=1)
  if problem == "general":
    return out
  raise ConfigError(f"problem must be one of {', '.join(PROBLEMS)}, got {problem!r}.")


def batched_map(fn: Callable, xs, batch_size: Optional[int] = None):
  """``fn(*x)`` over the leading axis of the arrays ``xs``: one vmap (``batch_size=None``) or
  ``lax.map`` over batches of ``batch_size`` (less memory, same numbers)."""
  if batch_size is None:
    return jax.vmap(lambda *a: fn(*a))(*xs)
  if int(batch_size) <= 0:
    raise ConfigError(f"batch_size must be > 0 or None, got {batch_size}.")
  return jax.lax.map(lambda a: fn(*a), xs, batch_size=int(batch_size))


def margin_jacobian(
  apply_fn, problem: str, params, x, labels, act=None, *, batch_size: Optional[int] = None
) -> jax.Array:
  """``[m, C', P]``: candidate i's margins (:func:`margins`) differentiated in the parameters.

  ``P`` is flattened as ``jax.flatten_util.ravel_pytree(params)`` (leaf order); ``C'`` is 1
  for 'binary'/'multiclass' and ``C`` for 'general' (row ``[i, c]`` is ``grad_theta
  Phi_c(x_i)``).  ``act`` is the activation the network is differentiated with (None: its
  own).  Every Gram matrix, refit and identifiability column of the library comes from here;
  ``batch_size`` as in :func:`batched_map`.
  """

  def one(xi, yi):
    def g(p):
      return margins(problem, apply_fn(p, xi[None], act), yi[None]).reshape(-1)  # [C']

    leaves = jax.tree_util.tree_leaves(jax.jacrev(g)(params))  # each [C', *leaf_shape]
    return jnp.concatenate([a.reshape(a.shape[0], -1) for a in leaves], axis=1)

  return batched_map(one, (x, labels), batch_size)


def predictions(loss: str, out: jax.Array) -> jax.Array:
  """Predicted labels (+-1, class ids) or regression outputs."""
  if loss == "logistic":
    return jnp.where(out[:, 0] >= 0, 1.0, -1.0).astype(out.dtype)
  if loss == "ce":
    return jnp.argmax(out, axis=-1)
  return out[:, 0]


def error_rate(loss: str, out: jax.Array, y: jax.Array) -> jax.Array:
  """Misclassification rate, or the mean squared error for ``mse``."""
  if loss == "mse":
    return jnp.mean((out[:, 0] - y) ** 2)
  return jnp.mean(predictions(loss, out) != y)


def unit_centred(flat: jax.Array) -> jax.Array:
  """Rows (the last axis) centred and scaled to unit norm: NCC is their dot product."""
  centred = flat - jnp.mean(flat, axis=-1, keepdims=True)
  norm = jnp.linalg.norm(centred, axis=-1, keepdims=True)
  # Constant rows have zero norm: leave them as zero vectors so their NCC is 0.
  return jnp.where(norm > 0, centred / jnp.where(norm > 0, norm, jnp.ones_like(norm)), 0.0)
