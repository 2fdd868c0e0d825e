"""Run a config-driven job from the command line: flags, ``--help``, one-line errors, exit codes.

A script names its config file (an ml_collections file with ``PRESETS`` and
``get_config(preset)``, optionally ``HELP = {setting: text}``) and its job::

  from absl import flags
  from recon_jax import cli

  def main(cfg):  # the job, on the parsed config
    print(my_study(cfg, flags.FLAGS.workdir, overwrite=flags.FLAGS.overwrite))

  if __name__ == "__main__":
    cli.run(main, "configs/my_study.py", "default")

Its command line then takes ``--config=FILE:PRESET`` and ``--config.NAME=VALUE`` for
every setting, ``--workdir``, ``--overwrite``, ``--resume`` and ``--verbose``;
``--help`` prints every setting with its default (exit code 0); an unknown preset or
setting, or a value of the wrong type, is refused in one line.  While the job runs, a
library :class:`~recon_jax.errors.Error` becomes one line naming the user's flag (its
``argument`` and ``mentions`` mapped through the config's structure, :func:`flag_of`):
exit code 1, the error's own ``exit_code`` where it has one (2: :class:`RunFailed`,
results written); Ctrl-C exits 130 and SIGTERM 143, each with one line.
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

from recon_jax.core import signals
from recon_jax.core.signals import Terminated  # noqa: F401  (SIGTERM, raised as Ctrl-C is)
from recon_jax.errors import Error, RunFailed, spelled  # noqa: F401  (RunFailed: exit code 2)
from recon_jax.io import workdir as workdirs
from recon_jax.io.workdir import expand, flatten

FLAGS = flags.FLAGS
HELP_ARGS = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
RUN_FLAGS = ("workdir", "overwrite", "resume")  # recon_jax.io.workdir's arguments, our flags
STANDARD = ("config", "workdir", "overwrite", "resume", "verbose")


class UserError(Error, ValueError):
  """A bad flag or setting found on the command line: one line, exit code 1."""


def quiet_jax_startup() -> None:
  """Hides JAX's INFO line about absent TPU/GPU backends ("Unable to initialize backend").

  Only that logger's INFO lines; platform selection and every warning are unchanged.
  """
  py_logging.getLogger("jax._src.xla_bridge").setLevel(py_logging.WARNING)


def _fail(message: str, code: int = 1) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(code)


def _is_config_flag(arg: str, dotted: bool) -> bool:
  """``arg`` is ``--config[=...]`` (``dotted``: ``--config.X...``/``--noconfig.X``)."""
  name = arg.lstrip("-").split("=", 1)[0]
  if not arg.startswith("-") or arg.startswith("---"):
    return False
  if dotted:
    return name.removeprefix("no").startswith("config.")
  return name == "config"


def _config_arg(argv: Sequence[str]) -> tuple[int, Optional[str]]:
  """Index and value of ``--config=VALUE`` / ``--config VALUE`` in ``argv`` (-1, None: absent)."""
  for i, a in enumerate(argv):
    if _is_config_flag(a, dotted=False):
      if "=" in a:
        return i, a.split("=", 1)[1]
      return i, argv[i + 1] if i + 1 < len(argv) else None
  return -1, None


def _split_config(value: str) -> tuple[str, Optional[str]]:
  path, _, preset = value.partition(":")
  return path, (preset or None)


def load_config(path: str, preset: Optional[str]):
  """``(module, get_config(preset))`` of the config file ``path``; UserError naming --config."""
  path = expand(path)
  if not os.path.isfile(path):
    raise UserError(f"--config: {path}: no such config file.")
  name = "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
  spec = importlib.util.spec_from_file_location("_config_" + name, path)
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


def _comment_of(line: str) -> tuple[Optional[str], int, str]:
  """A config file's ``c.NAME = VALUE  # comment`` line as (NAME, column of comment, comment)."""
  body, hash_, note = line.partition("#")
  left, eq, _ = body.partition("=")
  name = left.strip().removeprefix("c.")
  if not (hash_ and eq and left.strip().startswith("c.") and note.strip()):
    return None, -1, ""
  if not all(part.isidentifier() for part in name.split(".")):
    return None, -1, ""
  return name, len(line) - len(note.lstrip()), note.strip()


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
    name, at, note = _comment_of(line)
    more = line.lstrip().startswith("#") and len(line) - len(line.lstrip("# ")) == column
    if name:
      last, column = name, at
      out.setdefault(last, note)
    elif last and more:  # the comment goes on, aligned
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


