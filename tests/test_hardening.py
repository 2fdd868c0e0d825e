"""Hostile input to the library and the harness: every setting of the typed settings' table
refused when wrongly typed, beyond float32 or its range, or set while its feature is off (a
walk over the registry, checked without running anything); the efficacy harness's variant
lists; the public functions' arguments; x64 honoured from Python."""

import dataclasses
import json
import os
import subprocess
import sys

from conftest import reference_layout_safetensors
import jax
import numpy as np
import pytest

from experiments import efficacy as efficacy_binary
from experiments.configs import efficacy as efficacy_configs
from experiments.configs import reconstruct as configs
import recon_jax as rj
from recon_jax import cli
from recon_jax.core import rules
from recon_jax.engine import sweep
from recon_jax.errors import ConfigError
from recon_jax.eval import verdict
from recon_jax.job import pipeline, planning
from recon_jax.job.settings import RULES, SECTIONS, JobConfig
from recon_jax.studies import runner
from recon_jax.victims import models, recipe
from recon_jax.victims.recipe import VictimConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny(**changes):
  c = configs.get_config("tiny").to_dict()
  sections = {name: changes.pop(name, {}) for name in ("victim", *SECTIONS)}
  c.update(changes)
  for name, given in sections.items():
    c[name] = {**c[name], **given}
  return c


def _refused(config, name, explicit=()):
  with pytest.raises(ConfigError) as e:
    planning.prepare(JobConfig.of(config), explicit=explicit)
  assert e.value.argument == name, (name, str(e.value))
  return str(e.value)


# ----------------------------------------------------------------------------- the registry


def _fields(cls):
  return {f.name: f.default for f in dataclasses.fields(cls)}


def _registry():
  """(dotted name, rule, default) of every setting of the main job, its victim's included."""
  job = {k: v for k, v in _fields(JobConfig).items() if k not in ("victim", *SECTIONS)}
  out = [(k, RULES[k], job[k]) for k in job]
  for name, cls in SECTIONS.items():
    out += [(f"{name}.{k}", rules.rules_of(cls)[k], v) for k, v in _fields(cls).items()]
  defaults = dict(_fields(VictimConfig), widths=(256, 256))
  out += [(f"victim.{k}", recipe.RULES[k], defaults[k]) for k in defaults]
  return out


def _with(name, value, base=None):
  c = base if base is not None else _tiny()
  *section, leaf = name.split(".")
  (c[section[0]] if section else c)[leaf] = value
  return c


def test_every_setting_has_a_rule():
  assert set(RULES) == set(_fields(JobConfig)) - {"victim", *SECTIONS}
  for cls in SECTIONS.values():
    assert set(rules.rules_of(cls)) == set(_fields(cls))
  assert set(recipe.RULES) == set(_fields(VictimConfig))
  for _, rule, _ in _registry():
    assert rule.kind in rules.KINDS


WRONG_TYPE = {
  "bool": "False",  # a string is not a bool (it would be truthy)
  "int": "3",
  "float": "1.0",
  "str": 123,
  "path": 123,
  "range": None,
  "ints": 32,
}


@pytest.mark.parametrize("name, rule, default", _registry(), ids=[r[0] for r in _registry()])
def test_a_wrongly_typed_setting_is_refused_naming_it(name, rule, default):
  _refused(_with(name, WRONG_TYPE[rule.kind]), name)
  if rule.kind == "float":  # beyond float32, and infinite
    _refused(_with(name, 1e300), name)
    _refused(_with(name, float("inf")), name)
    _refused(_with(name, True), name)  # a bool is not a number
  if rule.kind == "int":
    _refused(_with(name, 1.5), name)
    _refused(_with(name, True), name)
    if rule.high is not None:
      _refused(_with(name, int(rule.high) + 1), name)
    if rule.low is not None:
      _refused(_with(name, int(rule.low) - 1), name)


