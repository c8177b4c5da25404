"""`albert fill-mask`: a masked-LM model's top candidates for each [MASK] of a text, one JSON line per text.

The model is a folder with a trained MLM head: what `albert pretrain` or `albert convert` writes
(AlbertForPreTraining), a transformers AlbertForMaskedLM, or a hub id of one; a folder without the head
(a fine-tuned classifier) is refused by name. The tokenizer does not read "[MASK]" inside text (as
google-research's does not), so each text is split at its [MASK]s, the parts encoded, and the mask id
put between them; a text without one is an error naming its line. The encoder runs on batches of
similar length, the MLM head only at the masked positions. Each output line:

    {"line": 1, "masks": [[{"token": "door", "id": 912, "probability": 0.31}, ...], ...],
     "filled": "She opened the door."}

`masks` holds, for each [MASK] in order, the `top_k` most probable pieces (the piece's word-start mark
dropped from `token`; special tokens never among them); `filled` is the text with each [MASK] replaced by
its first candidate that starts a word. All masks
of a text are predicted at once from the same input, as transformers' fill-mask pipeline does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from albert_lm.deploy.inputs import check_output, jsonl, parse_columns, read_texts, with_kept, write_output
from albert_lm.deploy.loading import (
    Setup,
    load_setup,
    model_folder,
    refuse_untrained_mlm,
    run_batches,
    weight_names,
)
from albert_lm.deploy.texts_config import FillMaskConfig
from albert_lm.files import InputError
from albert_lm.model.heads import AlbertForMaskedLM
from albert_lm.model.hf_interop import load_model

logger = logging.getLogger(__name__)

MASK = "[MASK]"
MASK_WRITTEN = re.compile(re.escape(MASK), re.IGNORECASE)  # [mask] too: the tokenizer lowercases text
OUTPUT_FIELDS = ("line", "masks", "filled")
WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word
UNUSED = re.compile(r"\[unused\d+\]")  # WordPiece's placeholder pieces, never trained as words


@dataclass
class FillMaskSummary:
    texts: int
    masks: int
    blank_lines: int
    skipped: list[str]  # messages of the bad rows left out (skip_bad)


class MaskFiller:
    """A folder's tokenizer and MLM head, loaded once for many texts."""

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
        folder = self.setup.folder
        refuse_untrained_mlm(folder)
        names = weight_names(folder)
        if names is not None and not any(n.startswith("predictions.") for n in names):
            arch = (self.setup.config.extra.get("architectures") or ["no architectures"])[0]
            raise ValueError(
                f"--model {folder}: no masked-LM head in its weights (config.json says {arch}): fill-mask "
                "needs a pretraining checkpoint (albert pretrain, albert convert) or another folder with "
                "an MLM head, not a fine-tuned one"
            )
        self.model = load_model(AlbertForMaskedLM, folder, require_head=True).eval().to(self.setup.device)
        if depth is not None:  # elastic depth: the first `depth` applications of the layers
            self.model.albert.encoder.set_depth(depth)
        tok, vocab = self.setup.tokenizer, self.setup.config.vocab_size
        pieces = tok.convert_ids_to_tokens(list(range(vocab)))
        # never a candidate: [CLS], [SEP], [PAD], [MASK], <unk> and WordPiece's [unusedN] placeholders
        self.not_words = torch.tensor(
            [i for i, piece in enumerate(pieces) if i in tok.all_special_ids or UNUSED.fullmatch(str(piece))],
            dtype=torch.long,
        )
        # pieces that start a word: SentencePiece's carry its mark, WordPiece's are those without "##"; the
        # mark alone (a word whose letters follow as pieces of their own) fills a mask with nothing
        sentencepiece = any(str(piece).startswith(WORD_START) for piece in pieces)
        self.starts_word = [
            (str(p).startswith(WORD_START) and str(p) != WORD_START)
            if sentencepiece
            else not str(p).startswith("##")
            for p in pieces
        ]

    def encode(self, text: str, line: int, name: str) -> tuple[list[int], list[int]]:
        """(input ids, positions of the masks) of one text; an InputError without a [MASK] or with one
        past the sequence length."""
        tok = self.setup.tokenizer
        parts = MASK_WRITTEN.split(text)
        if len(parts) == 1:
            hint = (
                " (ALBERT's mask is written [MASK]; <mask> is RoBERTa's)" if "<mask>" in text.lower() else ""
            )
            raise InputError(name, f"no {MASK} in the text{hint}", line=line)
        ids, positions = [tok.cls_token_id], []
        for k, piece_ids in enumerate(tok.encode_batch(parts)):
            if k:
                positions.append(len(ids))
                ids.append(tok.mask_token_id)
            ids.extend(piece_ids)
        limit = self.setup.max_len - 1  # room for [SEP]
        if positions[-1] >= limit:
            raise InputError(
                name,
                f"{MASK} number {len(positions)} is at token {positions[-1] + 1}, past the "
                f"{self.setup.max_len} tokens of --max-seq-length",
                line=line,
            )
        return [*ids[:limit], tok.sep_token_id], positions

    def fill(
        self, texts: Sequence[str], top_k: int = 5, lines: Sequence[int] | None = None, name: str = "texts"
    ) -> list[dict[str, Any]]:
        """One dict per text: its line (1, 2, ... unless given), the top-k candidates of each mask and the
        text filled with each mask's first candidate that starts a word."""
        lines = list(lines) if lines is not None else list(range(1, len(texts) + 1))
        if top_k < 1:  # before the texts: a bad argument is named before any text's fault
            raise ValueError(f"top_k {top_k}: expected at least 1")
        encoded = [self.encode(text, line, name) for text, line in zip(texts, lines, strict=True)]
        return self._fill_encoded(texts, lines, encoded, top_k)

    def _fill_encoded(
        self,
        texts: Sequence[str],
        lines: Sequence[int],
        encoded: Sequence[tuple[list[int], list[int]]],
        top_k: int = 5,
    ) -> list[dict[str, Any]]:
        """`fill` of texts already encoded (`encode`), `top_k` checked already."""
        model, k = self.model, min(top_k, self.setup.config.vocab_size - len(self.not_words))

        def step(inputs: dict[str, torch.Tensor]) -> list[Any]:
            hidden = model.albert(**inputs).last_hidden_state  # (B, S, H)
            is_mask = inputs["input_ids"] == self.setup.tokenizer.mask_token_id  # (B, S)
            probs = torch.softmax(model.predictions(hidden[is_mask]).float(), -1)  # (masks, V)
            if not bool(probs.isfinite().all()):  # topk would rank NaN first: [SEP] "at probability NaN"
                raise ValueError(
                    f"{self.setup.folder}: the model gave non-finite probabilities (NaN or infinity)"
                    + (
                        "; try --precision fp32"
                        if self.setup.precision != "fp32"
                        else "; its weights are damaged"
                    )
                )
            top = probs.index_fill(-1, self.not_words.to(probs.device), -1.0).topk(k, dim=-1)
            counts = is_mask.sum(-1).tolist()
            values, ids = top.values.cpu().split(counts), top.indices.cpu().split(counts)
            return list(zip(values, ids, strict=True))

        results = run_batches(self.setup, [ids for ids, _ in encoded], self.batch_size, step)
        return [self._record(t, line, r) for t, line, r in zip(texts, lines, results, strict=True)]

    def _record(self, text: str, line: int, result: tuple[torch.Tensor, torch.Tensor]) -> dict[str, Any]:
        values, ids = result  # (masks, k) each
        tok, masks = self.setup.tokenizer, []
        for p_row, id_row in zip(values.tolist(), ids.tolist(), strict=True):
            pieces = tok.convert_ids_to_tokens(id_row)
            masks.append(
                [
                    {
                        "token": str(piece).replace(WORD_START, " ").strip() or str(piece),
                        "id": i,
                        "probability": round(float(p), 6),
                    }
                    for piece, i, p in zip(pieces, id_row, p_row, strict=True)
                ]
            )
        parts = MASK_WRITTEN.split(text)
        # each [MASK] filled with its best candidate that is a word (not a piece that goes on one)
        best = [next((m for m in ms if self.starts_word[m["id"]]), ms[0]) for ms in masks]
        filled = parts[0] + "".join(m["token"] + rest for m, rest in zip(best, parts[1:], strict=True))
        return {"line": line, "masks": masks, "filled": filled}


def fill_mask(cfg: FillMaskConfig) -> FillMaskSummary:
    """Read, fill, write (see the module's docstring)."""
    keep = parse_columns(cfg.keep_columns, OUTPUT_FIELDS)
    folder = model_folder(cfg.model)
    check_output(cfg.output, {"--model": folder, "--input": cfg.input}, "fill-mask")
    texts = read_texts(cfg.input, cfg.text, cfg.format, cfg.text_column, keep, cfg.skip_bad)
    filler = MaskFiller(folder, cfg.device, cfg.precision, cfg.max_seq_length, cfg.batch_size, cfg.depth)
    encoded = texts.checked(lambda text, line: filler.encode(text, line, texts.name), cfg.skip_bad)
    records = filler._fill_encoded(texts.texts, texts.lines, encoded, cfg.top_k)
    write_output(cfg.output, jsonl(with_kept(r, k) for r, k in zip(records, texts.kept, strict=True)))
    masks = sum(len(r["masks"]) for r in records)
    return FillMaskSummary(len(records), masks, texts.blank_lines, texts.skipped)


__all__ = ["FillMaskConfig", "FillMaskSummary", "MaskFiller", "fill_mask"]
