"""The documents name only what exists: no stale command, flag, preset, link or module.

Fast and static (no JAX program is compiled): the commands are parsed out of the Markdown,
not run.  What is checked:

* every ``python -m experiments.X`` (and ``benchmarks.X``, ``reproduction.X``) named in
  README.md, BUILD.md, RESULTS.md and docs/*.md is a module of the checkout;
* in README.md and the other :data:`FLAG_DOCUMENTS`, every ``--config.NAME`` (dotted:
  ``--config.victim.widths``) is a setting of the config of the binary its command runs,
  at the command's ``:preset``, which must be a preset of that binary's config file (and
  every ``--variants`` one of its variants); outside a command, a setting of some binary's
  config, and every ``experiments/configs/X.py:PRESET`` a preset of X.  Every other
  ``--flag`` is one the binaries define (their absl flags, the benchmarks' options); every
  ``rj.NAME`` is in ``recon_jax.__all__``;
* in every document, source paths (``recon_jax/eval/evaluation.py:evaluate_candidates``) and
  dotted names (``recon_jax.job.run.run_reconstruction``) resolve to a file and a name in
  it, and relative links point at files that exist;
* BUILD.md's layout names every subpackage of recon_jax and no folder that is gone;
* README.md is at most 350 lines and holds the test command CI runs.

The checks are functions of a document's text, so the last test plants mistakes and sees
each one reported.
"""

import functools
import importlib
import pathlib
import re
import shlex

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = "README.md"
TEST_COMMAND = 'python -m pip install -e ".[test]" && python -m pytest -q -n 2'
MAX_README_LINES = 350
# Documents whose commands, source names and links are checked; README.md's flags too.
# The dated logs (docs/log/) too: their commands must still run and their links resolve.
LOGS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "log").glob("*.md"))
DOCUMENTS = (
  ["README.md", "BUILD.md", "RESULTS.md", "CHANGELOG.md"]
  + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
  + LOGS
)
# Modules that a CHANGELOG or a log names as removed are allowed there (they say what was).
HISTORY = ("CHANGELOG.md", *LOGS)
PACKAGES = ("experiments", "benchmarks", "reproduction")
# Placeholders a document may write in a name (``python -m experiments.NAME``).
PLACEHOLDERS = {"NAME", "X", "PRESET", "FIELD", "FILE", "VALUE", "SCRIPT"}
# absl's own flags, which every binary answers.
ABSL_FLAGS = {"help", "helpfull", "helpshort", "helpxml", "flagfile", "undefok"}

