"""A finished reproduction's report placed in a checkout: RESULTS.md at its root, the files the
report links (figures, the init study's summaries) under ``docs/results/``, the links
rewritten to point there, and the run's absolute folder
written as ``workdirs/reproduce`` (a folder of the checkout, so the commands stay runnable
there and the report names no folder of the machine it ran on).  The report is not changed
otherwise, so what a reader sees in the checkout is what the run wrote."""

from __future__ import annotations

import os
import re
import shutil

from recon_jax.errors import ConfigError
from recon_jax.io import workdir

FOLDER = os.path.join("docs", "results")
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
STAND_IN = "workdirs/reproduce"  # the run's folder in a published report, where it was absolute


def linked(text: str, where: str) -> list:
  """The relative targets of ``text``'s Markdown links that are files under ``where``."""
  out = []
  for _, target, _ in _LINK.findall(text):
    if "://" in target or target.startswith(("/", "#")) or ".." in target.split("/"):
      continue
    if os.path.isfile(os.path.join(where, target)) and target not in out:
      out.append(target)
  return out


def checkout_of(path: str) -> str:
  """``path`` as an absolute folder; raises :class:`~recon_jax.errors.ConfigError` naming
  ``publish`` where it is not a checkout (no README.md there)."""
  folder = os.path.abspath(workdir.expand(path))
  if not os.path.isfile(os.path.join(folder, "README.md")):
    raise ConfigError(f"publish: {path} is not a checkout (no README.md there).", "publish")
  return folder


def publish(run: str, checkout: str) -> list:
  """Copies run ``run``'s RESULTS.md into ``checkout`` (its figures and linked files under
  docs/results/, replacing that folder); returns the files copied.

  Raises :class:`~recon_jax.errors.ConfigError` naming ``publish`` where ``checkout`` is not
  a folder with a README.md or the run has no RESULTS.md.
  """
  checkout = checkout_of(checkout)
  source = os.path.join(run, "RESULTS.md")
  if not os.path.isfile(source):
    raise ConfigError(f"publish: {run} has no RESULTS.md to publish.", "publish")
  with open(source) as fh:
    text = fh.read()
  files = linked(text, run)
  target = os.path.join(checkout, FOLDER)
  shutil.rmtree(target, ignore_errors=True)  # figures of an older report go with it
  for rel in files:
    os.makedirs(os.path.dirname(os.path.join(target, rel)), exist_ok=True)
    shutil.copyfile(os.path.join(run, rel), os.path.join(target, rel))
  moved = set(files)
  text = _LINK.sub(
    lambda m: (
      m.group(1) + (f"{FOLDER}/{m.group(2)}" if m.group(2) in moved else m.group(2)) + m.group(3)
    ),
    text,
  )
  workdir.write_text(checkout, "RESULTS.md", without_folder(text, run))
  return files


def without_folder(text: str, run: str) -> str:
  """``text`` with ``run``'s absolute folder (and any path under it) written from
  :data:`STAND_IN` instead; relative paths in ``text`` are left as they are."""
  folder = os.path.abspath(workdir.expand(run))
  return re.sub(re.escape(folder) + r"(?=/|[\s`'\")\]]|$)", STAND_IN, text)