def settings_text(
  cfg,
  config_path: str = "",
  known: Optional[dict] = None,
  hidden: Sequence[str] = (),
  first: Sequence[str] = (),
) -> str:
  """Every setting of ``cfg`` as ``NAME = VALUE  what it is`` lines: the texts of ``known``
  (the config file's HELP) and of the config file's comments.  ``hidden``: settings not
  listed (a name, or a section ending in '.'; a config file's ``HIDDEN``); ``first``: the
  settings listed first, in that order (a config file's ``FIRST``: those a user needs)."""
  comments = _setting_comments(config_path, known) if config_path else dict(known or {})
  flat = flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
  shown = lambda k: not any(k == h or (h.endswith(".") and k.startswith(h)) for h in hidden)
  rank = {k: i for i, k in enumerate(first)}
  names = sorted(flat, key=lambda k: rank.get(k, len(rank)))  # stable: the rest as they were
  rows = [(k, _show(flat[k])) for k in names if shown(k)]
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
  config: str, preset: Optional[str], argv: Sequence[str] = (), doc: Optional[str] = None
) -> str:
  """What ``--help`` prints: the program, its flags, the presets and every setting's default.

  ``config``: the default config file.  The settings are those of the preset named by
  ``--config`` in ``argv``, if any.
  """
  default, path = f"{_rel(config)}:{preset}", config
  _, value = _config_arg(list(argv))
  if value:
    path, preset = _split_config(value)
  module, cfg = load_config(path, preset)
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  stem = os.path.splitext(os.path.basename(config))[0]
  binary = f"python -m {spec.name}" if spec else f"python {sys.argv[0] if sys.argv else stem}"
  parts = [
    (doc or "").strip(),
    "",
    f"usage: {binary} [--config=FILE:PRESET] [--config.NAME=VALUE ...]",
    f"       {' ' * len(binary)} [--workdir=DIR] [--overwrite] [--resume] [--verbose]",
    "",
    "flags:",
  ]
  own = [f.name for f in FLAGS.get_flags_for_module(sys.argv[0])] if sys.argv else []
  for name in (*STANDARD, *sorted(n for n in set(own) if n not in STANDARD)):
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
    f"settings of {_rel(path)}:{preset or '(its default preset)'} with their defaults",
    "(set any as --config.NAME=VALUE; pick a preset with --config=FILE:PRESET --help):",
    settings_text(
      cfg,
      os.path.abspath(expand(path)),
      getattr(module, "HELP", None),
      getattr(module, "HIDDEN", ()),
      getattr(module, "FIRST", ()),
    ),
  ]
  return "\n".join(parts).strip() + "\n"


# Where an unknown setting's user finds the names: every one now, and those that moved before
# the first release (a former name is refused as any unknown one).
_ALL_SETTINGS = "--help lists them all; CHANGELOG.md, 0.2.0, lists the names that moved"


def check_overrides(argv: Sequence[str], path: str, preset: Optional[str]) -> None:
  """Refuses ``--config.NAME`` settings the config lacks, naming the closest ones."""
  _, cfg = load_config(path, preset)
  keys = list(flatten(cfg.to_dict()))
  sections = {k.rsplit(".", 1)[0] for k in keys if "." in k}
  for a in argv:
    if not _is_config_flag(a, dotted=True):
      continue
    name = a.lstrip("-").removeprefix("no").removeprefix("config.").split("=", 1)[0]
    name = name.split()[0] if name.split() else name
    if name not in keys and name not in sections:
      near = difflib.get_close_matches(name, keys, n=2)
      if not near:  # a setting named without its section (or misspelt so): by its last name
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in sorted(keys, key=len, reverse=True)}
        near = [
          by_leaf[n] for n in difflib.get_close_matches(name.rsplit(".", 1)[-1], by_leaf, n=2)
        ]
      hint = f"; did you mean {' or '.join('--config.' + k for k in near)}?" if near else ""
      raise UserError(f"--config.{name}: no such setting{hint} ({_ALL_SETTINGS})")


def _reorder(argv: list, i: int) -> None:
  """``--config`` moved before its overrides (ml_collections needs the file first)."""
  taken = argv[i : i + 1] if "=" in argv[i] else argv[i : i + 2]
  del argv[i : i + len(taken)]
  argv[1:1] = taken


