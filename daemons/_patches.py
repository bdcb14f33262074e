"""Our patch series on the pinned engine: read it, hash it, apply it.

``native/engine-patches/`` holds plain unified diffs named ``NNNN-what.patch``, applied
in name order to a copy of the sha256-checked llama.cpp tree. Each file opens with one
line ``Reason: ...`` (why we carry it), then the diff, as ``diff -ruN a b`` or
``git diff`` writes it; paths lose their first component (``-p1``).

We apply the diffs ourselves instead of calling patch(1) or git: the result must be
the same on every machine that builds the engine (CI, a GPU host, a user's box), and a
hunk whose lines are not found is an error naming the patch and the hunk, never a
fuzzy or partial apply. A hunk may sit at another line than its header says (an
earlier patch in the series moved it), as patch(1) allows, but its lines must match
exactly.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from daemons.errors import BuildError
from daemons.paths import repo_root

__all__ = ["EnginePatch", "PATCH_DIR", "apply_series", "read_series", "series_hash"]

PATCH_DIR = repo_root() / "native" / "engine-patches"

_NAME = re.compile(r"^\d{4}-[a-z0-9][a-z0-9-]*\.patch$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_REASON = "Reason: "


@dataclass(frozen=True)
class EnginePatch:
    name: str
    reason: str
    text: str


@dataclass
class _Hunk:
    old_start: int
    new_start: int
    old: list[str]
    new: list[str]


@dataclass
class _FilePatch:
    old_path: str | None  # None: the patch creates the file
    new_path: str | None  # None: the patch deletes the file
    hunks: list[_Hunk]


def read_series(directory: Path = PATCH_DIR) -> list[EnginePatch]:
    """The series in the order it applies; an empty list when there is none."""
    if not directory.is_dir():
        return []
    patches = []
    for path in sorted(directory.glob("*.patch")):
        if not _NAME.match(path.name):
            raise BuildError(f"engine patch {path}: name it NNNN-what.patch "
                             "(four digits, then lower-case words joined by '-')")
        text = _read(path)
        first = text.split("\n", 1)[0]
        if not first.startswith(_REASON) or not first[len(_REASON):].strip():
            raise BuildError(f"engine patch {path}: its first line must be "
                             f"'{_REASON}<why we carry it>'")
        patches.append(EnginePatch(path.name, first[len(_REASON):].strip(), text))
    return patches


def series_hash(series: list[EnginePatch]) -> str:
    """Changes whenever a patch is added, removed, renamed or edited."""
    digest = hashlib.sha256()
    for patch in series:
        digest.update(f"{patch.name}\0{len(patch.text)}\0{patch.text}".encode())
    return digest.hexdigest()


def apply_series(series: list[EnginePatch], root: Path) -> None:
    for patch in series:
        for file_patch in _parse(patch):
            _apply_file(patch.name, file_patch, root)


def _strip_path(patch_name: str, raw: str) -> str | None:
    path = raw.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    parts = path.split("/", 1)
    if len(parts) != 2 or not parts[1] or ".." in parts[1].split("/"):
        raise BuildError(f"engine patch {patch_name}: cannot use path {path!r} "
                         "(expected a/<path inside llama.cpp>)")
    return parts[1]


def _parse(patch: EnginePatch) -> list[_FilePatch]:
    lines = _split_lines(patch.text)
    files: list[_FilePatch] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines)
                and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        current = _FilePatch(_strip_path(patch.name, lines[i][4:]),
                             _strip_path(patch.name, lines[i + 1][4:]), [])
        files.append(current)
        i += 2
        while i < len(lines) and (match := _HUNK.match(lines[i])):
            old_count = int(match.group(2) or "1")
            new_count = int(match.group(4) or "1")
            hunk = _Hunk(int(match.group(1)), int(match.group(3)), [], [])
            i += 1
            tag = " "
            while i < len(lines):
                line = lines[i]
                if line.startswith("\\"):  # "\ No newline at end of file"
                    _drop_newline(hunk, tag)
                    i += 1
                    continue
                if len(hunk.old) >= old_count and len(hunk.new) >= new_count:
                    break
                tag, body = line[:1], line[1:]
                if line in ("\n", "\r\n"):  # an editor stripped the context line's space
                    tag, body = " ", line
                if tag == " ":
                    hunk.old.append(body)
                    hunk.new.append(body)
                elif tag == "-":
                    hunk.old.append(body)
                elif tag == "+":
                    hunk.new.append(body)
                else:
                    raise BuildError(f"engine patch {patch.name}: malformed hunk line "
                                     f"{i + 1}: {line.rstrip()!r}")
                i += 1
            if len(hunk.old) != old_count or len(hunk.new) != new_count:
                raise BuildError(f"engine patch {patch.name}: hunk at line {i} is cut short")
            current.hunks.append(hunk)
    if not files:
        raise BuildError(f"engine patch {patch.name}: holds no diff")
    return files


def _drop_newline(hunk: _Hunk, tag: str) -> None:
    """The marker speaks of the line before it: old side, new side or both."""
    sides = {" ": (hunk.old, hunk.new), "-": (hunk.old,), "+": (hunk.new,)}.get(tag, ())
    for side in sides:
        if side and side[-1].endswith("\n"):
            side[-1] = side[-1][:-1]


def _apply_file(patch_name: str, file_patch: _FilePatch, root: Path) -> None:
    target = file_patch.new_path or file_patch.old_path
    assert target is not None
    path = root / target
    # diff -N names both sides of a created or deleted file; its hunks say which it is.
    creates = file_patch.old_path is None or all(
        hunk.old_start == 0 and not hunk.old for hunk in file_patch.hunks)
    deletes = file_patch.new_path is None or all(
        hunk.new_start == 0 and not hunk.new for hunk in file_patch.hunks)
    if creates:
        if path.exists():
            raise BuildError(f"engine patch {patch_name}: creates {target}, which exists")
        lines: list[str] = []
    else:
        if not path.is_file():
            raise BuildError(f"engine patch {patch_name}: {target} is not in the engine tree")
        lines = _split_lines(_read(path))
    shift = 0
    for number, hunk in enumerate(file_patch.hunks, 1):
        # A header's old start is the first old line, or the line a pure insertion follows.
        base = hunk.old_start - 1 if hunk.old else hunk.old_start
        at = _find(lines, hunk.old, max(base + shift, 0))
        if at is None:
            raise BuildError(f"engine patch {patch_name}: hunk {number} of {target} does not "
                             f"match the tree near line {hunk.old_start}; remake the patch "
                             "against the pinned engine with the earlier patches applied")
        lines[at:at + len(hunk.old)] = hunk.new
        shift = at - base + len(hunk.new) - len(hunk.old)
    if deletes:
        path.unlink()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(lines).encode("utf-8", "surrogateescape"))


def _read(path: Path) -> str:
    # Bytes as they are: no newline translation, and any byte survives the round trip.
    return path.read_bytes().decode("utf-8", "surrogateescape")


def _split_lines(text: str) -> list[str]:
    """Lines with their endings, split at "\\n" only (str.splitlines also splits at
    form feeds and other characters that source files may hold)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _find(lines: list[str], old: list[str], expected: int) -> int | None:
    """The start nearest to ``expected`` where ``old`` matches exactly."""
    if not old:
        return min(max(expected, 0), len(lines))
    last = len(lines) - len(old)
    for distance in range(0, max(expected, last - expected) + 1):
        for at in (expected - distance, expected + distance):
            if 0 <= at <= last and lines[at:at + len(old)] == old:
                return at
    return None