COMMAND = re.compile(r"python -m ((?:experiments|benchmarks|reproduction)\.\w+)")
FLAG = re.compile(r"(?<![\w./-])--([A-Za-z][\w.-]*)")
SOURCE = re.compile(
  r"(?<![\w./-])((?:recon_jax|experiments|reproduction|benchmarks|tests)(?:/\w+)+\.py)(?::(\w+))?"
)
DOTTED = re.compile(
  r"(?<![\w./-])((?:recon_jax|experiments|reproduction|benchmarks)(?:\.\w+)+)(?![\w/-])"
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
RJ = re.compile(r"(?<![\w.])rj\.(\w+)")


def _read(name: str) -> str:
  return (ROOT / name).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------
# What the checkout defines


def _source(path: pathlib.Path) -> str:
  return path.read_text(encoding="utf-8") if path.is_file() else ""


@functools.lru_cache(maxsize=None)
def binary_config(binary: str) -> str:
  """The config file (``experiments/configs/<name>.py``) a binary reads."""
  m = re.search(r"define_flags\(\s*\"(\w+)\"", _source(ROOT / "experiments" / f"{binary}.py"))
  if m:
    return m.group(1)
  return binary if (ROOT / "experiments" / "configs" / f"{binary}.py").is_file() else "victim"


@functools.lru_cache(maxsize=None)
def config_keys(config: str, preset: str = "") -> frozenset:
  """Every setting (dotted) and every section of ``experiments/configs/<config>.py`` at
  ``preset`` ('' its default); KeyError for an unknown preset."""
  module = importlib.import_module(f"experiments.configs.{config}")
  cfg = module.get_config(preset) if preset else module.get_config()
  keys = set()

  def walk(d, prefix):
    for k, v in d.items():
      keys.add(prefix + k)
      if isinstance(v, dict):
        walk(v, f"{prefix}{k}.")

  walk(cfg.to_dict(), "")
  return frozenset(keys)


def _defined_flags(text: str) -> set:
  names = set(re.findall(r"DEFINE_\w+\((?:\s*#[^\n]*)?\s*\"(\w+)\"", text))
  names |= set(re.findall(r"add_argument\(\s*\"--([\w-]+)\"", text))
  return names


@functools.lru_cache(maxsize=None)
def binary_flags(module: str) -> frozenset:
  """The flags ``python -m <module>`` accepts: the shared ones, its own, absl's."""
  package, name = module.split(".", 1)
  own = _defined_flags(_source(ROOT / package / f"{name}.py"))
  if package == "benchmarks":
    own |= _defined_flags(_source(ROOT / "benchmarks" / "common.py"))
    own |= {"no-" + f for f in own} | {"help"}
    return frozenset(own)
  shared = _defined_flags(_source(ROOT / "recon_jax" / "cli.py")) | {"config"}
  flags = own | shared | ABSL_FLAGS
  return frozenset(flags | {"no" + f for f in flags})


@functools.lru_cache(maxsize=None)
def all_binaries() -> tuple:
  out = []
  for package in PACKAGES:
    for p in sorted((ROOT / package).glob("*.py")):
      if p.stem not in ("__init__", "common") and "__main__" in _source(p):
        out.append(f"{package}.{p.stem}")
  return tuple(out)


@functools.lru_cache(maxsize=None)
def all_flags() -> frozenset:
  return frozenset().union(*(binary_flags(b) for b in all_binaries()))


@functools.lru_cache(maxsize=None)
def all_settings() -> frozenset:
  configs = {binary_config(b.split(".", 1)[1]) for b in all_binaries() if b.startswith("exp")}
  return frozenset().union(*(config_keys(c) for c in configs))


def module_exists(module: str) -> bool:
  path = ROOT.joinpath(*module.split("."))
  return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def _defines(path: pathlib.Path, name: str) -> bool:
  """Whether the Python file ``path`` defines ``name`` (a function, a class, an assignment, a
  field) or imports it."""
  text, n = _source(path), re.escape(name)
  defined = rf"^\s*(?:(?:async\s+)?def|class)\s+{n}\b|^\s*{n}\s*(?::[^\n]*)?="
  if re.search(defined, text, re.M) or re.search(rf"^\s*{n}\s*:", text, re.M):
    return True
  imports = re.findall(r"^\s*(?:from\s+\S+\s+)?import\s+(\([^)]*\)|[^\n]+)", text, re.M)
  return any(re.search(rf"\b{n}\b", i) for i in imports)


def resolve_dotted(name: str) -> bool:
  """``recon_jax.job.run.run_reconstruction``: packages, then a module, then a name in it."""
  parts = name.split(".")
  path = ROOT / parts[0]
  for i, part in enumerate(parts[1:], 1):
    if part in PLACEHOLDERS:
      return True
    if (path / part).is_dir() and (path / part / "__init__.py").is_file():
      path = path / part
    elif (path / f"{part}.py").is_file():
      path = path / f"{part}.py"
      return len(parts) == i + 1 or _defines(path, parts[i + 1])
    else:
      return _defines(path / "__init__.py", part)
  return True


@functools.lru_cache(maxsize=None)
def public_api() -> frozenset:
  m = re.search(r"__all__ = \[(.*?)\]", _source(ROOT / "recon_jax" / "__init__.py"), re.S)
  return frozenset(re.findall(r"\"(\w+)\"", m.group(1))) if m else frozenset()


# --------------------------------------------------------------------------------------
# What a document names


def _code(text: str) -> list:
  """The shell-like pieces of a document: each fenced block's lines (continuations
  joined) and each inline code span, split at ``&&``, ``;`` and ``|``."""
  pieces = []
  blocks = re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
  for block in blocks:
    for line in block.replace("\\\n", " ").splitlines():
      line = line.split(" # ")[0] if not line.lstrip().startswith("#") else ""
      pieces += re.split(r"&&|;|\|", line)
  prose = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
  for span in re.findall(r"`([^`]+)`", prose):
    pieces += re.split(r"&&|;|\|", " ".join(span.split()))
  return pieces


def commands(text: str) -> list:
  """``(module, [arguments])`` of every ``python -m <package>.<module>`` in the code."""
  out = []
  for piece in _code(text):
    m = COMMAND.search(piece)
    if not m:
      continue
    rest = piece[m.end() :]
    try:
      args = shlex.split(rest)
    except ValueError:
      args = rest.split()
    out.append((m.group(1), args))
  return out


def module_problems(text: str, history: bool = False) -> list:
  out = []
  for module in sorted(set(COMMAND.findall(text))):
    if module.split(".")[1] not in PLACEHOLDERS and not module_exists(module) and not history:
      out.append(f"python -m {module}: no such module")
  return out


def flag_problems(text: str) -> list:
  """Flags a document names that its binaries do not have (see the module doc)."""
  out = []
  for module, args in commands(text):
    if not module_exists(module):
      continue  # module_problems says so
    binary = module.split(".", 1)[1]
    config, preset = None, ""
    if module.startswith("experiments."):
      config = binary_config(binary)
    for a in args:
      m = re.match(r"^--?config=(?:[\w./~-]*/)?(\w+)\.py(?::(\w+))?$", a)
      if m and config:
        if m.group(1) != config:
          out.append(f"{module}: {a}: its config file is experiments/configs/{config}.py")
          continue
        preset = m.group(2) or ""
        try:
          config_keys(config, preset)
        except KeyError:
          out.append(f"{module}: {a}: no preset {preset!r} in experiments/configs/{config}.py")
          preset = ""
    for a in args:
      m = re.match(r"^--?(no)?config\.([\w.]+?)\.?(=.*)?$", a)
      if m and config:
        if m.group(2) not in config_keys(config, preset):
          out.append(f"{module}: --config.{m.group(2)}: no such setting")
        continue
      m = re.match(r"^--([A-Za-z][\w-]*)(=.*)?$", a)
      if m and m.group(1) not in binary_flags(module):
        out.append(f"{module}: --{m.group(1)}: no such flag")
      m = re.match(r"^--variants=(.*)$", a)
      if m and config:
        for v in filter(None, m.group(1).split(",")):
          if f"variants.{v}" not in config_keys(config, preset):
            out.append(f"{module}: --variants: no variant {v!r} in its config")
  # Other tools' flags (ruff --fix, pip -e) are theirs: their commands are left out.
  tools = r"(?:ruff|pip|git|pytest|python -m (?:pip|pytest))\b"
  mine = re.sub(rf"`{tools}[^`]*`", "", text)
  mine = re.sub(rf"^\s*{tools}.*$", "", mine, flags=re.M)
  for name in sorted(set(FLAG.findall(mine))):
    name = name.rstrip(".")
    if set(re.split(r"[.=]", name)) & PLACEHOLDERS:
      continue
    if name.startswith(("config.", "noconfig.")):
      if name.split(".", 1)[1] not in all_settings():
        out.append(f"--{name}: no binary has this setting")
    elif name.split("=")[0] not in all_flags():
      out.append(f"--{name}: no binary has this flag")
  for config, preset in sorted(set(re.findall(r"experiments/configs/(\w+)\.py:(\w+)", text))):
    if preset not in PLACEHOLDERS and config not in PLACEHOLDERS:
      try:
        config_keys(config, preset)
      except (KeyError, ModuleNotFoundError):
        out.append(f"experiments/configs/{config}.py:{preset}: no such preset")
  for name in sorted(set(RJ.findall(text))):
    if name not in public_api():
      out.append(f"rj.{name}: not in recon_jax.__all__")
  return out


@functools.lru_cache(maxsize=None)
def settings_anywhere() -> frozenset:
  """Every setting and section of every binary's config, at its default preset and at each
  ``experiments/configs/X.py:PRESET`` a document names (a preset may add settings)."""
  keys = set(all_settings())
  for name in DOCUMENTS:
    for config, preset in set(re.findall(r"experiments/configs/(\w+)\.py:(\w+)", _read(name))):
      try:
        keys |= config_keys(config, preset)
      except (KeyError, ModuleNotFoundError):
        pass  # flag_problems names a preset that does not exist
  return frozenset(keys)


def _placeholder(name: str) -> bool:
  return bool(set(re.split(r"[.=]", name)) & PLACEHOLDERS)


def setting_problems(text: str) -> list:
  """The ``--config.X`` flags of a document that are no setting of today: in a command, of
  its binary's config at the command's preset (its default where that preset is gone); in
  the prose, of any binary's config."""
  out = []
  for module, args in commands(text):
    if not module.startswith("experiments.") or not module_exists(module):
      continue
    config, preset = binary_config(module.split(".", 1)[1]), ""
    for a in args:
      m = re.match(r"^--?config=(?:[\w./~-]*/)?(\w+)\.py(?::(\w+))?$", a)
      if m and m.group(1) == config:
        preset = m.group(2) or ""
    try:
      keys = config_keys(config, preset)
    except KeyError:
      keys = config_keys(config)
    for a in args:
      m = re.match(r"^--?(?:no)?config\.([\w.]+?)\.?(?:=.*)?$", a)
      if m and not _placeholder(m.group(1)) and m.group(1) not in keys:
        out.append(f"{module}: --config.{m.group(1)}: not a setting of {config}.py")
  for name in sorted(set(FLAG.findall(text))):
    name = name.rstrip(".").split("=")[0]
    if name.startswith(("config.", "noconfig.")) and not _placeholder(name):
      if name.split(".", 1)[1] not in settings_anywhere():
        out.append(f"--{name}: not a setting of any binary")
  return out


def source_problems(text: str) -> list:
  """Source paths and dotted names that do not resolve."""
  out = []
  for path, name in sorted(set(SOURCE.findall(text))):
    if set(re.split(r"[/.]", path)) & PLACEHOLDERS:
      continue
    if path.startswith("experiments/configs/"):
      name = ""  # FILE:PRESET: README's presets are checked with their commands
    if not (ROOT / path).is_file():
      out.append(f"{path}: no such file")
    elif name and name not in PLACEHOLDERS and not _defines(ROOT / path, name):
      out.append(f"{path}:{name}: {name} is not in {path}")
  for name in sorted(set(DOTTED.findall(text))):
    if name.rsplit(".", 1)[-1] in ("py", "md", "json", "msgpack", "npz"):
      continue  # a file name
    if not resolve_dotted(name):
      out.append(f"{name}: does not resolve")
  return out


def link_problems(text: str, where: pathlib.Path) -> list:
  """Relative links and images of a document at ``where`` that point at nothing."""
  out = []
  for target in sorted(set(LINK.findall(text))):
    if re.match(r"^(?:[a-z]+:|#)", target):
      continue
    if not (where.parent / target.split("#")[0]).exists():
      out.append(f"link {target}: no such file")
  return out


# --------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("name", DOCUMENTS)
def test_commands_modules_and_links_exist(name):
  text = _read(name)
  problems = module_problems(text, history=name in HISTORY) + link_problems(text, ROOT / name)
  if name not in HISTORY:
    problems += source_problems(text)
  assert not problems, f"{name}:\n" + "\n".join(problems)


# Documents whose flags, presets and variants are checked too (docs/bad_input.md names bad
# flags on purpose; CHANGELOG.md names the flags that were renamed).
FLAG_DOCUMENTS = [README, "BUILD.md", "RESULTS.md"] + [
  f"docs/{n}.md"
  for n in ("evaluation", "identifiability", "findings", "papers", "data_formats", "leakage")
]


@pytest.mark.parametrize("name", FLAG_DOCUMENTS)
def test_flags_presets_and_api_exist(name):
  problems = flag_problems(_read(name))
  assert not problems, f"{name}:\n" + "\n".join(problems)


# Documents whose --config.X flags must be settings of today (setting_problems), so that a
# reader can run their commands: the reference pages and the dated logs (written with the
# names of 0.2.0), not docs/bad_input.md (bad flags on purpose) nor CHANGELOG.md (the names
# that moved).
SETTING_DOCUMENTS = [
  name for name in DOCUMENTS if name not in ("CHANGELOG.md", "docs/bad_input.md")
]


@pytest.mark.parametrize("name", SETTING_DOCUMENTS)
def test_every_config_flag_a_document_names_is_a_setting_of_today(name):
  """docs/log/ and docs/log/findings.md's commands named settings by their names before
  0.2.0 (``--config.init_checkpoint``, ``--config.w_tv``), which 0.2.0 refuses."""
  problems = setting_problems(_read(name))
  assert not problems, f"{name}:\n" + "\n".join(problems)


def test_the_setting_check_catches_former_names():
  good = (
    "```bash\npython -m experiments.reconstruct --config=experiments/configs/reconstruct.py:"
    "lfw --config.kkt.w_tv=0.1 --noconfig.runtime.x64 --config.search.steps=10\n```\n"
    "Set `--config.victim.FIELD=VALUE`; the audit's `--config.theta0`, `--config.search.*`."
  )
  assert setting_problems(good) == []
  planted = {
    "python -m experiments.reconstruct --config.w_tv=0.1": "not a setting of reconstruct.py",
    "python -m experiments.reconstruct --config.init_checkpoint=t.pt": "not a setting",
    "python -m experiments.efficacy --config.base.steps=9": "not a setting of efficacy.py",
    "python -m experiments.audit --config.init=t.pt": "not a setting of audit.py",
    # the init study has a num_restarts of its own; the main job's is search.num_restarts
    "python -m experiments.reconstruct --config.num_restarts=2": "not a setting",
  }
  for line, want in planted.items():
    found = setting_problems(f"```bash\n{line}\n```\n")
    assert any(want in p for p in found), (line, found)
  assert setting_problems("we ran `--config.init_checkpoint=t.pt` then") == [
    "--config.init_checkpoint: not a setting of any binary"
  ]


@pytest.mark.parametrize(
  "binary", sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem != "__init__")
)
def test_the_binaries_own_examples_name_what_exists(binary):
  """The examples of a binary's --help (its module docstring): flags, presets, variants."""
  import ast

  doc = ast.get_docstring(ast.parse((ROOT / "experiments" / f"{binary}.py").read_text())) or ""
  joined = re.sub(r"\\\n\s*", " ", doc).splitlines()  # continuation lines joined
  lines = [x.split("  #")[0].strip() for x in joined if x.strip().startswith("python -m")]
  problems = flag_problems("\n".join(f"`{x}`" for x in lines))
  assert not problems, f"experiments/{binary}.py:\n" + "\n".join(problems)


