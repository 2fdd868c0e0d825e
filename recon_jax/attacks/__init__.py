"""Attacks: each returns a :class:`recon_jax.types.Attack` (pure init/step) and registers an
:class:`~recon_jax.attacks.spec.AttackSpec`, so the main job can select it by name.

:func:`specs` imports every module of this package once and returns the registry; adding
an attack is adding a module that calls :func:`~recon_jax.attacks.spec.register` (its
options, their settings in the main job and its contract-test runs come with its spec).
"""

from __future__ import annotations

import importlib
import pkgutil

from recon_jax.attacks.spec import (  # noqa: F401
  AttackSpec,
  Common,
  Example,
  Setup,
  option,
  register,
  registry,
)
from recon_jax.errors import ConfigError


def specs() -> dict:
  """``{name: AttackSpec}`` of every attack module in this package."""
  for mod in pkgutil.iter_modules(__path__):
    if mod.name != "spec":
      importlib.import_module(f"{__name__}.{mod.name}")
  return registry()


def get(name: str) -> AttackSpec:
  """The spec of attack ``name``; ConfigError naming the ``attack`` setting otherwise."""
  table = specs()
  if name not in table:
    raise ConfigError(f"attack must be one of {', '.join(sorted(table))}, got {name!r}.", "attack")
  return table[name]
