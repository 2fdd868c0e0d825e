"""The main job's settings ship with the library: defaults, meanings, overrides; the
attacks' own options among them."""

import dataclasses
import json
import types
import warnings

import ml_collections
import numpy as np
import pytest

from experiments.configs import efficacy as efficacy_configs
from experiments.configs import reconstruct as reconstruct_configs
import recon_jax as rj
from recon_jax.errors import ConfigError
from recon_jax.io import workdir
from recon_jax.io.checkpoint import CheckpointError
from recon_jax.job import planning, settings
from recon_jax.victims import recipe, trained


def test_the_binary_default_is_the_library_config():
  # The library's defaults are Haim et al.'s setting, the binary's lfw preset; its default
  # preset is finetune (a model fine-tuned from known weights).
  assert rj.reconstruct_config().to_dict() == reconstruct_configs.get_config("lfw").to_dict()


def test_every_setting_says_what_it_is():
  names = set(workdir.flatten(rj.reconstruct_config().to_dict()))
  assert names == set(settings.HELP)
  assert all(text.strip() for text in settings.HELP.values())
  base = {f"base.{k}" for k in names}
  assert base <= set(efficacy_configs.HELP)


def test_every_config_class_declares_each_setting_once_with_a_rule_and_a_meaning():
  """The job, its threat section, a victim's recipe, every attack's options and the studies: each field is
  a ``rules.setting`` (default, meaning, rule), and the tables are read off those fields."""
  from recon_jax import attacks
  from recon_jax.core import rules
  from recon_jax.studies import init_study_settings, toy
  from recon_jax.victims import recipe

  classes = [settings.JobConfig, *settings.SECTIONS.values(), recipe.VictimConfig]
  classes += [toy.ToySettings, init_study_settings.InitStudySettings]
  classes += [spec.options for spec in attacks.specs().values()]
  for cls in classes:
    assert rules.undeclared(cls, sections=("victim", *settings.SECTIONS)) == [], cls.__name__
  assert settings.RULES == rules.rules_of(settings.JobConfig)
  assert settings.THREAT_RULES == rules.rules_of(settings.Threat)
  assert recipe.RULES == rules.rules_of(recipe.VictimConfig)
  assert recipe.HELP == rules.meanings_of(recipe.VictimConfig)
  assert recipe.ADDED_FIELDS["pretrain_epochs"] == 0 and "lr" not in recipe.ADDED_FIELDS
  assert recipe.OPTIONAL["batch_size"] is int and recipe.OPTIONAL["init_std"] is float


def test_a_setting_declared_once_gives_every_table_and_a_plain_field_is_named():
  from recon_jax.core import rules
  from recon_jax.core.rules import Rule, setting

  @dataclasses.dataclass(frozen=True)
  class Planted:
    size: int = setting(3, "how many", Rule("int", low=1))
    scale: float = setting(None, "how far (unset: auto)", Rule("float", optional=True))
    late: str = setting("a", "added after the cache keys", Rule("str"), added=True)
    plain: int = 0  # no rule, no meaning

  assert rules.rules_of(Planted) == {
    "size": Rule("int", low=1),
    "scale": Rule("float", optional=True),
    "late": Rule("str"),
  }
  assert rules.meanings_of(Planted)["scale"] == "how far (unset: auto)"
  assert rules.unset_types(Planted) == {"scale": float}
  assert rules.added_defaults(Planted) == {"late": "a"}
  assert rules.undeclared(Planted) == ["plain"]
  with pytest.raises(ValueError, match="immutable"):
    setting([1, 2], "a list", Rule("ints"))


def test_overrides_and_unknown_names():
  c = rj.reconstruct_config(search={"steps": 7}, victim={"n_per_class": 3}, threat={"stride": 2})
  assert (c.search.steps, c.victim.n_per_class, c.threat.stride, c.threat.padding) == (7, 3, 2, 0)
  with pytest.raises(KeyError, match="stepz"):
    rj.reconstruct_config(stepz=7)
  with pytest.raises(KeyError, match="widthz"):
    rj.reconstruct_config(victim={"widthz": (8,)})


def test_configs_do_not_share_their_unset_fields():
  a, b = rj.reconstruct_config(), rj.reconstruct_config()
  a.evaluation.ssim_threshold = 0.5
  a.victim.batch_size = 4
  assert b.evaluation.ssim_threshold is None and b.victim.batch_size is None


