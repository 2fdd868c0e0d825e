"""metrics.json declared: every key a reconstruction's report holds, one frozen dataclass per
section (:mod:`recon_jax.eval.sections`: how a section is declared, read and written).

Each field says which key of its section it is with :func:`key` (one declaration per key,
with what it means); a value that is free-form by nature (a dict of seconds per score, the
sweep's hyperparameters of a restart) is one field that holds it as it is, or a section's
open part, each saying so.  Adding a number to the report is one line here; a stage of the
job that states a key not declared raises :class:`Undeclared` naming its full path.

The job's stages (:mod:`recon_jax.job.pipeline`, :mod:`recon_jax.job.assembly`) return
their parts of the report typed, :class:`Metrics` is joined from them and completed by the
verdict (:func:`recon_jax.eval.verdict.conclude`), and metrics.json is written from it
(:meth:`Section.to_dict`): each section writes the keys it states, in order.

Readers (the verdict, the efficacy harness, the reproduction, report.md and the figures)
read by attribute.  :meth:`Metrics.from_metrics` reads a metrics.json (of this version or
an earlier one) leniently: a key that is absent reads as the field's default (None unless
stated), never a KeyError; a section that is absent reads as an empty one (None where it is
``optional``), so ``report.regime.cone.cannot`` is None on a run of another attack; a key it
does not declare is left out.  Values are kept as the file holds them (a count stays the
int, a ratio the float or None it was), so a reader formats the same number it read
before.  A reader whose arithmetic must not meet a damaged file (the efficacy harness and
the reproduction, reading finished draws back) passes ``problems``, a list: a value not of
its field's declared type then reads as absent too, and ``PATH holds VALUE, not TYPE`` is
appended there.  A reader's shortcut to a key of a subsection (``Metrics.total_s``:
``timing.total_s``) is a property, so that key is still declared once.

This is not the report the job writes for people (:mod:`recon_jax.job.report`: report.md)
nor the evaluation that makes its counts (:mod:`recon_jax.eval.evaluation`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

from recon_jax.eval.sections import (  # noqa: F401 (the machinery, read here by its users)
  Section,
  Undeclared,
  declared_keys,
  fits,
  key,
  read,
  shown,
  write,
)


# --------------------------------------------------------------------------------------------
# The victim and what the job assumed of it
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Conv(Section):
  """One row of ``victim.imported.arch.convs``: a convolution of an imported network."""

  features: Optional[int] = key()  # output channels
  in_channels: Optional[int] = key()  # input channels
  kernel_size: Optional[Sequence[int]] = key()  # [kh, kw]
  stride: Optional[Sequence[int]] = key()  # [sh, sw]
  padding: Optional[Sequence[Sequence[int]]] = key()  # [[top, bottom], [left, right]]
  bias: Optional[bool] = key()  # it has a bias
  out_shape: Optional[Sequence[int]] = key()  # [H, W, C] of its output
  name: Optional[str] = key()  # its prefix in the file's tensor names


@dataclasses.dataclass(frozen=True)
class Arch(Section):
  """``victim.imported.arch``: the network the importer read from the file."""

  kind: Optional[str] = key()  # 'mlp' or 'cnn'
  input_shape: Optional[Sequence[int]] = key()  # an image's [H, W, C] (an MLP: [d])
  input_layout: Optional[str] = key()  # 'nhwc' or 'nchw' (PyTorch's flatten)
  first_linear_permuted: Optional[bool] = key()  # the first dense layer's columns reordered
  widths: Optional[Sequence[int]] = key()  # the hidden dense layers' widths
  out_dim: Optional[int] = key()  # the output layer's width
  bias: Optional[str] = key()  # which layers have biases: a bias mode, or 'custom'
  layer_bias: Optional[Sequence[bool]] = key()  # per dense layer, whether it has a bias
  layer_names: Optional[Sequence[str]] = key()  # the dense layers' prefixes in the file
  convs: Tuple[Conv, ...] = key(rows=Conv)  # a CNN's convolutions (absent for an MLP)
  module: Optional[str] = key()  # the flax module that runs it


@dataclasses.dataclass(frozen=True)
class Imported(Section):
  """``victim.imported``: a model imported from a user's file."""

  format: Optional[str] = key()  # 'safetensors', 'torch', ...
  arch: Arch = key(section=Arch)  # what the importer read of its layers


