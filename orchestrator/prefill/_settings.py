"""The ``[models.prefill]`` table and the ``--prefill-*`` flags, validated.

::

    [models.prefill]
    mode = "auto"              # off | auto | always
    drafter = "default"        # the drafter GGUF; "default" = the embedded gemma3-270m
    threshold = 32000          # auto: compress prompts of at least this many tokens
    keep = 0.05                # a flat keep ratio, or instead:
    # curve = "2048:0.5 8192:0.2 32768:0.1"   # T:R points, linear in between
    park_target = false        # park the target while the drafter scores (one device)
    n_ctx = 131072             # the drafter's context: the longest prompt it can score
    threads, n_gpu_layers      # the drafter daemon's, as for the model
    lookahead = 8, chunk = 32, pool = 13      # compress options (PROTOCOL.md 5.7)
    upstream = "http://gpu-box:8080/v1"       # proxy mode: forward to this server
    upstream_key = "..."       # its bearer key (or $LUCERNA_UPSTREAM_KEY)
    upstream_model = "qwen3.6-27b"            # the model name sent upstream

In proxy mode (``upstream`` set) Lucerna runs no target: the model's own GGUF (or
``drafter`` when given) is the drafter, served by a pflash daemon.

Sans-IO and free of ``orchestrator.config``: the config module hands each table in
through the small ``SettingsTable`` protocol its own validator implements.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from orchestrator.errors import ConfigError
from orchestrator.prefill._curve import KeepRatioCurve

__all__ = [
    "MODES",
    "CompressOptions",
    "PrefillOverrides",
    "PrefillSettings",
    "UpstreamSettings",
    "parse_prefill_table",
    "upstream_endpoint",
]

Mode = Literal["off", "auto", "always"]
MODES: tuple[Mode, ...] = ("off", "auto", "always")

DEFAULT_THRESHOLD = 32000
DEFAULT_KEEP = 0.05


@dataclass(frozen=True)
class CompressOptions:
    """How a conversation is compressed, beyond the keep ratio."""

    lookahead: int = 8
    """Query positions at the end of the prompt whose attention scores it."""
    chunk: int = 32
    """Tokens are kept or dropped in chunks of this many."""
    pool: int = 13
    """Width of the max-pool that smooths the scores."""
    requery_ratio: float = 0.8
    """The user's last message must keep this share of its tokens, else it is re-appended."""
    requery_max_tokens: int = 1000
    """A last message up to this long is re-appended whole; a longer one only its tail."""
    requery_tail_tokens: int = 64
    """The tail of a long last message that is re-appended (where a question sits)."""
    repair_max_tokens: int = 32
    """How far a kept run may grow to finish a word the cut split."""


@dataclass(frozen=True)
class UpstreamSettings:
    """Proxy mode: where compressed conversations go (an OpenAI-compatible server)."""

    url: str
    """The base URL as an OpenAI client takes it, e.g. ``http://gpu-box:8080/v1``."""
    key: str | None = None
    model: str | None = None
    """The ``model`` sent upstream; default: the name clients used here."""
    timeout_s: float = 600.0
    """Longest wait for the upstream's next bytes (its prefill of a long prompt included)."""


@dataclass(frozen=True)
class PrefillSettings:
    mode: Mode = "auto"
    drafter: str | None = None
    """A GGUF path or ``"default"``; None: the embedded model (proxy mode: the model's own)."""
    threshold: int = DEFAULT_THRESHOLD
    curve: KeepRatioCurve = field(default_factory=lambda: KeepRatioCurve.flat(DEFAULT_KEEP))
    park_target: bool = False
    n_ctx: int | None = None
    """The drafter's context; None: the model's ``n_ctx``."""
    threads: int | None = None
    n_gpu_layers: int | None = None
    options: CompressOptions = CompressOptions()
    upstream: UpstreamSettings | None = None


def upstream_endpoint(url: str) -> str:
    """``<base>/chat/completions``; a bare ``http://host:port`` gets ``/v1`` first."""
    base = url.rstrip("/")
    if urlsplit(base).path in ("", "/"):
        base += "/v1"
    return base + "/chat/completions"


def _check_upstream_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{url!r} is not an http(s) URL"
    return None


