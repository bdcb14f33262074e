"""The results store: the raw runs behind docs/benchmarks.md, and the check that keeps it whole.

Layout (docs/results/README.md says the same for readers)::

    docs/results/index.json        {"format": 1, "runs": [entry, ...]}, one entry a line
    docs/results/runs/<id>.json    {"run": "<id>", "files": {"<name>": <content>, ...}}

An entry names its run (``id``), when and on what it ran (``date``, ``commit``,
``machine``, ``card``), what it measured (``subject``; ``scenario`` and ``peer`` where a
``lucerna bench`` scenario ran against llama-server), the ``command`` that reproduces it
and its ``file``. A run file holds each output the run wrote under its own name: a JSON
output as that JSON, a text output as its list of lines. Both files are written in one
canonical, compact form (``dump_index``, ``dump_run``), which ``check`` holds them to.

The reference cites runs as links to ``results/runs/<id>.json``; ``check`` also holds
the citations to the index: every run cited in docs/ or the README exists, every
indexed run backs a figure of docs/benchmarks.md, and the other documents cite only
runs the reference cites.

    python -m orchestrator.bench.results_store check
    python -m orchestrator.bench.results_store add --id ID --date D --commit C \\
        --machine M --card K --subject S --command CMD [--scenario N --peer P] OUTPUT...
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from daemons.paths import repo_root
from orchestrator.errors import ConfigError

__all__ = [
    "FORMAT",
    "OPTIONAL_FIELDS",
    "PEERS",
    "REQUIRED_FIELDS",
    "add_run",
    "check_store",
    "dump_index",
    "dump_run",
    "run_file_contents",
]

FORMAT = 1
REQUIRED_FIELDS = ("id", "date", "commit", "machine", "card", "subject", "command", "file")
OPTIONAL_FIELDS = ("scenario", "peer")
# The two llama-servers a figure may be measured against: built from the untouched pinned
# tree, as its users install it, or inside our patched engine's build directory.
PEERS = ("pristine", "patched")

_ID = re.compile(r"[a-z0-9][a-z0-9.-]*")
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_CITATION = re.compile(r"results/runs/([^/\s)\]#]+)\.json")
_STORE_NAMES = {"README.md", "index.json", "runs"}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def dump_index(entries: Sequence[dict[str, Any]]) -> str:
    """index.json's one form: one entry a line, so a new run is a one-line diff."""
    lines = [f'{{"format":{FORMAT},"runs":[']
    lines += [_compact(entry) + ("," if i < len(entries) - 1 else "")
              for i, entry in enumerate(entries)]
    return "\n".join([*lines, "]}"]) + "\n"


def dump_run(run_id: str, files: dict[str, Any]) -> str:
    """A run file's one form: each output on one line, none pretty-printed."""
    body = ",\n".join(f"{_compact(name)}:{_compact(content)}" for name, content in files.items())
    return f'{{"run":{_compact(run_id)},"files":{{\n{body}\n}}}}\n'


def run_file_contents(path: Path) -> Any:
    """What a run file keeps of one output: its JSON, or its text as lines."""
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        return json.loads(text)
    return text.splitlines()


def _entry_problems(entry: Any, where: str) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where}: an entry must be an object"]
    problems = [f"{where}: missing {name}" for name in REQUIRED_FIELDS
                if not isinstance(entry.get(name), str) or not entry[name].strip()]
    problems += [f"{where}: unknown field {name!r}" for name in entry
                 if name not in REQUIRED_FIELDS + OPTIONAL_FIELDS]
    if problems:
        return problems
    run_id = entry["id"]
    if not _ID.fullmatch(run_id):
        problems.append(f"{where}: id {run_id!r} must be lower-case letters, digits, . and -")
    try:
        datetime.date.fromisoformat(entry["date"])
    except ValueError:
        problems.append(f"{where}: date {entry['date']!r} is not YYYY-MM-DD")
    if not _COMMIT.fullmatch(entry["commit"]):
        problems.append(f"{where}: commit {entry['commit']!r} is not a hex commit id")
    if entry["file"] != f"runs/{run_id}.json":
        problems.append(f"{where}: file must be runs/{run_id}.json, not {entry['file']!r}")
    if "peer" in entry and entry["peer"] not in PEERS:
        problems.append(f"{where}: peer {entry['peer']!r} is not one of {', '.join(PEERS)}")
    if "scenario" in entry and not (isinstance(entry["scenario"], str) and entry["scenario"]):
        problems.append(f"{where}: scenario must be a scenario's name")
    return problems


def _run_file_problems(store: Path, entry: dict[str, Any]) -> list[str]:
    path = store / entry["file"]
    if not path.is_file():
        return [f"{entry['file']}: indexed as {entry['id']}, but there is no such file"]
    text = path.read_text()
    try:
        run = json.loads(text)
    except ValueError as exc:
        return [f"{entry['file']}: not JSON ({exc})"]
    if not isinstance(run, dict) or set(run) != {"run", "files"}:
        return [f"{entry['file']}: must hold exactly 'run' and 'files'"]
    if run["run"] != entry["id"]:
        return [f"{entry['file']}: says run {run['run']!r}, the index {entry['id']!r}"]
    if not isinstance(run["files"], dict) or not run["files"]:
        return [f"{entry['file']}: 'files' must name at least one output"]
    if text != dump_run(run["run"], run["files"]):
        return [f"{entry['file']}: not in the store's compact form (write it with dump_run)"]
    return []


