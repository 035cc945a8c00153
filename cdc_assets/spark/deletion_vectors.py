"""Delta Lake deletion vectors as the protocol defines them, read and written without Spark.

A deletion vector marks rows of one data file as deleted by their position (row index) in it.
Its descriptor in the log (``add.deletionVector``) says where its bytes are:

- ``storageType`` ``u``: in the file ``<table>/<prefix>deletion_vector_<uuid>.bin``, where
  ``pathOrInlineDv`` is the prefix followed by the UUID in 20 Z85 characters; ``offset`` is the
  vector's position in that file;
- ``i``: inline, ``pathOrInlineDv`` is the Z85 text of the serialized vector;
- ``p``: in the file at the absolute path ``pathOrInlineDv``, at ``offset``.

The serialized vector is a *RoaringBitmapArray* in its portable form: the magic number
``1681511377`` (int32, little endian) followed by a 64-bit Roaring bitmap in the portable
format (``pyroaring.BitMap64.serialize``). A vector file is a format byte (1), then per vector
its size (int32, big endian), its bytes and their CRC-32 (int32, big endian). Spark's Delta
writes exactly this (checked byte for byte in the tests), so Spark, DuckDB and any Delta reader
read what is written here.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pyroaring import BitMap64

PORTABLE_MAGIC = 1681511377
FILE_FORMAT_VERSION = 1
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(Z85)}
UUID_CHARS = 20  # a 16-byte UUID in Z85


def z85_encode(data: bytes) -> str:
    """``data`` (a multiple of 4 bytes) in Z85 (big-endian 4-byte groups, 5 characters each)."""
    if len(data) % 4:
        raise ValueError("Z85 encodes multiples of 4 bytes")
    out = []
    for (word,) in struct.iter_unpack(">I", data):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise ValueError("Z85 text comes in groups of 5 characters")
    out = bytearray()
    for i in range(0, len(text), 5):
        word = 0
        for c in text[i : i + 5]:
            word = word * 85 + _Z85_VALUE[c]
        out += struct.pack(">I", word)
    return bytes(out)


def serialize(rows: BitMap64) -> bytes:
    """The deleted row positions as a portable RoaringBitmapArray."""
    return struct.pack("<i", PORTABLE_MAGIC) + rows.serialize()


def deserialize(data: bytes) -> BitMap64:
    (magic,) = struct.unpack_from("<i", data)
    if magic != PORTABLE_MAGIC:
        raise ValueError(f"not a portable RoaringBitmapArray (magic {magic})")
    return BitMap64.deserialize(data[4:])


def vector_file(table: Path, path_or_inline: str) -> Path:
    """The file of a ``u`` descriptor: its prefix directory, then the UUID's file name."""
    prefix, encoded = path_or_inline[:-UUID_CHARS], path_or_inline[-UUID_CHARS:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return table / prefix / name if prefix else table / name


def read(table: Path, descriptor: Mapping[str, Any] | None) -> BitMap64:
    """The rows ``descriptor`` marks deleted (none for a file without a vector)."""
    if not descriptor:
        return BitMap64()
    kind, where = descriptor["storageType"], descriptor["pathOrInlineDv"]
    size = int(descriptor["sizeInBytes"])
    if kind == "i":
        return deserialize(z85_decode(where)[:size])
    if kind == "u":
        path = vector_file(table, where)
    elif kind == "p":
        path = Path(unquote(where.removeprefix("file:")))
    else:
        raise ValueError(f"unknown deletion vector storage type {kind!r}")
    with open(path, "rb") as f:
        f.seek(int(descriptor.get("offset") or 0))
        (stored_size,) = struct.unpack(">i", f.read(4))
        data = f.read(stored_size)
        (checksum,) = struct.unpack(">I", f.read(4))
    if stored_size != size or zlib.crc32(data) != checksum:
        raise ValueError(f"deletion vector in {path} does not match its descriptor or checksum")
    return deserialize(data)


def write(table: Path, vectors: Sequence[BitMap64]) -> list[dict[str, Any]]:
    """``vectors`` in one new file under ``table``; their descriptors, in the same order."""
    file_id = uuid.uuid4()
    body = bytearray([FILE_FORMAT_VERSION])
    descriptors = []
    for rows in vectors:
        data = serialize(rows)
        descriptors.append(
            {
                "storageType": "u",
                "pathOrInlineDv": z85_encode(file_id.bytes),
                "offset": len(body),
                "sizeInBytes": len(data),
                "cardinality": len(rows),
            }
        )
        body += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    if vectors:
        path = table / f"deletion_vector_{file_id}.bin"
        with open(path, "xb") as f:
            f.write(body)
    return descriptors


def unique_id(descriptor: Mapping[str, Any] | None) -> str | None:
    """What tells two vectors of the same file apart (with the path, a file action's key)."""
    if not descriptor:
        return None
    offset = descriptor.get("offset")
    text = f"{descriptor['storageType']}{descriptor['pathOrInlineDv']}"
    return f"{text}@{offset}" if offset is not None else text
