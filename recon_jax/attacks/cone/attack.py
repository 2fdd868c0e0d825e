"""The cone attack's entry: its options, :func:`cone_images` (what the job's ``direct``
runs), the theta pair the job's target holds, the checks of the victim, and the registered
:data:`SPEC` (its hand-over to the KKT search and its re-reading of the search's candidates).
"""

from __future__ import annotations

import dataclasses

from absl import logging
import jax
import numpy as np

from recon_jax.attacks.cone.deep import first_layer_images, read_deep
from recon_jax.attacks.cone.facets import START_DIVISOR, with_mirrors
from recon_jax.attacks.cone.handover import always_hands_over, unsure_of
from recon_jax.attacks.cone.reading import dense_layers, first_triple, read
from recon_jax.attacks.cone.signed import read_signed
from recon_jax.attacks.spec import AttackSpec, Setup, option, register, require
from recon_jax.core.rules import Rule
from recon_jax.victims import recipe


@dataclasses.dataclass(frozen=True)
class ConeOptions:
  """The cone attack's options."""

  cone_starts: int = option(
    100,
    "attack=cone: random starts of the facet search (a few linear programs each; it stops "
    "once every facet the span allows is found)",
    Rule("int", low=1, high=10**6),
  )
  cone_public: bool = option(
    True,
    "attack=cone: where the random starts leave facets unfound, start again from images "
    "the attacker holds that are not training images (the public pool, else the held-out "
    "images; on one hidden layer, each followed by its mirror image); their patterns land on "
    "more facets",
    Rule("bool"),
  )
  cone_search_minutes: float = option(
    30.0,
    "attack=cone: where the cone reads fewer images than the change's span holds (below "
    "0.9 of them, or of n), and always under squared error or past one hidden layer (where "
    "an image read may be a blend), the KKT search in that span runs after it, started "
    "from the images it read, if it is estimated to take at most this many minutes (the "
    "report says so where it is not); its candidates are then scored beside the cone's "
    "images (the finetune_kkt preset's search, 4 restarts of 2000 steps at two or more "
    "hidden layers unless num_restarts or steps are set: at 50 + 50 faces 73 of 100 "
    "against the cone's 22)",
    Rule("float", low=0, high=1e6, note="0: never"),
  )


def cone_images(
  theta_star,
  theta_0,
  input_shape,
  box_lo,
  box_hi,
  *,
  n=None,
  starts=100,
  seed=0,
  public=None,
  decay=None,
  mixed=False,
):
  """``(images [F, *input_shape], labels [F], reading)`` read off the cone of the first
  layer's change (``reading``: what the change showed, :class:`Reading`; F is 0 where it
  says the cone cannot be there, or no facet was found).

  Args:
    theta_star, theta_0: the victim's trained and initial parameters (one hidden layer).
    input_shape: one image's shape.
    box_lo, box_hi: the pixel box (broadcastable to one image): a quarter of its diagonal is
      the norm of the random images the facet search starts from.
    n: the training-set size where known (it tells the span from rounding noise, and the
      weight decay training kept).
    starts, seed: the facet search's random starts (at most; see :data:`PATIENCE`).
    public: images the attacker holds that are not training images ([N, *input_shape], in
      the model's input space): where the random starts leave facets of the span's images
      unfound, the search starts again from these images' activation patterns.
    decay: the multiple of theta_0 weight decay kept, where the caller found it already
      (a target's :attr:`~recon_jax.types.Target.decay`); None: found here.
    mixed: the loss's derivative may change sign in training (squared error): a unit's
      coefficient below 0 is a soft cost of its own (:func:`facet`).
  """
  net_star, net_init = dense_layers(theta_star), dense_layers(theta_0)
  star, init = first_triple(net_star), first_triple(net_init)
  reading = read(star, init, n, decay)
  none = np.zeros((0, *tuple(input_shape))), np.zeros(0)
  if reading.cannot:
    logging.info("cone: %s", reading.cannot)
    return (*none, reading)
  if reading.decay < 1.0:
    logging.info(
      "cone: training kept %.4g of theta_0 (weight decay): reading theta* - %.4g theta_0",
      reading.decay,
      reading.decay,
    )
  basis = reading.basis
  diagonal = np.broadcast_to(np.asarray(box_hi) - np.asarray(box_lo), tuple(input_shape))
  scale = float(np.linalg.norm(diagonal)) / START_DIVISOR
  rng = np.random.default_rng(seed)
  held = None
  if public is not None and len(public):
    held = np.asarray(public, np.float64).reshape(len(public), -1)
  if len(net_star) == 2:
    starts_held = None if held is None else with_mirrors(held, input_shape)
    out, exact = read_signed(
      star, init, basis, reading.decay, n, scale, rng, starts, starts_held, mixed
    )
    blends = len(out) - exact
    if blends:
      logging.info("cone: %d of the %d facets found are blends, not sharp", blends, len(out))
  else:
    out, exact = read_deep(net_star, net_init, reading, n, scale, rng, starts, held, mixed)
    blends = 0
  unsure = unsure_of(mixed, len(net_star) - 1)
  reading = reading._replace(read=exact, unsure=unsure, blends=blends)
  if not out:
    return (*none, reading)
  images = np.array([basis @ c for c, _ in out]).reshape(len(out), *input_shape)
  return images, np.array([y for _, y in out]), reading