def _load_index(store: Path) -> tuple[list[Any], list[str]]:
    path = store / "index.json"
    if not path.is_file():
        return [], [f"{path}: missing"]
    text = path.read_text()
    try:
        index = json.loads(text)
    except ValueError as exc:
        return [], [f"index.json: not JSON ({exc})"]
    if not isinstance(index, dict) or index.get("format") != FORMAT \
            or not isinstance(index.get("runs"), list):
        return [], [f'index.json: must be {{"format": {FORMAT}, "runs": [...]}}']
    problems = [] if text == dump_index(index["runs"]) else \
        ["index.json: not in the store's form (one entry a line; write it with dump_index)"]
    return index["runs"], problems


def _cited(documents: Iterable[Path]) -> dict[Path, set[str]]:
    return {doc: set(_CITATION.findall(doc.read_text())) for doc in documents if doc.is_file()}


def check_store(root: Path | None = None) -> list[str]:
    """Every problem of the store under ``root``'s docs/results, and of its citations."""
    root = root or repo_root()
    store = root / "docs" / "results"
    entries, problems = _load_index(store)
    ids: set[str] = set()
    for number, entry in enumerate(entries):
        where = f"index.json run {number + 1}" + (
            f" ({entry['id']})" if isinstance(entry, dict) and "id" in entry else "")
        entry_problems = _entry_problems(entry, where)
        problems += entry_problems
        if entry_problems:
            continue
        if entry["id"] in ids:
            problems.append(f"{where}: id {entry['id']} appears twice")
        ids.add(entry["id"])
        problems += _run_file_problems(store, entry)
    runs = store / "runs"
    on_disk = {p.relative_to(store).as_posix() for p in runs.rglob("*") if p.is_file()} \
        if runs.is_dir() else set()
    problems += [f"{name}: not in index.json" for name in
                 sorted(on_disk - {f"runs/{run_id}.json" for run_id in ids})]
    if store.is_dir():
        problems += [f"docs/results/{p.name}: the store holds only index.json, runs/ and "
                     "README.md" for p in sorted(store.iterdir()) if p.name not in _STORE_NAMES]
    return problems + _citation_problems(root, ids)


def _citation_problems(root: Path, ids: set[str]) -> list[str]:
    reference = root / "docs" / "benchmarks.md"
    documents = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    cited = _cited(documents)
    problems = [f"{doc.relative_to(root)}: cites run {run_id}, which the store lacks"
                for doc, runs in cited.items() for run_id in sorted(runs - ids)]
    in_reference = cited.get(reference, set())
    problems += [f"run {run_id}: backs no figure of docs/benchmarks.md; remove it from the "
                 "store (git keeps it)" for run_id in sorted(ids - in_reference)]
    problems += [f"{doc.relative_to(root)}: cites run {run_id}, which docs/benchmarks.md does "
                 "not: quote the reference instead" for doc, runs in cited.items()
                 if doc != reference for run_id in sorted(runs & ids - in_reference)]
    return problems


def add_run(root: Path, entry: dict[str, str], outputs: Sequence[Path]) -> Path:
    """Writes ``outputs`` as run ``entry['id']`` and indexes it; returns the run file."""
    store = root / "docs" / "results"
    entries, problems = _load_index(store) if (store / "index.json").is_file() else ([], [])
    entry = {**entry, "file": f"runs/{entry['id']}.json"}
    problems += _entry_problems(entry, f"run {entry['id']}")
    if any(isinstance(e, dict) and e.get("id") == entry["id"] for e in entries):
        problems.append(f"run {entry['id']}: already in index.json")
    names = [output.name for output in outputs]
    if not outputs or len(set(names)) != len(names):
        problems.append("give the run's outputs, each under a distinct file name")
    if problems:
        raise ConfigError("; ".join(problems))
    path = store / entry["file"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_run(entry["id"], {o.name: run_file_contents(o) for o in outputs}))
    ordered = sorted([*entries, entry], key=lambda e: (e["date"], e["id"]))
    (store / "index.json").write_text(dump_index(ordered))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.bench.results_store",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command_name", required=True)
    check = commands.add_parser("check", help="check docs/results and its citations")
    check.add_argument("--root", type=Path, default=None, help="the checkout (default: this)")
    add = commands.add_parser("add", help="store a run's outputs and index it")
    for name in REQUIRED_FIELDS[:-1]:
        add.add_argument(f"--{name}", required=True)
    for name in OPTIONAL_FIELDS:
        add.add_argument(f"--{name}")
    add.add_argument("--root", type=Path, default=None, help="the checkout (default: this)")
    add.add_argument("outputs", nargs="+", type=Path, help="the files the run wrote")
    args = parser.parse_args(argv)
    root = args.root or repo_root()
    if args.command_name == "check":
        problems = check_store(root)
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"results store: {len(problems)} problem(s)" if problems else "results store: ok")
        return 1 if problems else 0
    entry = {name: getattr(args, name) for name in REQUIRED_FIELDS[:-1] + OPTIONAL_FIELDS
             if getattr(args, name) is not None}
    try:
        path = add_run(root, entry, args.outputs)
    except ConfigError as exc:
        print(f"results store: {exc}", file=sys.stderr)
        return 2
    print(f"stored {path.relative_to(root)}; cite it as results/runs/{entry['id']}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
