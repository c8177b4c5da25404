"""A model folder made ready for inference, shared by `fill-mask` and `embed` (and `albert_lm.Predictor`):
the folder (or hub id) resolved, the device and precision chosen, the tokenizer checked against the
model, the sequence length fixed, and a batch loop that sorts texts by length (little padding) and
gives the results back in input order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import read_json_object
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import autocast, pick_device, resolved_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.weights import SAFETENSORS_INDEX, find_weights, read_weight_map, safetensors_names
from albert_lm.runtime.finetuned import read_saved_settings
from albert_lm.runtime.fits import check_tokenizer_fits, sequence_length
from albert_lm.runtime.run_folders import no_model
from albert_lm.tasks.batches import collate, length_bucketed_batches

logger = logging.getLogger(__name__)

DEFAULT_LENGTH = 512  # tokens per text without --max-seq-length or a fine-tuned length, capped by positions


@dataclass
class Setup:
    """What every inference run on a folder needs besides the network itself."""

    folder: Path
    config: AlbertConfig
    tokenizer: AlbertTokenizer
    device: torch.device
    precision: str
    max_len: int


def model_folder(value: str | Path) -> Path:
    """The folder `--model` names (a hub id: its cached snapshot); it must hold config.json. A Path to a
    folder is one resolved before (not looked up, nor logged, again)."""
    folder = value if isinstance(value, Path) and value.is_dir() else resolve_model(value)
    if not (folder / "config.json").is_file():
        raise no_model(folder)
    return folder


def load_setup(model: str | Path, device: str, precision: str, max_seq_length: int | None) -> Setup:
    folder = model_folder(model)
    config = AlbertConfig.from_pretrained(folder)
    tokenizer = AlbertTokenizer.from_pretrained(folder)
    saved = read_saved_settings(folder)
    check_tokenizer_fits(tokenizer, folder, config, saved.get("tokenizer_fingerprint"))
    if max_seq_length is not None and max_seq_length < 8:
        raise ValueError(f"--max-seq-length {max_seq_length}: expected at least 8")
    length = sequence_length(
        max_seq_length, int(saved.get("max_seq_length") or DEFAULT_LENGTH), config, folder
    )
    where = pick_device(device)
    return Setup(folder, config, tokenizer, where, resolved_precision(precision, where), length)


def weight_names(folder: Path) -> set[str] | None:
    """The tensor names of the folder's weights, read from the safetensors headers only (None for a
    pickled checkpoint, whose names cost a full load): which heads a folder holds, before loading it.
    An unreadable weights file is a ValueError naming it."""
    file = find_weights(folder)
    if file.name == SAFETENSORS_INDEX:
        return set(read_weight_map(file))
    if file.suffix != ".safetensors":
        return None
    return safetensors_names(file)


STUDENT_SETTINGS = "distill_config.json"  # what `albert distill` leaves in a student's folder


def refuse_untrained_mlm(folder: Path) -> None:
    """Refuse a masked-LM head that never trained: a student of `albert distill general` without a
    masked-LM loss. Students made since keep no such head; older ones kept the random one beside the
    encoder, which would answer fill-mask with noise at exit 0."""
    settings = folder / STUDENT_SETTINGS
    if not settings.is_file():
        return
    weight = read_json_object(settings, "distillation settings").get("mlm_weight", 1)
    if not weight:
        raise ValueError(
            f"{folder}: its masked-LM head never trained (a student of albert distill general with "
            f"mlm_weight {weight!r} in {STUDENT_SETTINGS}): it embeds texts (albert embed) but cannot fill "
            "masks; distil with --mlm-weight for a student that does"
        )


@torch.no_grad()
def run_batches(
    setup: Setup,
    ids: Sequence[list[int]],
    batch_size: int,
    step: Callable[[dict[str, torch.Tensor]], list[Any]],
) -> list[Any]:
    """`step(inputs)` on batches of similar length (inputs: input_ids, token_type_ids, attention_mask
    on the device, under the precision's autocast; one result per row), results in the order of `ids`."""
    features = [{"input_ids": list(x), "token_type_ids": [0] * len(x)} for x in ids]
    results: list[Any] = [None] * len(features)
    for idx in length_bucketed_batches([len(f["input_ids"]) for f in features], batch_size, None):
        batch = collate([features[i] for i in idx], setup.tokenizer.pad_token_id)
        inputs = {k: v.to(setup.device) for k, v in batch.items()}
        with autocast(setup.device, setup.precision):
            rows = step(inputs)
        for i, row in zip(idx, rows, strict=True):
            results[i] = row
    return results


__all__ = ["Setup", "load_setup", "model_folder", "refuse_untrained_mlm", "run_batches", "weight_names"]
