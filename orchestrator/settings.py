"""Settings declared once: a ``Setting`` is the one source of everything about a value.

A setting has a TOML key, a type with its bounds or choices, a default, the fix its
error messages give, and (when it has one) the command-line flag with its help. From
that one declaration come

- ``SettingsTable.read``: the TOML check, with messages that name the file, the key
  and the fix (``models[0] (m).n_ctx: expected an integer >= 16, got "4k"``);
- ``add_flag``: the argparse flag, whose help ends with the default;
- ``check_flag``: the same bounds for a flag's value (``--n-ctx: 4 is below ...``);
- ``SettingsTable.file`` / ``flag_file``: the one check of a path that must name a file
  (a model, a draft, a drafter, a chat template), or one of the embedded models' words.

``N_CTX``, ``THREADS`` and ``N_GPU_LAYERS`` are declared here because every command
that starts a daemon (``serve``, ``niah``, ``bench``) and every daemon table
(``[[models]]``, ``[models.prefill]``) takes them, ``PARALLEL``, ``SPARE_SEQUENCES``
and ``QUEUE_LIMIT`` because ``bench`` passes them on to the ``serve`` it starts, and
``BEARER_KEY`` because every command that talks to a running Lucerna (``niah``,
``bench``) does. This module imports nothing of
ours but the error type, so a command line may import it before anything heavy.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from protocol import MAX_PARALLEL

__all__ = [
    "BEARER_KEY",
    "BEARER_KEY_ENV",
    "N_CTX",
    "N_GPU_LAYERS",
    "PARALLEL",
    "QUEUE_LIMIT",
    "SPARE_SEQUENCES",
    "THREADS",
    "Setting",
    "SettingsTable",
    "add_flag",
    "check_flag",
    "flag_file",
    "resolve_file",
]


@dataclass(frozen=True)
class Setting:
    """One configurable value: its TOML key and, when it has one, its flag."""

    key: str
    """The TOML key (also the ``Overrides`` field a flag fills, unless ``dest`` says)."""
    kind: type
    """``int``, ``float``, ``str``, ``bool``, ``list`` (of non-empty strings) or ``dict``
    (a table)."""
    fix: str
    """What a wrong value's message tells the user to do."""
    default: Any = None
    """The value when the key and the flag are absent; None: decided later (see ``shown``)."""
    shown: str | None = None
    """The help's words for the default when it is not a plain value ("all", ...)."""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    noun: str = "value"
    """What a value is called in ``unknown <noun> 'x'`` when it is not one of ``choices``."""
    flag: str | None = None
    help: str | None = None
    """The flag's help, without its default (``add_flag`` appends that)."""
    flag_fix: str | None = None
    """The fix of a flag's message where ``fix`` speaks of the config file; None: ``fix``."""
    dest: str | None = None
    """The flag's attribute on argparse's namespace; None: ``key``."""
    metavar: str | None = None

    def flag_help(self, shown: str | None = None, help: str | None = None) -> str:
        """``help`` (or the declared help) with the default: ``shown`` words, the declared
        words, or the value."""
        words = shown or self.shown
        default = (f"default: {words}" if words is not None
                   else f"default {self.default:g}" if isinstance(self.default, float)
                   else f"default {self.default}")
        return f"{help or self.help} ({default})"

    def flag_error(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.flag}: {problem}. Fix: {self.flag_fix or self.fix}.")


N_CTX = Setting("n_ctx", int, "write the context size in tokens, e.g. n_ctx = 4096",
                default=4096, low=16, flag="--n-ctx", help="context size in tokens")
THREADS = Setting("threads", int, "give a CPU thread count, or leave it out for all",
                  shown="all", low=1, flag="--threads", help="CPU threads per daemon")
N_GPU_LAYERS = Setting("n_gpu_layers", int,
                       "give the layers to offload (-1 or leave out: all that fit the build)",
                       shown="all that fit the build", low=-1, flag="--n-gpu-layers",
                       help="layers to offload on GPU builds, -1: all")
