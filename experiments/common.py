"""What every binary shares: its flags, its workdir, its files, and how it reports errors.

A binary defines ``--config`` (an ml_collections config file with presets,
``--config=experiments/configs/NAME.py:PRESET``, every field overridable as
``--config.FIELD=VALUE``), ``--workdir``, ``--overwrite``, ``--resume`` and
``--verbose`` with :func:`define_flags` (which also answers ``--help`` with every
setting and its default, exit code 0, and refuses unknown settings in one line),
and runs with :func:`run_main`.  Library errors name the library's arguments;
:func:`main_guard` turns them into one line naming the user's setting: exit code
1 for an error, 2 for a run that wrote its results but failed (:class:`RunFailed`),
130 for Ctrl-C.
"""

from __future__ import annotations

import difflib
import importlib.util
import logging as py_logging
import os
import re
import signal
import sys
import textwrap
import traceback
from typing import Any, Callable, Optional, Sequence

from absl import app, flags
import ml_collections
from ml_collections import config_flags

from recon_jax.errors import Error, RunFailed  # noqa: F401  (RunFailed: the binaries' exit 2)
from recon_jax.workdir import expand, flatten

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout
CONFIG_DIR = os.path.join(ROOT, "experiments", "configs")
FLAGS = flags.FLAGS
HELP_ARGS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
RUN_FLAGS = ("workdir", "overwrite", "resume")  # recon_jax.workdir's arguments, our flags


class UserError(Error, ValueError):
  """A bad flag or setting found by a binary: one line, exit code 1."""


def quiet_jax_startup() -> None:
  """Hides JAX's INFO line about absent TPU/GPU backends ("Unable to initialize backend").

  Only that logger's INFO lines; platform selection and every warning are unchanged.
  """
  py_logging.getLogger("jax._src.xla_bridge").setLevel(py_logging.WARNING)


def _fail(message: str, code: int = 1) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(code)


def _config_arg(argv: Sequence[str]) -> tuple[int, Optional[str]]:
  """Index and value of ``--config=VALUE`` / ``--config VALUE`` in ``argv`` (-1, None: absent)."""
  for i, a in enumerate(argv):
    m = re.match(r"^--?config(=(.*))?$", a)
    if m:
      if m.group(1) is not None:
        return i, m.group(2)
      return i, argv[i + 1] if i + 1 < len(argv) else None
  return -1, None


def _split_config(value: str) -> tuple[str, Optional[str]]:
  path, _, preset = value.partition(":")
  return path, (preset or None)


def load_config(path: str, preset: Optional[str]):
  """``get_config(preset)`` of the config file ``path``; UserError naming --config if it fails."""
  path = expand(path)
  if not os.path.isfile(path):
    raise UserError(f"--config: {path}: no such config file.")
  spec = importlib.util.spec_from_file_location(
    "_config_" + re.sub(r"\W", "_", os.path.abspath(path)), path
  )
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
    cfg = module.get_config(preset) if preset else module.get_config()
  except KeyError as e:  # our config files: an unknown preset
    raise UserError(f"--config={path}:{preset}: {e.args[0] if e.args else e}") from None
  except SyntaxError as e:
    raise UserError(f"--config: {path}, line {e.lineno}: {e.msg}.") from None
  except AttributeError as e:
    raise UserError(f"--config: {path} has no get_config ({e}).") from None
  if not isinstance(cfg, ml_collections.ConfigDict):
    raise UserError(
      f"--config: get_config() of {path} must return an ml_collections.ConfigDict, "
      f"not {type(cfg).__name__}."
    )
  return module, cfg


def _setting_comments(path: str, known: Optional[dict] = None) -> dict:
  """``{setting: comment}``: ``known`` (a config file's HELP), then the file's own
  ``c.NAME = VALUE  # comment`` lines for the settings it lacks."""
  out = dict(known or {})
  try:
    with open(path) as f:
      lines = f.read().splitlines()
  except OSError:
    return out
  last, column = None, -1
  for line in lines:
    m = re.match(r"^\s*c\.([A-Za-z_][\w.]*)\s*=[^#]*#\s*(.+)$", line)
    more = re.match(r"^\s*#\s*", line)
    if m:
      last, column = m.group(1), m.start(2)
      out.setdefault(last, m.group(2).strip())
    elif last and more and more.end() == column:  # the comment goes on, aligned
      out[last] += " " + line[column:].strip()
    else:
      last = None
  return out


def _show(v) -> str:
  if v is None:
    return "None (unset)"
  if isinstance(v, tuple):
    return ",".join(str(x) for x in v) if v else "()"
  return repr(v)


