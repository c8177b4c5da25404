"""Reading and writing weight files safely: safetensors first, pickles only through weights_only.

A checkpoint folder from transformers holds `model.safetensors` (or shards listed in
`model.safetensors.index.json`), or an older `pytorch_model.bin`. A `.bin` is a pickle: it is read
with `torch.load(weights_only=True)`, which refuses any object that is not a plain tensor, so a file
whose unpickling would run code fails here instead of running. Every failure names the file.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from albert_lm.files import file_mode

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"
NATIVE = "albert_lm.safetensors"  # albert-lm's own layout, for sharing transformers cannot express
CANDIDATES = (SAFETENSORS, SAFETENSORS_INDEX, NATIVE, PYTORCH_BIN)


def find_weights(folder: Path) -> Path:
    for name in CANDIDATES:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{folder}: no weights found (looked for {', '.join(CANDIDATES)})")


def _read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"{file}: not a readable safetensors file (truncated or corrupt?): {e}") from e


def _read_bin(file: Path) -> dict[str, torch.Tensor]:
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
        try:
            weight_map = json.loads(file.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{file}: expected JSON with a 'weight_map' object: {e}") from e
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            state.update(_read_safetensors(file.parent / shard))
        return state, file
    if file.suffix == ".bin":
        return _read_bin(file), file
    return _read_safetensors(file), file


def write_weights(file: Path, state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write safetensors atomically: a temporary file beside `file`, renamed over it once complete.

    `safetensors.torch.save` could hand its bytes to `albert_lm.files.atomic_write`, but it builds the
    whole file in memory first (a second copy of the model: 0.9 GB for albert-xxlarge in fp32), while
    `save_file` writes straight from the tensors to a path; so the temporary name is made here, in
    atomic_write's pattern.
    """
    file.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
    tmp = file.with_name(f".{file.name}.{secrets.token_hex(4)}.tmp")
    try:
        save_file(tensors, tmp, metadata={"format": "pt", **(metadata or {})})
        os.chmod(tmp, file_mode())  # safetensors creates it private (0600); give it what open() would
        os.replace(tmp, file)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