PARALLEL = Setting(
    "parallel", int, "give how many requests generate at once, e.g. parallel = 4 (1: one at "
    "a time), or leave it out for as many as fit the memory",
    shown="as many as fit the memory, at most 8 (docs/batching.md)", low=1, high=MAX_PARALLEL,
    flag="--parallel",
    help="requests per model that generate at once (continuous batching in one daemon, each "
    "promised n_ctx tokens of one shared KV pool); the rest queue")
SPARE_SEQUENCES = Setting(
    "spare_sequences", int, "give how many conversations to keep in the daemon beyond "
    "parallel, e.g. spare_sequences = 8 (0: none)",
    shown="as many as parallel where the memory allows (docs/batching.md)", low=0,
    high=MAX_PARALLEL - 1, flag="--spare-sequences",
    help="daemon sequences beyond --parallel that only keep conversations between their "
    "turns, so a conversation's next turn finds its state where it left it")
QUEUE_LIMIT = Setting("queue_limit", int, "give how many requests may wait, e.g. 16",
                      default=16, low=0, flag="--queue-limit",
                      help="requests that may wait per model before new ones get 503")

BEARER_KEY_ENV = "LUCERNA_API_KEY"
BEARER_KEY = Setting("api_key", str, f"pass the server's API key, or set ${BEARER_KEY_ENV}",
                     shown=f"${BEARER_KEY_ENV}", flag="--api-key", help="bearer key")
"""The key a client command (``niah``, ``bench``) sends to a running Lucerna."""


def add_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, setting: Setting, *,
             flag: str | None = None, default: Any = None, help: str | None = None,
             shown: str | None = None, **extra: Any) -> None:
    """Add ``setting``'s flag (or ``flag``, for a key that is a flag of one command only);
    its help ends with the default, ``shown`` or declared.

    ``default`` is argparse's, None by default: a flag that was not given leaves the
    config file's value (or the declared default) alone.
    """
    name = flag or setting.flag
    assert name is not None, f"{setting.key} has no flag"
    options: dict[str, Any] = {"default": default, "help": setting.flag_help(shown, help)}
    if setting.kind in (int, float):
        options["type"] = setting.kind
    if setting.choices:
        options["choices"] = setting.choices
    options["dest"] = setting.dest or setting.key
    if setting.metavar is not None:
        options["metavar"] = setting.metavar
    parser.add_argument(name, **(options | extra))


def check_flag(setting: Setting, value: float | None) -> None:
    """Refuse a flag's value outside the declared bounds (None: the flag was not given)."""
    if value is None:
        return
    if setting.low is not None and value < setting.low:
        raise ConfigError(f"{setting.flag}: {value:g} is below its minimum {setting.low:g}. "
                          f"Fix: give {setting.flag} a value >= {setting.low:g}, or leave it "
                          "out for the default.")
    if setting.high is not None and value > setting.high:
        raise ConfigError(f"{setting.flag}: {value:g} is above its maximum {setting.high:g}. "
                          f"Fix: give {setting.flag} a value <= {setting.high:g}, or leave it "
                          "out for the default.")


def resolve_file(value: str, base: Path, embedded: Collection[str],
                 error: Callable[[str], ConfigError]) -> str:
    """``value`` as an absolute path to an existing file, or as is if it is ``embedded``.

    Relative paths resolve against ``base`` (the config file's directory, or the
    working directory for a flag); a missing file is ``error(problem)``.
    """
    if value in embedded:
        return value
    resolved = (base / Path(value).expanduser()).resolve()
    if not resolved.is_file():
        raise error(f"{resolved} is not a file")
    return str(resolved)


def flag_file(setting: Setting, value: str, embedded: Collection[str] = ()) -> str:
    """A file flag's value (``--model``, ``--draft``, ...) checked like its TOML key."""
    return resolve_file(value, Path.cwd(), embedded, setting.flag_error)


