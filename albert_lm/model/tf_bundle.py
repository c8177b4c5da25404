"""A reader of TensorFlow's checkpoint format (the "tensor bundle", V2), with numpy and nothing else.

Written by hand because no maintained library reads it without TensorFlow: tensorstore has no driver
for it, transformers 5 dropped its TF loaders, and the one PyPI reader is unmaintained. The format is
small and frozen since TF 1.x (tensorflow/core/util/tensor_bundle):

- `PREFIX.index` is a LevelDB-style sorted table (SSTable), written uncompressed: data blocks of
  prefix-compressed key/value entries, an index block pointing at them, and a 48-byte footer
  (two block handles, the magic 0xdb4775248b80fb57). Every block ends with a type byte and the masked
  CRC-32C of its bytes.
- Key "" holds a BundleHeaderProto (number of data shards, endianness); every other key is a tensor
  name whose value is a BundleEntryProto: dtype, shape, shard, offset and size of its bytes in
  `PREFIX.data-SSSSS-of-NNNNN`, and the masked CRC-32C of those bytes.
- Tensor bytes are the raw little-endian array, row-major.

The two protobuf messages are read with the few lines of wire-format decoding below rather than
generated code: their field numbers are all this needs. Every problem (missing file, bad magic, a block
or tensor whose checksum does not match, a truncated data file, an entry whose shape, size or offset
cannot be true) is a `CheckpointError` naming the file, and the tensor where there is one. The index is
checked whole when the bundle is opened, so a hostile entry (a shape of 10^12 elements, bytes past the
end of the data file) is refused before any array is allocated.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import google_crc32c
import numpy as np

__all__ = ["CheckpointError", "TensorBundle", "TensorEntry", "data_file", "read_index", "shard_ends"]

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48
# An index holds ~100 bytes per tensor (albert-xxlarge's, slots included, is under 100 KB): a bigger file
# is not an index, and reading it whole would only fill memory.
MAX_INDEX_BYTES = 256 << 20
_MASK_DELTA = 0xA282EAD8
# TensorFlow's DataType enum -> numpy (little-endian). bfloat16 is read as its 16 bits and widened.
_DTYPES: dict[int, tuple[str, np.dtype]] = {
    1: ("float32", np.dtype("<f4")),
    2: ("float64", np.dtype("<f8")),
    3: ("int32", np.dtype("<i4")),
    4: ("uint8", np.dtype("u1")),
    5: ("int16", np.dtype("<i2")),
    6: ("int8", np.dtype("i1")),
    9: ("int64", np.dtype("<i8")),
    10: ("bool", np.dtype("?")),
    14: ("bfloat16", np.dtype("<u2")),
    19: ("float16", np.dtype("<f2")),
}
_DTYPE_NAMES = {7: "string", 8: "complex64", 18: "complex128", 20: "resource", 21: "variant"}


class CheckpointError(ValueError):
    """A TensorFlow checkpoint that cannot be read: names the file and what is wrong."""

    def __init__(self, path: str | os.PathLike, message: str) -> None:
        super().__init__(f"{path}: {message}")


def _mask(crc: int) -> int:
    """TensorFlow's (and LevelDB's) masked CRC: rotated and offset, so a CRC of CRCs stays strong."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _crc32c(data: bytes | memoryview, chunk: int = 1 << 24) -> int:
    """CRC-32C of `data`; a memoryview (an array's bytes) goes in pieces of `chunk` bytes, since the
    library takes only bytes and a whole-tensor copy would double the memory a tensor needs."""
    if isinstance(data, bytes):
        return int(google_crc32c.value(data))
    crc = 0
    for start in range(0, len(data), chunk):
        crc = google_crc32c.extend(crc, bytes(data[start : start + chunk]))
    return int(crc)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A protobuf/LevelDB base-128 varint at `pos`: (value, position after it)."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The (field number, value) pairs of a protobuf message: ints for varint and fixed fields,
    bytes for length-delimited ones."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 1:
            yield number, struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 5:
            yield number, struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            yield number, buf[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _nested(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("a number where a nested message belongs")
    return value


@dataclass(frozen=True)
class TensorEntry:
    """Where one tensor lives: BundleEntryProto's fields."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    sliced: bool  # a partitioned variable: stored in slices, which this reader does not join


def _int(value: int | bytes) -> int:
    if isinstance(value, bytes):
        raise ValueError("a nested message where a number belongs")
    return value


def _entry(name: str, value: bytes) -> TensorEntry:
    dtype_id, shard, offset, size, crc, sliced = 0, 0, 0, 0, 0, False
    shape: list[int] = []
    for number, v in _fields(value):
        if number == 1:
            dtype_id = _int(v)
        elif number == 2:  # TensorShapeProto: repeated Dim dim = 2 {int64 size = 1}
            for n, dim in _fields(_nested(v)):
                if n == 2:
                    size_of = [_int(s) for m, s in _fields(_nested(dim)) if m == 1]
                    shape.append(size_of[0] if size_of else 0)
                    if shape[-1] >= 1 << 63:  # an int64 below zero: TensorFlow's "unknown" size
                        raise ValueError(f"dimension {shape[-1] - (1 << 64)} in its shape")
        elif number == 3:
            shard = _int(v)
        elif number == 4:
            offset = _int(v)
        elif number == 5:
            size = _int(v)
        elif number == 6:
            crc = _int(v)
        elif number == 7:
            sliced = True
    dtype = _DTYPES[dtype_id][0] if dtype_id in _DTYPES else _DTYPE_NAMES.get(dtype_id, f"dtype #{dtype_id}")
    return TensorEntry(name, dtype, tuple(shape), shard, offset, size, crc, sliced)


def _numpy_dtype(entry: TensorEntry) -> np.dtype | None:
    """The numpy dtype `entry`'s bytes are read as; None for what is not an array of numbers."""
    return next((d for n, d in _DTYPES.values() if n == entry.dtype), None)


def _check_entry(index: Path, entry: TensorEntry, num_shards: int) -> None:
    """An entry whose shard, shape and size agree: checked when the index is read, so that reading
    the tensor allocates no more than the data file holds for it."""
    if not 0 <= entry.shard < num_shards:
        raise CheckpointError(index, f"tensor {entry.name!r} in shard {entry.shard} of {num_shards}")
    dtype = _numpy_dtype(entry)
    if entry.sliced or dtype is None:  # refused by name when read
        return
    count = math.prod(entry.shape)
    if count * dtype.itemsize != entry.size:
        raise CheckpointError(
            index,
            f"tensor {entry.name!r} declares shape {entry.shape} {entry.dtype} ({count:,} values, "
            f"{count * dtype.itemsize:,} bytes) but {entry.size:,} bytes of data: a damaged index",
        )


def read_index(index: Path) -> tuple[int, dict[str, TensorEntry]]:
    """The number of data shards and every entry (tensor name -> TensorEntry) of the index file `index`,
    each entry checked; the data files are not looked at."""
    if not index.is_file():
        raise CheckpointError(index, "missing: a TensorFlow checkpoint is PREFIX.index + PREFIX.data-*")
    if index.stat().st_size > MAX_INDEX_BYTES:
        raise CheckpointError(index, f"{index.stat().st_size:,} bytes: too big for a checkpoint index")
    try:
        raw = index.read_bytes()
    except OSError as e:
        raise CheckpointError(index, f"cannot read: {e.strerror or e}") from e
    try:
        table = dict(_read_table(raw, index))
        header = table.pop(b"", None)
        head = dict(_fields(header or b""))
        num_shards, big_endian = _int(head.get(1, 1)), _int(head.get(2, 0))
    except CheckpointError:
        raise
    except (ValueError, struct.error, IndexError) as e:
        raise CheckpointError(index, f"not a TensorFlow checkpoint index (damaged?): {e}") from e
    if header is None:
        raise CheckpointError(index, "no bundle header (is this a TF1 V1 checkpoint? only V2 is read)")
    if big_endian:
        raise CheckpointError(index, "written big-endian; only little-endian checkpoints are read")
    if num_shards < 1:
        raise CheckpointError(index, f"the header declares {num_shards} data shards")
    entries: dict[str, TensorEntry] = {}
    for key, value in table.items():
        name = key.decode("utf-8", errors="replace")
        try:
            entries[name] = _entry(name, value)
        except (ValueError, struct.error) as e:
            raise CheckpointError(index, f"damaged entry for tensor {name!r}: {e}") from e
        _check_entry(index, entries[name], num_shards)
    return num_shards, entries


def shard_ends(entries: dict[str, TensorEntry]) -> dict[int, TensorEntry]:
    """For each data shard the entries use, the entry that reaches furthest into it: the shard's data
    file must hold at least `offset + size` of that entry's bytes."""
    last: dict[int, TensorEntry] = {}
    for entry in entries.values():
        now = last.get(entry.shard)
        if now is None or entry.offset + entry.size > now.offset + now.size:
            last[entry.shard] = entry
    return last


def data_file(prefix: Path, shard: int, num_shards: int) -> Path:
    return prefix.with_name(f"{prefix.name}.data-{shard:05d}-of-{num_shards:05d}")


class TensorBundle:
    """A checkpoint opened by its prefix (`.../model.ckpt-best`): the index read and checked at once,
    tensors read one at a time with `read(name)`, each checked against its CRC-32C.

    >>> bundle = TensorBundle("albert_base/model.ckpt-best")
    >>> bundle.entries["bert/embeddings/word_embeddings"].shape
    (30000, 128)
    """

    def __init__(self, prefix: str | os.PathLike) -> None:
        self.prefix = Path(prefix)
        self.index = self.prefix.with_name(self.prefix.name + ".index")
        self.num_shards, self.entries = read_index(self.index)
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Every shard the index uses present and long enough for the tensors it puts there."""
        for shard, entry in sorted(shard_ends(self.entries).items()):
            file = data_file(self.prefix, shard, self.num_shards)
            if not file.is_file():
                raise CheckpointError(file, "missing data shard")
            size, end = file.stat().st_size, entry.offset + entry.size
            if size < end:
                raise CheckpointError(
                    file,
                    f"truncated: {size:,} bytes, but the index puts tensor {entry.name!r} at bytes "
                    f"{entry.offset:,}..{end:,}",
                )

    def data_file(self, name: str) -> Path:
        """The data file holding tensor `name`."""
        return data_file(self.prefix, self.entries[name].shard, self.num_shards)

    def verify(self, name: str) -> None:
        """Check tensor `name`'s bytes against its CRC-32C without keeping them (for tensors skipped)."""
        entry = self.entries[name]
        file = self.data_file(name)
        crc, left = 0, entry.size
        try:
            with open(file, "rb") as f:
                f.seek(entry.offset)
                while left:
                    chunk = f.read(min(left, 1 << 24))
                    if not chunk:
                        raise CheckpointError(file, f"truncated: tensor {name!r} runs past the end")
                    crc = google_crc32c.extend(crc, chunk)
                    left -= len(chunk)
        except OSError as e:
            raise CheckpointError(file, f"cannot read: {e.strerror or e}") from e
        if _mask(crc) != entry.crc32c:
            raise CheckpointError(file, f"checksum mismatch in tensor {name!r} (the file is damaged)")

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` as a numpy array (bfloat16 widened to float32), its checksum verified."""
        entry = self.entries[name]
        file = self.data_file(name)
        dtype = _numpy_dtype(entry)
        if entry.sliced:
            raise CheckpointError(
                self.index, f"tensor {name!r} is stored in slices (a partitioned variable): not supported"
            )
        if dtype is None:
            raise CheckpointError(
                self.index, f"tensor {name!r} has dtype {entry.dtype}, which is not an array of numbers"
            )
        # read straight into the array: no second copy of the bytes (the index vouched for the size)
        array = np.empty(math.prod(entry.shape), dtype=dtype)
        try:
            with open(file, "rb") as f:
                f.seek(entry.offset)
                got = f.readinto(array.data.cast("B"))
        except OSError as e:
            raise CheckpointError(file, f"cannot read: {e.strerror or e}") from e
        if got != entry.size:
            raise CheckpointError(
                file, f"truncated: tensor {name!r} needs bytes {entry.offset}..{entry.offset + entry.size}"
            )
        if _mask(_crc32c(array.data.cast("B"))) != entry.crc32c:
            raise CheckpointError(file, f"checksum mismatch in tensor {name!r} (the file is damaged)")
        array = array.reshape(entry.shape)
        if entry.dtype == "bfloat16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array


# ----------------------------------------------------------------- the SSTable (LevelDB's format)
def _block(raw: bytes, offset: int, size: int, index: Path) -> bytes:
    """The contents of the block at (offset, size), its trailer's type and checksum checked."""
    if offset + size + 5 > len(raw):
        raise CheckpointError(index, f"truncated: a block at {offset} runs past the end of the file")
    contents = raw[offset : offset + size]
    kind = raw[offset + size]
    (stored,) = struct.unpack_from("<I", raw, offset + size + 1)
    if _mask(_crc32c(raw[offset : offset + size + 1])) != stored:
        raise CheckpointError(index, f"checksum mismatch in the block at byte {offset} (the file is damaged)")
    if kind != 0:
        raise CheckpointError(
            index, f"block at byte {offset} is compressed (type {kind}); TensorFlow writes them plain"
        )
    return contents


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """A block's (key, value) pairs; keys are stored as (shared prefix length, the rest)."""
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise ValueError("bad restart count")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise ValueError("entry runs past its block")
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + length]
        pos += length


def _handle(buf: bytes, pos: int = 0) -> tuple[int, int, int]:
    offset, pos = _varint(buf, pos)
    size, pos = _varint(buf, pos)
    return offset, size, pos


def _read_table(raw: bytes, index: Path) -> Iterator[tuple[bytes, bytes]]:
    if len(raw) < _FOOTER:
        raise CheckpointError(index, f"too short ({len(raw)} bytes) to be a checkpoint index")
    footer = raw[-_FOOTER:]
    (magic,) = struct.unpack_from("<Q", footer, _FOOTER - 8)
    if magic != _MAGIC:
        raise CheckpointError(
            index, f"wrong magic number {magic:#018x} (expected {_MAGIC:#018x}): not a checkpoint index"
        )
    _, _, pos = _handle(footer)  # the metaindex block: empty in tensor bundles
    offset, size, _ = _handle(footer, pos)
    for _, value in _block_entries(_block(raw, offset, size, index)):
        data_offset, data_size, _ = _handle(value)
        yield from _block_entries(_block(raw, data_offset, data_size, index))