@dataclasses.dataclass(frozen=True)
class VictimReport(Section):
  """``victim``: the victim's training summary (margins and outputs left out).  A victim
  stored by another version of the library (a checkpoint, the cache) carries the summary
  that version wrote: its keys not declared here are kept as they are in ``other``."""

  loss: Optional[float] = key()  # the final training loss
  train_error: Optional[float] = key()  # the fraction of its training set it misclassifies
  stationary: Optional[bool] = key()  # False: its convergence phase ended before its tolerance
  grad_norm_rel: Optional[float] = key()  # its relative gradient norm at the end
  epochs_run: Optional[int] = key()  # the epochs it trained
  time_s: Optional[float] = key()  # seconds of its last training phase
  test_accuracy: Optional[float] = key()  # on the held-out images (a classifier)
  test_mse: Optional[float] = key()  # on the held-out images (squared error)
  phase: Optional[str] = key()  # its last phase: 'weight_decay' or 'converge' (absent: plain)
  lbfgs_iters: Optional[int] = key()  # L-BFGS iterations of its convergence phase
  final_weight_decay: Optional[float] = key()  # the weight decay of its last phase
  images_on_kink: Optional[float] = key()  # training images on a first-layer ReLU's kink
  init: Optional[str] = key()  # how theta_0 was made, where not the recipe's draw
  imported: Optional[Imported] = key(section=Imported, optional=True)  # None: not imported
  other: Mapping[str, Any] = key(open=True)  # a stored summary's keys of another version


@dataclasses.dataclass(frozen=True)
class Assumed(Section):
  """``assumed``: what the report took as given about the victim and its data."""

  dataset: Optional[str] = key()  # the victim's dataset, or ``user:FOLDER``
  n_per_class: Optional[int] = key()  # its draw (None: a user's images)
  data_seed: Optional[int] = key()  # the seed of that draw (None: a user's images)
  task_from_loss: Optional[str] = key(default="logistic")  # the victim's loss
  input_shape: Optional[Sequence[int]] = key()  # an image's [H, W, C]
  pixel_range: Optional[Sequence[float]] = key()  # [0, 1]
  training_mean_subtracted: Optional[bool] = key()  # the victim saw images less their mean
  input_layout: Optional[str] = key()  # an imported model's (absent: native)
  conv_stride: Any = key()  # an imported CNN's stride setting, as given
  conv_padding: Any = key()  # its padding setting, as given
  data_mean_file: Optional[str] = key()  # the training mean's file (None: none)


# --------------------------------------------------------------------------------------------
# The regime: what the job read of theta* before the attack
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Cone(Section):
  """``regime.cone``: what the cone read of the first layer's change (empty for other attacks)."""

  decay: Optional[float] = key()  # the multiple of theta_0 training kept (weight decay)
  span_dim: Optional[int] = key()  # directions of the change above its rounding noise
  input_dim: Optional[int] = key()  # d, the input's directions
  under_noise_floor: Optional[int] = key()  # training images with no facet above that noise
  cannot: Optional[str] = key()  # why it cannot test the model (its gate), or None
  read: Optional[int] = key()  # the images it read exactly (None: it did not search)
  short: Optional[str] = key()  # how it read fewer images than the span holds, or None


