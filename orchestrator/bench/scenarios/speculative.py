"""``speculative``: DFlash against the peer's ``draft-dflash``, at fixed acceptance and at
the real draft's.

Both servers load the same DFlash draft GGUF (``--draft``; llama-server's
``draft-dflash`` loads ours as it is) and verify the same block: ours at the draft's
``dflash.block_size``, the peer with ``--spec-draft-n-max`` one less (the block is the
last committed token plus the proposals). Two ways to set the acceptance:

- the real draft's: ``ours-dflash`` against ``peer-dflash``, each also against its own
  plain decoding (random-weight drafts accept nothing: the cost of proposals that miss);
- fixed, at each ``--acceptance`` A: our oracle proposer (the daemon's benchmark-only
  ``--draft-oracle``, which no ``serve`` flag reaches, so this arm drives our daemon
  directly, without HTTP; the draft still runs every step and its proposals are
  replaced) against the peer's synthetic acceptance (``--spec-synth-len A``, its own
  benchmark-only switch, which accepts at that mean length whatever the draft said), and
  against our plain daemon.

Code prompts, completions API, one at a time, every prompt cold. Each arm holds a model
and a draft: on a GPU, run one acceptance per run (``--acceptance 4``) or pick arms.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.bench.scenarios._common import PEER_DEFAULTS, code_rounds, completion_probe, fixed
from orchestrator.bench.scenarios._declare import (
    COLD,
    Arm,
    Comparison,
    Options,
    Scenario,
    Sizing,
)

__all__ = ["ACCEPTANCES", "SPECULATIVE", "oracle_label", "synth_label"]

ACCEPTANCES = (1.0, 4.0, 8.0, 12.0)
MAX_TOKENS = 128
_DRAFT_PLACEHOLDER = Path("<draft.gguf>")
_BLOCK_PLACEHOLDER = 16


def oracle_label(accept: float) -> str:
    return f"daemon-oracle-a{accept:g}"


def synth_label(accept: float) -> str:
    return f"peer-synth-a{accept:g}"


def _peer_dflash(options: Options) -> tuple[str, ...]:
    block = options.draft_block or _BLOCK_PLACEHOLDER
    return ("--spec-type", "draft-dflash", "-md", str(options.draft or _DRAFT_PLACEHOLDER),
            "--spec-draft-n-max", str(block - 1))


def _arms(options: Options) -> tuple[Arm, ...]:
    draft = str(options.draft or _DRAFT_PLACEHOLDER)
    block = options.draft_block or _BLOCK_PLACEHOLDER
    fixed_arms: list[Arm] = []
    for accept in options.acceptances or ACCEPTANCES:
        fixed_arms += [
            Arm(oracle_label(accept), "daemon", (), f"our daemon with the draft and the "
                f"oracle at mean acceptance {accept:g} (block {block})",
                oracle_accept=accept),
            Arm(synth_label(accept), "peer", (*_peer_dflash(options), "--spec-synth-len",
                                              f"{accept:g}"),
                f"its draft-dflash with synthetic acceptance at mean length {accept:g}, "
                f"the same block ({block - 1} proposals)"),
        ]
    return (
        Arm("ours-dflash", "lucerna", ("--draft", draft), f"DFlash with the draft at its "
            f"own block size ({block})"),
        Arm("peer-dflash", "peer", _peer_dflash(options), f"{PEER_DEFAULTS}; its "
            f"draft-dflash on the same draft GGUF, the same block: {block - 1} proposals "
            "a step (its default is 3)"),
        Arm("ours", "lucerna", (), "our plain decoding: the floor proposals must not "
            "sink below"),
        Arm("peer", "peer", (), f"{PEER_DEFAULTS}; plain decoding"),
        *fixed_arms,
        Arm("daemon", "daemon", (), "our daemon, plain: the oracle arms' own floor"),
    )


def _comparisons(options: Options) -> tuple[Comparison, ...]:
    rows = [
        Comparison("ours-dflash", ("peer-dflash",), "decode_tps",
                   "DFlash against its draft-dflash, at the real draft's acceptance"),
        Comparison("ours-dflash", ("ours",), "decode_tps", "DFlash against our plain "
                   "decoding"),
        Comparison("peer-dflash", ("peer",), "decode_tps", "its draft-dflash against its "
                   "plain decoding"),
    ]
    for accept in options.acceptances or ACCEPTANCES:
        rows += [
            Comparison(oracle_label(accept), (synth_label(accept),), "decode_tps",
                       f"at acceptance {accept:g}: our verify (daemon, no HTTP) against its "
                       "(server)"),
            Comparison(oracle_label(accept), ("daemon",), "decode_tps",
                       f"at acceptance {accept:g}: our verify against our plain daemon"),
            Comparison(synth_label(accept), ("peer",), "decode_tps",
                       f"at acceptance {accept:g}: its verify against its plain decoding"),
        ]
    return tuple(rows)


SPECULATIVE = Scenario(
    name="speculative",
    version=1,
    measures="DFlash decode against the peer's draft-dflash: at fixed acceptance (our "
             "oracle, its synthetic acceptance) and at the real draft's",
    workload="code prompts (~150 tokens), completions API, greedy, one at a time, cold",
    api="completions",
    phases=fixed(COLD),
    levels=(1,),
    max_tokens=MAX_TOKENS,
    arms=_arms,
    rounds=lambda options, salt: code_rounds(options, salt, prompts=3, max_tokens=MAX_TOKENS,
                                             warm=False),
    probe=completion_probe,
    sizing=lambda options: Sizing(n_ctx=2048, parallel=1),
    comparisons=_comparisons,
    needs="a qwen35 target (--model) and its DFlash draft (--draft)",
)