class SettingsTable(Protocol):
    """What ``orchestrator.config``'s table validator offers (duck-typed, no import)."""

    def get(self, key: str) -> Any: ...

    def string(self, key: str, fix: str, *, required: bool = False) -> str | None: ...

    def integer(self, key: str, low: int, fix: str, *, high: int | None = None) -> int | None: ...

    def number(self, key: str, low: float, fix: str) -> float | None: ...

    def error(self, key: str | None, problem: str, fix: str) -> ConfigError: ...

    def finish(self) -> None: ...


def parse_prefill_table(table: SettingsTable, base: Path) -> PrefillSettings:
    """A ``[models.prefill]`` table; relative ``drafter`` paths resolve against ``base``."""
    mode = table.string("mode", f"use one of {', '.join(MODES)}")
    if mode is not None and mode not in MODES:
        raise table.error("mode", f"unknown mode {mode!r}", f"use one of {', '.join(MODES)}")
    drafter = table.string("drafter", 'give the drafter GGUF, or "default" for the embedded '
                                      "gemma3-270m")
    if drafter is not None and drafter != "default":
        resolved = (base / Path(drafter).expanduser()).resolve()
        if not resolved.is_file():
            raise table.error("drafter", f"{resolved} is not a file",
                              'point it at a GGUF file (relative to the config file), or '
                              'write "default"')
        drafter = str(resolved)
    threshold = table.integer("threshold", 0, "give a prompt length in tokens, e.g. 32000")
    keep = table.number("keep", 0.001, "give a ratio in (0, 1], e.g. keep = 0.05")
    if keep is not None and keep > 1:
        raise table.error("keep", f"{keep:g} is above 1", "give a ratio in (0, 1], e.g. 0.05")
    curve_text = table.string("curve", 'write points "TOKENS:RATIO ...", e.g. '
                                       '"2048:0.5 8192:0.2 32768:0.1"')
    if keep is not None and curve_text is not None:
        raise table.error("curve", "keep and curve are both set", "keep only one of them")
    curve = KeepRatioCurve.flat(DEFAULT_KEEP if keep is None else keep)
    if curve_text is not None:
        try:
            curve = KeepRatioCurve.parse(curve_text)
        except ValueError as exc:
            raise table.error("curve", str(exc), 'write points "TOKENS:RATIO ...", lengths '
                              'increasing, ratios in (0, 1], e.g. "2048:0.5 32768:0.1"') from None
    park = table.get("park_target")
    if park is not None and not isinstance(park, bool):
        raise table.error("park_target", f"expected true or false, got {park!r}",
                          "write park_target = true to park the target while the drafter "
                          "scores (drafter and target on one device that cannot hold both)")
    n_ctx = table.integer("n_ctx", 16, "give the drafter's context in tokens, e.g. 131072")
    threads = table.integer("threads", 1, "give a CPU thread count, or leave it out for all")
    gpu = table.integer("n_gpu_layers", -1, "give the drafter layers to offload (-1: all)")
    defaults = CompressOptions()
    lookahead = table.integer("lookahead", 1, "give a query count, e.g. 8", high=1024)
    chunk = table.integer("chunk", 1, "give a chunk size in tokens, e.g. 32")
    pool = table.integer("pool", 1, "give a pooling width in tokens, e.g. 13")
    upstream_url = table.string("upstream", 'give the upstream base URL, e.g. '
                                            '"http://gpu-box:8080/v1"')
    if upstream_url is not None and (problem := _check_upstream_url(upstream_url)):
        raise table.error("upstream", problem, 'write a base URL such as '
                          '"http://gpu-box:8080/v1"')
    key = table.string("upstream_key", "write the upstream's API key as a string")
    upstream_model = table.string("upstream_model", "write the model name the upstream serves")
    if upstream_url is None and (key is not None or upstream_model is not None):
        raise table.error("upstream", "upstream_key or upstream_model is set without upstream",
                          "add upstream = URL, or remove them")
    table.finish()
    return PrefillSettings(
        mode=mode or "auto",  # checked against MODES above
        drafter=drafter,
        threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
        curve=curve,
        park_target=bool(park),
        n_ctx=n_ctx,
        threads=threads,
        n_gpu_layers=gpu,
        options=replace(
            defaults,
            lookahead=lookahead or defaults.lookahead,
            chunk=chunk or defaults.chunk,
            pool=pool or defaults.pool,
        ),
        upstream=None if upstream_url is None else UpstreamSettings(
            url=upstream_url, key=key, model=upstream_model),
    )


