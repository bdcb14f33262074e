"""The include lines of native/src keep its layers pointing down (native/CMakeLists.txt).

wire/ (the protocol's bytes) includes nothing from the other folders, so it stays
testable on bytes alone; engine/ (the model at work) includes wire/ and the engine's
headers but never commands/ or daemon/, which sit on top of it. A project include is
`#include "folder/file.h"`; system and engine headers ("llama.h", <vector>) name no
folder of ours and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.native.sources import NATIVE_SRC

FOLDERS = ("wire", "engine", "commands", "daemon", "apps", "mkmodels")
# What each lower layer may include besides itself.
ALLOWED = {"wire": {"wire"}, "engine": {"wire", "engine"}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(\w+)/', re.M)


def project_includes(path: Path) -> list[str]:
    """The folders of our own headers that `path` includes."""
    return [folder for folder in INCLUDE.findall(path.read_text()) if folder in FOLDERS]


def sources_of(layer: str) -> list[Path]:
    files = sorted(p for p in (NATIVE_SRC / layer).iterdir() if p.suffix in (".h", ".cpp"))
    assert files, f"native/src/{layer} has no sources"
    return files


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_lower_layers_include_nothing_above(layer: str) -> None:
    wrong = [
        f"native/src/{layer}/{path.name} includes {folder}/"
        for path in sources_of(layer)
        for folder in project_includes(path)
        if folder not in ALLOWED[layer]
    ]
    assert not wrong, "\n".join(wrong)


def test_the_scan_sees_includes(tmp_path: Path) -> None:
    sample = tmp_path / "x.cpp"
    sample.write_text('#include "engine/log.h"\n#include <vector>\n#include "llama.h"\n'
                      '# include "daemon/x.h"\n')
    assert project_includes(sample) == ["engine", "daemon"]