def define_flags(
  config: str,
  preset: Optional[str] = None,
  *,
  resume: bool = True,
  workdir: Optional[str] = None,
  argv: Optional[list] = None,
) -> None:
  """The flags of a program whose default config file is ``config`` (preset ``preset``).

  Also what must happen before flag parsing: JAX's backend INFO line is silenced;
  ``--help`` prints the program's settings with their defaults and exits 0; an unknown
  preset or setting, or a value of the wrong type, is refused in one line (exit 1).
  ``workdir``: the default of ``--workdir`` (``workdirs/<config file's name>``).
  """
  argv = sys.argv if argv is None else argv
  signals.install(stop_line)  # Ctrl-C and SIGTERM heard from here on, in every phase
  quiet_jax_startup()
  cache = os.environ.get("RECON_JAX_CACHE", "")
  if cache.startswith("~") or "$" in cache:  # a quoted ~ reaches us unexpanded
    os.environ["RECON_JAX_CACHE"] = expand(cache)
  default = f"{config}:{preset}" if preset else config
  workdir = workdir or f"workdirs/{os.path.splitext(os.path.basename(config))[0]}"
  i, value = _config_arg(argv)
  if value and value.startswith("~"):  # ml_collections opens the path as given
    if "=" in argv[i]:
      argv[i] = f"{argv[i].split('=', 1)[0]}={expand(value)}"
    else:
      argv[i + 1] = expand(value)
  if value and any(_is_config_flag(a, dotted=True) for a in argv[1:i]):
    _reorder(argv, i)
  i, value = _config_arg(argv)
  cpath, cpreset = _split_config(value) if value else (config, preset)
  define = lambda fv, args=None: _define(default, config, preset, resume, workdir, fv, args)
  try:
    check_overrides(argv, cpath, cpreset)
    define(FLAGS)
    if any(a in HELP_ARGS for a in argv[1:]):
      doc = getattr(sys.modules.get("__main__"), "__doc__", None)
      sys.stdout.write(help_text(config, preset, argv, doc))
      sys.exit(0)
    if any(a in ("--helpfull", "-helpfull") for a in argv[1:]):  # absl's, but exit code 0
      app.define_help_flags()
      sys.stdout.write(FLAGS.get_help() + "\n")
      sys.exit(0)
    trial = flags.FlagValues()  # a dry run of the parse, where a failure changes nothing
    define(trial, argv)
    trial(list(argv), known_only=True)
  except UserError as e:
    _fail(str(e))
  except (flags.Error, ValueError, TypeError, KeyError, AttributeError) as e:
    _fail(_flag_message(e))


def _flag_message(e: BaseException) -> str:
  msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  if msg.startswith("flag --") and ": " in msg:  # absl's "flag --x=v: why"
    msg = msg.removeprefix("flag ")
  bad = "('Non-boolean argument to boolean flag', "
  if bad in msg:
    return msg[: msg.index(bad)] + "expected true or false"
  for python, what in _PARSE_ERRORS:  # Python's words for a typed flag's value, as a user's
    found = re.search(python, msg)
    if found:
      return f"{msg[: found.start()]}expected {what}, got {found.group(1)}"
  return msg


# A typed flag's value that Python could not parse, and what the setting expects instead.
_PARSE_ERRORS = (
  (r"invalid literal for int\(\) with base \d+: ('.*')$", "an integer"),
  (r"could not convert string to float: ('.*')$", "a number"),
)


def _define(default, path, preset, resume, workdir, fv, argv=None) -> None:
  presets, example = "", "--config.seed=1"
  try:
    module, cfg = load_config(path, preset)
    presets = " Presets: " + ", ".join(module.PRESETS) + "."
    keys = flatten(cfg.to_dict())
    known = ("search.num_restarts", "num_restarts", "victim.n_per_class", "seed")
    name = next((k for k in known if k in keys), None)
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
    workdir,
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
  """Runs a program whose flags are defined: flags parsed (one-line errors), then
  ``job(config)`` under :func:`main_guard`."""
  from absl import logging

  def main(argv):
    if len(argv) > 1:
      _fail(f"unexpected arguments: {' '.join(argv[1:])}")
    signals.install(stop_line)  # (define_flags did, unless the program defined its own)
    logging.set_verbosity(logging.INFO)
    cfg = FLAGS.config
    main_guard(lambda: job(cfg), cfg, FLAGS.verbose)

  app.run(main, flags_parser=parse_flags)


