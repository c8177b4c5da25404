"""Training an ALBERT SentencePiece model: unigram, ALBERT's special pieces at ids 0-4 (`<pad> <unk> [CLS]
[SEP] [MASK]`), the released model's trainer settings, on text normalized by `preprocess_text`.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from albert_lm.data.tokenizer import (
    CONFIG_FILE,
    MODEL_FILE,
    USER_DEFINED_SYMBOLS,
    AlbertTokenizer,
    preprocess_text,
)
from albert_lm.files import atomic_write, describe_folder

logger = logging.getLogger(__name__)


def train_tokenizer(
    inputs: Sequence[str | os.PathLike],
    output_dir: str | os.PathLike,
    vocab_size: int = 30000,
    do_lower_case: bool = True,
    strip_gutenberg: bool = False,
    character_coverage: float = 0.99995,
    input_sentence_size: int = 10_000_000,
    seed: int = 12345,
    num_threads: int | None = None,
    overwrite: bool = False,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
) -> AlbertTokenizer:
    """Train a unigram SentencePiece model the way the released ALBERT model was trained.

    Each non-empty line of the inputs (after `preprocess_text`) is one training sentence. Trainer settings
    copy the released model's (`albert_trainer_settings`: pad 0, unk 1, no bos/eos, control pieces [CLS]
    [SEP] [MASK], the same user-defined pieces and character coverage); SentencePiece samples
    `input_sentence_size` lines with a fixed seed, so the same inputs and seed give the same model, byte
    for byte (the model is written from memory: no temporary path is recorded in it). Lines longer than
    SentencePiece's sentence limit are split at sentence ends (then at spaces), never dropped.
    `overwrite`: replace a tokenizer already in `output_dir` (refused otherwise).
    """
    for path in inputs:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--input {path}: no such file")
    out = _output_folder(Path(output_dir), overwrite)
    sentences = _Sentences(inputs, do_lower_case, strip_gutenberg, skip_invalid_utf8, max_line_bytes)
    settings = albert_trainer_settings(vocab_size, character_coverage, input_sentence_size, num_threads)
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, **settings)
    except RuntimeError as e:
        if sentences.lines == 0:
            raise ValueError(f"no text lines in {', '.join(str(p) for p in inputs)}") from None
        raise ValueError(f"SentencePiece training failed: {e}") from None
    atomic_write(out / MODEL_FILE, model.getvalue())
    tok = AlbertTokenizer(out / MODEL_FILE, do_lower_case=do_lower_case)
    tok.save_pretrained(out)
    vocab = "".join(f"{tok.sp.id_to_piece(i)}\t{tok.sp.get_score(i):g}\n" for i in range(tok.vocab_size))
    atomic_write(out / "spiece.vocab", vocab)
    if sentences.split:
        logger.info("%d lines over %d bytes were split at sentence ends to fit SentencePiece's limit",
                    sentences.split, MAX_SENTENCE_BYTES)  # fmt: skip
    logger.info("trained a %d-piece unigram model on %d lines -> %s", tok.vocab_size, sentences.lines, out)
    return tok


def albert_trainer_settings(
    vocab_size: int, character_coverage: float, input_sentence_size: int, num_threads: int | None
) -> dict[str, Any]:
    """SentencePiece trainer options of the released ALBERT model (ids 0-4 `<pad> <unk> [CLS] [SEP] [MASK]`)."""
    return {
        "model_type": "unigram",
        "vocab_size": vocab_size,
        "pad_id": 0,
        "unk_id": 1,
        "bos_id": -1,
        "eos_id": -1,
        "control_symbols": ["[CLS]", "[SEP]", "[MASK]"],
        "user_defined_symbols": list(USER_DEFINED_SYMBOLS),
        "character_coverage": character_coverage,
        "input_sentence_size": input_sentence_size,
        "shuffle_input_sentence": True,
        "num_threads": num_threads or os.cpu_count() or 1,
        "max_sentence_length": MAX_SENTENCE_BYTES,
        "minloglevel": 2,
    }


TOKENIZER_FILES = (MODEL_FILE, CONFIG_FILE, "spiece.vocab")


def _output_folder(out: Path, overwrite: bool) -> Path:
    """`out`, created; refused if it is a file, holds a tokenizer (unless `overwrite`) or anything else.
    Leftovers of an interrupted training (`.train-*` folders of older versions) are removed."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    if out.is_dir():
        for stale in out.glob(".train-*"):
            shutil.rmtree(stale, ignore_errors=True)
        present = {p.name for p in out.iterdir()}
        if present - set(TOKENIZER_FILES):
            raise FileExistsError(
                f"--output {out}: folder holds other files ({describe_folder(out)}); give an empty or new folder"
            )
        if MODEL_FILE in present and not overwrite:
            raise FileExistsError(
                f"--output {out}: already holds a tokenizer ({describe_folder(out)}); pass --overwrite to "
                "replace it, or give another --output"
            )
    out.mkdir(parents=True, exist_ok=True)
    return out


# SentencePiece's sentence limit (its default is 4192 bytes, and longer lines are skipped without a word).
MAX_SENTENCE_BYTES = 16384
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+")


def fit_line(text: str, limit: int = MAX_SENTENCE_BYTES) -> list[str]:
    """`text` as lines of at most `limit` UTF-8 bytes: whole sentences joined while they fit, a sentence
    still too long cut at spaces, a word too long cut at characters. Nothing is lost but the separators."""
    if len(text.encode()) <= limit:
        return [text]
    out: list[str] = []
    current = ""
    units = [u for s in _SENTENCE_END.split(text) for u in _cut(s, limit, " ")]
    for unit in units:
        joined = f"{current} {unit}" if current else unit
        if len(joined.encode()) <= limit:
            current = joined
        else:
            out.append(current)
            current = unit
    return [*out, current] if current else out


def _cut(text: str, limit: int, sep: str) -> list[str]:
    """Pieces of `text` under `limit` bytes: split at `sep`, then at characters."""
    if len(text.encode()) <= limit:
        return [text]
    if sep:
        return [p for word in text.split(sep) if word for p in _cut(word, limit, "")]
    pieces, current = [], ""
    for ch in text:
        if len((current + ch).encode()) > limit:
            pieces.append(current)
            current = ""
        current += ch
    return [*pieces, current]


class _Sentences:
    """The inputs' non-empty lines after `preprocess_text`, counted (`lines`) as they are read."""

    def __init__(
        self,
        inputs: Sequence[str | os.PathLike],
        do_lower_case: bool,
        strip_gutenberg: bool,
        skip_invalid_utf8: bool = False,
        max_line_bytes: int = 1 << 20,
    ) -> None:
        self.inputs, self.do_lower_case, self.strip_gutenberg = inputs, do_lower_case, strip_gutenberg
        self.skip_invalid_utf8, self.max_line_bytes = skip_invalid_utf8, max_line_bytes
        self.lines = 0
        self.split = 0  # lines over the limit, split

    def __iter__(self) -> Iterator[str]:
        from albert_lm.data.corpus import iter_text_lines

        for path in self.inputs:
            lines = iter_text_lines(
                Path(path), self.strip_gutenberg, self.skip_invalid_utf8, self.max_line_bytes
            )
            for line in lines:
                text = preprocess_text(line, lower=self.do_lower_case)
                if not text:
                    continue
                parts = fit_line(text)
                self.split += len(parts) > 1
                for part in parts:
                    self.lines += 1
                    yield part
