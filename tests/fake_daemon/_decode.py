"""``generate`` and ``restore`` in the fake daemon: protocol 1 and protocol 2 (9.2).

One decoding path for both, as in native/src/commands/generate.cpp: check the request
(the refusals a daemon owes it), take what the sequence, a slot or another sequence
holds, "prefill" the rest (``prefill_delay_s`` a token), take the ``snap=``, then pick
tokens with the behaviour's model until the length, an end-of-generation token, a stop
id or a cancel, writing each at once: bare int32 ids (or logprob records) on protocol 1,
framed records on protocol 2.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from protocol import (
    DoneLine,
    ErrReply,
    FinishReason,
    Generate,
    GenerateSummary,
    InlineIds,
    OkReply,
    Restore,
    TokenFileError,
    TokenLogprobs,
    encode_seq_end,
    encode_seq_record,
    encode_token_bytes,
    read_token_file,
)

from ._behaviour import Death
from ._state import Decoded

if TYPE_CHECKING:
    from ._daemon import FakeDaemon, Run

__all__ = ["run_generation", "start_sequence"]

Writer = Callable[[Sequence[int]], Awaitable[None]]


async def run_generation(daemon: FakeDaemon, run: Run, death: Death | None) -> None:
    """Protocol 1: the values, ``-1``, then the reply (PROTOCOL.md 5.1)."""
    checked = check(daemon, run)
    if isinstance(checked, ErrReply):
        daemon.finished(run)
        await daemon.end_stream()
        await daemon.write_line(checked.encode())
        return
    daemon.runs[run.seq] = run
    try:
        reply = await decode(daemon, run, checked, death, _bare(daemon))
    finally:
        del daemon.runs[run.seq]
        daemon.changed()
    await daemon.end_stream()
    await daemon.write_line(reply.encode())


async def start_sequence(daemon: FakeDaemon, run: Run, death: Death | None) -> None:
    """Protocol 2: ``ok <command> seq=S`` at once, or a refusal that writes nothing; the
    generation then runs beside the others and ends with its end record and done line."""
    checked = check(daemon, run)
    if isinstance(checked, ErrReply):
        daemon.finished(run)
        await daemon.write_line(checked.encode())
        return
    daemon.runs[run.seq] = run
    await daemon.write_line(OkReply(run.command.name, {"seq": str(run.seq)}).encode())
    daemon.spawn(_sequence, daemon, run, checked, death)


async def _sequence(daemon: FakeDaemon, run: Run, prompt: tuple[int, ...],
                    death: Death | None) -> None:
    seq = run.seq

    async def record(values: Sequence[int]) -> None:
        await daemon.write_stream(encode_seq_record(seq, list(values)))

    reply = await decode(daemon, run, prompt, death, record)
    await daemon.write_stream(encode_seq_end(seq))
    await daemon.write_line(DoneLine(seq, reply).encode())
    del daemon.runs[seq]
    daemon.changed()
    daemon.after_sequence()


def _bare(daemon: FakeDaemon) -> Writer:
    async def write(values: Sequence[int]) -> None:
        await daemon.write_stream(encode_token_bytes(values))

    return write


def check(daemon: FakeDaemon, run: Run) -> tuple[int, ...] | ErrReply:
    """The prompt, or the refusal the request earns before it runs (5.1, 5.5, 6, 9.3)."""
    command, seq = run.command, run.seq
    if not 0 <= seq < daemon.parallel:
        return ErrReply("bad_seq", f"seq={seq} is not a sequence of this daemon "
                        f"(0..{daemon.parallel - 1}, --parallel={daemon.parallel})")
    if command.seq is not None and seq in daemon.runs:
        return ErrReply("seq_busy", f"sequence {seq} is still generating; wait for its done "
                        "line or cancel it")
    if daemon.parked:
        return ErrReply("parked", "the target is parked; send unpark first")
    if command.lookup and daemon.launch.lookup is None:
        return ErrReply("unsupported", "lookup=1 needs a daemon started with --lookup")
    try:
        prompt = (command.prompt.ids if isinstance(command.prompt, InlineIds)
                  else tuple(read_token_file(command.prompt.path)))
    except (OSError, TokenFileError) as exc:
        return ErrReply("bad_token_file", str(exc).replace("\n", " "))
    if not prompt:
        return ErrReply("empty_prompt", f"{command.name} needs at least one prompt token")
    n_vocab = daemon.behaviour.vocab.n_vocab
    bad = next((t for t in (*prompt, *command.stop) if t >= n_vocab), None)
    if bad is not None:
        return ErrReply("bad_token", f"token id {bad} is outside [0, {n_vocab})")
    held = daemon.held
    slots = [s for s in (getattr(command, "slot", None), (command.snap or (0, None))[1])
             if s is not None]
    if any(s >= held.n_slots for s in slots):
        return ErrReply("bad_slot", f"slot {max(slots)} is outside 0..{held.n_slots - 1}")
    if isinstance(command, Restore):
        slot = held.slots.get(command.slot)
        if slot is None:
            return ErrReply("empty_slot", f"slot {command.slot} holds no snapshot")
        if prompt[:len(slot.tokens)] != slot.tokens:
            return ErrReply("snapshot_mismatch", f"the ids do not start with slot "
                            f"{command.slot}'s {len(slot.tokens)} tokens")
    limit = (min(daemon.n_ctx, daemon.behaviour.n_ctx_train) if daemon.parallel > 1
             else daemon.n_ctx)
    if len(prompt) + command.n_gen > limit:
        return ErrReply("context_overflow", f"n_prompt={len(prompt)} + n_gen={command.n_gen} "
                        f"exceeds n_ctx_seq={limit}")
    return prompt


async def decode(daemon: FakeDaemon, run: Run, prompt: tuple[int, ...], death: Death | None,
                 write: Writer) -> OkReply:
    """Run a checked generation to its end; its reply (the done line's, on protocol 2)."""
    command, seq, held, behaviour = run.command, run.seq, daemon.held, daemon.behaviour
    began = trio.current_time()
    scoring = isinstance(command, Generate) and command.prompt_logprobs
    cache_slot: int | None
    if isinstance(command, Restore):
        reused, cache_slot = len(held.slots[command.slot].tokens), command.slot
    elif command.reuse and not scoring:
        reused, cache_slot = held.reuse(seq, prompt)
    else:
        reused, cache_slot = 0, None
    if command.snap is not None:
        reused = min(reused, command.snap[0] - 1)  # a snapshot is taken after a decode
    held.live[seq] = prompt[:reused]
    if death is not None and death.after_tokens == 0:
        await daemon.die(death)  # during the prefill
    generated: list[int] = []
    finish = FinishReason.CANCELLED
    prefilled_at = began
    if not run.cancelled:  # a generation cancelled while queued never prefills (5.4)
        await trio.sleep(behaviour.prefill_delay_s * (len(prompt) - reused))
        if command.snap is not None:
            held.snapshot(command.snap[1], prompt[: command.snap[0]])
        held.live[seq] = prompt
        if scoring:
            assert command.logprobs is not None
            for i in range(1, len(prompt)):
                await write(_words(behaviour.logprobs(prompt[:i], prompt[i], command.logprobs)))
        prefilled_at = trio.current_time()
        finish = await _pick(daemon, run, prompt, death, write, generated)
    ended_at = trio.current_time()
    held.live[seq] = prompt + tuple(generated[:-1])  # the last pick was never fed back
    daemon.decoded.append(Decoded(command.name, seq, prompt, reused, cache_slot, command.snap,
                                  tuple(generated), finish.value))
    counters = daemon.counters
    counters.requests += 1
    counters.tokens_prompt += len(prompt)
    counters.tokens_generated += len(generated)
    counters.cancelled += finish is FinishReason.CANCELLED
    daemon.finished(run)
    restore = isinstance(command, Restore)
    return GenerateSummary(
        n_prompt=len(prompt), n_gen=len(generated), finish=finish,
        prefill_ms=round((prefilled_at - began) * 1000, 3),
        decode_ms=round((ended_at - prefilled_at) * 1000, 3),
        n_reused=reused if restore else None, n_cached=None if restore else reused,
        cache_slot=None if restore else cache_slot,
        snap_slot=None if command.snap is None else command.snap[1],
        snap_pos=None if command.snap is None else command.snap[0],
        **_speculation(daemon, run, len(generated)),
    ).to_reply()


def _speculation(daemon: FakeDaemon, run: Run, n_gen: int) -> dict[str, Any]:
    """The draft fields of a daemon that decodes speculatively (5.9): which proposers the
    request ran; the counts are the fake's own (half the tokens verified in steps that
    proposed three and accepted two), none with ``logprobs=`` (decoded without)."""
    launch, command = daemon.launch, run.command
    if launch.draft is None and launch.lookup is None:
        return {}
    lookup = command.lookup if command.lookup is not None else launch.lookup == "on"
    spec = "+".join(name for name, on in (("dflash", launch.draft is not None),
                                         ("lookup", lookup)) if on) or "none"
    steps = 0 if spec == "none" or command.logprobs is not None else n_gen // 2
    return {"spec": spec, "draft_steps": steps, "draft_proposed": 3 * steps,
            "draft_accepted": 2 * steps, "draft_ms": 0.0}


async def _pick(daemon: FakeDaemon, run: Run, prompt: tuple[int, ...], death: Death | None,
                write: Writer, generated: list[int]) -> FinishReason:
    """The decode loop; fills ``generated``, returns why it stopped."""
    command, behaviour = run.command, daemon.behaviour
    finish = FinishReason.LENGTH
    while len(generated) < command.n_gen:
        if death is not None and death.after_tokens and len(generated) >= death.after_tokens:
            await daemon.die(death)
        if run.cancelled:
            return FinishReason.CANCELLED
        token = behaviour.model((*prompt, *generated))
        if token in behaviour.vocab.eog and not command.ignore_eos:
            return FinishReason.EOG  # not written (5.1)
        context = (*prompt, *generated)
        generated.append(token)
        await write([token] if command.logprobs is None
                    else _words(behaviour.logprobs(context, token, command.logprobs)))
        if token in command.stop:
            return FinishReason.STOP  # written
        await trio.sleep(behaviour.token_delay_s)  # a checkpoint even at 0: cancel lands
    if death is not None and death.after_tokens and len(generated) >= death.after_tokens:
        await daemon.die(death)
    return finish


def _words(record: TokenLogprobs) -> list[int]:
    data = record.encode()
    return list(struct.unpack(f"<{len(data) // 4}i", data))
