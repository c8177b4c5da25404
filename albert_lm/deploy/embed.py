"""`albert embed`: one vector per text from an ALBERT encoder, as JSON Lines or a .npy matrix.

Any albert-lm or transformers ALBERT folder (pretraining or fine-tuned; a hub id too): only the encoder
is loaded, whatever head the folder also holds. Pooling:

- `mean` (default): the last layer averaged over the text's tokens, [CLS] and [SEP] included and
  padding left out (as sentence-transformers' mean pooling);
- `cls`: the last layer at [CLS];
- `pooler`: the pooler's output tanh(W h_[CLS]), the vector SOP pretraining and sentence-level
  fine-tuning train; a folder without pooler weights (a masked-LM-only checkpoint) is refused for it.

`normalize` scales each vector to unit L2 norm, so dot products are cosines. Texts run in batches of
similar length (sorted by token count) and come back in input order. Output: JSON Lines
`{"line": 1, "embedding": [...]}` (plus kept columns), each value the shortest decimal that reads back
as the same float32, or, for an output name ending in .npy, a float32 (texts, hidden size) matrix,
row i the i-th text.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.deploy.inputs import check_output, parse_columns, read_texts, with_kept, write_output
from albert_lm.deploy.loading import (
    STUDENT_SETTINGS,
    Setup,
    load_setup,
    model_folder,
    run_batches,
    weight_names,
)
from albert_lm.deploy.texts_config import EmbedConfig
from albert_lm.files import read_json_object
from albert_lm.model.encoder import AlbertModel, mean_pool
from albert_lm.model.hf_interop import load_model
from albert_lm.model.outputs import BaseModelOutputWithPooling

logger = logging.getLogger(__name__)

POOLINGS = ("mean", "cls", "pooler")
OUTPUT_FIELDS = ("line", "embedding")


@dataclass
class EmbedSummary:
    texts: int
    dimensions: int
    blank_lines: int
    skipped: list[str]  # messages of the bad rows left out (skip_bad)


class Embedder:
    """A folder's tokenizer and encoder, loaded once for many texts."""

    def __init__(
        self,
        model: str | Path,
        device: str = "auto",
        precision: str = "auto",
        max_seq_length: int | None = None,
        batch_size: int = 32,
        depth: int | None = None,
    ) -> None:
        self.setup: Setup = load_setup(model, device, precision, max_seq_length)
        self.batch_size = batch_size
        names = weight_names(self.setup.folder)
        self.has_pooler = names is None or any(n.endswith("pooler.weight") for n in names)
        # Without pooler weights the encoder still loads (a fresh pooler, warned about at WARNING): quiet
        # here, as `pooling="pooler"` is refused for such a folder and nothing else reads the pooler.
        interop = logging.getLogger("albert_lm.model.hf_interop")
        level = interop.level
        if not self.has_pooler:
            interop.setLevel(logging.ERROR)
        try:
            encoder = load_model(AlbertModel, self.setup.folder)
        finally:
            interop.setLevel(level)
        self.model = encoder.eval().to(self.setup.device)
        if depth is not None:  # elastic depth: the first `depth` applications of the layers
            self.model.encoder.set_depth(depth)

    def embed(self, texts: Sequence[str], pooling: str = "mean", normalize: bool = False) -> np.ndarray:
        """(len(texts), hidden size) float32, row i the embedding of texts[i]."""
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r}: expected one of {', '.join(POOLINGS)}")
        if pooling == "pooler" and not self.has_pooler:
            raise ValueError(
                f"--pooling pooler: {self.setup.folder} holds no pooler weights (a masked-LM-only "
                "checkpoint); use --pooling mean or cls"
            )
        if pooling == "pooler" and _untaught_pooler(self.setup.folder):
            logger.warning(
                "--pooling pooler: %s is a student of `albert distill general` taught without --cls-weight: "
                "its pooler kept its first random weights, and its vectors say little; it learned --pooling mean",
                self.setup.folder,
            )
        tok, limit = self.setup.tokenizer, self.setup.max_len - 2  # room for [CLS] and [SEP]
        encoded = tok.encode_batch(list(texts))
        if cut := sum(len(x) > limit for x in encoded):
            logger.warning(
                "%d of %d texts are longer than %d tokens: each is embedded from its first %d (--max-seq-length "
                "%d); split long texts into passages to embed all of them",
                cut, len(encoded), limit, limit, self.setup.max_len,
            )  # fmt: skip
        ids = [[tok.cls_token_id, *x[:limit], tok.sep_token_id] for x in encoded]
        model = self.model

        def step(inputs: dict[str, torch.Tensor]) -> list[Any]:
            out = model(**inputs)
            assert isinstance(out, BaseModelOutputWithPooling) and out.last_hidden_state is not None
            hidden = out.last_hidden_state.float()  # (B, S, H)
            if pooling == "pooler":
                assert out.pooler_output is not None
                pooled = out.pooler_output.float()  # (B, H)
            elif pooling == "cls":
                pooled = hidden[:, 0]
            else:
                pooled = mean_pool(hidden, inputs["attention_mask"])
            return list(pooled.cpu().numpy())

        rows = run_batches(self.setup, ids, self.batch_size, step)
        width = self.setup.config.hidden_size
        matrix = np.stack(rows).astype(np.float32) if rows else np.zeros((0, width), np.float32)
        if normalize:
            matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        return matrix


