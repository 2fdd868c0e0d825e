"""A refused run of the efficacy harness, the init study or the reproduction prints one
line, exits 1 and leaves a finished workdir byte-identical (test_bad_input.py covers
reconstruct, train_victim and the toy the same way)."""

import hashlib
import os
import socket

import pytest

from experiments import efficacy as E
from experiments import init_study as I
from experiments import reproduce as P
from experiments.configs import efficacy as efficacy_configs
from experiments.configs import init_study as init_configs
from experiments.configs import reproduce as reproduce_configs
from recon_jax import cli
from recon_jax.io import workdir as wd

BINARIES = {
  "efficacy": (E, efficacy_configs, "tiny"),
  "init_study": (I, init_configs, "tiny"),
  "reproduce": (P, reproduce_configs, "quick"),
}


def _tree_hash(folder):
  out = {}
  for root, _, names in os.walk(folder):
    for n in names:
      p = os.path.join(root, n)
      with open(p, "rb") as f:
        out[os.path.relpath(p, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out


def _finished(tmp_path, study, cfg):
  """A workdir as a finished run of ``study`` leaves it: its config.json, results."""
  work = tmp_path / "finished"
  work.mkdir()
  wd.write_config(str(work), cfg, study=study)
  (work / "metrics.json").write_text('{"finished": true}')
  (work / "results.md").write_text("| a finished table |\n")
  return work


def _set(cfg, key, value):
  *parents, name = key.split(".")
  target = cfg
  for part in parents:
    target = target[part]
  target[name] = value
  return cfg


# (id, binary, settings changed, job keywords, how the workdir was written, substrings)
CASES = [
  ("efficacy_no_variant", "efficacy", {}, dict(variants=",", overwrite=True), None, ["variants"]),
  ("efficacy_zero_draws", "efficacy", {}, dict(draws=0, overwrite=True), None, ["draws"]),
  ("efficacy_huge_draws", "efficacy", {}, dict(draws=10**12, overwrite=True), None, ["draws"]),
  (
    "efficacy_resume_other_seed",
    "efficacy",
    {"base.search.seed": 5},
    dict(resume=True),
    None,
    ["--resume", "base.search.seed"],
  ),
  ("efficacy_resume_other_binary", "efficacy", {}, dict(resume=True), "init_study", ["--resume"]),
  ("efficacy_not_empty", "efficacy", {}, {}, None, ["not empty", "--overwrite"]),
  ("efficacy_locked", "efficacy", {}, dict(overwrite=True, lock=True), None, ["in use"]),
  ("init_bad_wd", "init_study", {"bilevel_wd": 0.0}, dict(overwrite=True), None, ["bilevel_wd"]),
  ("init_resume_other_seed", "init_study", {"seed": 3}, dict(resume=True), None, ["seed"]),
  ("init_resume_other_binary", "init_study", {}, dict(resume=True), "efficacy", ["--resume"]),
  ("init_locked", "init_study", {}, dict(overwrite=True, lock=True), None, ["in use"]),
  ("reproduce_bad_draws", "reproduce", {"draws": -1}, dict(overwrite=True), None, ["draws"]),
  ("reproduce_no_section", "reproduce", {}, dict(only=",", overwrite=True), None, ["only"]),
  ("reproduce_resume_other_draws", "reproduce", {"draws": 3}, dict(resume=True), None, ["draws"]),
  ("reproduce_resume_other_binary", "reproduce", {}, dict(resume=True), "efficacy", ["--resume"]),
  ("reproduce_locked", "reproduce", {}, dict(overwrite=True, lock=True), None, ["in use"]),
]


@pytest.mark.parametrize(
  "case_id, name, settings, kw, written_by, must", CASES, ids=[c[0] for c in CASES]
)
def test_a_refused_run_leaves_a_finished_workdir_byte_identical(
  tmp_path, capsys, case_id, name, settings, kw, written_by, must
):
  binary, configs, preset = BINARIES[name]
  work = _finished(tmp_path, written_by or name, configs.get_config(preset))
  kw = dict(kw)
  if kw.pop("lock", False):  # another live process of this host holds the workdir
    (work / ".lock").write_text(f"{os.getppid()} {socket.gethostname()}")
  before = _tree_hash(work)
  cfg = configs.get_config(preset)
  for key, value in settings.items():
    _set(cfg, key, value)
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:
    cli.main_guard(lambda: binary.job(cfg, str(work), **kw), cfg)
  err = capsys.readouterr().err
  lines = err.strip().splitlines()
  assert e.value.code == 1 and len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
  for s in must:
    assert s in lines[0], (s, lines[0])
  print(f"{case_id}: {lines[0]}")
  assert _tree_hash(work) == before