def _theta_pair(setup: Setup):
  """``(theta*, theta_0)`` from the target: its params are at ``linearize`` between them and
  its reference is ``theta* - decay theta_0`` (:func:`recon_jax.victims.targets.known_init_target`)."""
  target, lin = setup.target, float(setup.common.linearize)
  c = float(target.decay)
  scale = 1.0 - lin + lin * c  # params = theta_0 (1 - lin + lin c) + lin reference
  init = jax.tree_util.tree_map(lambda p, r: (p - lin * r) / scale, target.params, target.reference)
  star = jax.tree_util.tree_map(lambda r, i: r + c * i, target.reference, init)
  return star, init


def _direct(setup: Setup, options: ConeOptions):
  star, init = _theta_pair(setup)
  images, labels, reading = cone_images(
    star,
    init,
    setup.input_shape,
    setup.target.box_lo,
    setup.target.box_hi,
    n=setup.n or None,
    starts=options.cone_starts,
    seed=setup.common.seed,
    public=setup.public if options.cone_public else None,
    decay=float(setup.target.decay),  # the job's target found it (victims.targets)
    mixed=setup.problem == "general",  # squared error on labels +-1
  )
  return images[None], labels.astype(np.float32), {"cone": reading.summary()}


def _reread(setup: Setup, options: ConeOptions, candidates):
  """The first layer's facets the search's ``candidates`` lead to, past one hidden layer
  (:func:`first_layer_images`); none on one hidden layer, whose cone the random starts read."""
  del options
  star, init = _theta_pair(setup)
  diagonal = np.broadcast_to(
    np.asarray(setup.target.box_hi) - np.asarray(setup.target.box_lo), tuple(setup.input_shape)
  )
  return first_layer_images(
    star,
    init,
    candidates,
    n=setup.n or None,
    decay=float(setup.target.decay),
    bound=float(np.linalg.norm(diagonal)),
  )


def _check(options: ConeOptions, setup: Setup) -> None:
  del options
  v = setup.victim
  two_classes = setup.problem == "binary" or (
    setup.problem == "general" and not setup.foreign and recipe.task_of(v) == "binary"
  )
  require(
    two_classes,
    "attack=cone reads a one-output victim trained for two classes (the logistic loss, or "
    "squared error on labels +-1).",
    "problem",
  )
  require(
    setup.common is None or bool(setup.common.known_init),
    "attack=cone reads theta* - theta_0: set threat.known_init=True (and threat.theta0 for "
    "an imported model).",
    "threat.known_init",
    ("attack=cone", "threat.known_init=True", "threat.theta0"),
  )
  if setup.foreign:
    return  # an imported model's layers are checked when its parameters are read
  require(
    v.arch in ("mlp", "one_hidden") and len(v.widths) >= 1,
    f"attack=cone reads a dense ReLU network, not arch={v.arch} (the KKT search in the "
    "change's span reads others: the finetune_kkt preset).",
    "attack",
  )
  require(
    len(v.widths) == 1 or v.bias == "all",
    f"attack=cone reads a network of {len(v.widths)} hidden layers through the biases of "
    f"every layer, which bias={v.bias} leaves out (the finetune_kkt preset reads it).",
    "attack",
  )
  require(
    v.activation == "relu",
    f"attack=cone reads ReLU units, not activation={v.activation}.",
    "attack",
  )
  require(
    v.bias != "none",
    "attack=cone reads the first layer's biases, which bias=none leaves out.",
    "attack",
  )


SPEC = register(
  AttackSpec(
    name="cone",
    build=lambda options, setup: None,
    check=_check,
    options=ConeOptions,
    hparams=(),
    state_arrays=lambda options, common: 0,
    direct=_direct,
    rerunnable=lambda options: False,
    first_order=lambda options: False,
    reads_init=True,
    hands_over=lambda options: float(options.cone_search_minutes),
    always_hands_over=always_hands_over,
    reread=_reread,
    doc="the images off the cone of the first layer's change from a known theta_0: "
    "linear programs, no search",
    examples=(),  # nothing to run: the contract is for searches
  )
)