# What turns each feature off, from the tiny preset (a test fails when a new feature lacks it).
def _features_off(tmp_path):
  model = str(tmp_path / "model.safetensors")
  reference_layout_safetensors(model, d=64)
  return {
    "search": {"attack": "weights"},
    "first_order": {"attack": "weights"},
    "lr_lam": {"attack": "inversion"},
    "alpha": {"attack": "inversion"},
    "lam_min": {"attack": "inversion"},
    "refine": {},
    "anneal": {},
    "split": {},
    "known_init": {},
    "known_init_attack": {"attack": "inversion"},
    "subspace": {},
    "lm": {},
    "identify": {"evaluation": {"identify": False}},
    "foreign": {},
    "user_data": {},
    "own_checkpoint": {},
    "trains": {"threat": {"model": model}},
    # the victim's own
    "wd_phase": {},
    "sgd": {"victim": {"optimizer": "adam"}},
    "converge": {},
  }


def _other_value(rule, default):
  """A valid value of ``rule`` that is not ``default``."""
  if rule.kind == "bool":
    return not default
  if rule.kind == "int":
    return int(default) + 1
  if rule.kind == "float":
    return (default or 0) * 0.5 if default else 0.5 * (rule.high or 1)
  if rule.kind == "str":
    choices = rule.choices() if callable(rule.choices) else rule.choices
    return next(c for c in (choices or ("32x32",)) if c != default)
  if rule.kind == "path":
    return "/nowhere/file"
  if rule.kind == "range":
    return "0.5"
  raise AssertionError(rule.kind)


def test_a_setting_of_a_feature_that_is_off_is_refused_naming_it(tmp_path):
  off = _features_off(tmp_path)
  walked = set()
  for name, rule, default in _registry():
    if rule.feature is None:
      continue
    assert rule.feature in off, f"{name}: how to turn {rule.feature!r} off?"
    walked.add(rule.feature)
    base = _tiny(**{k: dict(v) if isinstance(v, dict) else v for k, v in off[rule.feature].items()})
    config = _with(name, _other_value(rule, default), base)
    explicit = {name} if rule.explicit_only else ()
    _refused(config, name, explicit)
    if rule.explicit_only:  # a preset may carry it: accepted unless the user set it
      try:
        planning.prepare(JobConfig.of(config))
      except ConfigError as e:
        assert e.argument != name, str(e)
  assert walked  # the walk saw features at all


def test_the_issues_typed_cases_name_their_setting():
  for config, name in (
    (_tiny(threat={"known_init": "False"}), "threat.known_init"),
    (_tiny(runtime={"x64": "True"}), "runtime.x64"),
    (_tiny(search={"anneal_alpha": "100"}), "search.anneal_alpha"),
    (_tiny(threat={"model": 123}), "threat.model"),
    (_tiny(runtime={"matmul_precision": "bogus"}), "runtime.matmul_precision"),
    (_tiny(kkt={"w_tv": 1e300}), "kkt.w_tv"),
    (_tiny(kkt={"split_every": 5, "split_eps": float("inf")}), "kkt.split_eps"),
    (_tiny(kkt={"split_eps": -1.0}), "kkt.split_eps"),
    (_tiny(kkt={"split_every": 50}), "kkt.split_every"),  # more than steps: it would never split
    (_tiny(victim={"converge_tol": 1e300, "weight_decay": 1e-3}), "victim.converge_tol"),
    (_tiny(victim={"wd": 1e-3}), "victim.wd"),
    (_tiny(attack="inversion", search={"anneal_alpha": 100.0}), "search.anneal_alpha"),
    (_tiny(attack="inversion", search={"lr_lam": "0.1"}), "search.lr_lam"),
    (_tiny(attack="inversion", threat={"known_init": True}), "threat.known_init"),
    (_tiny(runtime={"max_memory_gb": 1e300}), "runtime.max_memory_gb"),
    (
      _tiny(
        attack="bilevel",
        victim={"weight_decay": 1e-3},
        search={"m_per_sample": 1},
        bilevel={"bilevel_inner_maxiter": 10**9},
      ),
      "bilevel.bilevel_inner_maxiter",
    ),
    (
      _tiny(victim={"converge_tol": 1e-6, "weight_decay": 1e-3, "converge_maxiter": 10**12}),
      "victim.converge_maxiter",
    ),
  ):
    _refused(config, name)
  for victim in (None, "lfw", 3):
    with pytest.raises(ConfigError) as e:
      JobConfig.of(_tiny() | {"victim": victim})
    assert e.value.argument == "victim"
  with pytest.raises(ConfigError) as e:
    JobConfig.of(_tiny() | {"threat": None})
  assert e.value.argument == "threat"
  _refused(_with("victim.widths", 32), "victim.widths")
  # steps under attack=weights: refused when the user set it (a preset may carry it)
  _refused(_tiny(attack="weights", search={"steps": 7}), "search.steps", explicit={"search.steps"})