@dataclasses.dataclass(frozen=True)
class Span(Section):
  """``regime.span``: the first layer's span (of theta* - theta_0 with a known theta_0)."""

  dim: Optional[int] = key()  # the directions kept
  input_dim: Optional[int] = key()  # d, the input's directions
  rule: Optional[str] = key()  # 'noise', 'all' (no bulk) or 'rel_tol'
  noise_floor_rel: Optional[float] = key()  # the median singular value / the largest
  weakest_kept_rel: Optional[float] = key()  # the smallest kept singular value / the largest
  strongest_dropped_rel: Optional[float] = key()  # the largest dropped one / the largest


@dataclasses.dataclass(frozen=True)
class Regime(Section):
  """``regime``: what the job read of theta* before the attack."""

  known_init: Optional[bool] = key()  # theta_0 known: the attack fits theta* - theta_0
  n_train: Optional[int] = key()  # the training images the span is read against
  linearize: Optional[float] = key()  # where between theta_0 and theta* (known theta_0)
  span: Optional[Span] = key(section=Span, optional=True)  # None: not computed (not dense)
  span_why: Optional[str] = key()  # why it was not (a first layer that is not dense)
  handover_skipped: Optional[str] = key()  # why the cone did not hand over to the search
  cone: Cone = key(section=Cone)  # the cone's reading (absent: another attack)

  @property
  def span_dim(self) -> Optional[int]:
    """``span.dim``; None where the span was not computed."""
    return None if self.span is None else self.span.dim

  @property
  def not_dense(self) -> bool:
    """The first layer is not dense: the span and the flat-family checks do not apply."""
    return self.span_dim is None and bool(self.span_why)


# --------------------------------------------------------------------------------------------
# The evaluation against the truth
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EvaluationReport(Section):
  """``evaluation`` (the candidates pooled), ``baselines.mean_image`` and
  ``baselines.heldout``: an evaluation's counts
  (:meth:`recon_jax.eval.images.EvalResult.summary`)."""

  n_train: Optional[int] = key()  # the training images scored against
  n_candidates: Optional[int] = key()  # the images scored as reconstructions
  n_heldout_ref: Optional[int] = key()  # held-out images a reconstruction is compared with
  ssim_threshold: Optional[float] = key()  # strict recovery's
  filter_size: Optional[int] = key()  # SSIM's window
  vote_frac: Optional[float] = key()  # the matching's voting fraction
  recovered_strict: Optional[int] = key()  # training images recovered strictly
  recovered_strict_frac: Optional[float] = key()  # of n_train
  n_ssim_gt_04: Optional[int] = key("n_ssim_gt_0.4")  # the paper's looser count
  n_ssim_gt_05: Optional[int] = key("n_ssim_gt_0.5")  # training images above SSIM 0.5
  n_ssim_gt_06: Optional[int] = key("n_ssim_gt_0.6")  # above SSIM 0.6
  mean_ssim_top10: Optional[float] = key()  # the mean SSIM of the 10 best reconstructions
  mean_ssim_top45: Optional[float] = key()  # of the 45 best (Haim et al.'s figure)
  mean_ssim: Optional[float] = key()  # over the training images
  median_ssim: Optional[float] = key()  # over the training images
  all_restarts_diverged: Optional[bool] = key()  # nothing was scored: no candidate finished


@dataclasses.dataclass(frozen=True)
class Baselines(Section):
  """``baselines``: what the evaluation gives images that are no reconstructions."""

  mean_image: EvaluationReport = key(section=EvaluationReport)  # the training mean
  heldout: Optional[EvaluationReport] = key(section=EvaluationReport, optional=True)  # unseen


