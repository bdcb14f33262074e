"""``lucerna niah``: haystack sizing and fillers, the report files, and the command itself
on a one-case grid in both modes (daemons directly, and a running server over HTTP),
with its exit status: 0 only when every cell found the needle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.niah import (
    FULL,
    Cell,
    build_case,
    corpus_filler,
    needle_found,
    render_table,
    synthetic_filler,
    write_heatmap,
    write_json,
)
from tests.conftest import LucernaServer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


async def _chars_over_four(messages: list[dict[str, Any]]) -> int:
    return sum(len(m["content"]) for m in messages) // 4 + 10


def test_cases_are_sized_just_under_their_length_and_deterministic() -> None:
    filler = synthetic_filler()
    for length, depth in ((2000, 0.0), (5000, 0.5), (900, 1.0)):
        case = trio.run(build_case, filler, length, depth, _chars_over_four)
        assert 0.97 * length <= case.n_tokens <= length
        system, user = case.messages
        assert f"The secret number is {case.value}." in system["content"]
        assert user == {"role": "user", "content": "What is the secret number given in the text?"}
        assert trio.run(build_case, synthetic_filler(), length, depth, _chars_over_four) == case
    first = trio.run(build_case, filler, 5000, 0.0, _chars_over_four).messages[0]["content"]
    assert first.index("secret number is") < 200  # depth 0: right after the preamble


def test_corpus_filler_reads_a_file_or_a_tree_of_text_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n\n    return 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text("# Title\ntext\n")
    (tmp_path / "image.png").write_bytes(PNG_MAGIC)
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.py").write_text("secret = 1\n")
    tree = corpus_filler(tmp_path)
    assert list(tree.units) == ["# file: a.py", "def f():", "    return 1", "# file: sub/b.md",
                                "# Title", "text"]
    assert list(corpus_filler(tmp_path / "a.py").units) == ["def f():", "    return 1"]
    with pytest.raises(ValueError):
        corpus_filler(tmp_path / "missing")


def test_needle_check() -> None:
    assert needle_found(" The secret number is 4729105.", "4729105")
    assert needle_found("4,729,105", "4729105") and needle_found("4 729 105", "4729105")
    assert not needle_found("472910", "4729105") and not needle_found("", "4729105")


def test_report_files(tmp_path: Path) -> None:
    cells = [Cell("synthetic", 2048, 0.5, FULL, 2000, 2000, "1234567", "1234567", True, 4.0, 4.5),
             Cell("synthetic", 2048, 0.5, 0.1, 2000, 230, "1234567", "no", False, 2.0, 2.2, 1.5,
                  needle_kept=False)]
    table = render_table(cells)
    assert "| 2048 | 0.5 | 0.1 | 230 / 2000 | 2.00 | 2.00x | FAIL (dropped) | no |" in table
    # The summary: pass rate, medians, and how much of the TTFT was the drafter's.
    assert "| full | 2048 | 1/1 | 2000 | 4.00 |  |  |" in table
    assert "| 0.1 | 2048 | 0/1 | 230 | 2.00 | 2.00x | 1.50 |" in table
    write_json(tmp_path / "r.json", cells, {"mode": "test"})
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["passed"] is False and len(document["cells"]) == 2
    assert document["summary"][1]["speedup"] == 2.0
    assert document["summary"][1]["compress_s"] == 1.5
    write_heatmap(tmp_path / "r.png", cells, "title")
    assert (tmp_path / "r.png").read_bytes().startswith(PNG_MAGIC)


def niah(tmp_path: Path, *args: str, length: int = 500) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "niah.json"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "niah", "--lengths", str(length), "--depths",
         "0.5", "--max-tokens", "12", "--out", str(out), *args],
        cwd=repo_root(), capture_output=True, text=True, timeout=600)
    assert out.exists(), done.stderr[-3000:]
    assert out.with_suffix(".png").read_bytes().startswith(PNG_MAGIC)
    return done.returncode, json.loads(out.read_text()), done.stdout


@pytest.mark.slow
def test_daemon_mode_grid_and_exit_status(
    native: NativeBuild, default_model: Path, tmp_path: Path,
) -> None:
    code, document, table = niah(tmp_path, "--keeps", "0.3", "--threads", "2")
    cells = document["cells"]
    assert [c["keep"] for c in cells] == [FULL, 0.3]
    assert cells[1]["prompt_tokens"] < 0.5 * cells[0]["prompt_tokens"]
    # At 500 tokens gemma3-270m finds the needle uncompressed and at keep 0.3 (which keeps
    # it): both cells pass, their answers give the number, and the command exits 0. A
    # scorer or a retrieval that never finds the needle fails here; one that always
    # finds it fails on the one-token run below.
    for cell in cells:
        assert cell["passed"] is True and cell["value"] in cell["answer"], cell
    assert cells[0]["needle_kept"] is None and cells[1]["needle_kept"] is True
    assert cells[1]["compress_s"] > 0
    assert code == 0 and document["passed"] is True
    assert document["run"]["mode"] == "daemon" and "| 500 | 0.5 | 0.3 |" in table
    # One generated token cannot hold a seven-digit number: every cell fails, exit 1. This
    # run also takes code as filler (a directory) and parks the target while it scores.
    code, document, _ = niah(tmp_path, "--keeps", "0.5", "--no-baseline", "--max-tokens", "1",
                             "--threads", "2", "--filler-file", "daemons", "--park", length=200)
    assert code == 1 and document["passed"] is False and len(document["cells"]) == 1
    assert document["run"]["filler"] == "corpus:daemons"
    assert "target parked while scoring" in document["run"]["backend"]
    assert document["cells"][0]["prompt_tokens"] > 0 and document["cells"][0]["error"] is None


@pytest.mark.slow
def test_http_mode_through_a_compressing_server(prefill_server: LucernaServer,
                                                tmp_path: Path) -> None:
    code, document, _ = niah(tmp_path, "--mode", "http", "--url", f"{prefill_server.base_url}/v1",
                             "--keeps", "0.3")
    full, compressed = document["cells"]
    assert 480 <= full["n_tokens"] <= 500 and full["prompt_tokens"] == full["n_tokens"]
    assert compressed["prompt_tokens"] < 0.5 * full["n_tokens"]
    # Over HTTP too the uncompressed baseline must find the needle (a scorer that never
    # does fails here); the compressed cell's outcome is the server's to report.
    assert full["passed"] is True and full["value"] in full["answer"], full
    assert code == (0 if compressed["passed"] else 1) and document["passed"] is compressed["passed"]
