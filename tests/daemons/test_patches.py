"""The engine patch series: made by real diff tools, applied by us, byte for byte."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

from daemons._patches import PATCH_DIR, EnginePatch, apply_series, read_series, series_hash
from daemons.engine import ENGINE_PIN, engine_root, ensure_engine, ensure_patched_source
from daemons.errors import BuildError

ORIGINAL = {
    "ggml/src/kernel.c": "".join(f"int line_{n} = {n};\n" for n in range(1, 80)),
    "ggml/src/gone.h": "#pragma once\n",
    "src/no-newline.txt": "first\nlast without newline",
    "src/crlf.txt": "one\r\ntwo\r\nthree\r\n",
}


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())


def _edit(tree: Path) -> None:
    kernel = tree / "ggml/src/kernel.c"
    lines = kernel.read_text().splitlines(keepends=True)
    lines[3] = "int line_4 = 400; // changed\n"
    lines[40:42] = []
    lines.insert(60, "int inserted = 1;\n")
    lines.append("int appended = 2;\n")
    kernel.write_text("".join(lines))
    (tree / "ggml/src/gone.h").unlink()
    (tree / "ggml/src/new-kernel.cu").write_text("__global__ void k() {}\n")
    (tree / "src/no-newline.txt").write_bytes(b"first\nlast, edited, still without newline")
    (tree / "src/crlf.txt").write_bytes(b"one\r\nTWO\r\nthree\r\n")


def _edit_again(tree: Path) -> None:
    # Made against the first edit's result, as the README asks; moves lines the first
    # edit touched less than a hunk away.
    kernel = tree / "ggml/src/kernel.c"
    kernel.write_text("// header added by the second patch\n" + kernel.read_text()
                      .replace("int line_70 = 70;\n", "int line_70 = 7000;\n"))


def _diff(a: Path, b: Path, reason: str) -> str:
    result = subprocess.run(["diff", "-ruN", a.name, b.name], cwd=a.parent, capture_output=True)
    assert result.returncode == 1, result.stderr  # 1: the trees differ
    return f"Reason: {reason}\n" + result.stdout.decode()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          check=True, capture_output=True).stdout.decode()


def _same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all(
        filecmp.cmp(a / name, b / name, shallow=False) for name in files_a)


def test_a_series_made_by_diff_reproduces_the_edited_tree(tmp_path: Path) -> None:
    pristine, step1, step2 = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _write_tree(pristine, ORIGINAL)
    shutil.copytree(pristine, step1)
    _edit(step1)
    shutil.copytree(step1, step2)
    _edit_again(step2)
    series = [EnginePatch("0001-first.patch", "first", _diff(pristine, step1, "first")),
              EnginePatch("0002-second.patch", "second", _diff(step1, step2, "second"))]

    target = tmp_path / "applied"
    shutil.copytree(pristine, target)
    apply_series(series, target)

    assert _same_tree(target, step2)


def test_a_series_made_by_git_reproduces_the_edited_tree(tmp_path: Path) -> None:
    pristine, repo = tmp_path / "a", tmp_path / "repo"
    _write_tree(pristine, ORIGINAL)
    shutil.copytree(pristine, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "pinned")
    series = []
    for number, edit in enumerate((_edit, _edit_again), 1):
        edit(repo)
        _git(repo, "add", "-A")
        series.append(EnginePatch(f"000{number}-edit.patch", "edit",
                                  "Reason: edit\n" + _git(repo, "diff", "--cached")))
        _git(repo, "commit", "-qm", f"edit {number}")

    apply_series(series, pristine)

    shutil.rmtree(repo / ".git")
    assert _same_tree(pristine, repo)


def test_a_hunk_that_does_not_match_names_the_patch_and_the_file(tmp_path: Path) -> None:
    pristine, edited = tmp_path / "a", tmp_path / "b"
    _write_tree(pristine, ORIGINAL)
    shutil.copytree(pristine, edited)
    _edit(edited)
    patch = EnginePatch("0007-kernel.patch", "why", _diff(pristine, edited, "why"))
    (pristine / "ggml/src/kernel.c").write_text("int something_else;\n")

    with pytest.raises(BuildError, match=r"0007-kernel\.patch: hunk 1 of ggml/src/kernel\.c"):
        apply_series([patch], pristine)


def test_the_series_is_read_in_order_and_needs_a_reason(tmp_path: Path) -> None:
    body = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-1\n+2\n"
    (tmp_path / "0002-later.patch").write_text("Reason: applies second\n" + body)
    (tmp_path / "0001-sooner.patch").write_text("Reason: applies first\n" + body)
    (tmp_path / "README.md").write_text("not a patch\n")

    series = read_series(tmp_path)

    assert [(p.name, p.reason) for p in series] == [
        ("0001-sooner.patch", "applies first"), ("0002-later.patch", "applies second")]
    (tmp_path / "0003-no-reason.patch").write_text(body)
    with pytest.raises(BuildError, match="first line must be 'Reason: "):
        read_series(tmp_path)
    (tmp_path / "0003-no-reason.patch").unlink()
    (tmp_path / "fix.patch").write_text("Reason: x\n" + body)
    with pytest.raises(BuildError, match=r"name it NNNN-what\.patch"):
        read_series(tmp_path)


def test_the_series_hash_follows_every_change() -> None:
    one = EnginePatch("0001-a.patch", "r", "Reason: r\n--- a/x\n+++ b/x\n")
    hashes = {
        series_hash([one]),
        series_hash([EnginePatch("0002-a.patch", one.reason, one.text)]),
        series_hash([EnginePatch(one.name, one.reason, one.text + "\n")]),
        series_hash([one, one]),
        series_hash([]),
    }
    assert len(hashes) == 5


def test_the_engine_we_build_carries_the_committed_series() -> None:
    """The daemons' engine is the pinned tree with native/engine-patches applied; the
    peer's stays pristine (daemons/peer.py builds from ensure_engine_source)."""
    series = read_series(PATCH_DIR)
    build = ensure_engine(progress=lambda message: None)
    assert build.source_dir == ensure_patched_source(progress=lambda message: None)
    if not series:
        assert build.name == ENGINE_PIN.name
        assert build.source_dir == engine_root(ENGINE_PIN) / "src"
        return
    digest = series_hash(series)
    assert build.series_hash == digest
    assert build.name == f"{ENGINE_PIN.name}+p{digest[:12]}"
    assert build.build_dir.name.endswith(f"-p{digest[:12]}")
    assert build.source_dir != engine_root(ENGINE_PIN) / "src"
