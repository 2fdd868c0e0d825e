"""A registered attack run on a victim: the attack its spec builds from the job's settings,
the candidates' starts, and the restarts of the sweep in the one batched loop
(:func:`recon_jax.engine.loop.run_attack`); or, for an attack without a search, the
candidates it reads off theta*.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import numpy as np

from recon_jax.attacker.view import OracleStarts
from recon_jax.attacks.spec import AttackSpec, Setup
from recon_jax.engine import inits, loop
from recon_jax.errors import ConfigError
from recon_jax.types import Attack, float_dtype


class Found(NamedTuple):
  """The attack's candidates: searched (``run`` and ``attack`` set) or read off theta*."""

  candidates: np.ndarray  # [R, m, *input_shape]
  weights: np.ndarray  # [R, m]
  final_loss: np.ndarray  # [R]
  hparams: dict  # per-restart hyperparameters ({} without a search)
  run: Optional[loop.AttackRun] = None
  attack: Optional[Attack] = None
  timing: Optional[dict] = None  # compile and run seconds of the search
  labels: Optional[np.ndarray] = None  # [m]: the candidates' own labels (None: the target's)
  notes: Optional[dict] = None  # what a direct attack read of theta* before its candidates
  oracle: Optional[str] = None  # the init whose training images it started from (an oracle)


def find_candidates(
  spec: AttackSpec,
  options,
  search,
  setup: Setup,
  stages: list,
  hparams: dict,
  state_file: Optional[loop.StateFile] = None,
  starts: Optional[tuple] = None,
  oracle: Optional[OracleStarts] = None,
) -> Found:
  """The candidates of attack ``spec`` on the victim and target of ``setup``: built from its
  ``options`` (its section of the job's settings), its restarts run as ``search`` says (the
  job's search section: its ``init``, ``seed``, ``num_restarts``, ``chunk_steps`` and
  ``batching``), the sweep's ``stages`` (whose per-restart ``hparams`` are drawn) in one
  compiled call, saved to and resumed from ``state_file``; or, without a search, read off
  theta*.  What the initialisation may start from is the attacker's: ``setup.view`` (its
  public pool and data mean, :class:`recon_jax.attacker.view.AttackerView`); ``starts``:
  ``(images [F, ...], labels [F])`` another attack read, every restart's first candidates
  of those labels (:func:`recon_jax.engine.inits.seeded`); ``oracle``: the training images
  an ``init`` of :data:`recon_jax.attacker.view.ORACLE_INITS` starts from
  (:func:`recon_jax.attacker.view.oracle_starts`), the one way one reaches a search."""
  target = setup.target
  if spec.direct is not None:  # candidates read off the target, no search
    cands, labels, *notes = spec.direct(setup, options)
    cands = np.asarray(cands)
    return Found(
      cands,
      np.ones(cands.shape[:2]),
      np.zeros(len(cands)),
      {},
      labels=labels,
      notes=notes[0] if notes else None,
    )
  attack = spec.build(options, setup)
  view = setup.view
  if view is None:
    raise ConfigError("setup.view: a search starts from what the attacker holds; none given.")
  x_init = inits.make_x_init(
    search.init,
    m=len(target.labels),
    input_shape=setup.input_shape,
    oracle=None if oracle is None else oracle.images,
    x_part=view.partition,
    offset=view.offset,
    dtype=float_dtype(),
  )
  if starts is not None:
    x_init = inits.seeded(x_init, *starts, target.labels)
  keys = jax.random.split(jax.random.PRNGKey(search.seed), search.num_restarts)
  run = loop.run_attack(
    attack,
    x_init,
    keys,
    stages,
    target,
    chunk_steps=search.chunk_steps,
    batching=search.batching,
    state_file=state_file,
  )
  steps = sum(n for n, _ in stages)
  timing = dict(
    compile_s=run.compile_s,
    attack_run_s=run.run_s,
    restart_steps_per_s=search.num_restarts * steps / max(run.run_s, 1e-9),
  )
  said = None if oracle is None else oracle.init
  return Found(
    run.candidates, run.weights, run.final_loss, hparams, run, attack, timing, oracle=said
  )