def test_typed_settings_read_a_config_and_write_the_same_config_json(tmp_path):
  c = rj.reconstruct_config(
    search={"steps": 7}, victim={"n_per_class": 3, "widths": [8, 4]}, threat={"stride": 2}
  )
  job = rj.JobConfig(**c)
  assert (job.search.steps, job.victim.n_per_class, job.victim.widths) == (7, 3, (8, 4))
  assert (job.threat.stride, job.threat.padding, job.evaluation.ssim_threshold) == (2, 0, None)
  assert rj.JobConfig().to_dict() == rj.reconstruct_config().to_dict()  # one home for defaults
  # config.json is unchanged, so a workdir written from the ConfigDict resumes under the type
  assert workdir.jsonable(job) == workdir.jsonable(c)
  workdir.write_config(str(tmp_path), c, study="reconstruct")
  (tmp_path / "state.msgpack").write_bytes(b"")
  workdir.check_resumable(job, str(tmp_path), "state.msgpack", "reconstruct")
  with pytest.raises(ConfigError, match="steps"):
    workdir.check_resumable(
      job.replace(**{"search.steps": 8}), str(tmp_path), "state.msgpack", "reconstruct"
    )


def test_typed_settings_refuse_unknown_names():
  assert rj.JobConfig.of(rj.JobConfig()) == rj.JobConfig()
  with pytest.raises(ConfigError, match="stepz") as e:
    rj.JobConfig.of({"search": {"steps": 1}, "stepz": 7})
  assert e.value.argument == "stepz"
  with pytest.raises(ConfigError, match="widthz") as e:
    rj.JobConfig(victim={"widthz": (8,)})
  assert e.value.argument == "victim.widthz"
  with pytest.raises(ConfigError, match="threat.strid") as e:
    rj.JobConfig(threat={"strid": 2})
  assert e.value.argument == "threat.strid"


def test_a_victim_recipe_refuses_a_field_that_breaks_its_rule_where_it_is_built(tmp_path):
  """From Python as from the job: VictimConfig(lr=-1) is refused when built, naming
  victim.lr; a checkpoint whose recipe breaks a rule is its file's fault, named so; a recipe
  held under other names (the toy's victim_*) says those names."""
  for field, value in (("lr", -1.0), ("widths", "x"), ("arch", "nope"), ("epochs", 0)):
    with pytest.raises(ConfigError, match=rf"^victim\.{field} ") as e:
      rj.VictimConfig(**{field: value})
    assert e.value.argument == f"victim.{field}"
  with pytest.raises(ConfigError, match=r"^victim\.lr "):
    dataclasses.replace(rj.VictimConfig(), lr=0.0)
  assert rj.VictimConfig(dataset="my_own_images").dataset == "my_own_images"  # a caller's own
  stored = {"victim": {**rj.VictimConfig().to_dict(), "epochs": -3}}
  with pytest.raises(CheckpointError, match=r"^v.msgpack: corrupt victim metadata: epochs "):
    trained.recipe_of(stored, "v.msgpack")
  with pytest.raises(ConfigError, match=r"^kkt_width ") as e:
    recipe.check_named(lambda: rj.VictimConfig(widths=(10**7,)), {"widths": "kkt_width"})
  assert e.value.argument == "kkt_width"


def test_a_name_from_before_0_2_0_is_refused_in_one_line():
  """The names settings had before they moved into sections (``checkpoint``, ``steps``, the
  ``foreign`` section) were read with a DeprecationWarning; 0.2.0 refuses them as any name
  it does not know, in one line naming it, from Python, ``replace``, a ConfigDict and an
  attribute (CHANGELOG.md, 0.2.0, lists where each one moved)."""
  built = {
    "JobConfig": lambda given: rj.JobConfig(**given),
    "replace": lambda given: rj.JobConfig().replace(**given),
    "dataclasses.replace": lambda given: dataclasses.replace(rj.JobConfig(), **given),
  }
  for given, name in [
    (dict(checkpoint="m.pt"), "checkpoint"),
    (dict(init_checkpoint="t.pt"), "init_checkpoint"),
    (dict(steps=5), "steps"),
    (dict(x64=True), "x64"),
    (dict(foreign={"stride": 2}), "foreign"),
    (dict(subspace=True), "subspace"),
  ]:
    for how, build in built.items():
      with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # refused, not read with a notice
        with pytest.raises(ConfigError) as e:
          build(given)
      assert str(e.value) == (
        f"{name} is not a setting; the settings are the fields of JobConfig."
      ), how
      assert e.value.argument == name
  with pytest.raises(KeyError, match="unknown settings \\['checkpoint'\\]"):
    rj.reconstruct_config(checkpoint="m.pt")
  for name in ("checkpoint", "foreign", "steps"):
    assert not hasattr(rj.JobConfig(), name)
  with pytest.raises(ConfigError, match=r"^kkt\.search is not a setting"):
    rj.JobConfig(kkt={"search": "lm"})  # kkt's solver, named search before 0.2.0