def test_the_binary_names_the_flag_of_a_refused_setting(tmp_path, capsys):
  from experiments import reconstruct

  cfg = configs.get_config("tiny")
  cfg.kkt.split_eps = float("inf")
  cfg.kkt.split_every = 5
  with pytest.raises(SystemExit):
    cli.main_guard(lambda: reconstruct.job(cfg, str(tmp_path / "w")), cfg)
  line = capsys.readouterr().err.strip()
  assert line.startswith("error: --config.kkt.split_eps must be a finite number"), line
  assert not (tmp_path / "w").exists()


def test_presets_still_pass_their_checks():
  for preset in configs.PRESETS:
    if preset != "paper":  # CIFAR-10 files
      planning.prepare(configs.get_config(preset))
  for preset in ("finetune", "finetune_kkt", "lfw", "digits", "tiny"):
    cfg = efficacy_configs.get_config(preset)
    ok = [v for v in cfg.variants if v != "split" or preset != "tiny"]  # tiny: 20 steps
    runner.check_efficacy(cfg, ok, 1)
  cfg = efficacy_configs.get_config("leakage_map_quick")
  runner.check_efficacy(cfg, list(cfg.variants), 1)


def test_an_imported_model_refuses_the_recipe_it_would_ignore(tmp_path):
  model = str(tmp_path / "model.safetensors")
  reference_layout_safetensors(model, d=64)
  threat = {"model": model}
  planning.prepare(JobConfig.of(_tiny(threat=threat)))  # the preset's recipe: accepted
  _refused(_tiny(threat=threat, victim={"activation": "softplus"}), "victim.activation")
  _refused(_tiny(threat=threat, victim={"widths": (64, 64)}), "victim.widths")
  _refused(_tiny(threat=threat, victim={"lr": 0.5}), "victim.lr", explicit={"victim.lr"})
  _refused(_tiny(threat=dict(threat, known_init=True)), "threat.theta0")


# ----------------------------------------------------------------------------- the harness


def _harness(tmp_path, variants=("default", "tv")):
  """A finished harness's workdir as far as a refusal reads it: config.json (with its variants),
  metrics.json and results.md."""
  cfg = efficacy_configs.get_config("tiny")
  work = tmp_path / "eff"
  work.mkdir()
  from recon_jax.io import workdir as wd

  wd.write_config(str(work), cfg, study="efficacy", variants=list(variants), draws=1, first_draw=0)
  (work / "metrics.json").write_text('{"variants": {"default": {}, "tv": {}}}')
  (work / "results.md").write_text("| variant |\n")
  return cfg, work


def _tree(folder):
  return {p: (folder / p).read_bytes() for p in sorted(os.listdir(folder))}


