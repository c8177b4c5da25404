"""Training an ALBERT SentencePiece model: unigram, ALBERT's special pieces at ids 0-4 (`<pad> <unk> [CLS]
[SEP] [MASK]`), the released model's trainer settings, on text normalized by `preprocess_text`.
"""

from __future__ import annotations

import logging
import os
import tempfile
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
) -> AlbertTokenizer:
    """Train a unigram SentencePiece model the way the released ALBERT model was trained.

    Each non-empty line of the inputs (after `preprocess_text`) is one training sentence. Trainer settings
    copy the released model's (`albert_trainer_settings`: pad 0, unk 1, no bos/eos, control pieces [CLS]
    [SEP] [MASK], the same user-defined pieces and character coverage); SentencePiece samples
    `input_sentence_size` lines with a fixed seed, so the same inputs and seed give the same model.
    """
    out = _output_folder(Path(output_dir))
    sentences = _Sentences(inputs, do_lower_case, strip_gutenberg)
    settings = albert_trainer_settings(vocab_size, character_coverage, input_sentence_size, num_threads)
    spm.set_random_generator_seed(seed)
    with tempfile.TemporaryDirectory(dir=out, prefix=".train-") as tmp:
        prefix = Path(tmp) / "spiece"
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_prefix=str(prefix), **settings
            )
        except RuntimeError as e:
            if sentences.lines == 0:
                raise ValueError(f"no text lines in {[str(p) for p in inputs]}") from None
            raise ValueError(f"SentencePiece training failed: {e}") from None
        for name in ("spiece.model", "spiece.vocab"):
            os.replace(prefix.with_suffix(Path(name).suffix), out / name)
    tok = AlbertTokenizer(out / MODEL_FILE, do_lower_case=do_lower_case)
    tok.save_pretrained(out)
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
        "minloglevel": 2,
    }


def _output_folder(out: Path) -> Path:
    """`out`, created; an error if it is a file or a folder holding anything but a tokenizer."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(p.name not in (MODEL_FILE, CONFIG_FILE, "spiece.vocab") for p in out.iterdir()):
        raise FileExistsError(f"{out}: folder holds other files; give an empty or new --output folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


class _Sentences:
    """The inputs' non-empty lines after `preprocess_text`, counted (`lines`) as they are read."""

    def __init__(
        self, inputs: Sequence[str | os.PathLike], do_lower_case: bool, strip_gutenberg: bool
    ) -> None:
        self.inputs, self.do_lower_case, self.strip_gutenberg = inputs, do_lower_case, strip_gutenberg
        self.lines = 0

    def __iter__(self) -> Iterator[str]:
        from albert_lm.data.corpus import iter_text_lines

        for path in self.inputs:
            for line in iter_text_lines(Path(path), strip_gutenberg=self.strip_gutenberg):
                text = preprocess_text(line, lower=self.do_lower_case)
                if text:
                    self.lines += 1
                    yield text
