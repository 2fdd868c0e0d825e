"""The pipeline every binary, study and benchmark calls.

data -> victim (trained, cached or imported) -> theta* -> Target ->
x-initialisation -> attack -> the one batched loop -> candidates ->
evaluation -> the report, typed (metrics.json's :class:`~recon_jax.eval.metrics_json.Metrics`).

:func:`reconstruct` runs one job (a :class:`~recon_jax.job.planning.Plan`, or its typed
settings, :class:`recon_jax.job.settings.JobConfig`) in stages, each handing on what the
next takes: :func:`victim_stage` (the data, the victim and the attacker's target),
:func:`attack_stage` (the regime, the estimate, the candidates, a hand-over: an
:class:`Attacked`), the scoring (:func:`recon_jax.eval.scoring.score_run`) and the verdict.
Each stage returns its part of the report typed (:mod:`recon_jax.job.assembly`); the parts
are joined in metrics.json's order and the verdict completes them
(:func:`recon_jax.eval.verdict.conclude`), a new report: nothing is edited once made.  It
returns the report without writing anything but the optional resume file.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, NamedTuple, Optional, Tuple

from absl import logging
import numpy as np

from recon_jax import attacks, data
from recon_jax.attacker import view as attacker
from recon_jax.attacks import search, span
from recon_jax.core import progress
from recon_jax.engine import loop, precision, resume
from recon_jax.eval import evaluation, scoring, verdict
from recon_jax.eval.metrics_json import Metrics, Regime
from recon_jax.job import assembly, estimate, planning
from recon_jax.job.planning import Plan
from recon_jax.job.settings import JobConfig
from recon_jax.types import Attack, HParams, Target, float_dtype  # noqa: F401 (re-exported)
from recon_jax.victims import recipe, sources, targets


def attack_setup(
  cfg: JobConfig,
  apply_fn,
  problem: str,
  num_outputs: int = 1,
  *,
  victim_config: Optional[recipe.VictimConfig] = None,
  foreign: bool = False,
  input_shape=(),
  n: int = 0,
  target: Optional[Target] = None,
) -> attacks.Setup:
  """What an attack is built from: the victim and target the run knows and the job's shared
  settings (``cfg``: a JobConfig or a mapping of settings)."""
  return attacks.Setup(
    problem,
    victim_config or recipe.VictimConfig(),
    foreign,
    apply_fn,
    num_outputs,
    tuple(input_shape),
    n,
    target,
    attacks.Common.of(JobConfig.of(cfg)),
  )


def make_attack(
  cfg: JobConfig,
  apply_fn,
  problem: str,
  num_outputs: int = 1,
  *,
  spec: Optional[attacks.AttackSpec] = None,
  **known,
) -> Attack:
  """The attack a job names (``cfg.attack``; a JobConfig or a mapping of settings), built by
  its registered spec (:mod:`recon_jax.attacks`) from its options and the
  :func:`attack_setup` of what the run knows (``known``: its keyword arguments; ``spec``:
  the attack's spec when the caller has it)."""
  cfg = JobConfig.of(cfg)
  spec = attacks.get(cfg.attack) if spec is None else spec
  return spec.build(
    spec.options_of(cfg), attack_setup(cfg, apply_fn, problem, num_outputs, **known)
  )


class Reconstruction(NamedTuple):
  """A reconstruction job's outcome: the report and what the figures and arrays need."""

  report: Metrics  # the report, typed (metrics.json: ``report.to_dict()``)
  arrays: dict  # name -> array (reconstructions.npz)
  eval_result: Any  # metrics.EvalResult of the pooled candidates (or None)
  dataset: data.Dataset
  victim: sources.Victim

  @property
  def metrics(self) -> dict:
    """metrics.json's dict of the report (a new dict each time)."""
    return self.report.to_dict()


def load_victim(plan: Plan) -> Tuple[data.Dataset, sources.Victim, np.ndarray, float]:
  """The job's data, its victim (trained, cached, loaded or imported from the files the
  plan read), the candidates' labels, and the seconds the victim took.  A bad ``m`` fails
  before any training."""
  cfg, src = plan.config, plan.source
  ds, labels = src.dataset, plan.labels
  t0 = time.time()
  vic = sources.victim_of(src, use_cache=cfg.use_cache)
  return ds, vic, labels, time.time() - t0


def job_target(plan: Plan, vic: sources.Victim, ds: data.Dataset, labels) -> Target:
  """What the attacker sees: theta* in the run's precision, the labels, the pixel box, and
  with ``known_init`` theta* - theta_0 as the reference (less the multiple of theta_0 that
  weight decay kept: :func:`recon_jax.victims.targets.decay_factor`), the gradients taken at
  the ``linearize`` point between them (:func:`recon_jax.victims.targets.known_init_target`)."""
  target = targets.make_target(vic.params, labels, ds.mean, dtype=float_dtype())
  if plan.config.threat.known_init:
    n = len(ds.x_train)
    decay = targets.decay_factor(vic.params, vic.init, n) if n else 1.0
    if decay < 1.0:
      logging.info(
        "weight decay: training kept %.4g of theta_0, so the attack fits theta* - %.4g theta_0",
        decay,
        decay,
      )
    target = targets.known_init_target(target, vic.init, plan.config.linearize, decay)
  return target


def _estimate(plan: Plan, vic, ds, seen, flops: Optional[float] = None) -> dict:
  """:func:`recon_jax.job.estimate.estimate` of a plan's attack and scoring on the victim
  ``vic`` and data ``ds`` (``seen``: the regime, whose span the candidates live in where the
  plan searches in it), with the search it hands over to (``plan.then``) where it may;
  ``flops``: the machine's rate (measured now when None)."""
  cfg = plan.config
  dim = Regime.of(seen).span_dim
  then = plan.then
  handover = None
  if then is not None:
    handover = dict(
      restarts=then.config.search.num_restarts,
      steps=sum(steps for steps, _ in then.stages),
      m=len(then.labels),
      span_dim=dim if then.config.kkt.subspace else None,
      identify=then.config.evaluation.identify,
    )
  return estimate.estimate(
    vic.params,
    n=len(ds.x_train),
    heldout=len(ds.x_test),
    pixels=int(np.prod(ds.x_train.shape[1:])),
    restarts=cfg.search.num_restarts,
    steps=sum(steps for steps, _ in plan.stages),
    m=len(plan.labels),
    searched=plan.spec.direct is None,
    attack=cfg.attack,
    span_dim=dim if (cfg.kkt.subspace or plan.spec.direct is not None) else None,
    identify=cfg.evaluation.identify,
    handover=handover,
    certain=handover is not None
    and plan.spec.always_hands_over(plan.problem, len(planning._hidden_widths(plan))),
    budget_s=60.0 * plan.spec.hands_over(plan.options),
    ceiling=bool(cfg.threat.known_init and dim and dim < np.prod(ds.x_train.shape[1:])),
    flops=flops,
  )


def _hand_over(then: Plan, direct: search.Found, setup, ds, state_file):
  """``(found, target)``: the search a direct attack hands over to (``then``:
  :func:`recon_jax.job.planning.handover`) on the target of its own candidates' labels,
  every restart started from the direct attack's candidates
  (:func:`recon_jax.engine.inits.seeded`)."""
  target = setup.target._replace(labels=then.labels)
  setup = setup._replace(target=target, common=then.setup.common)
  progress.phase("the KKT search in the change's span after the cone (its first chunk compiles)")
  images = direct.candidates[0]
  # a search's candidates carry the target's labels, but for squared error (all 0: the
  # multipliers take the sign), so the cone's images go to slots of their own label
  signed = then.problem != "general" and direct.labels is not None
  starts = (images, direct.labels if signed else np.zeros(len(images), np.float32))
  found = search.find_candidates(
    then.spec,
    then.options,
    then.config.search,
    setup,
    then.stages,
    then.hparams,
    state_file,
    starts=starts,
    oracle=attacker.oracle_starts(ds, then.config.search.init),
  )
  return found._replace(notes=direct.notes), target


def _after_direct(state_file, memo: resume.Memo):
  """The state file of the search a direct attack hands over to: carrying the direct
  attack's memo in each save, and resumed only where the file holds the search's own state
  (a run stopped in the direct attack saved its memo alone)."""
  if state_file is None:
    return None
  again = state_file.resume and "run" in resume.parts(state_file.path)
  return state_file._replace(resume=again, carried=memo.entries or None)


def _reread(plan: Plan, setup, found: search.Found) -> np.ndarray:
  """What the direct attack reads of theta* again from the search's lowest-loss restart
  (:attr:`AttackSpec.reread`: the cone, past one hidden layer, the first layer's facets its
  candidates lead to); no images where it reads nothing again."""
  cands = found.candidates
  best = evaluation.best_by_loss(found.final_loss)
  if plan.spec.reread is None or best is None:
    return np.zeros((0, *cands.shape[2:]), cands.dtype)
  progress.phase("the cone again, from the search's candidates")
  images = plan.spec.reread(setup, plan.options, cands[best])
  return np.asarray(images, cands.dtype).reshape(-1, *cands.shape[2:])


@contextlib.contextmanager
def progress_shown(verbose: bool = True):
  """The library's progress lines (absl logging at INFO) shown while a job runs, also when
  it is called from Python rather than a binary; the caller's level is restored after."""
  from absl import logging as absl_logging

  before = absl_logging.get_verbosity()
  if verbose and before < absl_logging.INFO:
    absl_logging.set_verbosity(absl_logging.INFO)
  try:
    yield
  finally:
    absl_logging.set_verbosity(before)


def reconstruct(
  job,
  *,
  state_file: Optional[loop.StateFile] = None,
  requested_victim: Optional[dict] = None,
  verbose: bool = True,
) -> Reconstruction:
  """Runs one reconstruction job: :func:`victim_stage` -> :func:`attack_stage` (the regime,
  :func:`recon_jax.attacks.span.regime`, and the attack's candidates,
  :func:`recon_jax.attacks.search.find_candidates`) -> identifiability, evaluation and the
  attacker's scores (:func:`recon_jax.eval.scoring.score_run`) -> the report.

  ``job``: the job resolved by :func:`recon_jax.job.planning.prepare` (a
  :class:`~recon_jax.job.planning.Plan`, taken as it is), or its settings (a
  :class:`~recon_jax.job.settings.JobConfig`, or a ConfigDict such as
  :func:`recon_jax.reconstruct_config`), checked and resolved here
  (``requested_victim`` as in :func:`recon_jax.job.planning.victim_config`).  The
  sweep saves to and resumes from ``state_file`` (see :func:`recon_jax.engine.loop.run_attack`).
  ``verbose``: log a line per phase and chunk, with the time left (absl logging, INFO).
  """
  plan = planning.resolve(job, requested_victim)
  with precision.scoped(plan.config.runtime.x64, plan.config.runtime.matmul_precision):
    return run(plan, state_file, verbose)


def run(plan: Plan, state_file: Optional[loop.StateFile] = None, verbose: bool = True):
  """:func:`reconstruct` of a job resolved already, in the precision its caller set
  (:func:`recon_jax.engine.precision.scoped` of the plan's ``x64`` and ``matmul_precision``)."""
  with progress_shown(verbose), progress.watch():
    return _reconstruct(plan, state_file)


class Attacked(NamedTuple):
  """The attack stage's outcome (:func:`attack_stage`), handed on to the scoring: the
  candidates, the plan and target that found them, and what the job read on the way."""

  found: search.Found  # the candidates scored (the search's, after a hand-over)
  ran: Plan  # the plan whose attack found them (the hand-over's, after one)
  target: Target  # what they were found on (with the hand-over's labels, after one)
  regime: Regime  # what the job read of theta* first, with the direct attack's notes
  guess: dict  # the estimate said before the attack (:func:`recon_jax.job.estimate.estimate`)
  searched: bool  # a search ran (not a direct reading alone)
  started: float  # when the attack started (time.time()), what the estimate is of
  direct_s: float  # seconds of the attack (before any hand-over)
  direct: Optional[search.Found] = None  # after a hand-over: the direct attack's candidates
  reread: Optional[np.ndarray] = None  # after a hand-over: what it read again of the search's
  reread_s: float = 0.0
  handover_s: float = 0.0  # the search after a hand-over (its compilation and steps)
  regime_s: float = 0.0  # reading the regime off theta* (the first layer's span)
  estimating_s: float = 0.0  # the estimate (its timed probes)
  why: Optional[str] = None  # why the direct attack handed over


def victim_stage(plan: Plan):
  """``(ds, vic, setup, seconds)``: the job's data, its victim, the attack's setup completed
  with what the run knows now (the victim and the attacker's view, built once:
  :func:`recon_jax.attacker.view.view_of` of the target, :func:`job_target`), and the
  seconds the victim took."""
  progress.phase("loading the victim (or training it, the first time)")
  ds, vic, labels, victim_s = load_victim(plan)
  known = vic.init if plan.config.threat.known_init else None
  view = attacker.view_of(ds, job_target(plan, vic, ds, labels), known)
  setup = plan.setup._replace(
    apply_fn=vic.apply_fn,
    num_outputs=vic.num_outputs,
    input_shape=view.input_shape,
    n=view.n,
    target=view.target,
    public=view.public,
    view=view,
  )
  return ds, vic, setup, victim_s


def attack_stage(plan: Plan, vic, ds: data.Dataset, setup, state_file) -> Attacked:
  """The regime (:func:`recon_jax.attacks.span.regime`), the estimate, then the attack's
  candidates (:func:`recon_jax.attacks.search.find_candidates`); where a direct attack reads
  fewer images than the change's span holds and its plan hands over (``plan.then``) within
  its budget, the search from its candidates and what it reads again of the search's."""
  cfg, spec = plan.config, plan.spec
  target = setup.target
  t_regime = time.time()
  seen = span.regime(target, len(ds.x_train), cfg.threat.known_init, cfg.linearize)
  seen = assembly.typed(Regime, seen, "regime")
  regime_s = time.time() - t_regime
  if seen.span:
    logging.info(
      "regime: the first layer's %s %d of %d input directions for %d training images",
      "change spans" if seen.known_init else "weights span",
      seen.span.dim,
      seen.span.input_dim,
      seen.n_train,
    )
  t_guess = time.time()
  guess = _estimate(plan, vic, ds, seen)
  logging.info("%s", estimate.say(guess))
  started = time.time()
  searched = spec.direct is None
  progress.phase(
    f"attack={cfg.attack}: "
    + ("the search (its first chunk compiles)" if searched else "reading the candidates")
  )
  # A direct attack's programs are saved in the run's state file as they are solved, so a
  # run stopped in them resumes where it was (resume.Memo); the search after a hand-over
  # keeps them in each of its saves.
  with resume.memo_of(state_file if not searched else None) as memo:
    oracle = attacker.oracle_starts(ds, cfg.search.init)
    found = search.find_candidates(
      spec, plan.options, cfg.search, setup, plan.stages, plan.hparams, state_file, oracle=oracle
    )
  if found.notes:  # what a direct attack read of theta* (the cone: weight decay, its gate)
    seen = Regime.joined(seen, assembly.typed(Regime, found.notes, "regime"))
  read = [v.get("short") for v in (found.notes or {}).values() if isinstance(v, dict)]
  why = next((f"attack={cfg.attack} {w}" for w in read if w), None)
  out = Attacked(found, plan, target, seen, guess, searched, started, time.time() - started)
  out = out._replace(regime_s=regime_s, estimating_s=started - t_guess)
  if why is None or plan.then is None:
    return out
  # judged at a rate that does not move with the machine's load (estimate.steady_rate),
  # said at the rate measured before the attack: the machine is not measured again
  steady = estimate.steady_rate(guess)
  judged = _estimate(plan.then, vic, ds, seen, flops=steady)
  then_s = _estimate(plan.then, vic, ds, seen, flops=guess["gflops"] * 1e9)
  budget = 60.0 * spec.hands_over(plan.options)
  if judged["total_s"] > budget:
    skipped = (
      f"it would take about {judged['total_s'] / 60:.0f} minutes at "
      f"{steady / 1e9:.0f} GFLOP/s, over the {budget / 60:g} of cone_search_minutes"
    )
    logging.info("no hand-over to the KKT search: %s", skipped)
    return out._replace(regime=seen.with_(handover_skipped=skipped))
  logging.info(
    "hand-over: %s; the KKT search in the change's span runs from its %d images. %s",
    why,
    found.candidates.shape[1],
    estimate.say(then_s),
  )
  t_handed = time.time()
  handed, target = _hand_over(plan.then, found, setup, ds, _after_direct(state_file, memo))
  handover_s = time.time() - t_handed
  t_reread = time.time()
  reread = _reread(plan, setup, handed)
  return out._replace(
    found=handed,
    ran=plan.then,
    target=target,
    searched=True,
    direct=found,
    reread=reread,
    reread_s=time.time() - t_reread,
    handover_s=handover_s,
    why=why,
  )


def on_box(att: Attacked, input_ndim: int) -> Tuple[Attacked, float]:
  """``(att, outside)``: the attack's final images projected on the pixel box its target
  holds (``target.box_lo``, ``box_hi``: part of what the attacker sees), the candidates of
  its restarts and, after a hand-over, the cone's and what it read again of the search's;
  ``outside``: the fraction of their pixels the projection moved.  The search's soft box
  prior leaves pixels outside it, and the evaluation stretches each image to its own range,
  so a few bright pixels grey an image's background: on MNIST 50 + 50 the clipped search
  read 84 strictly where the same candidates unclipped read 35; faces moved by none."""
  box = att.target.box_lo, att.target.box_hi

  def clip(x):
    x = np.asarray(x)
    if x.size == 0:
      return x, 0, 0
    # numpy, in the images' own dtype: a direct attack's are float64 where JAX runs float32
    one = x.shape[x.ndim - input_ndim :]
    lo, hi = (np.broadcast_to(np.asarray(b, x.dtype), one) for b in box)
    out = np.clip(x, lo, hi)
    return out, int(np.count_nonzero(out != x)), x.size

  found = att.found
  cands, moved, total = clip(found.candidates)
  att = att._replace(found=found._replace(candidates=cands))
  if att.direct is not None:
    direct, m1, t1 = clip(att.direct.candidates)
    reread, m2, t2 = clip(att.reread)
    att = att._replace(direct=att.direct._replace(candidates=direct), reread=reread)
    moved, total = moved + m1 + m2, total + t1 + t2
  return att, moved / total if total else 0.0


def membership_stage(plan: Plan, vic, ds: data.Dataset, setup) -> Tuple[Metrics, float]:
  """The membership-only audit (an attack that reconstructs nothing: ``attack=none``): every
  given image scored by the tests read off the weights
  (:func:`recon_jax.eval.scoring.weight_membership`), as the report's entries after the
  job's head (:func:`recon_jax.job.assembly.membership_only`), and the seconds they took."""
  progress.phase("the membership tests from the weights")
  t0 = time.time()
  tests = scoring.weight_membership(
    vic.apply_fn, vic.params, setup.target, ds, plan.config.search.seed, vic.init
  )
  return assembly.membership_only(ds, tests), time.time() - t0


def _membership_only(plan: Plan, state_file) -> Reconstruction:
  """:func:`reconstruct` of a job whose attack reconstructs nothing (:func:`membership_stage`)."""
  del state_file  # nothing long enough to save
  t_start = time.time()
  head = assembly.head(plan)
  ds, vic, setup, victim_s = victim_stage(plan)
  guess = _estimate(plan, vic, ds, {})
  logging.info("%s", estimate.say(guess))
  started = time.time()
  entries, membership_s = membership_stage(plan, vic, ds, setup)
  timing = assembly.timing(
    {"victim_s": victim_s, "estimate_s": guess["total_s"]},
    {"estimated": estimate.phases_of(guess), "membership_s": membership_s},
    {"since_estimate_s": time.time() - started, "total_s": time.time() - t_start},
  )
  parts = (head, assembly.victim_part(vic), entries, Metrics.stating(timing=timing))
  report = verdict.conclude(Metrics.joined(*parts), ds.num_classes, searched=False)
  logging.info(
    "membership from the weights of %d training images; %s", len(ds.x_train), report.verdict_line
  )
  arrays = {"train_idx": ds.train_idx, "mean": ds.mean}
  return Reconstruction(report, arrays, None, ds, vic)


def _attack_timing(att: Attacked, victim_s: float, target_s: float) -> dict:
  """The seconds of the job up to the scoring: the victim, the target, the regime, the
  estimate (its probes, and what it said), the attack and any hand-over."""
  out = {
    "victim_s": victim_s,
    "target_s": target_s,
    "regime_s": att.regime_s,
    "estimating_s": att.estimating_s,
    "estimate_s": att.guess["total_s"],
    "estimated": estimate.phases_of(att.guess),
    "attack_s": att.direct_s,
    **(att.found.timing or {}),
  }
  if att.direct is not None:
    out.update(handover_s=att.handover_s, reread_s=att.reread_s)
  return out


def _said(report: Metrics, n: int) -> None:
  """The job's last progress line: what it recovered, or a blind attack's candidates."""
  if n == 0:
    logging.info(
      "blind attack: %d candidates of %d restarts; %s",
      report.m,
      report.num_restarts,
      report.verdict_line,
    )
    return
  logging.info(
    "recovered strictly %d of %d (strict baselines: held-out %s, mean image %s; the looser "
    "SSIM > 0.4 count %d); membership %s; total %.1fs",
    report.recovered_strict,
    n,
    report.baseline_heldout_recovered_strict,
    report.baseline_mean_image_recovered_strict,
    report.n_ssim_gt_04,
    verdict.membership_text(report.membership),
    report.total_s,
  )


def _reconstruct(plan: Plan, state_file) -> Reconstruction:
  """:func:`reconstruct` of a resolved job, stage by stage, each handing on what the next
  takes and returning its part of the report typed: what the report states of the job
  (:func:`recon_jax.job.assembly.head`), the victim (:func:`victim_stage`), the attack
  (:func:`attack_stage`), the scores (:func:`recon_jax.job.assembly.scored`; nothing is
  scored without training images: a blind attack), then the verdict."""
  if not plan.spec.reconstructs:
    return _membership_only(plan, state_file)
  t_start = time.time()
  head = assembly.head(plan)
  ds, vic, setup, victim_s = victim_stage(plan)
  target_s = time.time() - t_start - victim_s
  att = attack_stage(plan, vic, ds, setup, state_file)
  clipped = None
  if plan.config.clip_to_box:  # the candidates written and scored are in the box
    att, clipped = on_box(att, len(setup.input_shape))
  found = att.found
  before = _attack_timing(att, victim_s, target_s)
  victim = assembly.victim_part(vic, att.regime, clipped, found.oracle)
  arrays = dict(
    candidates=found.candidates,
    weights=found.weights,
    final_loss=found.final_loss,
    mean=ds.mean,
    **{f"hp_{k}": v for k, v in found.hparams.items()},
  )
  n, result = len(ds.x_train), None
  if n == 0:  # a blind attack: the candidates and the attacker's own view of them
    entries, after, scored_timing = assembly.blind(ds, found), Metrics.stating(), {}
  else:
    scores = assembly.scored(plan, att, vic, ds)
    entries, after, scored_timing = scores.entries, scores.after, scores.timing
    arrays, result = {**arrays, **scores.arrays}, scores.result
  timing = assembly.timing(
    before,
    scored_timing,
    {
      "total_s": time.time() - t_start,  # every phase, the attacker's own scores too
      "since_estimate_s": time.time() - att.started,  # what the estimate is of
    },
  )
  joined = Metrics.joined(head, victim, entries, Metrics.stating(timing=timing), after)
  report = verdict.conclude(joined, ds.num_classes, att.searched)
  _said(report, n)
  return Reconstruction(report, arrays, result, ds, vic)