def _untaught_pooler(folder: Path) -> bool:
    """Whether `folder` is a general student whose distillation never trained its pooler (cls_weight 0)
    and that no fine-tuning trained since."""
    settings = folder / STUDENT_SETTINGS
    if not settings.is_file() or (folder / "finetune_config.json").is_file():
        return False
    return not read_json_object(settings, "distillation settings").get("cls_weight")


def _float32_list(row: np.ndarray) -> str:
    """A JSON list of float32 values, each the shortest decimal that reads back as the same float32
    (half the size of float64's digits for the same information)."""
    if not np.isfinite(row).all():
        raise ValueError("the model gave a non-finite embedding (NaN or infinity): check the model's weights")
    return "[" + ", ".join(str(v) for v in row.astype(np.float32)) + "]"


def embedding_lines(matrix: np.ndarray, lines: Sequence[int], kept: Sequence[dict[str, Any]]) -> str:
    """The JSON Lines output: each row's line number, kept columns and embedding."""
    out = []
    for row, line, k in zip(matrix, lines, kept, strict=True):
        head = json.dumps(with_kept({"line": line}, k), ensure_ascii=False)
        out.append(f'{head[:-1]}, "embedding": {_float32_list(row)}}}\n')
    return "".join(out)


def embed(cfg: EmbedConfig) -> EmbedSummary:
    """Read, embed, write (see the module's docstring)."""
    keep = parse_columns(cfg.keep_columns, OUTPUT_FIELDS)
    npy = cfg.output.lower().endswith(".npy")
    if npy and keep:
        raise ValueError("--keep-columns writes into JSON Lines; a .npy --output holds the matrix only")
    folder = model_folder(cfg.model)
    check_output(cfg.output, {"--model": folder, "--input": cfg.input}, "embed", allowed=(".npy",))
    texts = read_texts(cfg.input, cfg.text, cfg.format, cfg.text_column, keep, cfg.skip_bad)
    embedder = Embedder(folder, cfg.device, cfg.precision, cfg.max_seq_length, cfg.batch_size, cfg.depth)
    matrix = embedder.embed(texts.texts, cfg.pooling, cfg.normalize)
    if npy:
        buffer = io.BytesIO()
        np.save(buffer, matrix)
        write_output(cfg.output, buffer.getvalue())
        if texts.blank_lines or texts.skipped:  # the matrix's rows are no longer the input's lines
            logger.warning(
                "%s: row i is the i-th text embedded; the %d blank or skipped lines have no row, so rows and "
                "input lines differ: a .jsonl --output gives each row its line (and --keep-columns an id)",
                cfg.output, texts.blank_lines + len(texts.skipped),
            )  # fmt: skip
    else:
        write_output(cfg.output, embedding_lines(matrix, texts.lines, texts.kept))
    return EmbedSummary(len(texts.texts), matrix.shape[1], texts.blank_lines, texts.skipped)


__all__ = ["POOLINGS", "EmbedConfig", "EmbedSummary", "Embedder", "embed"]