@dataclasses.dataclass(frozen=True)
class Selection(Section):
  """``selection``: the restarts and the attacker's own pick among them."""

  n_restarts: Optional[int] = key()  # the restarts run
  n_diverged: Optional[int] = key()  # of them diverged
  diverged_restarts: Optional[Sequence[int]] = key()  # which
  spearman_neg_loss_vs_mean_ssim: Optional[float] = key()  # does a lower loss mean better?
  best_by_loss_restart: Optional[int] = key()  # the attacker's pick: the lowest final loss
  best_by_loss_mean_ssim: Optional[float] = key()  # its mean SSIM
  best_by_loss_recovered_strict: Optional[int] = key()  # what that pick recovers strictly
  best_true_restart: Optional[int] = key()  # the one that truly recovers most (None: unscored)
  best_true_mean_ssim: Optional[float] = key()  # its mean SSIM
  best_true_recovered_strict: Optional[int] = key()  # what it recovers strictly
  spearman_weight_vs_candidate_ssim: Optional[float] = key()  # does a larger lambda mean better?

  @property
  def picked_best(self) -> Optional[bool]:
    """Whether the attacker's pick was the truly best restart (None: nothing scored)."""
    if self.best_true_restart is None:
      return None
    return self.best_by_loss_restart == self.best_true_restart


@dataclasses.dataclass(frozen=True)
class Restart(Section):
  """One row of ``per_restart``.  Its hyperparameters are named after the sweep's settings
  (``lr_x``, ``alpha``, ... of the attack that ran): ``hparams``, its open part."""

  restart: Optional[int] = key()  # its index
  diverged: Optional[bool] = key()  # its loss went non-finite
  final_loss: Optional[float] = key()  # None: diverged
  mean_ssim: Optional[float] = key()  # its own reconstructions' mean SSIM
  recovered_strict: Optional[int] = key()  # what it recovers strictly on its own
  n_ssim_gt_04: Optional[int] = key("n_ssim_gt_0.4")  # above SSIM 0.4 on its own
  stat_rel: Optional[float] = key()  # its relative stationarity residual at the end
  hparams: Mapping[str, float] = key(open=True)  # the sweep's draw for it


@dataclasses.dataclass(frozen=True)
class Family(Section):
  """``identifiability.family``: the flat family of exact fits through the training set."""

  dimension: Optional[int] = key()  # its dimension (0: none)
  first_layer_rank: Optional[int] = key()  # the input directions the first layer sees
  input_dim: Optional[int] = key()  # d, of all of them
  multiplier_rank: Optional[int] = key()  # the rank of the multipliers' first-layer terms
  witness_residual: Optional[float] = key()  # how well its farthest member in the box fits
  witness_distance: Optional[float] = key()  # how far that member is from the training set
  confirmed: Optional[bool] = key()  # None where it was not looked for
  witness_note: Optional[str] = key()  # why no member was found
  skipped: Optional[str] = key()  # why it was not looked for


@dataclasses.dataclass(frozen=True)
class Missed(Section):
  """``identifiability.missed``: where the images the attack missed rank in the truth's fit."""

  images: Optional[Sequence[int]] = key()  # the training images not recovered
  weakness_rank: Optional[Sequence[int]] = key()  # 1: the one the equations notice least
  gain_over_residual: Optional[Sequence[float]] = key()  # each one's leave-one-out gain / truth


@dataclasses.dataclass(frozen=True)
class Identifiability(Section):
  """``identifiability``: how well the training set fits the attack's equations against
  what the attack found."""

  truth_residual: Optional[float] = key()  # the training set's, a fraction of ||reference||^2
  attack_best_residual: Optional[float] = key()  # the best restart's
  attack_median_residual: Optional[float] = key()  # the restarts' median
  ratio: Optional[float] = key()  # the attack's best residual / the training set's
  comparison: Optional[str] = key()  # what is compared with what, in words
  per_restart_residual: Optional[Sequence[float]] = key()  # each restart's (None: not scored)
  best_restart: Optional[int] = key()  # the restart that fits best
  attack_best_residual_all_m: Optional[float] = key()  # that restart's, all its candidates
  # the training set's multipliers: per image (binary), per image and output (multiclass and
  # regression: [n][outputs])
  truth_lam: Optional[Union[Sequence[float], Sequence[Sequence[float]]]] = key()
  truth_leave_one_out: Optional[Sequence[float]] = key()  # each image's leave-one-out gain
  family: Family = key(section=Family)  # other exact fits through the training set
  missed: Optional[Missed] = key(section=Missed, optional=True)  # None: nothing scored
  tolerance: Optional[float] = key()  # the ratio's band of equal fits
  verdict: Optional[str] = key()  # its reading in one line
  cost_s: Optional[float] = key()  # seconds it took
  skipped: Optional[str] = key()  # why it was not scored