def run(job: Callable[[Any], Any], config: str, preset: Optional[str] = None, **kwargs) -> None:
  """:func:`define_flags` (``config``, ``preset``, ``kwargs``), then :func:`run_main` of ``job``.

  A program's own flags are defined before, so that ``--help`` lists them.
  """
  try:
    define_flags(config, preset, **kwargs)
    run_main(job)
  except KeyboardInterrupt as e:  # while the flags were read: the job's own is main_guard's
    _stopped(e, FLAGS.verbose if FLAGS.is_parsed() and "verbose" in FLAGS else False)


def main_job(cfg, workdir: str, *, resume=False, overwrite=False, explicit=None, spoken=None):
  """The main job (:func:`recon_jax.job.run.main_job`, the same arguments) as a binary runs
  it: its warnings on stderr as they come, the report's path and verdict line on stdout,
  these and report.md's reasons and warnings naming the settings as the flags of
  ``spoken``, the binary's config (:func:`in_flags`; default ``cfg``).  Returns
  the report metrics.json holds, typed (:class:`recon_jax.eval.metrics_json.Metrics`).  The binaries that run the main job
  (reconstruct, audit) call this, not each other."""
  from recon_jax.job import run as job_run

  say = lambda text: in_flags(text, cfg if spoken is None else spoken)
  warn = lambda w: print(f"warning: {say(w)}", file=sys.stderr)
  kw = dict(resume=resume, overwrite=overwrite, explicit=explicit, warn=warn, spell=say)
  path, m = job_run.main_job(cfg, workdir, **kw)
  print(f"wrote {path}: {say(m.verdict_line)}")
  return m


def overrides(flag_values=FLAGS, prefix: str = "") -> dict:
  """The ``--config.X=V`` settings given on the command line under ``prefix``, as {X: V}."""
  over = config_flags.get_override_values(flag_values["config"])
  flat = flatten(over) if isinstance(over, dict) else {}
  return {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}


def flag_of(cfg, argument: Optional[str]) -> Optional[str]:
  """The flag of the setting a library argument names, by the config's structure, if any.

  ``argument`` is the library's name (``lr``) or a dotted path (``victim.lr``); the
  shortest setting of ``cfg`` that is or ends with it wins (``seed``, not ``victim.seed``):
  ``--config.<its path>``; a dotted path in one of the config's sections is that setting
  even when missing; a dotted path whose section the config holds at its top (the audit
  holds the job's ``threat`` settings and the victim's ``loss`` there) is the setting of its
  last name.  ``recon_jax.io.workdir``'s arguments and a program's own flags are
  ``--<name>``.
  """
  if argument in RUN_FLAGS or (argument and argument not in STANDARD and argument in FLAGS):
    return f"--{argument}"
  if not argument or not (hasattr(cfg, "to_dict") or isinstance(cfg, dict)):
    return None
  flat = flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg))
  hits = [k for k in flat if k == argument or k.endswith("." + argument)]
  head, leaf = argument.split(".")[0], argument.rsplit(".", 1)[-1]
  deeper = [k for k in flat if k.startswith(head + ".") and k.endswith("." + leaf)]
  if not hits and "." in argument and deeper:  # a section's setting now deeper in it
    return f"--config.{min(deeper, key=len)}"  # (base.steps: base.search.steps)
  if not hits and "." in argument and any(k.startswith(head + ".") for k in flat):
    return f"--config.{argument}"  # an entry missing from a section the config has
  if not hits and "." in argument and argument.rsplit(".", 1)[1] in flat:
    return f"--config.{argument.rsplit('.', 1)[1]}"  # a section's setting held at the top
  return f"--config.{min(hits, key=lambda k: (len(k), k))}" if hits else None


def _speller(cfg, held: bool = False) -> Callable[[str, Optional[str]], Optional[str]]:
  """``spell(name, value)``: the library's setting ``name`` (with ``value``) as the flag of
  ``cfg`` that sets it (:func:`flag_of`), None where there is none; ``held``: only a flag
  that sets a setting ``cfg`` holds (or a program's own flag), not a missing entry of a
  section (words of free text that merely look like names: ``e.g.``, ``victim.msgpack``)."""
  known = flatten(cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)) if held else {}

  def spell(name: str, value: Optional[str]) -> Optional[str]:
    flag = flag_of(cfg, name)
    if flag is None or (held and flag.startswith("--config.") and flag[9:] not in known):
      return None
    if value is None:
      return flag
    is_bool = name in FLAGS and FLAGS[name].boolean or name in ("overwrite", "resume")
    return flag if is_bool and value == "True" and "config." not in flag else f"{flag}={value}"

  return spell


