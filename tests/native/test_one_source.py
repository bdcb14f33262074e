"""Every copy of a fact the daemons and the Python side share, held to PROTOCOL.md.

Error codes, startup exit codes, roles and their architectures, the commands (and
whether they stream, need the weights, which roles list them), the flags and the
protocol constants are written in C++ (native/src), in Python (protocol/, daemons/,
orchestrator/) and in the document. The document is the source; these tests read it
and every copy (tests/native/sources.py), so a copy that drifts fails here, and so does
a command added to the native table but not to the document.
"""

from __future__ import annotations

import re

from daemons.roles import DEFAULT_SLOTS, ROLES
from orchestrator.config._keys import ModelKeys
from protocol import (
    CHANNEL_ALIVE_LINE,
    CHANNEL_STREAM_WORD,
    MAX_LOGPROBS,
    MAX_PARALLEL,
    PROTOCOL_VERSION,
    ErrorCode,
)
from tests.native import sources


def test_error_codes() -> None:
    doc = sources.doc_error_codes()
    assert len(doc) == len(set(doc))
    assert [code.value for code in ErrorCode] == doc
    names = sources.native_error_names()
    assert sorted(names) == sorted(sources.native_error_enum())  # every member has its name
    assert sorted(names.values()) == sorted(doc)


def test_startup_exit_codes() -> None:
    doc = sources.doc_exit_codes()
    assert {code.value: code.exit_code for code in ErrorCode if code.exit_code is not None} == doc
    names = sources.native_error_names()
    assert {names[member]: status for member, status in sources.native_exit_codes().items()} == doc
    # Every other code ends a failed startup with 1 (section 2's "exits non-zero").
    assert "default: return 1;" in sources.native_source("wire/errors.cpp")


def test_roles() -> None:
    doc = {role.name: role for role in sources.doc_roles()}
    native = {role.name: role for role in sources.native_roles()}
    assert list(native) == list(doc) and set(ROLES) == set(doc)
    for name, role in doc.items():
        assert native[name].executable == role.executable == ROLES[name].executable
        assert native[name].architectures == role.architectures  # the order of wrong_arch's message
        assert ROLES[name].architectures == frozenset(role.architectures)


def test_commands_match_the_document() -> None:
    table = sources.native_commands()
    assert len({c.name for c in table}) == len(table)
    doc = sources.doc_commands()
    assert {c.name: c.stream for c in table} == {c.name: c.stream for c in doc}
    assert {c.name for c in table if c.needs_weights} == sources.doc_parked_commands()
    # The reader numbers the generations a cancel stops, and acts on cancel itself.
    assert {c.name for c in table if c.on_read == "NumberGeneration"} == {"generate", "restore"}
    assert [c.name for c in table if c.on_read == "Cancel"] == ["cancel"]


def test_capabilities_match_the_document() -> None:
    doc = sources.doc_capabilities()
    roles = sources.native_roles()
    assert {role.name for role in roles} == set(doc)
    for role in roles:
        assert sources.native_capabilities(role) == doc[role.name], role.name
    # What a role does not list it refuses with `unsupported`, not `unknown_command`:
    # every protocol command is in the table, listed for some role or an alias (exit).
    unlisted = {c.name for c in sources.native_commands() if not c.listed}
    assert unlisted == {"exit"}


def test_flags_match_the_document() -> None:
    assert sorted(sources.native_flags()) == sorted(sources.doc_flags())


def test_protocol_constants() -> None:
    native = sources.native_constants()
    assert sources.doc_protocol_version() == PROTOCOL_VERSION == native["kProtocolVersion"]
    assert sources.doc_max_logprobs() == MAX_LOGPROBS == native["kMaxLogprobs"]
    low, high = sources.doc_draft_block_range()
    assert high == native["kMaxDraftBlock"]
    block = ModelKeys.DRAFT_BLOCK_SIZE
    assert (block.low, block.high) == (low, high)  # the config's draft_block_size bounds
    slots = sources.doc_flag_row("--slots")[1]
    assert int(slots) == DEFAULT_SLOTS == native["kDefaultSlots"]
    parallel = re.findall(r"`1\.\.(\d+)`", sources.doc_flag_row("--parallel")[2])
    assert [int(p) for p in parallel] == [MAX_PARALLEL] == [native["kMaxParallel"]]


def test_one_channel_units() -> None:
    text = sources.native_source("wire/constants.h")
    words = dict(re.findall(r'constexpr const char \* (kChannel\w+) = "([^"]*)";', text))
    assert words == {"kChannelStreamWord": CHANNEL_STREAM_WORD,
                     "kChannelAliveLine": CHANNEL_ALIVE_LINE}
    units = sources.doc_table(sources.doc_section("10"), "unit")
    cells = {row[0]: sources.ticked(row[1])[0] for row in units}
    assert cells["stream frame"] == f"{CHANNEL_STREAM_WORD} N\\n"
    assert cells["keep-alive"] == f"{CHANNEL_ALIVE_LINE}\\n"
    keepalive = sources.doc_flag_row("--keepalive-ms")[1]
    assert int(keepalive) == sources.native_constants()["kDefaultKeepaliveMs"]


def test_lookup_modes_and_bounds() -> None:
    """``--lookup``'s modes (the daemon's flag, the config's ``lookup``) and
    ``--lookup-min``'s default and range (engine/lookup.h) as PROTOCOL.md section 1 says."""
    modes = sources.ticked(sources.doc_flag_row("--lookup=")[0])[0].split("=", 1)[1]
    assert tuple(modes.replace("\\", "").split("|")) == ModelKeys.LOOKUP.choices
    args = sources.native_source("daemon/args.cpp")
    assert all(f'"{mode}"' in args for mode in ModelKeys.LOOKUP.choices)
    lookup = sources.native_source("engine/lookup.h")
    engine = dict(re.findall(r"constexpr int32_t (k\w+) = (\d+);", lookup))
    row = sources.doc_flag_row("--lookup-min")
    assert int(row[1]) == int(engine["kDefaultLookupMin"])
    assert re.findall(r"`1\.\.(\d+)`", row[2]) == [engine["kMaxLookupMatch"]]


def test_tree_verify_bounds() -> None:
    """``--draft-tree``'s range and ``--draft-tree-branches``' default and range as
    PROTOCOL.md section 1 says, the daemon's (wire/constants.h, engine/options.h) and the
    config's ``draft_tree`` and ``draft_tree_branches``."""
    native = sources.native_constants()
    options = sources.native_source("engine/options.h")
    default = re.findall(r"constexpr int32_t kDefaultTreeBranches = (\d+);", options)
    tree = re.findall(r"`(\d+)\.\.(\d+)`", sources.doc_flag_row("--draft-tree=")[2])
    branches = sources.doc_flag_row("--draft-tree-branches")
    assert tree == [("0", str(native["kMaxTreeBranches"] * (native["kMaxDraftBlock"] - 1)))]
    assert re.findall(r"`(\d+)\.\.(\d+)`", branches[2]) == [("1", str(native["kMaxTreeBranches"]))]
    assert default == [branches[1]]
    assert (ModelKeys.DRAFT_TREE.low, ModelKeys.DRAFT_TREE.high) == tuple(int(n) for n in tree[0])
    assert (ModelKeys.DRAFT_TREE_BRANCHES.low, ModelKeys.DRAFT_TREE_BRANCHES.high) == (
        1, native["kMaxTreeBranches"])