@dataclasses.dataclass(frozen=True)
class TprAtFpr(Section):
  """``membership.tpr_at_fpr``: the true-positive rate at low false-positive rates."""

  one_pct: Optional[float] = key("0.01")  # at 1% FPR
  tenth_pct: Optional[float] = key("0.001")  # at 0.1% FPR


@dataclasses.dataclass(frozen=True)
class TestTprAtFpr(Section):
  """``membership.tests.NAME.tpr_at_fpr``: true positives at 1%, 0.1% and 0.01% FPR (None:
  too few held-out images for that rate)."""

  one_pct: Optional[float] = key("0.01")  # at 1% FPR
  tenth_pct: Optional[float] = key("0.001")  # at 0.1% FPR
  hundredth_pct: Optional[float] = key("0.0001")  # at 0.01% FPR


@dataclasses.dataclass(frozen=True)
class MembershipTest(Section):
  """One of ``membership.tests``: a membership score and how well it separates the sets."""

  kind: Optional[str] = key()  # "weights", "baseline" or "reconstruction"
  auc: Optional[float] = key()  # ROC AUC of the training images against the held-out ones
  tpr_at_fpr: TestTprAtFpr = key(section=TestTprAtFpr)  # at low false-positive rates
  p_value: Optional[float] = key()  # the permutation test's
  significant: Optional[bool] = key()  # p_value at or below the level
  too_few_heldout_for: Optional[Sequence[str]] = key()  # the rates the held-out set cannot reach
  cost_s: Optional[float] = key()  # seconds the score took
  scores_train: Optional[Sequence[Optional[float]]] = key()  # per training image
  scores_heldout: Optional[Sequence[Optional[float]]] = key()  # per held-out image


@dataclasses.dataclass(frozen=True)
class Membership(Section):
  """``membership``: the membership test of the training images against held-out ones."""

  auc: Optional[float] = key()  # ROC AUC of the training images against the held-out ones
  tpr_at_fpr: TprAtFpr = key(section=TprAtFpr)  # true positives at low false-positive rates
  p_value: Optional[float] = key()  # the permutation test's
  level: float = key(default=0.01)  # its level
  smallest_p: float = key(default=1)  # the smallest p-value its images could reach
  testable: Optional[bool] = key()  # smallest_p reaches the level
  significant: Optional[bool] = key()  # p_value at or below the level
  n_members: Optional[int] = key()  # training images scored
  n_others: Optional[int] = key()  # held-out images scored
  scores_train: Optional[Sequence[Optional[float]]] = key()  # per training image
  scores_heldout: Optional[Sequence[Optional[float]]] = key()  # per held-out image
  skipped: Optional[str] = key()  # why it was not tested
  tests: Mapping[str, MembershipTest] = key(named=MembershipTest)  # every score, by name
  tests_skipped: Optional[Mapping[str, str]] = key()  # {a test that did not apply: why}

  @property
  def tpr_at_1pct(self) -> Optional[float]:
    """``tpr_at_fpr["0.01"]``: true positives at 1% FPR."""
    return self.tpr_at_fpr.one_pct


# --------------------------------------------------------------------------------------------
# The attacker's own scores (no ground truth), and the rest of the report
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Scores(Section):
  """One score of ``identification.scores``: how well it tells the real reconstructions."""

  auc: Optional[float] = key()  # ROC AUC of the score against real or not
  precision_at_5: Optional[float] = key("precision@5")  # the real among its 5 highest
  precision_at_10: Optional[float] = key("precision@10")  # among its 10 highest
  n: Optional[int] = key()  # candidates scored
  n_recovered: Optional[int] = key()  # of them real
  base_rate: Optional[float] = key()  # n_recovered / n: a random score's precision


