"""What PROTOCOL.md and the native sources say, read as text.

The facts the daemons and the Python side share (error codes, exit codes, roles, the
command table, protocol constants) are written in both languages; tests/native/
test_one_source.py holds every copy to the document with these readers, and the native
tests take their expectations from the document through them instead of a third copy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import protocol

REPO = Path(__file__).resolve().parents[2]
DOC = (Path(protocol.__file__).parent / "PROTOCOL.md").read_text()
NATIVE_SRC = REPO / "native" / "src"


def native_source(path: str) -> str:
    return (NATIVE_SRC / path).read_text()


def doc_section(number: str) -> str:
    """The text of section ``number`` ("1", "5.1"), up to the next heading at its level or above."""
    level = "###" if "." in number else "##"
    heading = rf"^{level} {re.escape(number)}[. ].*?$"
    match = re.search(rf"{heading}(.*?)(?=^#{{2,{len(level)}}} |\Z)", DOC, re.M | re.S)
    assert match, f"PROTOCOL.md has no section {number}"
    return match.group(1)


def doc_table(section: str, header: str) -> list[list[str]]:
    """The body rows of the table in ``section`` whose header row starts with ``header``."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        # A cell may hold an escaped pipe (`auto\|on\|off`).
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([cell.strip() for cell in cells])
    return rows


def ticked(cell: str) -> list[str]:
    """The `code` spans of a cell, in order."""
    return re.findall(r"`([^`]*)`", cell)


# --- PROTOCOL.md -----------------------------------------------------------------------


def doc_protocol_version() -> int:
    match = re.match(r"# Lucerna daemon protocol, version (\d+)", DOC)
    assert match
    return int(match.group(1))


def doc_error_codes() -> list[str]:
    return [ticked(row[0])[0] for row in doc_table(doc_section("6"), "code")]


def doc_exit_codes() -> dict[str, int]:
    """Startup error code -> process exit status (section 2); exit 0 is no error."""
    rows = doc_table(doc_section("2"), "exit code")
    return {code: int(row[0]) for row in rows if row[0] != "0" for code in ticked(row[1])}


@dataclass(frozen=True)
class DocRole:
    name: str
    executable: str
    architectures: tuple[str, ...]


def doc_roles() -> list[DocRole]:
    rows = doc_table(doc_section("1"), "role")
    # The third cell lists the architectures, then a parenthesis that may name others.
    return [
        DocRole(ticked(r[0])[0], ticked(r[1])[0], tuple(ticked(r[2].split("(")[0]))) for r in rows
    ]


def doc_capabilities() -> dict[str, list[str]]:
    """Role -> the ready line's capabilities, in order (section 5)."""
    caps: dict[str, list[str]] = {}
    previous: list[str] = []
    for row in doc_table(doc_section("5"), "role"):
        if row[1].startswith("the same plus"):
            listed = previous + ticked(row[1])
        else:
            listed = ticked(row[1])[0].split(",")
        for role in ticked(row[0]):
            caps[role] = listed
        previous = listed
    return caps


@dataclass(frozen=True)
class DocCommand:
    name: str
    stream: bool


def doc_commands() -> list[DocCommand]:
    """The commands of the section 5 table; `quit` / `exit` is two."""
    commands = []
    for row in doc_table(doc_section("5"), "command"):
        for usage in ticked(row[0]):
            commands.append(DocCommand(usage.split()[0], row[1] == "S"))
    return commands


def doc_parked_commands() -> set[str]:
    """The commands that answer `err parked` (section 6)."""
    row = next(r for r in doc_table(doc_section("6"), "code") if ticked(r[0]) == ["parked"])
    return set(ticked(row[1]))


def doc_flag_row(flag: str) -> list[str]:
    return next(r for r in doc_table(doc_section("1"), "flag") if r[0].startswith(f"`{flag}"))


def doc_flags() -> list[str]:
    return [ticked(row[0])[0].split("=")[0] for row in doc_table(doc_section("1"), "flag")]


def doc_draft_block_range() -> tuple[int, int]:
    low, high = re.findall(r"`(\d+)\.\.(\d+)`", doc_flag_row("--draft-block-size")[2])[0]
    return int(low), int(high)


