"""The boundary between what the attacker holds and the training set (recon_jax.attacker.view).

No function under recon_jax/attacks or recon_jax/engine is handed the dataset, or can reach a
training image through its arguments: statically (no parameter or import that could carry
one) and at run time (a job whose training images raise when read from those packages
finds the same candidates as one whose images are open).  Training images reach a search
only through the named oracle, and metrics.json says so.
"""

import ast
import os
import pathlib
import sys

from conftest import fast_compile
import jax
import numpy as np
import pytest

from experiments.configs import reconstruct as configs
import recon_jax
from recon_jax.attacker import view as attacker
from recon_jax.eval import metrics_json
from recon_jax.job import estimate, pipeline, planning
from recon_jax.types import RESTART_SCORES

PACKAGE = pathlib.Path(recon_jax.__file__).resolve().parent
SEALED = ("attacks", "engine")  # the packages that must never read a training image
# names under which a dataset or its training images would travel
CARRIERS = {"ds", "dataset", "x_train", "y_train", "x_test", "train_idx"}


def _modules():
  for pkg in SEALED:
    for path in sorted((PACKAGE / pkg).glob("*.py")):
      yield path, ast.parse(path.read_text())


def _reaches_data(module: str) -> bool:
  """An import that hands a module the evaluation, or the datasets and their loaders (the
  data package's constants, such as the input shapes, hold no image)."""
  if module.startswith("recon_jax.eval") or module in ("recon_jax.data", "recon_jax.data.data"):
    return True
  name = module.rsplit(".", 1)[-1]
  return module.startswith("recon_jax.data.") and ("Dataset" in name or name.startswith("load"))