def layout_problems(text: str) -> list:
  """BUILD.md's layout block against the checkout: every folder it names exists, every
  subpackage of recon_jax is named (indented names are inside recon_jax/), and none imports a
  subpackage named below it (the block's order is the order of the dependencies)."""
  block = re.search(r"## Layout.*?```[^\n]*\n(.*?)```", text, re.S)
  if not block:
    return ["no layout block under '## Layout'"]
  named = {}
  for line in block.group(1).splitlines():
    m = re.match(r"^( *)([\w.]+)/(?:\s|$)", line)
    if m:
      named[(ROOT / "recon_jax" if m.group(1) else ROOT) / m.group(2)] = line.strip()
  out = [f"layout: {line}: no such folder" for p, line in named.items() if not p.is_dir()]
  subpackages = {p.parent for p in (ROOT / "recon_jax").glob("*/__init__.py")}
  out += [f"layout: recon_jax/{p.name}/ is not named" for p in sorted(subpackages - set(named))]
  order = [p.name for p in named if p.parent.name == "recon_jax" and p.is_dir()]
  for i, pkg in enumerate(order):
    for path in sorted((ROOT / "recon_jax" / pkg).rglob("*.py")):
      used = re.findall(r"^\s*(?:from|import) recon_jax\.(\w+)", path.read_text(), re.M)
      out += [
        f"layout: {path.relative_to(ROOT)} imports recon_jax.{other}, listed below it"
        for other in sorted(set(used) & set(order[i + 1 :]))
      ]
  return out