@dataclasses.dataclass(frozen=True)
class Trusted(Section):
  """One row of ``identification.top``: a candidate the attacker trusts most."""

  rank: Optional[int] = key()  # 0: trusted most
  restart: Optional[int] = key()  # the restart it is of
  index: Optional[int] = key()  # in its restart
  score: Optional[float] = key()  # by the trusted score
  lambda_: Optional[float] = key("lambda")  # its multiplier (None: the attack has none)
  recovered_strict: Optional[bool] = key()  # real
  train_idx: Optional[int] = key()  # the training image it resembles most
  ssim: Optional[float] = key()  # with that image


@dataclasses.dataclass(frozen=True)
class Truth(Section):
  """``identification.truth``: the candidates marked real with the ground truth."""

  n_candidates: Optional[int] = key()  # of the restarts that finished
  n_real: Optional[int] = key()  # strict recoveries of some training image
  n_distinct_real: Optional[int] = key()  # the training images they recover
  n_restarts_valid: Optional[int] = key()  # the restarts that finished
  ssim_threshold: Optional[float] = key()  # strict recovery's


@dataclasses.dataclass(frozen=True)
class ScoreSettings(Section):
  """``identification.settings``: how the attacker's scores were computed."""

  stability_steps: Optional[int] = key()  # attack steps of each stability re-run
  stability_candidates: Optional[int] = key()  # the candidates scored for stability
  stability_select: Optional[str] = key()  # how they were chosen: 'lambda' or 'random'
  stability_noise: Optional[float] = key()  # the kick's std per input entry
  agreement_threshold: Optional[float] = key()  # NCC above which two candidates agree
  leave_one_out_normalize: Optional[str] = key()  # 'mean' or 'sum'
  trust_order: Optional[Sequence[str]] = key()  # the trusted score and its tie-breakers


@dataclasses.dataclass(frozen=True)
class Identification(Section):
  """``identification``: how well the attacker's own scores pick out the real candidates."""

  scores: Mapping[str, Scores] = key(named=Scores)  # {score's name: how well it ranks}
  skipped: Optional[Mapping[str, str]] = key()  # {score's name: why not computed}, as is
  trusted_score: Optional[str] = key()  # the score the attacker trusts (fixed a priori)
  top: Tuple[Trusted, ...] = key(rows=Trusted)  # the candidates it trusts most
  top_distinct_recovered: Optional[int] = key()  # training images they recover strictly
  truth: Truth = key(section=Truth)  # the ground truth they are measured against
  settings: ScoreSettings = key(section=ScoreSettings)  # how they were computed
  timing_s: Optional[Mapping[str, float]] = key()  # {score's name, truth, total: s}, as is


@dataclasses.dataclass(frozen=True)
class Handover(Section):
  """``handover``: the cone handed over to the KKT search in the change's span."""

  why: Optional[str] = key()  # what the cone read short, in words
  to: Optional[str] = key()  # the search's attack
  direct_candidates: Optional[int] = key()  # the cone's images, each a start of the search
  direct_recovered_strict: Optional[int] = key()  # what the cone's recover alone
  direct_n_ssim_gt_04: Optional[int] = key("direct_n_ssim_gt_0.4")  # above SSIM 0.4 alone
  reread_candidates: Optional[int] = key()  # the first layer's facets read again, past one layer
  reread_recovered_strict: Optional[int] = key()  # what those recover (absent: none read)
  direct_s: Optional[float] = key()  # seconds of the cone
  reread_s: Optional[float] = key()  # seconds of its reading again