@pytest.mark.parametrize(
  "kw, changes, must",
  [
    ({"variants": "default,default"}, {}, "variants names 'default' twice"),
    ({"variants": "default,tv"}, {"confidence": 1.5}, "--config.confidence"),
    ({"variants": "default,tv"}, {"variants.tv.kkt.w_tv": -1.0}, "--config.variants.tv.kkt.w_tv"),
    (
      {"variants": "default,subspace"},
      {"base.victim.arch": "cnn"},
      "--config.variants.subspace.kkt.subspace",
    ),
    ({"variants": "tv", "resume": True}, {}, "which ran variants=default,tv"),
    ({"variants": "tv,default", "resume": True}, {}, "which ran variants=default,tv"),
  ],
)
def test_a_refused_harness_leaves_a_finished_workdir_byte_identical(
  tmp_path, capsys, kw, changes, must
):
  cfg, work = _harness(tmp_path)
  for key, value in changes.items():
    node = cfg
    *path, leaf = key.split(".")
    for part in path:
      node = node[part]
    node[leaf] = value
  before = _tree(work)
  kw = {"draws": 1, "overwrite": not kw.get("resume"), **kw}
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: efficacy_binary.job(cfg, str(work), **kw), cfg)
  err = capsys.readouterr().err.strip().splitlines()
  assert e.value.code == 1 and len(err) == 1 and must in err[0], err
  assert _tree(work) == before


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_the_harness_help_lists_its_own_flags():
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.efficacy",
      "--config=experiments/configs/efficacy.py:tiny",
      "--help",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
  )
  assert out.returncode == 0, out.stderr
  for flag in ("--draws", "--variants", "--first_draw"):
    assert f"  {flag}\n" in out.stdout, flag


# ----------------------------------------------------------------------------- public functions


@pytest.fixture(scope="module")
def small():
  ds = rj.load_dataset("digits", n_per_class=3)
  module = models.MLP(widths=(8,), out_dim=1)
  params = models.init_params(module, jax.random.PRNGKey(0), ds.x_train.shape[1:])
  return ds, models.make_apply_fn(module), params


def _names(fn, argument):
  with pytest.raises(ConfigError) as e:
    fn()
  assert e.value.argument == argument, str(e.value)


def test_the_public_functions_name_a_bad_argument(small):
  ds, apply_fn, params = small
  img = ds.x_train.shape[1:]
  lab = np.array([1.0, 1.0, -1.0, -1.0])
  nan = jax.tree_util.tree_map(lambda a: a * np.nan, params)
  _names(lambda: rj.make_target(nan, lab), "params")
  _names(lambda: rj.make_target(params, np.ones((2, 2))), "labels")
  _names(lambda: rj.make_target(params, lab, box=(1.0, 0.0)), "box")
  _names(lambda: rj.make_x_init("gaussian", m=0, input_shape=img), "m")
  _names(lambda: rj.make_x_init("gaussian", m=2, input_shape=(8, 0, 1)), "input_shape")
  _names(
    lambda: rj.make_x_init("ground_truth", m=2, input_shape=img, oracle=np.zeros((3, 4, 4, 1))),
    "oracle",
  )
  _names(lambda: rj.random_search(0, 0, {"lr_x": (0.1, 1.0, "log")}), "num")
  _names(lambda: rj.random_search(0, 2, {"lr_x": (float("nan"), 1.0, "log")}), "lr_x")
  _names(lambda: rj.random_search(0, 2, {"lr_x": (0.1,)}), "lr_x")
  c, w, fl = np.zeros((2, 4, *img)), np.ones((2, 4)), np.zeros(2)
  _names(lambda: rj.evaluate_candidates(np.zeros((2, 4, 5, 5, 1)), w, fl, ds), "cands")
  _names(lambda: rj.evaluate_candidates(c, np.ones((2, 3)), fl, ds), "weights")
  _names(lambda: rj.evaluate_candidates(c, w, np.zeros(3), ds), "final_loss")
  _names(lambda: rj.evaluate_candidates(c, w, fl, ds, ssim_threshold=1.5), "ssim_threshold")
  x, y = ds.x_train, ds.y_train
  args = (apply_fn, "binary", params, x, y)
  _names(lambda: rj.identifiability(*args, c, w, lab[:2]), "labels")
  _names(lambda: rj.identifiability(apply_fn, "binary", params, x, y[:2], c, w, lab), "y_train")
  _names(lambda: rj.identifiability(*args, np.zeros((2, 4, 5, 5, 1)), w, lab), "candidates")
  multi = (apply_fn, "multiclass", params, x, y, c, w, np.arange(4))
  _names(lambda: rj.identifiability(*multi), "problem")  # a binary victim
  attack = rj.kkt_attack(apply_fn, "binary")
  target = rj.make_target(params, lab)
  x_init = rj.make_x_init("gaussian", m=4, input_shape=img)
  hp = rj.random_search(0, 2, dict(sweep.PAPER_RANGES))
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  run = lambda *a, **k: rj.run_attack(*a, log=False, **k)  # noqa: E731
  _names(lambda: run(attack, x_init, keys[:1], [(3, hp)], target), "stages")  # 2 values, 1 key
  _names(lambda: run(attack, x_init, keys, [(3, hp)], target, chunk_steps=0), "chunk_steps")
  _names(lambda: run(attack, x_init, keys, [], target), "stages")
  bad_hp = {**hp, "lr_x": np.array([np.nan, 1.0], np.float32)}
  _names(lambda: run(attack, x_init, keys, [(3, bad_hp)], target), "stages")
  wrong = rj.make_x_init("gaussian", m=4, input_shape=(5, 5, 1))
  _names(lambda: run(attack, wrong, keys, [(3, hp)], target), "x_init")
  fewer = rj.make_x_init("gaussian", m=2, input_shape=img)
  _names(lambda: run(attack, fewer, keys, [(3, hp)], target), "x_init")