class SettingsTable:
    """One TOML table being validated; remembers which keys were read.

    ``finish`` refuses the keys nobody asked for, so a typo such as ``n_cxt`` is an
    error that suggests ``n_ctx`` instead of a silently ignored setting.
    """

    def __init__(self, data: Mapping[str, Any], where: str, source: str) -> None:
        self.data = data
        self.where = where
        self.source = source
        self._read: set[str] = set()

    def error(self, key: str | None, problem: str, fix: str) -> ConfigError:
        at = f"{self.where}.{key}" if key and self.where else (key or self.where)
        return ConfigError(f"{self.source}: {at}: {problem}. Fix: {fix}.")

    def get(self, key: str) -> Any:
        self._read.add(key)
        return self.data.get(key)

    def has(self, setting: Setting) -> bool:
        """Whether the table sets ``setting`` (``read`` gives its default when not)."""
        return self.get(setting.key) is not None

    def read(self, setting: Setting, *, required: bool = False) -> Any:
        """The value of ``setting``'s key, checked as declared; absent: its default."""
        kind, key, fix = setting.kind, setting.key, setting.fix
        if kind is int:
            value: Any = self.integer(key, int(setting.low or 0), fix, high=(
                None if setting.high is None else int(setting.high)))
        elif kind is float:
            value = self.number(key, setting.low or 0, fix, high=setting.high)
        elif kind is bool:
            value = self.get(key)
            if value is not None and not isinstance(value, bool):
                raise self.error(key, f"expected true or false, got {value!r}", fix)
        elif kind is list:
            value = self.strings(key, fix)
        elif kind is dict:
            value = self.table(key, fix)
        else:
            value = self.string(key, fix, required=required)
            if value is not None and setting.choices and value not in setting.choices:
                raise self.error(key, f"unknown {setting.noun} {value!r}", fix)
        return setting.default if value is None else value

    def file(self, setting: Setting, base: Path, embedded: Collection[str] = (), *,
             required: bool = False) -> str | None:
        """A key that names a file (relative to ``base``) or one of the ``embedded`` words."""
        value = self.read(setting, required=required)
        return None if value is None else resolve_file(
            value, base, embedded, lambda problem: self.error(setting.key, problem,
                                                              setting.fix))

    def string(self, key: str, fix: str, *, required: bool = False) -> str | None:
        value = self.get(key)
        if value is None:
            if required:
                raise self.error(key, "is required", fix)
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {value!r}", fix)
        return value

    def integer(self, key: str, low: int, fix: str, *, high: int | None = None) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        if (isinstance(value, bool) or not isinstance(value, int) or value < low
                or (high is not None and value > high)):
            raise self.error(key, f"expected an integer {bound}, got {value!r}", fix)
        return value

    def number(self, key: str, low: float, fix: str, *,
               high: float | None = None) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        bound = f">= {low:g}" if high is None else f"in [{low:g}, {high:g}]"
        if (isinstance(value, bool) or not isinstance(value, int | float) or not value >= low
                or (high is not None and value > high)):
            raise self.error(key, f"expected a number {bound}, got {value!r}", fix)
        return float(value)

    def strings(self, key: str, fix: str) -> tuple[str, ...] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.error(key, f"expected a list of non-empty strings, got {value!r}", fix)
        return tuple(value)

    def table(self, key: str, fix: str) -> Mapping[str, Any] | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {value!r}", fix)
        return value

    def finish(self) -> None:
        for key in self.data:
            if key in self._read:
                continue
            close = difflib.get_close_matches(key, sorted(self._read), n=1)
            hint = f"did you mean {close[0]!r}?" if close else (
                f"known keys: {', '.join(sorted(self._read))}")
            raise self.error(key, "unknown key", f"remove it or correct it ({hint})")