def doc_max_logprobs() -> int:
    row = next(r for r in doc_table(doc_section("5.1"), "option") if r[0] == "`logprobs`")
    return int(re.findall(r"`\[0, (\d+)\]`", row[3])[0])


# --- native/src ------------------------------------------------------------------------


def native_constants() -> dict[str, int]:
    """The constexpr integers of native/src/wire/constants.h."""
    text = native_source("wire/constants.h")
    return {name: int(value) for name, value in re.findall(r"constexpr \w+ (k\w+) = (\d+);", text)}


def native_error_enum() -> list[str]:
    body = re.search(r"enum class ErrorCode \{(.*?)\};", native_source("wire/errors.h"), re.S)
    assert body
    return re.findall(r"\b(k\w+)\b", body.group(1))


def native_error_names() -> dict[str, str]:
    """ErrorCode member -> its wire name (error_code_name in errors.cpp)."""
    pairs = re.findall(r'case ErrorCode::(k\w+): return "(\w+)";', native_source("wire/errors.cpp"))
    return dict(pairs)


def native_exit_codes() -> dict[str, int]:
    """ErrorCode member -> exit status (startup_exit_code in errors.cpp); `default` left out."""
    text = native_source("wire/errors.cpp")
    body = text[text.index("int startup_exit_code(") :]
    codes: dict[str, int] = {}
    pending: list[str] = []
    for label, value in re.findall(r"case ErrorCode::(k\w+):(?:\s*return (\d+);)?", body):
        pending.append(label)
        if value:
            codes.update(dict.fromkeys(pending, int(value)))
            pending = []
    return codes


@dataclass(frozen=True)
class NativeRole:
    name: str
    executable: str
    architectures: tuple[str, ...]
    generates: bool


def native_roles() -> list[NativeRole]:
    text = native_source("daemon/roles.cpp")
    rows = re.findall(r'\{"(\w+)", "([\w-]+)",\s*\{([^}]*)\},\s*(true|false)\}', text)
    assert len(rows) == text.count("static const RoleInfo"), "a role row this reader cannot parse"
    return [NativeRole(n, e, tuple(re.findall(r'"(\w+)"', a)), g == "true") for n, e, a, g in rows]


@dataclass(frozen=True)
class NativeCommand:
    name: str
    stream: bool
    needs_weights: bool
    on_read: str
    served: str
    listed: bool


def native_commands() -> list[NativeCommand]:
    """The rows of native/src/commands/command_table.cpp, in order."""
    rows = re.findall(
        r'\{"(\w+)",\s*(kStream|kReplyOnly),\s*(kNeedsWeights|kAnyState),\s*OnRead::k(\w+),'
        r"\s*Served::k(\w+),\s*(kListed|kUnlisted),",
        native_source("commands/command_table.cpp"),
    )
    handlers = native_source("commands/command_table.cpp").count("[](CommandCall & c)")
    assert len(rows) == handlers, "a command row this reader cannot parse"
    return [
        NativeCommand(n, s == "kStream", w == "kNeedsWeights", r, v, listed == "kListed")
        for n, s, w, r, v, listed in rows
    ]


def native_capabilities(role: NativeRole) -> list[str]:
    """What the ready line lists for ``role``, derived from the table as the daemon does."""
    served: dict[str, Callable[[], bool]] = {
        "EveryRole": lambda: True,
        "GeneratingRoles": lambda: role.generates,
        "Pflash": lambda: role.name == "pflash",
    }
    return [c.name for c in native_commands() if c.listed and served[c.served]()]


def native_flags() -> list[str]:
    """The flags of the table in native/src/daemon/args.cpp, in order."""
    text = native_source("daemon/args.cpp")
    table = text[text.index("const Flag kFlags[] = {") :]
    table = table[: table.index("\n};")]
    flags = re.findall(r'\{"(--[\w-]+)"', table)
    setters = table.count("[](const std::string & flag")
    assert len(flags) == setters, "a flag row this reader cannot parse"
    return flags
