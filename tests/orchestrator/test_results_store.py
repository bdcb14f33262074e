"""The results store (docs/results) and its check: the repository's own store passes, and
each kind of damage the check exists for is found, in a store built in a temporary tree."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from daemons.paths import repo_root
from orchestrator.bench.results_store import add_run, check_store, dump_index, dump_run, main
from orchestrator.errors import ConfigError

ENTRY = {"id": "cpu-1207-decode", "date": "2026-12-07", "commit": "88415f9",
         "machine": "dev box, 2 vCPUs", "card": "none (CPU)", "subject": "decode",
         "command": "lucerna bench decode --model default-chat",
         "file": "runs/cpu-1207-decode.json"}
RUN = {"steps.txt": ["1 streams: 86.4 tok/s aggregate"], "bench.json": {"rows": [1, 2, 3]}}


def test_the_repositorys_store_passes_its_check() -> None:
    assert check_store(repo_root()) == []


def _store(root: Path, entries: list[dict[str, str]] | None = None,
           cite: str = "[run](results/runs/cpu-1207-decode.json)") -> Path:
    store = root / "docs" / "results"
    (store / "runs").mkdir(parents=True)
    entries = [dict(ENTRY)] if entries is None else entries
    (store / "index.json").write_text(dump_index(entries))
    for entry in entries:
        (store / entry["file"]).write_text(dump_run(entry["id"], RUN))
    (root / "docs" / "benchmarks.md").write_text(f"# Benchmarks\n\n| figure | {cite} |\n")
    (root / "README.md").write_text("# Lucerna\n")
    return store


def test_a_whole_store_passes(tmp_path: Path) -> None:
    _store(tmp_path)
    assert check_store(tmp_path) == []


def _edit_index(field: str, value: str | None) -> Callable[[Path], None]:
    def edit(store: Path) -> None:
        entry = dict(ENTRY)
        if value is None:
            del entry[field]
        else:
            entry[field] = value
        (store / "index.json").write_text(dump_index([entry]))
    return edit


def _write(name: str, text: str) -> Callable[[Path], None]:
    def write(store: Path) -> None:
        (store / name).write_text(text)
    return write


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "run file missing": (lambda s: (s / "runs" / "cpu-1207-decode.json").unlink(),
                         "there is no such file"),
    "file not indexed": (_write("runs/stray.json", dump_run("stray", RUN)),
                         "runs/stray.json: not in index.json"),
    "field missing": (_edit_index("command", None), "missing command"),
    "field empty": (_edit_index("card", " "), "missing card"),
    "unknown field": (_edit_index("notes", "x"), "unknown field 'notes'"),
    "bad date": (_edit_index("date", "7 Dec 2026"), "is not YYYY-MM-DD"),
    "bad commit": (_edit_index("commit", "HEAD"), "is not a hex commit id"),
    "bad peer": (_edit_index("peer", "upstream"), "is not one of pristine, patched"),
    "file named otherwise": (_edit_index("file", "runs/other.json"),
                             "file must be runs/cpu-1207-decode.json"),
    "run says another id": (_write("runs/cpu-1207-decode.json", dump_run("other", RUN)),
                            "says run 'other'"),
    "run pretty-printed": (_write("runs/cpu-1207-decode.json",
                                  json.dumps({"run": "cpu-1207-decode", "files": RUN}, indent=2)),
                           "not in the store's compact form"),
    "index pretty-printed": (_write("index.json",
                                    json.dumps({"format": 1, "runs": [ENTRY]}, indent=2)),
                             "not in the store's form"),
    "stray file in the store": (_write("notes.txt", "x"), "the store holds only"),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_the_check_finds_damage_to_the_store(tmp_path: Path, damage: str) -> None:
    store = _store(tmp_path)
    edit, expected = DAMAGE[damage]
    edit(store)
    problems = check_store(tmp_path)
    assert any(expected in problem for problem in problems), problems


def test_a_run_cited_but_not_stored_is_a_problem(tmp_path: Path) -> None:
    _store(tmp_path, cite="[a](results/runs/cpu-1207-decode.json) [b](results/runs/gone.json)")
    assert check_store(tmp_path) == [
        "docs/benchmarks.md: cites run gone, which the store lacks"]


def test_a_stored_run_that_backs_no_figure_is_a_problem(tmp_path: Path) -> None:
    _store(tmp_path, cite="no run cited")
    assert check_store(tmp_path) == [
        "run cpu-1207-decode: backs no figure of docs/benchmarks.md; remove it from the "
        "store (git keeps it)"]


def test_other_documents_cite_only_runs_the_reference_cites(tmp_path: Path) -> None:
    second = {**ENTRY, "id": "cpu-1207-edit", "file": "runs/cpu-1207-edit.json"}
    _store(tmp_path, entries=[dict(ENTRY), second])
    (tmp_path / "docs" / "dflash.md").write_text("see results/runs/cpu-1207-edit.json\n")
    (tmp_path / "README.md").write_text("see docs/results/runs/cpu-1207-decode.json\n")
    assert check_store(tmp_path) == [
        "run cpu-1207-edit: backs no figure of docs/benchmarks.md; remove it from the store "
        "(git keeps it)",
        "docs/dflash.md: cites run cpu-1207-edit, which docs/benchmarks.md does not: quote "
        "the reference instead"]


def test_add_stores_outputs_compactly_and_keeps_the_index_in_date_order(tmp_path: Path) -> None:
    _store(tmp_path)
    outputs = tmp_path / "out"
    outputs.mkdir()
    (outputs / "steps.txt").write_text("== raw default\n8 streams: 515.9 tok/s aggregate\n")
    (outputs / "run.json").write_text(json.dumps({"rows": [{"a": 1}]}, indent=2))
    earlier = {key: value for key, value in ENTRY.items() if key != "file"}
    earlier.update(id="h100-1205-raw", date="2026-12-05", card="NVIDIA H100 80GB HBM3",
                   peer="pristine")
    path = add_run(tmp_path, earlier, [outputs / "steps.txt", outputs / "run.json"])
    assert path == tmp_path / "docs" / "results" / "runs" / "h100-1205-raw.json"
    assert json.loads(path.read_text()) == {"run": "h100-1205-raw", "files": {
        "steps.txt": ["== raw default", "8 streams: 515.9 tok/s aggregate"],
        "run.json": {"rows": [{"a": 1}]}}}
    index = json.loads((tmp_path / "docs" / "results" / "index.json").read_text())
    assert [entry["id"] for entry in index["runs"]] == ["h100-1205-raw", "cpu-1207-decode"]
    (tmp_path / "docs" / "benchmarks.md").write_text(
        "results/runs/cpu-1207-decode.json results/runs/h100-1205-raw.json\n")
    assert check_store(tmp_path) == []


def test_add_refuses_a_run_it_cannot_index(tmp_path: Path) -> None:
    _store(tmp_path)
    output = tmp_path / "steps.txt"
    output.write_text("x\n")
    again = {key: value for key, value in ENTRY.items() if key != "file"}
    with pytest.raises(ConfigError, match=r"already in index\.json"):
        add_run(tmp_path, again, [output])
    with pytest.raises(ConfigError, match="missing machine"):
        add_run(tmp_path, {**again, "id": "cpu-1207-new", "machine": ""}, [output])
    assert not (tmp_path / "docs" / "results" / "runs" / "cpu-1207-new.json").exists()


def test_the_command_line_reports_and_fails_on_problems(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store(tmp_path)
    assert main(["check", "--root", str(tmp_path)]) == 0
    assert "results store: ok" in capsys.readouterr().out
    (tmp_path / "docs" / "results" / "runs" / "cpu-1207-decode.json").unlink()
    assert main(["check", "--root", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "there is no such file" in captured.err
    assert "1 problem(s)" in captured.out
