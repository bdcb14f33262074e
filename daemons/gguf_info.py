"""What a GGUF file says about itself, read without loading weights.

``gguf.GGUFReader`` parses every tensor header and every array (262k vocabulary
strings for gemma3), which takes about 14 s on the default model. The front end
needs a handful of scalar keys before spawning a daemon, so this module walks the
key/value section once, skipping arrays by length, and stops before the tensors.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from gguf import GGUFValueType

from daemons.errors import ModelError

__all__ = ["GGUFInfo", "read_gguf_info", "read_gguf_scalars"]

_SCALAR_FORMATS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}

Scalar = int | float | bool | str


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    architecture: str
    name: str | None
    context_length: int | None
    chat_template: str | None
    size_bytes: int


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.offset = 0

    def unpack(self, fmt: str) -> tuple[object, ...]:
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += struct.calcsize(fmt)
        return values

    def u32(self) -> int:
        (value,) = struct.unpack_from("<I", self.data, self.offset)
        self.offset += 4
        return int(value)

    def u64(self) -> int:
        (value,) = struct.unpack_from("<Q", self.data, self.offset)
        self.offset += 8
        return int(value)

    def string(self) -> str:
        length = self.u64()
        raw = self.data[self.offset : self.offset + length]
        self.offset += length
        return raw.decode("utf-8", errors="replace")

    def skip_array(self) -> None:
        elem_type = GGUFValueType(self.u32())
        count = self.u64()
        if elem_type == GGUFValueType.STRING:
            for _ in range(count):
                length = self.u64()
                self.offset += length
        elif elem_type == GGUFValueType.ARRAY:
            for _ in range(count):
                self.skip_array()
        else:
            self.offset += count * struct.calcsize(_SCALAR_FORMATS[elem_type])


def read_gguf_scalars(path: Path) -> dict[str, Scalar]:
    """Every scalar key/value of a GGUF file (arrays are skipped)."""
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist")
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[:4] != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file (bad magic {data[:4]!r})")
            cur = _Cursor(data)
            cur.offset = 4
            version = cur.u32()
            if version < 2:
                raise ModelError(f"{path} is GGUF version {version}; only 2 and 3 are supported")
            cur.u64()  # tensor count
            n_kv = cur.u64()
            scalars: dict[str, Scalar] = {}
            for _ in range(n_kv):
                key = cur.string()
                value_type = GGUFValueType(cur.u32())
                if value_type == GGUFValueType.STRING:
                    scalars[key] = cur.string()
                elif value_type == GGUFValueType.ARRAY:
                    cur.skip_array()
                else:
                    (value,) = cur.unpack(_SCALAR_FORMATS[value_type])
                    scalars[key] = value  # type: ignore[assignment]
            return scalars
    except (struct.error, ValueError, OSError) as exc:
        raise ModelError(f"{path} is not a readable GGUF file: {exc}") from exc


def read_gguf_info(path: Path) -> GGUFInfo:
    """Read the metadata the front end needs (architecture, context, chat template)."""
    scalars = read_gguf_scalars(path)
    arch = scalars.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{path} has no general.architecture key; is it a model GGUF?")
    name = scalars.get("general.name")
    ctx = scalars.get(f"{arch}.context_length")
    template = scalars.get("tokenizer.chat_template")
    return GGUFInfo(
        path=path,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        context_length=int(ctx) if isinstance(ctx, int) and not isinstance(ctx, bool) else None,
        chat_template=template if isinstance(template, str) else None,
        size_bytes=path.stat().st_size,
    )