def settings_text(cfg, config_path: str = "", known: Optional[dict] = None) -> str:
  """Every setting of ``cfg`` as ``NAME = VALUE  what it is`` lines: the texts of ``known``
  (the config file's HELP) and of the config file's comments."""
  comments = _setting_comments(config_path, known) if config_path else dict(known or {})
  flat = flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
  rows = [(k, _show(v)) for k, v in flat.items()]
  width = min(max(len(k) + len(v) + 3 for k, v in rows), 34) if rows else 0
  out = []
  for k, v in rows:
    text, note = f"{k} = {v}", comments.get(k, "")
    lines = textwrap.wrap(note, 96 - width) or [""]
    first = f"  {text:<{width}}  {lines[0]}".rstrip()
    if note and len(text) > width:
      first = f"  {text}\n  {'':<{width}}  {lines[0]}"
    out.append("\n".join([first] + [f"  {'':<{width}}  {x}" for x in lines[1:]]))
  return "\n".join(out)


def _rel(path: str) -> str:
  path = os.path.abspath(expand(path))
  rel = os.path.relpath(path, os.getcwd())
  return path if rel.startswith("..") else rel


def help_text(
  config_name: str, preset: Optional[str], argv: Sequence[str] = (), doc: Optional[str] = None
) -> str:
  """What ``--help`` prints: the binary, its flags, the presets and every setting's default.

  The settings are those of the preset named by ``--config`` in ``argv``, if any.
  """
  default = f"{_rel(os.path.join(CONFIG_DIR, f'{config_name}.py'))}:{preset}"
  path = os.path.join(CONFIG_DIR, f"{config_name}.py")
  _, value = _config_arg(list(argv))
  if value:
    path, preset = _split_config(value)
  module, cfg = load_config(path, preset)
  rel = _rel(path)
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  binary = f"python -m {spec.name}" if spec else f"python -m experiments.{config_name}"
  parts = [
    (doc or "").strip(),
    "",
    f"usage: {binary} [--config=FILE:PRESET] [--config.NAME=VALUE ...]",
    f"       {' ' * len(binary)} [--workdir=DIR] [--overwrite] [--resume] [--verbose]",
    "",
    "flags:",
  ]
  standard = ("config", "workdir", "overwrite", "resume", "verbose")
  own = [f.name for f in FLAGS.get_flags_for_module(sys.argv[0])] if sys.argv else []
  for name in (*standard, *sorted(n for n in set(own) if n not in standard)):
    if name in FLAGS:
      f = FLAGS[name]
      body = textwrap.fill(
        f"{f.help} (default: {default if name == 'config' else f.default})",
        96,
        initial_indent="      ",
        subsequent_indent="      ",
      )
      parts.append(f"  --{name}\n{body}")
  parts += [
    "  --helpfull\n      every flag, absl's own included",
    "",
    (module.__doc__ or "").strip(),
    "",
    f"settings of {rel}:{preset or '(its default preset)'} with their defaults",
    "(set any as --config.NAME=VALUE; pick a preset with --config=FILE:PRESET --help):",
    settings_text(cfg, os.path.abspath(expand(path)), getattr(module, "HELP", None)),
  ]
  return "\n".join(parts).strip() + "\n"


def _check_overrides(argv: Sequence[str], path: str, preset: Optional[str]) -> None:
  """Refuses ``--config.NAME`` settings the config lacks, naming the closest ones."""
  _, cfg = load_config(path, preset)
  keys = list(flatten(cfg.to_dict()))
  sections = {k.rsplit(".", 1)[0] for k in keys if "." in k}
  for a in argv:
    m = re.match(r"^--?(?:no)?config\.([^=\s]+)", a)
    if m and m.group(1) not in keys and m.group(1) not in sections:
      near = difflib.get_close_matches(m.group(1), keys, n=2)
      hint = f"; did you mean {' or '.join('--config.' + k for k in near)}?" if near else ""
      raise UserError(f"--config.{m.group(1)}: no such setting{hint} (--help lists them all)")