def test_a_dotted_name_sets_a_setting_of_every_section_the_victims_too():
  """``"search.steps"`` worked for every section but the victim's: ``"victim.lr"`` was
  "not a setting", from the constructor and from ``replace``."""
  cfg = rj.JobConfig(**{"victim.lr": 0.5, "victim.widths": [8], "search.steps": 3})
  assert (cfg.victim.lr, cfg.victim.widths, cfg.search.steps) == (0.5, (8,), 3)
  base = rj.JobConfig(victim={"lr": 0.2, "epochs": 7}, search={"steps": 9, "seed": 3})
  changed = base.replace(**{"victim.lr": 0.5, "search.steps": 4})
  assert (changed.victim.lr, changed.victim.epochs) == (0.5, 7)  # the rest of the section kept
  assert (changed.search.steps, changed.search.seed) == (4, 3)
  with pytest.raises(ConfigError, match=r"^victim\.lrr is not a setting") as e:
    rj.JobConfig(**{"victim.lrr": 0.5})
  assert e.value.argument == "victim.lrr"
  with pytest.raises(ConfigError, match=r"^victim\.lr must be") as e:
    base.replace(**{"victim.lr": -1.0})
  assert e.value.argument == "victim.lr"


@pytest.mark.parametrize(
  "given, says",
  [
    (
      {"search.steps": 3, "search": {"steps": 7}},
      "search.steps=3 and search={'steps': 7} are the same setting, given two values; give it "
      "once.",
    ),
    (
      {"victim.lr": 0.5, "victim": {"lr": 0.1}},
      "victim.lr=0.5 and victim={'lr': 0.1} are the same setting, given two values; give it once.",
    ),
  ],
  ids=["dotted", "victim"],
)
def test_one_setting_given_two_values_is_refused_naming_both(given, says):
  """A dotted name and its section given different values took one of them silently."""
  for build in (lambda: rj.JobConfig(**given), lambda: rj.JobConfig().replace(**given)):
    with pytest.raises(ConfigError) as e:
      build()
    assert str(e.value) == says
    assert e.value.argument == says.split("=")[0]
  with pytest.raises(ConfigError, match=r"^search\.steps=5 and search=\{'steps': 7\} are the same"):
    rj.JobConfig(**{"search.steps": 5}, search=ml_collections.ConfigDict({"steps": 7}))
  # The same value twice is one setting given once; a section given as its object is the
  # base a dotted name changes (what dataclasses.replace passes).
  assert rj.JobConfig(**{"threat.model": "a.pt"}, threat={"model": "a.pt"}).threat.model == "a.pt"
  assert rj.JobConfig(search={"steps": 9}).replace(**{"search.steps": 5}).search.steps == 5
  changed = dataclasses.replace(rj.JobConfig(search={"steps": 9}), **{"search.steps": 5})
  assert changed.search.steps == 5
  # a mapping of every setting of the section (a ConfigDict of the job's) is a base too
  cfg = rj.reconstruct_config()
  cfg.search.steps = 9
  assert rj.JobConfig(**cfg, **{"search.steps": 5}).search.steps == 5


def test_a_victim_recipe_refuses_an_unknown_name_and_holds_its_widths_as_a_tuple():
  """``VictimConfig(foo=1)`` raised a plain TypeError; ``VictimConfig(widths=[16, 16])``
  built a recipe that could not be hashed."""
  with pytest.raises(ConfigError, match=r"^victim\.foo is not a setting; ") as e:
    rj.VictimConfig(foo=1)
  assert e.value.argument == "victim.foo"
  with pytest.raises(ConfigError, match=r"^victim\.bar is not a setting \(nor victim\.foo\)"):
    dataclasses.replace(rj.VictimConfig(), foo=1, bar=2)
  v = rj.VictimConfig(widths=[16, 16])
  assert v.widths == (16, 16) and v == rj.VictimConfig(widths=(16, 16))
  assert hash(v) == hash(rj.VictimConfig(widths=(16, 16))) and v.key() == v.key()
  assert rj.VictimConfig(widths=np.array([4, 8])).widths == (4, 8)
  assert {v: 1}[rj.VictimConfig(widths=(16, 16))] == 1


