"""Reading and writing weight files safely: safetensors first, pickles only through weights_only.

A checkpoint folder from transformers holds `model.safetensors` (or shards listed in
`model.safetensors.index.json`), or an older `pytorch_model.bin`. A `.bin` is a pickle: it is read
with `torch.load(weights_only=True)`, which refuses any object that is not a plain tensor, so a file
whose unpickling would run code fails here instead of running. Every failure names the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import pickle
import re
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError

from albert_lm.files import InputError, file_mode, output_target, read_json_object

if TYPE_CHECKING:
    import torch

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
NATIVE = "albert_lm.safetensors"  # albert-lm's own layout, for sharing transformers cannot express
CANDIDATES = (SAFETENSORS, SAFETENSORS_INDEX, NATIVE, PYTORCH_BIN)


def find_weights(folder: Path) -> Path:
    for name in CANDIDATES:
        if (folder / name).is_file():
            return folder / name
    exported = (folder / "model.onnx").is_file() or (folder / "onnx" / "model.onnx").is_file()
    hint = (
        "; it is an ONNX export (albert export): run it with ONNX Runtime, see docs/deploy.md"
        if exported
        else ""
    )
    raise FileNotFoundError(f"{folder}: no weights found (looked for {', '.join(CANDIDATES)}){hint}")


# What the safetensors library raises on a file it cannot read: its own error (a damaged or cut header,
# shapes whose size overflows, offsets past the end), or the system's.
_SAFETENSORS_ERRORS = (SafetensorError, OSError, ValueError, RuntimeError)


def _unreadable(file: Path, e: BaseException) -> ValueError:
    detail = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ValueError(f"{file}: not a readable safetensors file (truncated or corrupt?): {detail}")


_INDEX_BUFFERS = ("position_ids", "token_type_ids")


def check_tensors(state: dict[str, torch.Tensor], file: Path) -> dict[str, torch.Tensor]:
    """`state` as read from `file`, once every tensor is checked: a floating-point dtype (an integer or
    boolean weight is a file of something else) and every value finite. One NaN weight makes every
    answer NaN, which argmax then reads as class 0 and a JSON writer as a bare NaN; so a damaged or
    diverged model is refused here, where every model, head and checkpoint is read, naming the tensor."""
    for name, tensor in state.items():
        if name.endswith(_INDEX_BUFFERS) and not tensor.is_floating_point():
            continue  # transformers' position and token-type index buffers: integers by design, never read
        if not tensor.is_floating_point():
            raise ValueError(
                f"{file}: tensor {name} is {str(tensor.dtype).removeprefix('torch.')}, expected floating-point "
                "weights (float32, float16 or bfloat16): not a model's weights file, or a damaged one"
            )
        finite = tensor.isfinite()
        if not bool(finite.all()):
            bad = tensor.numel() - int(finite.sum())
            raise ValueError(
                f"{file}: tensor {name} has {bad} non-finite value{'s' if bad > 1 else ''} (NaN or "
                f"infinity) of {tensor.numel()}: a damaged file or a run that diverged; restore the "
                "file from a good copy or train again"
            )
    return state


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """Every tensor of one safetensors file, checked (`check_tensors`); a file the library cannot read is
    a ValueError naming it."""
    from safetensors.torch import load_file  # torch loads only where tensors are made (convert needs none)

    try:
        state = load_file(str(file), device="cpu")
    except _SAFETENSORS_ERRORS as e:
        raise _unreadable(file, e) from e
    return check_tensors(state, file)


def safetensors_names(file: Path) -> set[str]:
    """The tensor names of a safetensors file, from its header alone; a file the library cannot read is
    a ValueError naming it."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="numpy") as f:
            return set(f.keys())
    except _SAFETENSORS_ERRORS as e:
        raise _unreadable(file, e) from e


def read_weight_map(index: Path) -> dict[str, str]:
    """The tensor -> shard map of a sharded checkpoint's model.safetensors.index.json, checked: an object
    of names to file names beside the index, each of which exists."""
    weight_map = read_json_object(index, "weights index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in weight_map.items()
    ):
        raise InputError(index, "weight_map: expected an object of tensor name -> shard file name")
    for shard in sorted(set(weight_map.values())):
        if Path(shard).name != shard or shard in (".", ".."):
            raise InputError(index, f"weight_map: shard {shard!r} is not a file name in the index's folder")
        if not (index.parent / shard).is_file():
            raise FileNotFoundError(f"{index}: lists the shard {shard}, which is not in {index.parent}")
    return weight_map


