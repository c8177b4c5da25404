"""A test-only writer of TensorFlow's checkpoint format (tensor bundle V2), for checkpoints the tests
build on the fly: other configs, sizes, shard counts and damaged variants of google-research's layout.

Checked against TensorFlow's own reader once (tf.train.load_checkpoint read every tensor of a
two-shard checkpoint written here back bit for bit, TF 2.x, see tests/fixtures/tf_checkpoint/make.py
for the fixtures TensorFlow itself wrote). Not part of the package: albert-lm only reads the format.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np

_DTYPE = {
    np.dtype("float32"): 1,
    np.dtype("float64"): 2,
    np.dtype("int32"): 3,
    np.dtype("uint8"): 4,
    np.dtype("int8"): 6,
    np.dtype("int64"): 9,
    np.dtype("bool"): 10,
    np.dtype("float16"): 19,
}
_BFLOAT16 = 14
_MAGIC = 0xDB4775248B80FB57


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes | int) -> bytes:
    key = _varint(number << 3 | wire)
    if wire == 0:
        return key + _varint(int(payload))  # type: ignore[arg-type]
    if wire == 5:
        return key + struct.pack("<I", payload)
    return key + _varint(len(payload)) + payload  # type: ignore[arg-type, operator]


def _entry(dtype: int, shape: tuple[int, ...], shard: int, offset: int, size: int, crc: int) -> bytes:
    dims = b"".join(_field(2, 2, _field(1, 0, d % (1 << 64))) for d in shape)  # int64: -1 as 2^64 - 1
    out = _field(1, 0, dtype) + _field(2, 2, dims)
    if shard:
        out += _field(3, 0, shard)
    if offset:
        out += _field(4, 0, offset)
    return out + _field(5, 0, size) + _field(6, 5, crc)


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """One SSTable block, a restart point every 16 keys (LevelDB's default)."""
    out, restarts, last = bytearray(), [], b""
    for k, (key, value) in enumerate(entries):
        shared = 0
        if k % 16 == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        last = key
    out += b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))
    return bytes(out)


def _put_block(out: bytearray, contents: bytes) -> bytes:
    """Append a block with its trailer; returns its handle."""
    handle = _varint(len(out)) + _varint(len(contents))
    trailer = b"\x00" + struct.pack("<I", _mask(google_crc32c.value(contents + b"\x00")))
    out += contents + trailer
    return handle


def write_bundle(
    prefix: str | Path,
    tensors: dict[str, np.ndarray],
    num_shards: int = 1,
    *,
    bfloat16: Collection[str] = (),
    declare: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """`prefix`.index and `prefix`.data-*: tensor k goes to shard k % num_shards.

    `bfloat16`: names of float32 tensors stored as bfloat16 (their upper 16 bits, as TensorFlow does).
    `declare`: what the index says about a tensor where it differs from what was written, for damaged
    checkpoints: {name: {"shape": ..., "offset": ..., "size": ..., "shard": ..., "dtype": number}};
    the name "" declares the header's {"num_shards": ...}."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    declare = declare or {}
    header_shards = declare.get("", {}).get("num_shards", num_shards)
    entries = [(b"", _field(1, 0, header_shards) + _field(3, 2, _field(1, 0, 1)))]
    with contextlib.ExitStack() as stack:
        files = [
            stack.enter_context(open(f"{prefix}.data-{s:05d}-of-{num_shards:05d}", "wb"))
            for s in range(num_shards)
        ]
        for k, name in enumerate(sorted(tensors)):
            array = np.asarray(tensors[name]).copy(order="C")
            assert array.dtype in _DTYPE, f"{name}: {array.dtype} has no TensorFlow dtype number here"
            dtype = _DTYPE[array.dtype]
            if name in bfloat16:
                array, dtype = (array.astype("<f4").view("<u4") >> 16).astype("<u2"), _BFLOAT16
            data = array.tobytes()
            shard = k % num_shards
            offset = files[shard].tell()
            files[shard].write(data)
            said = {"dtype": dtype, "shape": array.shape, "shard": shard, "offset": offset, "size": len(data)}
            said.update(declare.get(name, {}))
            crc = _mask(google_crc32c.value(data))
            entries.append((name.encode(), _entry(**said, crc=crc)))
    out = bytearray()
    # Data blocks of up to 64 entries; the index block maps each block's last key to its handle.
    index = []
    for start in range(0, len(entries), 64):
        chunk = entries[start : start + 64]
        index.append((chunk[-1][0], _put_block(out, _block(chunk))))
    meta = _put_block(out, _block([]))
    index_handle = _put_block(out, _block(index))
    footer = meta + index_handle
    footer += b"\x00" * (40 - len(footer)) + struct.pack("<Q", _MAGIC)
    Path(f"{prefix}.index").write_bytes(bytes(out + footer))


def google_shapes(c: dict) -> dict[str, list[int]]:
    """google-research's variable names and shapes for config `c`."""
    v, e, h, i = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    out = {
        "bert/embeddings/word_embeddings": [v, e],
        "bert/embeddings/token_type_embeddings": [c["type_vocab_size"], e],
        "bert/embeddings/position_embeddings": [c["max_position_embeddings"], e],
        "bert/embeddings/LayerNorm/gamma": [e],
        "bert/embeddings/LayerNorm/beta": [e],
        "bert/encoder/embedding_hidden_mapping_in/kernel": [e, h],
        "bert/encoder/embedding_hidden_mapping_in/bias": [h],
        "bert/pooler/dense/kernel": [h, h],
        "bert/pooler/dense/bias": [h],
        "cls/predictions/transform/dense/kernel": [h, e],
        "cls/predictions/transform/dense/bias": [e],
        "cls/predictions/transform/LayerNorm/gamma": [e],
        "cls/predictions/transform/LayerNorm/beta": [e],
        "cls/predictions/output_bias": [v],
        "cls/seq_relationship/output_weights": [2, h],
        "cls/seq_relationship/output_bias": [2],
    }
    for g in range(c["num_hidden_groups"]):
        for j in range(c["inner_group_num"]):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{j}/"
            for qkv in ("query", "key", "value"):
                out[p + f"attention_1/self/{qkv}/kernel"] = [h, h]
                out[p + f"attention_1/self/{qkv}/bias"] = [h]
            out[p + "attention_1/output/dense/kernel"] = [h, h]
            out[p + "attention_1/output/dense/bias"] = [h]
            out[p + "LayerNorm/gamma"] = [h]
            out[p + "LayerNorm/beta"] = [h]
            out[p + "ffn_1/intermediate/dense/kernel"] = [h, i]
            out[p + "ffn_1/intermediate/dense/bias"] = [i]
            out[p + "ffn_1/intermediate/output/dense/kernel"] = [i, h]
            out[p + "ffn_1/intermediate/output/dense/bias"] = [h]
            out[p + "LayerNorm_1/gamma"] = [h]
            out[p + "LayerNorm_1/beta"] = [h]
    return out