@pytest.mark.parametrize(
  "task, loss, says",
  [
    ("binary", "ce", "victim.task is binary, but victim.loss=ce trains one output per class"),
    ("multiclass", "logistic", "victim.task is multiclass, but victim.loss=logistic trains one"),
    ("multiclass", "mse", "victim.task is multiclass, but victim.loss=mse trains one output"),
  ],
)
def test_a_task_set_against_the_loss_is_refused_where_the_recipe_is_built(task, loss, says):
  """``victim.task=binary`` with ``victim.loss=ce`` trained a multiclass victim without a
  word (the data follow the loss); the task now follows the loss unless set, and set against
  it is refused where the recipe is built, naming both."""
  for build in (
    lambda: rj.VictimConfig(task=task, loss=loss),
    lambda: rj.JobConfig(victim={"task": task, "loss": loss}),
    lambda: rj.JobConfig(**{"victim.task": task, "victim.loss": loss}),
  ):
    with pytest.raises(ConfigError, match="^" + says) as e:
      build()
    assert e.value.argument == "victim.task" and f"victim.loss={loss}" in e.value.mentions


def test_the_task_follows_the_loss_and_a_recipe_keeps_its_cache_key(tmp_path):
  for loss, task in (("logistic", "binary"), ("mse", "binary"), ("ce", "multiclass")):
    v = rj.VictimConfig(loss=loss)
    assert v.task is None and recipe.task_of(v) == task
    assert recipe.task_of(rj.VictimConfig(loss=loss, task=task)) == task
  # the keys of the victims cached before (the task's former default, binary, in them)
  assert rj.VictimConfig().key() == "89a4e066b1f8738a"
  assert rj.VictimConfig(loss="ce").key() == "d5ae43e77a11b652"
  assert rj.VictimConfig(loss="ce", task="multiclass").key() == "0bea4d38cda845a4"
  # A checkpoint written before holds the former default beside loss=ce: read as its loss's.
  stored = {"victim": {**rj.VictimConfig(loss="ce").to_dict(), "task": "binary"}}
  assert recipe.task_of(trained.recipe_of(stored, "v.msgpack")) == "multiclass"
  # A run whose config.json holds the former default resumes.
  cfg = rj.JobConfig(victim={"loss": "ce"})
  workdir.write_config(str(tmp_path), cfg.to_dict(), study="s")
  (tmp_path / "state.msgpack").write_bytes(b"state")
  path = tmp_path / "config.json"
  whole = json.loads(path.read_text())
  whole["config"]["victim"]["task"] = "binary"
  path.write_text(json.dumps(whole))
  workdir.check_resumable(cfg.to_dict(), str(tmp_path), "state.msgpack", "s")


def test_the_checks_take_the_typed_settings_and_expand_their_paths(monkeypatch, tmp_path):
  monkeypatch.setenv("HOME", str(tmp_path))
  job = rj.JobConfig(
    search={"steps": 7}, data_dir="~/data", victim={"dataset": "digits", "n_per_class": 3}
  )
  plan = planning.prepare(job)
  assert plan.config == job.replace(data_dir=f"{tmp_path}/data")
  assert (plan.problem, plan.foreign, plan.stages[0][0]) == ("binary", False, 7)
  assert planning.prepare(plan.config.to_dict()).config == plan.config  # a plain dict too
  with pytest.raises(ConfigError, match="steps"):
    planning.prepare(job.replace(**{"search.steps": 0}))


# ----------------------------------------------------------------------------- attack options

