"""First-layer weights read as images (Haim et al. 2022, §5.4, Fig. 5b): a baseline with no search.

Each first-layer unit's weight vector, reshaped to an image, is scored like the
attack's candidates: a network that memorised its training images can show
them in its first layer, which no reconstruction attack is needed to read.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from recon_jax.attacks.spec import AttackSpec, no_check, register
from recon_jax.errors import ConfigError


def first_layer_images(params, input_shape):
  """First-layer weight vectors read as images (Haim et al. §5.4, Fig. 5b): [h, *input_shape]."""
  leaves = jax.tree_util.tree_leaves_with_path(params)
  for path, leaf in leaves:
    if leaf.ndim == 2 and leaf.shape[0] == int(jnp.prod(jnp.array(input_shape))):
      return jnp.asarray(leaf).T.reshape(leaf.shape[1], *input_shape)
  raise ConfigError("no dense first layer whose input size matches the images.")


SPEC = register(
  AttackSpec(
    name="weights",
    build=lambda options, setup: None,
    check=no_check,
    hparams=(),
    state_arrays=lambda options, common: 0,
    direct=lambda setup, options: (
      first_layer_images(setup.target.params, setup.input_shape)[None],
      None,  # a unit's weights carry no label
    ),
    doc="first-layer weights read as images (Haim et al. §5.4): no search",
    examples=(),  # nothing to run: the contract is for searches
  )
)
