"""The fake daemon's dispatcher and its commands other than ``generate``/``restore``.

``dispatch`` does what native/src/daemon's dispatcher does before a handler (refuse a
command the role does not serve, ``unsupported``), then what the test's ``Behaviour``
scripts (a death, a refusal, a delay), then the handler. Stream commands end their
stream with ``-1`` whatever the outcome (PROTOCOL.md 1). Replies are built with
protocol/'s own types (``OkReply``, ``ErrReply``, ``PieceTable.to_bytes``).
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import trio

from protocol import (
    Command,
    Compress,
    Detokenize,
    Embed,
    ErrReply,
    FreeSnapshot,
    InlineIds,
    InlineText,
    ListSlots,
    LoadSlot,
    OkReply,
    Park,
    Quit,
    SaveSlot,
    Snapshot,
    Stats,
    TokenFileError,
    Tokenize,
    Unpark,
    Vocab,
    encode_token_bytes,
    read_token_file,
)

from ._decode import run_generation, start_sequence
from ._state import BadSnapshotFile

if TYPE_CHECKING:
    from ._daemon import FakeDaemon, Run

__all__ = ["dispatch"]

Reply = OkReply | ErrReply
_RSS_KB = 65536


async def dispatch(daemon: FakeDaemon, command: Command, run: Run | None) -> bool:
    """Run one command to its reply; True for ``quit`` (the daemon then exits 0)."""
    counts = daemon.counters.per_command
    counts[command.name] += 1
    behaviour = daemon.behaviour
    unframed_stream = command.is_stream and getattr(command, "seq", None) is None
    reply: Reply | None = None
    if command.name not in daemon.capabilities:
        reply = ErrReply("unsupported", f"{command.name} is not served by the {daemon.role} role")
    death = behaviour.death_for(command, counts[command.name])
    if reply is None and death is not None and death.after_tokens is None:
        await daemon.die(death)
    reply = reply or behaviour.refusal_for(command, counts[command.name])
    if reply is not None:
        if run is not None:
            daemon.finished(run)
        if unframed_stream:
            await daemon.end_stream()
        await daemon.write_line(reply.encode())
        return False
    await trio.sleep(behaviour.command_delay_s.get(command.name, 0.0))
    if run is not None:
        await (start_sequence if run.command.seq is not None else run_generation)(
            daemon, run, death)
        return False
    handler = _HANDLERS[command.name]
    reply = await handler(daemon, command)
    if command.is_stream:
        await daemon.end_stream()
    await daemon.write_line(reply.encode())
    return command.name == "quit"


def _ids(daemon: FakeDaemon, ref: Any) -> tuple[int, ...] | ErrReply:
    try:
        ids = ref.ids if isinstance(ref, InlineIds) else tuple(read_token_file(ref.path))
    except (OSError, TokenFileError) as exc:
        return ErrReply("bad_token_file", str(exc).replace("\n", " "))
    n_vocab = daemon.behaviour.vocab.n_vocab
    bad = next((t for t in ids if t >= n_vocab), None)
    if bad is not None:
        return ErrReply("bad_token", f"token id {bad} is outside [0, {n_vocab})")
    return tuple(ids)


async def _tokenize(daemon: FakeDaemon, command: Tokenize) -> Reply:
    if isinstance(command.text, InlineText):
        text = command.text.text
    else:
        try:
            text = Path(command.text.path).read_text(encoding="utf-8")
        except OSError as exc:
            return ErrReply("bad_text_file", f"{command.text.path}: {exc.strerror}")
    ids = daemon.behaviour.vocab.tokenize(text, special=command.special, add_bos=command.add_bos)
    await daemon.write_stream(encode_token_bytes(ids))
    return OkReply("tokenize", {"n": str(len(ids))})


async def _detokenize(daemon: FakeDaemon, command: Detokenize) -> Reply:
    ids = _ids(daemon, command.ids)
    if isinstance(ids, ErrReply):
        return ids
    text = daemon.behaviour.vocab.render(ids, special=command.special)
    return OkReply("detokenize", {"text": text.decode("utf-8", errors="replace")})


async def _vocab(daemon: FakeDaemon, command: Vocab) -> Reply:
    table = daemon.behaviour.vocab.piece_table()
    _write_whole(Path(command.path), table.to_bytes())
    return OkReply("vocab", {"n": str(table.n_vocab), "path": os.fspath(command.path)})


async def _stats(daemon: FakeDaemon, command: Stats) -> Reply:
    counters, held = daemon.counters, daemon.held
    fields: dict[str, Any] = {
        "n_ctx": daemon.n_ctx, "n_vocab": daemon.behaviour.vocab.n_vocab,
        "requests": counters.requests, "tokens_prompt": counters.tokens_prompt,
        "tokens_generated": counters.tokens_generated, "forwards": counters.requests,
        "graphs_reused": 0, "cancelled": counters.cancelled, "preempted": 0,
        "shared_prefixes": counters.shared_prefixes, "checkpoint_bytes": 0,
        "checkpoints_dropped": 0, "rss_kb": _RSS_KB,
        "uptime_s": round(trio.current_time() - daemon.started_at, 1),
        "parked": int(daemon.parked), "slots_used": len(held.slots),
        "slots_bytes": sum(s.host_bytes for s in held.slots.values()),
        "last_prefill_tok_s": 0.0, "last_decode_tok_s": 0.0, "model_bytes": 0,
        "draft_steps": 0, "draft_proposed": 0, "draft_accepted": 0, "acceptance_length": 0.0,
        "draft_ms": 0.0, "draft_model_bytes": 0, "state_kept_bytes": 0, "states_reused": 0,
        "states_page_locked": 0, "bytes_host": 0, "bytes_device": 0,
    }
    wire = {key: str(value) for key, value in fields.items()}
    if command.path is not None:
        _write_whole(Path(command.path), msgpack.packb(fields))
        wire = {"path": os.fspath(command.path), **wire}
    return OkReply("stats", wire)


async def _quit(daemon: FakeDaemon, command: Quit) -> Reply:
    return OkReply("quit")


def _slot_refusal(daemon: FakeDaemon, slot: int) -> ErrReply | None:
    if slot >= daemon.held.n_slots:
        return ErrReply("bad_slot", f"slot {slot} is outside 0..{daemon.held.n_slots - 1}")
    return None


async def _snapshot(daemon: FakeDaemon, command: Snapshot) -> Reply:
    seq = command.seq or 0
    if refused := _slot_refusal(daemon, command.slot):
        return refused
    if not 0 <= seq < daemon.parallel:
        return ErrReply("bad_seq", f"seq={seq} is not a sequence of this daemon")
    if daemon.parked:
        return ErrReply("parked", "the target is parked; send unpark first")
    if seq in daemon.runs:
        return ErrReply("seq_busy", f"sequence {seq} is generating")
    live = daemon.held.live[seq]
    if not live:
        return ErrReply("empty_sequence", f"sequence {seq} holds nothing decoded")
    state = daemon.held.snapshot(command.slot, live)
    return OkReply("snapshot", {"slot": str(command.slot), "n_tokens": str(len(state.tokens)),
                                "bytes": str(state.host_bytes)})


async def _free_snapshot(daemon: FakeDaemon, command: FreeSnapshot) -> Reply:
    if refused := _slot_refusal(daemon, command.slot):
        return refused
    state = daemon.held.slots.pop(command.slot, None)
    if state is None:
        return ErrReply("empty_slot", f"slot {command.slot} holds no snapshot")
    return OkReply("free_snapshot", {"slot": str(command.slot), "bytes": str(state.host_bytes)})


async def _list_slots(daemon: FakeDaemon, command: ListSlots) -> Reply:
    slots = sorted(daemon.held.slots.items())
    return OkReply("list_slots", {
        "slots": ",".join(f"{n}:{len(s.tokens)}" for n, s in slots),
        "bytes": str(sum(s.host_bytes for _, s in slots))})


async def _save_slot(daemon: FakeDaemon, command: SaveSlot) -> Reply:
    if refused := _slot_refusal(daemon, command.slot):
        return refused
    if not daemon.known_state:
        return ErrReply("parked", "started parked: its state identity is known once unparked")
    if command.slot not in daemon.held.slots:
        return ErrReply("empty_slot", f"slot {command.slot} holds no snapshot")
    size = daemon.held.save(command.slot, Path(command.path), daemon.state_id)
    return OkReply("save_slot", {"slot": str(command.slot), "bytes": str(size)})


async def _load_slot(daemon: FakeDaemon, command: LoadSlot) -> Reply:
    if refused := _slot_refusal(daemon, command.slot):
        return refused
    if not daemon.known_state:
        return ErrReply("parked", "started parked: its state identity is known once unparked")
    try:
        state = daemon.held.load(command.slot, Path(command.path), daemon.state_id)
    except BadSnapshotFile as exc:
        return ErrReply("bad_snapshot_file", str(exc))
    return OkReply("load_slot", {"slot": str(command.slot), "n_tokens": str(len(state.tokens)),
                                 "bytes": str(state.host_bytes)})


def _park_state(daemon: FakeDaemon, command: str) -> Reply:
    draft = "absent" if daemon.launch.draft is None else ("parked" if daemon.parked else "ready")
    return OkReply(command, {"target": "parked" if daemon.parked else "ready", "draft": draft,
                             "rss_kb": str(_RSS_KB)})


async def _park(daemon: FakeDaemon, command: Park) -> Reply:
    if command.which in ("target", "all"):
        daemon.parked = True
    return _park_state(daemon, "park")


async def _unpark(daemon: FakeDaemon, command: Unpark) -> Reply:
    if command.which in ("target", "all"):
        daemon.parked = False
        daemon.known_state = True
    return _park_state(daemon, "unpark")


async def _embed(daemon: FakeDaemon, command: Embed) -> Reply:
    ids = _ids(daemon, command.ids)
    if isinstance(ids, ErrReply):
        return ids
    if daemon.parked:
        return ErrReply("parked", "the target is parked; send unpark first")
    lengths = command.lengths or (len(ids),)
    dim, rows, at = daemon.behaviour.embed_dim, [], 0
    for length in lengths:
        one = ids[at:at + length]
        at += length
        pooled = one if command.pooling == "mean" else one[-1:]
        rows += [(sum(pooled) / len(pooled) + i) / 1000 for i in range(dim)]
    _write_whole(Path(command.path), struct.pack(f"<{len(rows)}f", *rows))
    daemon.held.live = [() for _ in daemon.held.live]  # embed clears every sequence (5.11)
    return OkReply("embed", {"n": str(len(lengths)), "dim": str(dim), "n_tokens": str(len(ids)),
                             "ms": "0.1"})


async def _compress(daemon: FakeDaemon, command: Compress) -> Reply:
    """Keeps ``keep_x1000`` of the chunks, the first and the last always, in order (5.7)."""
    ids = _ids(daemon, command.ids)
    if isinstance(ids, ErrReply):
        return ids
    if daemon.parked:
        return ErrReply("parked", "the target is parked; send unpark first")
    size = command.chunk or 32
    chunks = [ids[i:i + size] for i in range(0, len(ids), size)]
    wanted = max(min(2, len(chunks)), math.ceil(len(chunks) * command.keep_x1000 / 1000))
    keep = {0, len(chunks) - 1, *range(1, wanted - 1)}
    kept = [t for i, chunk in enumerate(chunks) if i in keep for t in chunk]
    await daemon.write_stream(encode_token_bytes(kept))
    return OkReply("compress", {"n_in": str(len(ids)), "n_out": str(len(kept)), "ms": "0.1"})


def _write_whole(path: Path, data: bytes) -> None:
    partial = path.with_name(f"{path.name}.tmp-fake")
    partial.write_bytes(data)
    partial.rename(path)


_HANDLERS: dict[str, Callable[[FakeDaemon, Any], Awaitable[Reply]]] = {
    "tokenize": _tokenize, "detokenize": _detokenize, "vocab": _vocab, "stats": _stats,
    "quit": _quit, "snapshot": _snapshot, "free_snapshot": _free_snapshot,
    "list_slots": _list_slots, "save_slot": _save_slot, "load_slot": _load_slot,
    "park": _park, "unpark": _unpark, "embed": _embed, "compress": _compress,
}