# The settings that are an attack's own options, by attack: the job holds each attack's as a
# section under its name (``kkt.subspace``); before 2026-11-28 they were settings at the top
# of the same names, which config files, flags and workdirs written then still use.
ATTACK_SETTINGS = {
  "cone": {"cone_starts", "cone_public", "cone_search_minutes"},
  "kkt": {
    "w_lam",
    "derivative",
    "multipliers",
    "subspace",
    "subspace_tol",
    "span_whiten",
    "solver",
    "lm_cg_maxiter",
    "lam_init",
    "lam_refit_every",
    "split_every",
    "split_eps",
    "w_tv",
  },
  "bilevel": {"bilevel_inner_maxiter"},
}


def test_each_attacks_options_are_a_section_of_the_job_under_its_name():
  from recon_jax import attacks

  fields = {f.name: f for f in dataclasses.fields(rj.JobConfig)}
  flags = workdir.flatten(rj.reconstruct_config().to_dict())
  owned = {}
  for name, spec in attacks.specs().items():
    for f in dataclasses.fields(spec.options):
      dotted = f"{name}.{f.name}"
      assert fields[name].type is spec.options and dotted in flags, dotted
      assert getattr(rj.JobConfig(), name) == spec.options()  # its defaults
      assert f.default == flags[dotted], dotted
      assert settings.HELP[dotted] == f.metadata["help"] and f.metadata["help"].strip()
      owned.setdefault(name, set()).add(f.name)
  assert owned == ATTACK_SETTINGS
  assert settings.ATTACK_SECTIONS == {n: attacks.get(n).options for n in ATTACK_SETTINGS}


def test_an_attack_gets_its_typed_options_and_the_shared_settings():
  from recon_jax import attacks
  from recon_jax.attacks import kkt

  job = rj.JobConfig(kkt={"split_every": 3, "w_tv": 0.5}, search={"steps": 9, "optimizer": "adam"})
  assert attacks.get("kkt").options_of(job) == kkt.KKTOptions(split_every=3, w_tv=0.5)
  assert attacks.get("inversion").options_of(job) == attacks.get("inversion").options()
  common = attacks.Common.of(job)
  assert (common.steps, common.optimizer) == (9, "adam")


def test_the_attack_setting_lists_the_registry():
  from recon_jax import attacks

  names = sorted(attacks.specs())
  assert " | ".join(names) in settings.HELP["attack"]
  assert tuple(settings.RULES["attack"].choices()) == tuple(names)


def test_an_attack_may_not_be_named_as_a_setting_of_the_job(monkeypatch):
  """Its options' section would hide the job's setting of that name (``search``)."""
  from recon_jax import attacks
  from recon_jax.attacks import spec as spec_module
  from recon_jax.core.rules import Rule

  @dataclasses.dataclass(frozen=True)
  class Clash:
    depth: int = spec_module.option(0, "again", Rule("int", low=0))

  fake = attacks.AttackSpec("search", build=None, check=None, options=Clash)
  monkeypatch.setitem(spec_module._REGISTRY, "search", fake)
  assert settings._attack_sections()["search"] is Clash
  with pytest.raises(ValueError, match="search"):
    settings.refuse_clashes(settings._attack_sections())


def test_an_attacks_range_option_is_drawn_per_restart(monkeypatch):
  from recon_jax import attacks
  from recon_jax.attacks import spec as spec_module
  from recon_jax.core.rules import Rule

  @dataclasses.dataclass(frozen=True)
  class Own:
    lr_z: str = spec_module.option("0.1:0.2:lin", "a range", Rule("range"))

  fake = attacks.AttackSpec("own", build=None, check=None, options=Own, hparams=("lr_x", "lr_z"))
  monkeypatch.setitem(spec_module._REGISTRY, "own", fake)
  job = types.SimpleNamespace(
    **{**rj.JobConfig().to_dict(), "attack": "own", "own": Own("0.1:0.2")}
  )
  job.search = rj.JobConfig().search.__class__(num_restarts=5)
  hp = planning.hparams_for(job, attacks.get(job.attack))
  assert hp["lr_z"].shape == (5,) and np.all((0.1 <= hp["lr_z"]) & (hp["lr_z"] <= 0.2))
  assert len(set(hp["lr_z"].tolist())) == 5  # one draw per restart
  with pytest.raises(ValueError, match="lr_z"):  # a range it does not say it reads
    spec_module.register(fake._replace(name="own2", hparams=("lr_x",)))
  with pytest.raises(ValueError, match=r"\['final_loss'\] are named as a restart's scores"):
    spec_module.register(fake._replace(name="own3", hparams=("lr_x", "lr_z", "final_loss")))