def in_flags(text: str, cfg) -> str:
  """``text``, the library's words for a reader (a verdict's line or reasons, a warning),
  with the settings it names (``attack=cone``, ``threat.theta0``) spelled as the flags of
  the binary whose config is ``cfg`` (:func:`flag_of`: ``--config.attack=cone``; the
  audit's ``--config.theta0``); every other word as it is.  metrics.json and the library's
  own results keep the library's names."""
  if cfg is None or not (hasattr(cfg, "to_dict") or isinstance(cfg, dict)):
    return text
  return spelled(text, _speller(cfg, held=True))


def error_line(e: BaseException, cfg=None) -> str:
  """The one line a user sees for the library's error ``e``: the settings it names as data
  (:meth:`recon_jax.errors.Error.named`) spelled as the user's flags (:func:`flag_of`)."""
  if isinstance(e, Error):
    return f"error: {e.named(_speller(cfg))}"
  text = str(e).strip()
  return f"error: {text.splitlines()[0] if text else type(e).__name__}"


def main_guard(fn: Callable[[], Any], cfg=None, verbose: bool = False) -> None:
  """Runs ``fn``; the library's errors become one line on stderr and a non-zero exit.

  Exit code 1 for an error (:class:`recon_jax.errors.Error`), the error's own
  ``exit_code`` where it has one (2: :class:`RunFailed`, results written); 130 and one
  line for Ctrl-C, 143 for SIGTERM.  Anything else is a bug and keeps its traceback.
  """
  try:
    fn()
  except Error as e:
    if verbose:
      traceback.print_exc()
    print(error_line(e, cfg), file=sys.stderr)
    sys.exit(int(getattr(e, "exit_code", 1)))
  except KeyboardInterrupt as e:
    _stopped(e, verbose)


def _stopped(e: KeyboardInterrupt, verbose: bool = False) -> None:
  """Ends the process stopped by ``e`` (Ctrl-C, or :class:`Terminated`: SIGTERM) with its
  exit code and one line (:func:`stop_line`)."""
  if verbose:
    traceback.print_exc()
  signum = signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT
  code, line = signals.EXIT_CODES[signum], stop_line(signum)
  if signals.installed():  # a binary's process: jax's threads may still run (signals)
    signals.exit_now(code, line)
  print(line, file=sys.stderr)
  sys.exit(code)


def stop_line(signum: int) -> str:
  """The one line a binary stopped by ``signum`` (SIGINT: Ctrl-C, or SIGTERM) prints
  (:func:`stop_message` of its ``--workdir``; before its flags are parsed, nothing of the
  run exists: :func:`recon_jax.core.signals.before_start`)."""
  if not FLAGS.is_parsed():
    return signals.before_start(signum)
  folder = FLAGS.workdir if "workdir" in FLAGS else None
  try:
    return stop_message(signum, folder, "resume" in FLAGS)
  except Exception:  # noqa: BLE001 (the process is ending: a line that promises nothing)
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


def stop_message(signum: int, folder: Optional[str], resumable: bool = True) -> str:
  """What a run stopped by ``signum`` in workdir ``folder`` can be continued from, and the
  command that continues or restarts it: ``--resume`` only where a resume would be accepted
  (:func:`recon_jax.io.workdir.saved`; ``resumable``: the program has ``--resume``).
  """
  how = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
  if not folder:
    return how
  path = os.path.abspath(expand(folder))
  can = workdirs.saved(path)
  if can and resumable:
    return f"{how}; run the same command with --resume to continue from the state saved in {path}"
  if can is None:
    return f"{how} before anything was written to {path}; run the same command to start again"
  nothing = f"{how}; nothing was saved in {path} that --resume could continue"
  if not resumable:
    nothing = f"{how}; {path} holds a partial run"
  if workdirs.holds_results(path):
    return f"{nothing}; run the same command with --overwrite to start again"
  return f"{nothing}; run the same command to start again"
