"""read_gguf(path): a GGUF file's metadata as Python values and its tensors as views of the mapped file.

The gguf package's GGUFReader makes a few numpy views per string of every metadata array, so a
150k-token vocabulary (tokens + merges: ~300k strings) costs it tens of seconds, and its memmap
views slow dequantisation down. Here a string array is one loop over plain bytes (struct offsets
and one decode per string), numeric arrays are one np.frombuffer, and tensor data are ndarray views
(not memmap) of one read-only mapping, shaped as GGUFReader shapes them (so that gguf.quants and
loader.py take either). `types` keeps each key's GGUF value type, so that a copy of the file can
be written back through gguf.GGUFWriter.add_key_value with the same types.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
)

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# GGUF value types (gguf.GGUFValueType) -> numpy dtype; 8 is a string, 9 an array
_SCALARS = {
    0: np.uint8,
    1: np.int8,
    2: np.uint16,
    3: np.int16,
    4: np.uint32,
    5: np.int32,
    6: np.float32,
    7: np.bool_,
    10: np.uint64,
    11: np.int64,
    12: np.float64,
}
_STRING, _ARRAY = 8, 9
# tensor types stored as plain numbers (GGUFReader's dtypes); every other type is blocks of uint8
_PLAIN = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


class CutShort(ValueError):
    """The file ends before the bytes its own header promises (an interrupted download or copy)."""

    def __init__(self, what: str, end: int, size: int):
        super().__init__(f"it has {size:,} bytes, but {what} ends at byte {end:,}")


def _past_end(what: str, end: int, size: int) -> ValueError:
    if end > 1 << 42:  # no model file is this large: a garbage length, not a file cut short
        return ValueError(f"{what} would end at byte {end:,}: the file is corrupt")
    return CutShort(what, end, size)


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]  # GGUF order: ne0 (a row's length) first
    data: np.ndarray  # numbers in numpy order, or [..., row bytes] uint8 blocks


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    fields: dict[str, Any]  # key -> int / float / bool / str / list (GGUFReader's contents())
    tensors: dict[str, GGUFTensor]  # in file order
    # key -> (vtype, an array's sub_type)
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]]

    def get(self, key: str, default=None):
        return self.fields.get(key, default)


class _Cursor:
    """Reads little-endian GGUF values from a buffer, advancing an offset."""

    def __init__(self, buf):
        self.buf, self.off = buf, 0

    def need(self, n: int, what: str) -> None:
        if self.off + n > len(self.buf):
            raise _past_end(what, self.off + n, len(self.buf))

    def u32(self) -> int:
        self.need(4, "the header")
        (v,) = _U32.unpack_from(self.buf, self.off)
        self.off += 4
        return v

    def u64(self) -> int:
        self.need(8, "the header")
        (v,) = _U64.unpack_from(self.buf, self.off)
        self.off += 8
        return v

    def string(self) -> str:
        n = self.u64()
        self.need(n, "a metadata string")
        s = str(self.buf[self.off : self.off + n], "utf-8")
        self.off += n
        return s

    def strings(self, count: int) -> list[str]:
        # the hot loop (a vocabulary's tokens and merges): locals only, no numpy per string
        buf, off, unpack, end = self.buf, self.off, _U64.unpack_from, len(self.buf)
        out = [""] * count
        for i in range(count):
            if off + 8 > end:
                raise _past_end("a metadata string array", off + 8, end)
            (n,) = unpack(buf, off)
            off += 8
            if off + n > end:
                raise _past_end("a metadata string array", off + n, end)
            out[i] = str(buf[off : off + n], "utf-8")
            off += n
        self.off = off
        return out

    def value(self, kind: int):
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            sub, count = self.u32(), self.u64()
            if sub == _STRING:
                return self.strings(count)
            if sub == _ARRAY:
                return [self.value(_ARRAY) for _ in range(count)]
            dtype = np.dtype(_SCALARS[sub])
            self.need(dtype.itemsize * count, "a metadata array")
            a = np.frombuffer(self.buf, dtype.newbyteorder("<"), count, self.off)
            self.off += a.nbytes
            return a.tolist()
        dtype = np.dtype(_SCALARS[kind])
        self.need(dtype.itemsize, "the header")
        v = np.frombuffer(self.buf, dtype.newbyteorder("<"), 1, self.off)[0].item()
        self.off += dtype.itemsize
        return v


def read_gguf(path: str | Path) -> GGUFFile:
    """Parse `path` (ValueError / KeyError / struct.error on a file that is not a complete GGUF)."""
    path = Path(path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    c = _Cursor(mapped)
    if c.u32() != GGUF_MAGIC:
        raise ValueError("GGUF magic invalid")
    version = c.u32()
    if version & 0xFFFF == 0:
        raise ValueError("the file is a big-endian GGUF, which paraspec does not read")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} is not 2 or 3")
    n_tensors, n_fields = c.u64(), c.u64()
    fields: dict[str, Any] = {}
    types: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = {}
    for _ in range(n_fields):
        key = c.string()
        if key in fields:
            raise KeyError(f"duplicate metadata key {key!r}")
        kind = c.u32()
        sub = _U32.unpack_from(mapped, c.off)[0] if kind == _ARRAY else None
        fields[key] = c.value(kind)
        types[key] = (GGUFValueType(kind), None if sub is None else GGUFValueType(sub))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        dims = tuple(c.u64() for _ in range(c.u32()))
        infos.append((name, dims, GGMLQuantizationType(c.u32()), c.u64()))
    align = fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise ValueError(f"general.alignment {align!r} is not a power of two")
    start = -(-c.off // align) * align
    tensors: dict[str, GGUFTensor] = {}
    for name, dims, kind, offset in infos:
        if name in tensors:
            raise ValueError(f"duplicate tensor {name!r}")
        tensors[name] = GGUFTensor(
            name, kind, dims, _data(mapped, start + offset, dims, kind, name)
        )
    return GGUFFile(path, fields, tensors, types)


def _data(
    buf, offset: int, dims: tuple[int, ...], kind: GGMLQuantizationType, name: str
) -> np.ndarray:
    shape = tuple(reversed(dims))
    n = int(np.prod(dims, dtype=np.int64))
    if kind.name in _PLAIN:
        dtype = np.dtype(_PLAIN[kind.name]).newbyteorder("<")
        _within(buf, offset + n * dtype.itemsize, name)
        return np.frombuffer(buf, dtype, n, offset).reshape(shape)
    block, size = GGML_QUANT_SIZES[kind]
    if shape[-1] % block:
        raise ValueError(
            f"tensor rows of {shape[-1]} values are not whole {kind.name} blocks of {block}"
        )
    _within(buf, offset + n // block * size, name)
    return np.frombuffer(buf, np.uint8, n // block * size, offset).reshape(
        *shape[:-1], shape[-1] // block * size
    )


def _within(buf, end: int, name: str) -> None:
    if end > len(buf):
        raise _past_end(f"tensor {name!r}", end, len(buf))