@dataclasses.dataclass(frozen=True)
class SpanCeiling(Section):
  """``span_ceiling``: the training images the change's span holds (a known theta_0)."""

  span_dim: Optional[int] = key()  # the change's directions above its rounding noise
  recovered_strict: Optional[int] = key()  # their projections that pass the strict rule
  missing: Optional[Sequence[int]] = key()  # the training images whose projection does not


@dataclasses.dataclass(frozen=True)
class Timing(Section):
  """``timing``: seconds of each part of the job."""

  victim_s: Optional[float] = key()  # loading or training the victim
  target_s: Optional[float] = key()  # the attacker's target (theta*, gradients at linearize)
  regime_s: Optional[float] = key()  # reading the regime off theta* (the first layer's span)
  estimating_s: Optional[float] = key()  # making the estimate (its timed probes)
  estimate_s: Optional[float] = key()  # what the estimate said before the attack
  # the estimate's seconds per phase ({"attack_s", "handover_s", "identifiability_s", ...})
  estimated: Optional[Mapping[str, float]] = key()
  attack_s: Optional[float] = key()  # the attack (before any hand-over; a search's compile too)
  handover_s: Optional[float] = key()  # the search after a hand-over (absent: none)
  reread_s: Optional[float] = key()  # the direct attack again after a hand-over (absent: none)
  compile_s: Optional[float] = key()  # the search's
  attack_run_s: Optional[float] = key()  # the search's steps, compiled
  restart_steps_per_s: Optional[float] = key()  # restarts x steps / attack_run_s
  identifiability_s: Optional[float] = key()  # scoring the fits
  evaluation_s: Optional[float] = key()  # scoring the candidates against the truth
  membership_s: Optional[float] = key()  # the membership test
  identification_s: Optional[float] = key()  # the attacker's own scores
  span_ceiling_s: Optional[float] = key()  # what the change's span holds (absent: not counted)
  total_s: Optional[float] = key()  # the job's, every phase (the attacker's scores too)
  since_estimate_s: Optional[float] = key()  # what the estimate is of
  files_s: Optional[float] = key()  # writing the figures and report.md (after total_s)