@dataclass(frozen=True)
class PrefillOverrides:
    """The ``--prefill-*`` flags that were given; None means "not on the command line".

    Any of them gives every model a prefill table (defaults where the file had none);
    with ``--prefill-compression off`` no drafter is started (proxy mode still forwards).
    """

    mode: str | None = None
    threshold: int | None = None
    keep: float | None = None
    curve: str | None = None
    drafter: str | None = None
    park_target: bool | None = None
    n_ctx: int | None = None
    upstream: str | None = None
    upstream_key: str | None = None
    upstream_model: str | None = None
    upstream_key_env: str | None = None
    """``$LUCERNA_UPSTREAM_KEY``: the key of an upstream configured without one."""

    def given(self) -> bool:
        return any(value is not None for value in vars(self).values())

    def apply(self, settings: PrefillSettings | None) -> PrefillSettings | None:
        """``settings`` with these flags on top; raises ConfigError naming the flag."""
        flags = replace(self, upstream_key_env=None)
        if flags.given():
            settings = flags._apply_flags(settings)
        upstream = settings.upstream if settings is not None else None
        if settings is not None and upstream is not None and upstream.key is None and (
                self.upstream_key_env):
            settings = replace(settings, upstream=replace(upstream, key=self.upstream_key_env))
        return settings

    def _apply_flags(self, settings: PrefillSettings | None) -> PrefillSettings:
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"--prefill-compression: unknown mode {self.mode!r}. Fix: use "
                              f"one of {', '.join(MODES)}.")
        if self.keep is not None and self.curve is not None:
            raise ConfigError("--prefill-keep and --prefill-curve are both given. Fix: keep "
                              "only one of them.")
        base = settings or PrefillSettings()
        changes: dict[str, Any] = {}
        if self.mode is not None:
            changes["mode"] = self.mode
        if self.threshold is not None:
            if self.threshold < 0:
                raise ConfigError(f"--prefill-threshold: {self.threshold} is negative. Fix: "
                                  "give a prompt length in tokens, e.g. 32000.")
            changes["threshold"] = self.threshold
        for flag, text in (("--prefill-keep", None if self.keep is None else str(self.keep)),
                           ("--prefill-curve", self.curve)):
            if text is not None:
                try:
                    changes["curve"] = KeepRatioCurve.parse(text)
                except ValueError as exc:
                    raise ConfigError(f"{flag}: {exc}. Fix: give a ratio in (0, 1] such as "
                                      '0.05, or points such as "2048:0.5 32768:0.1".') from None
        if self.drafter is not None:
            drafter = self.drafter
            if drafter != "default":
                resolved = Path(drafter).expanduser().resolve()
                if not resolved.is_file():
                    raise ConfigError(f"--prefill-drafter: {resolved} is not a file. Fix: give "
                                      'a GGUF file, or "default" for the embedded gemma3-270m.')
                drafter = str(resolved)
            changes["drafter"] = drafter
        if self.park_target is not None:
            changes["park_target"] = self.park_target
        if self.n_ctx is not None:
            if self.n_ctx < 16:
                raise ConfigError(f"--prefill-n-ctx: {self.n_ctx} is below 16. Fix: give the "
                                  "drafter's context in tokens, e.g. 131072.")
            changes["n_ctx"] = self.n_ctx
        upstream = base.upstream
        if self.upstream is not None:
            if problem := _check_upstream_url(self.upstream):
                raise ConfigError(f"--prefill-upstream: {problem}. Fix: give a base URL such "
                                  'as "http://gpu-box:8080/v1".')
            upstream = UpstreamSettings(url=self.upstream) if upstream is None else replace(
                upstream, url=self.upstream)
        if self.upstream_key is not None or self.upstream_model is not None:
            if upstream is None:
                raise ConfigError("--prefill-upstream-key/--prefill-upstream-model need an "
                                  "upstream. Fix: add --prefill-upstream URL.")
            if self.upstream_key is not None:
                upstream = replace(upstream, key=self.upstream_key)
            if self.upstream_model is not None:
                upstream = replace(upstream, model=self.upstream_model)
        changes["upstream"] = upstream
        return replace(base, **changes)