def define_flags(
  config_name: str,
  preset: Optional[str] = None,
  *,
  resume: bool = True,
  workdir: Optional[str] = None,
  argv: Optional[list] = None,
) -> None:
  """The flags of a binary whose config file is ``experiments/configs/<config_name>.py``.

  Also what must happen before flag parsing: JAX's backend INFO line is
  silenced; ``--help`` prints the binary's settings with their defaults and
  exits 0; an unknown preset or setting, or a value of the wrong type, is
  refused in one line (exit 1) instead of a traceback.
  """
  argv = sys.argv if argv is None else argv
  quiet_jax_startup()
  cache = os.environ.get("RECON_JAX_CACHE", "")
  if cache.startswith("~") or "$" in cache:  # a quoted ~ reaches us unexpanded
    os.environ["RECON_JAX_CACHE"] = expand(cache)
  path = os.path.join(CONFIG_DIR, f"{config_name}.py")
  default = f"{path}:{preset}" if preset else path
  i, value = _config_arg(argv)
  if value and value.startswith("~"):  # ml_collections opens the path as given
    if "=" in argv[i]:
      argv[i] = f"{argv[i].split('=', 1)[0]}={expand(value)}"
    else:
      argv[i + 1] = expand(value)
    i, value = _config_arg(argv)
  if value and any(re.match(r"^--?(no)?config\.", a) for a in argv[1:i]):
    # ml_collections needs the file before its overrides: the order a user meant is clear
    taken = argv[i : i + 1] if "=" in argv[i] else argv[i : i + 2]
    del argv[i : i + len(taken)]
    argv[1:1] = taken
    i, value = _config_arg(argv)
  cpath, cpreset = _split_config(value) if value else (path, preset)
  want_help = any(a in HELP_ARGS for a in argv[1:])
  try:
    _check_overrides(argv, cpath, cpreset)
    _define(config_name, default, path, preset, resume, workdir, FLAGS)
    if want_help:
      doc = getattr(sys.modules.get("__main__"), "__doc__", None)
      sys.stdout.write(help_text(config_name, preset, argv, doc))
      sys.exit(0)
    if any(a in ("--helpfull", "-helpfull") for a in argv[1:]):  # absl's, but exit code 0
      app.define_help_flags()
      sys.stdout.write(FLAGS.get_help() + "\n")
      sys.exit(0)
    trial = flags.FlagValues()  # a dry run of the parse, where a failure changes nothing
    _define(config_name, default, path, preset, resume, workdir, trial, argv)
    trial(list(argv), known_only=True)
  except UserError as e:
    _fail(str(e))
  except (flags.Error, ValueError, TypeError, KeyError, AttributeError) as e:
    _fail(_flag_message(e))


def _flag_message(e: BaseException) -> str:
  msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  msg = re.sub(r"^flag (--\S+?)(=\S*)?: ", r"\1\2: ", msg)
  return re.sub(r"\('Non-boolean argument to boolean flag', .*\)$", "expected true or false", msg)


def _define(config_name, default, path, preset, resume, workdir, fv, argv=None) -> None:
  presets, example = "", "--config.seed=1"
  try:
    module, cfg = load_config(path, preset)
    presets = " Presets: " + ", ".join(module.PRESETS) + "."
    keys = flatten(cfg.to_dict())
    name = next((k for k in ("num_restarts", "victim.n_per_class", "seed") if k in keys), None)
    example = f"--config.{name}={keys[name] + 1}" if name else example
  except (UserError, AttributeError, TypeError):
    pass
  config_flags.DEFINE_config_file(
    "config",
    default,
    f"Config file and preset, FILE:PRESET (default preset: {preset})."
    f"{presets} Override any setting as --config.NAME=VALUE, e.g. {example}; --help lists "
    "every setting with its default.",
    flag_values=fv,
    lock_config=True,
    sys_argv=argv,
  )
  flags.DEFINE_string(
    "workdir",
    workdir or f"workdirs/{config_name}",
    "Output folder (must be empty unless --overwrite or --resume).",
    flag_values=fv,
  )
  flags.DEFINE_bool("overwrite", False, "Allow writing into a non-empty --workdir.", flag_values=fv)
  if resume:
    flags.DEFINE_bool(
      "resume", False, "Continue the run saved in --workdir (same settings).", flag_values=fv
    )
  flags.DEFINE_bool("verbose", False, "Show tracebacks of errors.", flag_values=fv)


def parse_flags(argv: list) -> list:
  """absl's flag parsing, with any failure as one line ``error: ...`` and exit code 1."""
  try:
    return FLAGS(argv)
  except (flags.Error, ValueError, TypeError, KeyError, AttributeError) as e:
    _fail(_flag_message(e))


def run_main(job: Callable[[Any], Any]) -> None:
  """Runs a binary: flags parsed (one-line errors, :func:`parse_flags`), then ``job(config)``.

  ``job`` runs under :func:`main_guard`: the project's errors become one line
  naming the setting, Ctrl-C exits 130 with the command to resume.
  """
  from absl import logging

  def main(argv):
    if len(argv) > 1:
      _fail(f"unexpected arguments: {' '.join(argv[1:])}")
    signal.signal(signal.SIGTERM, _on_sigterm)
    logging.set_verbosity(logging.INFO)
    cfg = FLAGS.config
    main_guard(lambda: job(cfg), cfg, FLAGS.verbose)

  app.run(main, flags_parser=parse_flags)