@dataclasses.dataclass(frozen=True)
class Metrics(Section):
  """A reconstruction's metrics.json (:meth:`from_metrics`, :meth:`from_job`)."""

  attack: Optional[str] = key()  # the attack that ran first (a hand-over's: the cone)
  problem: Optional[str] = key()  # 'binary', 'multiclass' or 'general'
  assumed: Assumed = key(section=Assumed)  # what the report took as given
  assumes_stationary: Optional[bool] = key()  # the attack assumes a stationary victim
  dataset: Optional[str] = key()  # the images' dataset (a user's: their folder)
  heldout_removed: Optional[str] = key()  # held-out blanks and copies left out (absent: none)
  # the init that started the search from training images, an oracle no attacker has
  # (recon_jax.attacker.view.oracle_starts: 'ground_truth' or 'mix'; absent: none did)
  oracle_starts: Optional[str] = key()
  # the fraction of the candidates' pixels clipped to the pixel box before they were scored
  # (None: clip_to_box off, or a run before it)
  clipped_to_box: Optional[float] = key()
  regime: Regime = key(section=Regime)  # what the job read of theta* first
  victim: VictimReport = key(section=VictimReport)  # its training summary
  victim_source: Optional[str] = key()  # 'trained', 'cache', or the file it was read from
  n_train: Optional[int] = key()  # 0: a blind attack
  blind: Optional[bool] = key()  # no training images (absent otherwise)
  membership_only: Optional[bool] = key()  # attack=none: no reconstruction (absent otherwise)
  m: Optional[int] = key()  # candidates per restart
  num_restarts: Optional[int] = key()  # of the search (a direct attack: 1)
  recovered_strict: Optional[int] = key()  # pooled over restarts (None: blind)
  n_ssim_gt_04: Optional[int] = key("n_ssim_gt_0.4")  # the paper's looser count, pooled
  # the two counts of the baselines (baselines): the training mean, and unseen images scored
  # as reconstructions (None: no held-out images)
  baseline_mean_image_n_ssim_gt_04: Optional[int] = key("baseline_mean_image_n_ssim_gt_0.4")
  baseline_mean_image_recovered_strict: Optional[int] = key()
  baseline_heldout_recovered_strict: Optional[int] = key()
  baseline_heldout_n_ssim_gt_04: Optional[int] = key("baseline_heldout_n_ssim_gt_0.4")
  oracle_residual_rel: Optional[float] = key()  # identifiability.truth_residual
  identifiability: Identifiability = key(section=Identifiability)  # the equations' fits
  evaluation: EvaluationReport = key(section=EvaluationReport)  # the pooled candidates' counts
  baselines: Baselines = key(section=Baselines)  # the baselines' counts
  selection: Selection = key(section=Selection)  # the restarts, and the attacker's pick
  per_restart: Tuple[Restart, ...] = key(rows=Restart)  # each restart on its own
  # the attacker's own scores (None: evaluation.identify off, or no search)
  identification: Optional[Identification] = key(section=Identification, optional=True)
  membership: Membership = key(section=Membership)  # the membership test
  final_stat_rel: Optional[Sequence[float]] = key()  # each restart's, where the search ended
  precision_warning: Optional[str] = key()  # float32 ran out of digits first
  handover: Optional[Handover] = key(section=Handover, optional=True)  # None: no hand-over
  span_ceiling: Optional[SpanCeiling] = key(section=SpanCeiling, optional=True)  # None: not read
  timing: Timing = key(section=Timing)  # seconds of each part
  warnings: Optional[Sequence[str]] = key()  # what a reader must know first
  victim_warning: Optional[str] = key()  # why the victim may not hold its data (None: none)
  verdict: Optional[str] = key()  # 'leaks', 'no_evidence' or 'cannot_tell'
  reasons: Optional[Sequence[str]] = key()  # why, one sentence each
  verdict_line: Optional[str] = key()  # both in one line (the binary's last)
  wrong_data: Optional[bool] = key()  # the images given fit far worse than the candidates

  @classmethod
  def from_metrics(
    cls, metrics: Optional[Mapping[str, Any]], *, problems: Optional[list] = None
  ) -> "Metrics":
    """metrics.json's dict read typed, leniently (absent keys: the fields' defaults; keys not
    declared: left out), as an earlier version wrote it too.  ``problems`` (a list): a value
    not of its declared type reads as absent too, and what was wrong is appended to it
    (``n_train holds "20", not a whole number``; :func:`read`), so a reader's arithmetic
    meets only the types declared."""
    return read(cls, metrics, problems=problems)

  @classmethod
  def from_job(cls, metrics: Mapping[str, Any]) -> "Metrics":
    """A report's JSON values (a stage's part, :func:`recon_jax.job.assembly.typed`, or a
    metrics.json of this version) typed, strictly: :class:`Undeclared` names the first key
    this module does not declare.  :meth:`to_dict` gives ``metrics`` back."""
    return read(cls, metrics, strict=True)

  @property
  def total_s(self) -> Optional[float]:
    """``timing.total_s``."""
    return self.timing.total_s

  @property
  def task_from_loss(self) -> Optional[str]:
    """``assumed.task_from_loss`` (an older report without it: 'logistic')."""
    return self.assumed.task_from_loss

  @property
  def span_ceiling_strict(self) -> Optional[int]:
    """``span_ceiling.recovered_strict``: the training images the change's span holds."""
    return None if self.span_ceiling is None else self.span_ceiling.recovered_strict

  @property
  def scores(self) -> Mapping[str, Scores]:
    """``identification.scores`` ({} where the attacker's scores were not computed)."""
    return {} if self.identification is None else self.identification.scores

  @property
  def cannot(self) -> Optional[str]:
    """Why the attack said, from what it read of theta* before searching, that it cannot
    test the model (the cone's gate), or None."""
    return self.regime.cone.cannot