# ----------------------------------------------------------------------------- runs


class _Seen(Exception):
  pass


def test_x64_is_honoured_by_the_library_run(tmp_path, monkeypatch):
  """A job's x64 (and matmul_precision) hold while recon_jax.reconstruct and run_reconstruction
  run, whatever the caller's precision, and config.json records it; the caller's is restored."""
  from recon_jax.job import run
  from recon_jax.types import float_dtype

  seen = []

  def record(plan, state_file):
    seen.append((np.dtype(float_dtype()), jax.config.jax_default_matmul_precision))
    raise _Seen

  monkeypatch.setattr(pipeline, "_reconstruct", record)
  for x64, dtype in ((True, np.float64), (False, np.float32)):
    job = JobConfig.of(_tiny(runtime={"x64": x64, "matmul_precision": "highest"}))
    with jax.enable_x64(not x64):
      with pytest.raises(_Seen):
        rj.reconstruct(job, verbose=False)
      work = tmp_path / f"x64_{x64}"
      with pytest.raises(_Seen):
        run.run_reconstruction(planning.prepare(job), str(work))
      assert jax.config.jax_enable_x64 is (not x64)  # restored
    assert seen[-2:] == [(np.dtype(dtype), "highest")] * 2
    env = json.loads((work / "config.json").read_text())["environment"]
    assert env["x64"] is x64 and env["matmul_precision"] == "highest"


def test_a_convergence_phase_that_runs_out_warns():
  metrics = {"victim": {"stationary": False, "grad_norm_rel": 2.3e-3}}
  assert any("converge" in w for w in verdict.run_warnings(metrics, 2))
  assert not any("converge" in w for w in verdict.run_warnings({"victim": {}}, 2))


def test_a_direct_attack_that_reads_few_candidates_warns():
  few = {"attack": "cone", "m": 3, "n_train": 100}
  assert any("3 candidates for 100" in w for w in verdict.run_warnings(few, 2, searched=False))
  assert not any(
    "candidates for" in w
    for w in verdict.run_warnings(dict(few, m=19, n_train=20), 2, searched=False)
  )
  searched = dict(few, attack="kkt", num_restarts=4)  # a search's m is per restart
  assert not any("candidates for" in w for w in verdict.run_warnings(searched, 2))
