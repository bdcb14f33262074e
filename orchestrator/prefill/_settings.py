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
    segment = 8192             # longer prompts are scored a segment at a time (0: one pass)
    upstream = "http://gpu-box:8080/v1"       # proxy mode: forward to this server
    upstream_key = "..."       # its bearer key (or $LUCERNA_UPSTREAM_KEY)
    upstream_model = "qwen3.6-27b"            # the model name sent upstream

In proxy mode (``upstream`` set) Lucerna runs no target: the model's own GGUF (or
``drafter`` when given) is the drafter, served by a pflash daemon.

Sans-IO and free of ``orchestrator.config``: each key is declared once in ``_keys``
and read through ``orchestrator.settings.SettingsTable``, as the config's own keys are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from orchestrator.errors import ConfigError
from orchestrator.prefill._curve import KeepRatioCurve
from orchestrator.prefill._keys import DRAFTER_DEFAULT, MODES, Mode, PrefillKeys
from orchestrator.settings import SettingsTable, check_flag, flag_file

__all__ = [
    "MODES",
    "CompressOptions",
    "Mode",
    "PrefillOverrides",
    "PrefillSettings",
    "UpstreamSettings",
    "parse_prefill_table",
    "upstream_endpoint",
]

_KEYS = PrefillKeys


@dataclass(frozen=True)
class CompressOptions:
    """How a conversation is compressed, beyond the keep ratio."""

    lookahead: int = _KEYS.LOOKAHEAD.default
    """Query positions at the end of the prompt whose attention scores it."""
    chunk: int = _KEYS.CHUNK.default
    """Tokens are kept or dropped in chunks of this many."""
    pool: int = _KEYS.POOL.default
    """Width of the max-pool that smooths the scores."""
    segment: int = _KEYS.SEGMENT.default
    """Prompts longer than this are scored a segment at a time (0: one pass)."""
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
    mode: Mode = _KEYS.MODE.default
    drafter: str | None = None
    """A GGUF path or ``"default"``; None: the embedded model (proxy mode: the model's own)."""
    threshold: int = _KEYS.THRESHOLD.default
    curve: KeepRatioCurve = field(default_factory=lambda: KeepRatioCurve.flat(_KEYS.KEEP.default))
    park_target: bool = _KEYS.PARK_TARGET.default
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


def parse_prefill_table(table: SettingsTable, base: Path) -> PrefillSettings:
    """A ``[models.prefill]`` table; relative ``drafter`` paths resolve against ``base``."""
    keys = _KEYS
    mode = table.read(keys.MODE)
    drafter = table.file(keys.DRAFTER, base, (DRAFTER_DEFAULT,))
    threshold = table.read(keys.THRESHOLD)
    keep = table.read(keys.KEEP) if table.has(keys.KEEP) else None
    curve_text = table.read(keys.CURVE)
    if keep is not None and curve_text is not None:
        raise table.error("curve", "keep and curve are both set", "keep only one of them")
    curve = KeepRatioCurve.flat(keys.KEEP.default if keep is None else keep)
    if curve_text is not None:
        try:
            curve = KeepRatioCurve.parse(curve_text)
        except ValueError as exc:
            raise table.error("curve", str(exc), keys.CURVE.fix) from None
    park = table.read(keys.PARK_TARGET)
    n_ctx = table.read(keys.N_CTX)
    threads = table.read(keys.THREADS)
    gpu = table.read(keys.N_GPU_LAYERS)
    lookahead = table.read(keys.LOOKAHEAD)
    chunk = table.read(keys.CHUNK)
    pool = table.read(keys.POOL)
    segment = table.read(keys.SEGMENT)
    upstream_url = table.read(keys.UPSTREAM)
    if upstream_url is not None and (problem := _check_upstream_url(upstream_url)):
        raise table.error("upstream", problem, keys.UPSTREAM.fix)
    key = table.read(keys.UPSTREAM_KEY)
    upstream_model = table.read(keys.UPSTREAM_MODEL)
    if upstream_url is None and (key is not None or upstream_model is not None):
        raise table.error("upstream", "upstream_key or upstream_model is set without upstream",
                          "add upstream = URL, or remove them")
    table.finish()
    return PrefillSettings(
        mode=mode,  # one of MODES: its declaration's choices
        drafter=drafter,
        threshold=threshold,
        curve=curve,
        park_target=park,
        n_ctx=n_ctx,
        threads=threads,
        n_gpu_layers=gpu,
        options=CompressOptions(lookahead=lookahead, chunk=chunk, pool=pool, segment=segment),
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
        keys = _KEYS
        if self.mode is not None and self.mode not in MODES:
            raise keys.MODE.flag_error(f"unknown mode {self.mode!r}")
        if self.keep is not None and self.curve is not None:
            raise ConfigError("--prefill-keep and --prefill-curve are both given. Fix: keep "
                              "only one of them.")
        check_flag(keys.THRESHOLD, self.threshold)
        check_flag(keys.N_CTX, self.n_ctx)
        base = settings or PrefillSettings()
        changes: dict[str, Any] = {}
        if self.mode is not None:
            changes["mode"] = self.mode
        if self.threshold is not None:
            changes["threshold"] = self.threshold
        # A flat keep ratio is the curve of one point: both parse (and fail) as a curve.
        for setting, text in ((keys.KEEP, None if self.keep is None else str(self.keep)),
                              (keys.CURVE, self.curve)):
            if text is not None:
                try:
                    changes["curve"] = KeepRatioCurve.parse(text)
                except ValueError as exc:
                    raise setting.flag_error(str(exc)) from None
        if self.drafter is not None:
            changes["drafter"] = flag_file(keys.DRAFTER, self.drafter, (DRAFTER_DEFAULT,))
        if self.park_target is not None:
            changes["park_target"] = self.park_target
        if self.n_ctx is not None:
            changes["n_ctx"] = self.n_ctx
        upstream = base.upstream
        if self.upstream is not None:
            if problem := _check_upstream_url(self.upstream):
                raise keys.UPSTREAM.flag_error(problem)
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