def test_build_layout_names_every_package():
  problems = layout_problems(_read("BUILD.md"))
  assert not problems, "BUILD.md:\n" + "\n".join(problems)


def test_readme_is_short_and_holds_the_ci_command():
  text = _read(README)
  assert len(text.splitlines()) <= MAX_README_LINES
  assert TEST_COMMAND in text  # .ci/run runs this line


def test_the_checks_catch_planted_mistakes():
  good = "```bash\npython -m experiments.reconstruct --config.search.steps=10 --workdir=w\n```\n"
  assert flag_problems(good) == [] and module_problems(good) == []
  planted = {
    "python -m experiments.reconstruct --config.no_such_setting=1": "no such setting",
    "python -m experiments.reconstruct --no_such_flag": "no such flag",
    "python -m experiments.reconstruct --draws=3": "no such flag",  # efficacy's, not its
    "python -m experiments.reconstruct --config=experiments/configs/reconstruct.py:nope": (
      "no preset"
    ),
    "python -m experiments.train_victim --config=experiments/configs/reconstruct.py:lfw": (
      "its config file"
    ),
    "python -m experiments.efficacy --config.victim.n_per_class=3": "no such setting",
    "python -m experiments.efficacy --variants=default,no_such_variant": "no variant",
    "python -m experiments.toy_2d --config=experiments/configs/toy_2d.py:small "
    "--config.victim.lr=1": "no such setting",
  }
  for line, want in planted.items():
    found = flag_problems(f"```bash\n{line}\n```\n")
    assert any(want in p for p in found), (line, found)
  assert module_problems("run `python -m experiments.no_such_binary`")
  assert flag_problems("set `--config.not_a_setting_anywhere=1`")
  assert flag_problems("pick `--config=experiments/configs/audit.py:no_such_preset`")
  assert flag_problems("use `rj.no_such_function`")
  assert not flag_problems("run `ruff check --fix .` first")
  assert source_problems("see `recon_jax/eval/evaluation.py:no_such_function`")
  assert source_problems("see `recon_jax/studies/no_such_module.py`")
  assert source_problems("see `recon_jax.job.no_such_module`")
  assert link_problems("[x](docs/no_such_file.md)", ROOT / README)
  layout = "## Layout\n\n```\nrecon_jax/   x\n  nothing_here/   y\n```\n"
  found = layout_problems(layout)
  assert any("nothing_here" in p for p in found) and any("is not named" in p for p in found)
  upside_down = "## Layout\n\n```\nrecon_jax/   x\n  job/   y\n  core/   z\n```\n"
  assert any("listed below it" in p for p in layout_problems(upside_down))