def overrides(flag_values, prefix: str = "") -> dict:
  """The ``--config.X=V`` settings given on the command line under ``prefix``, as {X: V}."""
  over = config_flags.get_override_values(flag_values["config"])
  flat = flatten(over) if isinstance(over, dict) else {}
  return {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}


def setting_name(cfg, argument: Optional[str]) -> Optional[str]:
  """The flag or ``--config.`` path of the setting a library argument came from, if any.

  ``argument`` is the library's name (``lr``) or a dotted path (``victim.lr``);
  the shortest setting that is or ends with it wins (``seed``, not ``victim.seed``);
  a dotted path in one of the config's sections is that setting even when missing.
  ``recon_jax.workdir``'s arguments, and a binary's own flags, are flags.
  """
  if argument in RUN_FLAGS or (argument and argument != "config" and argument in FLAGS):
    return f"--{argument}"
  if not argument or cfg is None or not (hasattr(cfg, "to_dict") or isinstance(cfg, dict)):
    return None
  flat = flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
  hits = [k for k in flat if k == argument or k.endswith("." + argument)]
  if not hits and "." in argument and any(k.startswith(argument.split(".")[0] + ".") for k in flat):
    return f"--config.{argument}"  # an entry missing from a section the config has
  return f"--config.{sorted(hits, key=len)[0]}" if hits else None


def error_line(e: BaseException, cfg=None) -> str:
  """The one line a user sees for the project's error ``e``.

  A library message names its own argument first (``lr must be > 0``); that
  name becomes the setting's (``--config.victim.lr must be > 0``), or the
  setting is put in front (``--config.victim.lr: ...``).  Settings named inside
  the message as ``NAME=VALUE``, and the workdir's arguments (``overwrite=True``,
  ``workdir /x``), become the user's flags too.
  """
  text = str(e).strip()
  msg = text.splitlines()[0] if text else type(e).__name__
  msg = re.sub(r"\b(overwrite|resume)=True\b", r"--\1", msg)
  msg = re.sub(r"(?<=: )workdir (?=\S)", "--workdir ", msg)
  msg = re.sub(  # other settings named in the message as NAME=VALUE
    r"(?<![\w.-])([A-Za-z_][\w.]*)=",
    lambda m: (setting_name(cfg, m.group(1)) or m.group(1)) + "=",
    msg,
  )
  argument = getattr(e, "argument", None)
  name = setting_name(cfg, argument)
  if not name:
    return f"error: {msg}"
  bare = name.lstrip("-").removeprefix("config.")
  for lead in (name, bare, argument, bare.rsplit(".", 1)[-1]):
    if msg.startswith(lead) and (len(msg) == len(lead) or msg[len(lead)] in " :=,;'("):
      return f"error: {name}{msg[len(lead) :]}"
  return f"error: {name}: {msg}"


def main_guard(fn: Callable[[], Any], cfg=None, verbose: bool = False) -> None:
  """Runs ``fn``; the project's errors become one line on stderr and a non-zero exit.

  Exit code 1 for an error (:class:`recon_jax.errors.Error`), the error's own
  ``exit_code`` where it has one (2: :class:`RunFailed`, results written);
  130 and one line for Ctrl-C.  Anything else is a bug and keeps its traceback.
  """
  try:
    fn()
  except Error as e:
    if verbose:
      traceback.print_exc()
    print(error_line(e, cfg), file=sys.stderr)
    sys.exit(int(getattr(e, "exit_code", 1)))
  except KeyboardInterrupt as e:
    if verbose:
      traceback.print_exc()
    workdir = FLAGS.workdir if FLAGS.is_parsed() and "workdir" in FLAGS else None
    hint = (
      f"; run the same command with --resume to continue from the state saved in "
      f"{os.path.abspath(expand(workdir))}"
      if workdir and "resume" in FLAGS
      else ""
    )
    how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    print(f"{how}{hint}", file=sys.stderr)
    sys.exit(143 if isinstance(e, Terminated) else 130)


class Terminated(KeyboardInterrupt):
  """SIGTERM, raised in the main thread so that it ends a run as Ctrl-C does (one line)."""


def _on_sigterm(signum, frame):
  del signum, frame
  raise Terminated()