def _boundary_problems(path, tree) -> list:
  """What in module ``tree`` could hand it the dataset: an import of the evaluation or of
  the datasets, a parameter named like a dataset, or one annotated as one."""
  where = f"{path.parent.name}/{path.name}"
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      names = [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    else:
      names = []
    out += [f"{where}: imports {n}" for n in names if _reaches_data(n)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
      a = node.args
      for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
        if arg is None:
          continue
        name = getattr(node, "name", "lambda")
        if arg.arg in CARRIERS:
          out.append(f"{where}:{node.lineno} {name}() takes {arg.arg}")
        if arg.annotation is not None and "Dataset" in ast.unparse(arg.annotation):
          out.append(f"{where}:{node.lineno} {name}() takes a Dataset ({arg.arg})")
  return out


def test_no_attack_or_engine_function_can_be_handed_the_dataset():
  problems = [p for path, tree in _modules() for p in _boundary_problems(path, tree)]
  assert not problems, "\n".join(problems)


def test_the_static_check_finds_a_planted_dataset():
  planted = (
    "from recon_jax import data\n"
    "from recon_jax.eval import metrics_json\n"
    "def search(spec, ds: data.Dataset): pass\n"
    "def init(*, x_train=None): pass\n"
    "def other(view: 'data.Dataset'): pass\n"
  )
  found = _boundary_problems(PACKAGE / "attacks" / "planted.py", ast.parse(planted))
  assert any("recon_jax.eval.metrics_json" in p for p in found)
  assert any("imports recon_jax.data" in p for p in found)
  assert not _reaches_data("recon_jax.data.dataset.INPUT_SHAPES")
  assert any("takes ds" in p for p in found) and any("takes x_train" in p for p in found)
  assert any("takes a Dataset (view)" in p for p in found)


def test_restart_scores_are_the_keys_metrics_json_declares():
  # attacks/spec.py refuses hyperparameters of these names without reading the evaluation
  assert RESTART_SCORES == metrics_json.declared_keys(metrics_json.Restart)


class Sealed:
  """Training images that fail the test when read with a frame of recon_jax/attacks or
  recon_jax/engine on the stack (their shape and count may be read anywhere).  Every read
  so refused is also recorded in ``reads``, in case the reader swallows the error."""

  def __init__(self, x, reads: list):
    object.__setattr__(self, "_x", np.asarray(x))
    object.__setattr__(self, "_reads", reads)

  shape = property(lambda self: self._x.shape)
  dtype = property(lambda self: self._x.dtype)
  ndim = property(lambda self: self._x.ndim)
  size = property(lambda self: self._x.size)

  def __len__(self):
    return len(self._x)

  def _open(self):
    frame = sys._getframe(1)
    while frame is not None:
      path = os.path.realpath(frame.f_code.co_filename)
      if any(path.startswith(str(PACKAGE / p) + os.sep) for p in SEALED):
        self._reads.append(f"{path}:{frame.f_lineno}")
        raise AssertionError(f"a training image read in {path}:{frame.f_lineno}")
      frame = frame.f_back
    return self._x

  def __array__(self, dtype=None, copy=None):
    x = self._open()
    return x if dtype is None else x.astype(dtype)

  def __getitem__(self, index):
    return self._open()[index]

  def __iter__(self):
    return iter(self._open())

  def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
    inputs = [i._open() if isinstance(i, Sealed) else i for i in inputs]
    return getattr(ufunc, method)(*inputs, **kwargs)

  def __array_function__(self, func, types, args, kwargs):
    args = [a._open() if isinstance(a, Sealed) else a for a in args]
    return func(*args, **kwargs)

  def __getattr__(self, name):
    if name.startswith("_"):
      raise AttributeError(name)
    return getattr(self._open(), name)


def test_sealed_images_refuse_a_read_from_the_engine():
  from recon_jax.engine import inits

  reads = []
  x = Sealed(np.zeros((3, 4, 4, 1)), reads)
  assert len(x) == 3 and x.shape == (3, 4, 4, 1) and np.asarray(x).shape == (3, 4, 4, 1)
  with pytest.raises(AssertionError, match="engine"):
    inits.make_x_init("ground_truth", m=2, input_shape=(4, 4, 1), oracle=x)
  assert reads and "engine" in reads[0]


def _plan(**search):
  cfg = configs.get_config("tiny")
  cfg.search.steps = cfg.search.chunk_steps = 4
  cfg.search.update(search)
  return planning.prepare(cfg)


def _sealed(plan, reads):
  ds = plan.source.dataset
  ds = ds._replace(x_train=Sealed(ds.x_train, reads))
  return plan._replace(source=plan.source._replace(dataset=ds))


def _leaves_share(tree, x) -> list:
  x = np.asarray(x)
  leaves = jax.tree_util.tree_leaves(tree)
  arrays = [np.asarray(a) for a in leaves if isinstance(a, (np.ndarray, jax.Array))]
  rows = {r.tobytes() for r in x.reshape(len(x), -1)}
  row = x[0].size

  def holds(a):
    if np.shares_memory(a, x):
      return True
    return a.size % row == 0 and any(r.tobytes() in rows for r in a.reshape(-1, row))

  return [a.shape for a in arrays if a.size and holds(a.astype(x.dtype))]


def test_a_job_finds_the_same_candidates_with_its_training_images_sealed(monkeypatch):
  """The pipeline's victim and attack stages, once with the training images open and once
  sealed from recon_jax/attacks and recon_jax/engine: the same candidates, and no read.  The
  search starts from the training images (``init=ground_truth``): through the oracle."""
  monkeypatch.setattr(estimate, "machine_flops", lambda *a, **k: 1e10)  # no timed probe
  plan = _plan(init="ground_truth")
  with fast_compile():
    ds, vic, setup, _ = pipeline.victim_stage(plan)
    assert not _leaves_share(setup.view, ds.x_train)  # the view holds no training image
    assert setup.view.n == len(ds.x_train) and setup.view.input_shape == ds.x_train.shape[1:]
    open_run = pipeline.attack_stage(plan, vic, ds, setup, None)
    reads = []
    sealed = _sealed(plan, reads)
    ds_s, vic_s, setup_s, _ = pipeline.victim_stage(sealed)
    sealed_run = pipeline.attack_stage(sealed, vic_s, ds_s, setup_s, None)
  assert not reads, reads
  assert open_run.found.oracle == sealed_run.found.oracle == "ground_truth"
  np.testing.assert_array_equal(sealed_run.found.candidates, open_run.found.candidates)
  assert np.all(np.isfinite(sealed_run.found.candidates))


def test_metrics_json_says_when_the_oracle_started_a_search(monkeypatch):
  """``oracle_starts`` is declared in metrics.json and set where a search ran from an oracle's
  starts; a direct attack, which starts from nothing, is handed none whatever the init."""
  assert metrics_json.Metrics.from_job({"oracle_starts": "ground_truth"}).oracle_starts
  assert metrics_json.Metrics.from_job({}).to_dict() == {}  # absent on every other run
  monkeypatch.setattr(estimate, "machine_flops", lambda *a, **k: 1e10)
  cfg = configs.get_config("tiny")
  cfg.attack, cfg.search.init = "weights", "ground_truth"
  plan = planning.prepare(cfg)
  ds, vic, setup, _ = pipeline.victim_stage(plan)
  assert pipeline.attack_stage(plan, vic, ds, setup, None).found.oracle is None


def test_the_oracle_is_the_one_way_to_training_images():
  plan = _plan()
  ds = plan.source.dataset
  assert attacker.oracle_starts(ds, "gaussian") is None
  assert attacker.oracle_starts(ds, "partition") is None
  starts = attacker.oracle_starts(ds, "ground_truth")
  np.testing.assert_array_equal(starts.images, ds.x_train)
  # the view's fields are what an attacker holds: none is named or typed as training data
  assert not set(attacker.AttackerView._fields) & CARRIERS
  view = attacker.view_of(ds, None)
  assert not _leaves_share(view, ds.x_train)