def _read_bin(file: Path) -> dict[str, torch.Tensor]:
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(
            f"{file}: refused to load: the pickle holds objects other than tensors (loading it could run "
            f"code). Convert it to safetensors with a tool you trust. Detail: {str(e).splitlines()[0]}"
        ) from e
    except (RuntimeError, EOFError, OSError) as e:
        raise ValueError(f"{file}: not a readable PyTorch checkpoint (truncated or corrupt?): {e}") from e
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{file}: expected a dict of tensors (a state dict)")
    return state


def read_weights(folder: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of a checkpoint folder (shards merged) and the file they came from."""
    file = find_weights(Path(folder))
    if file.name == SAFETENSORS_INDEX:
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(read_weight_map(file).values())):
            state.update(read_safetensors(file.parent / shard))
        return state, file
    if file.suffix == ".bin":
        return check_tensors(_read_bin(file), file), file
    return read_safetensors(file), file


def write_weights(file: Path, state: dict[str, torch.Tensor]) -> None:
    """Write safetensors atomically: a temporary file beside `file`, renamed over it once complete.

    The header's metadata is {"format": "pt"} alone (what transformers checks): safetensors writes the
    metadata from a hash map, in an order that changes from one process to the next, so a second key
    would make two identical runs write files that differ in their bytes.

    `safetensors.torch.save` could hand its bytes to `albert_lm.files.atomic_write`, but it builds the
    whole file in memory first (a second copy of the model: 0.9 GB for albert-xxlarge in fp32), while
    `save_file` writes straight from the tensors to a path; so the temporary name is made here, in
    atomic_write's pattern.
    """
    from safetensors.torch import save_file

    file = output_target(file)[0]  # a link is written through, never replaced
    file.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    tmp = file.with_name(f".{file.name}.{secrets.token_hex(4)}.tmp")
    try:
        save_file(tensors, tmp, metadata={"format": "pt"})
        os.chmod(tmp, file_mode())  # safetensors creates it private (0600); give it what open() would
        os.replace(tmp, file)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, SafetensorError | OSError):
            raise _write_failed(file, e) from e
        raise


def _write_failed(file: Path, e: BaseException) -> OSError:
    """A failed write of `file` as an OSError naming it and the system's reason (a file-size limit, a full
    disk): the safetensors library reports these as its own error, with the errno only in its text."""
    found = re.search(r"os error (\d+)", str(e))
    code = getattr(e, "errno", None) or (int(found.group(1)) if found else None)
    reason = os.strerror(code) if code else (str(e).splitlines() or [type(e).__name__])[0]
    return OSError(code or errno.EIO, f"writing the weights failed: {reason}", str(file))


def _write_rows(f: Any, array: np.ndarray, chunk_bytes: int = 1 << 24) -> None:
    """`array`'s bytes in row-major order, a few MiB at a time: a transposed view is written without a
    contiguous copy of the whole tensor."""
    if array.ndim < 2 or array.flags.c_contiguous:
        f.write(np.ascontiguousarray(array).data.cast("B"))
        return
    rows = max(1, chunk_bytes // (array[0].nbytes or 1))
    for start in range(0, array.shape[0], rows):
        f.write(np.ascontiguousarray(array[start : start + rows]).data.cast("B"))


def stream_safetensors(
    file: Path,
    shapes: dict[str, tuple[int, ...]],
    arrays: Iterator[np.ndarray],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write float32 tensors into a safetensors file one at a time, as `arrays` yields them (in the order
    of `shapes`), so a model larger than memory converts.

    Written by hand because the safetensors library saves only from a complete dict of tensors; the
    format is its documented one (an 8-byte little-endian header length, a JSON header of names, dtypes,
    shapes and byte ranges padded to 8 bytes, then the bytes). Atomic like `write_weights`.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    file = output_target(file)[0]  # a link is written through, never replaced
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f".{file.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for name, shape in shapes.items():
                array = next(arrays)  # the previous tensor is released by now: one in memory at a time
                if array.shape != tuple(shape) or array.dtype != np.float32:
                    raise ValueError(
                        f"{name}: got {array.dtype} {array.shape}, expected float32 {tuple(shape)}"
                    )
                _write_rows(f, array)
                del array
        os.chmod(tmp, file_mode())
        os.replace(tmp, file)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise _write_failed(file, e) from e
        raise
