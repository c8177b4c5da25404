"""Training an ALBERT SentencePiece model: unigram, ALBERT's special pieces at ids 0-4 (`<pad> <unk> [CLS]
[SEP] [MASK]`), the released model's trainer settings, on text normalized by `preprocess_text`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

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
    copy the released model's (pad 0, unk 1, no bos/eos, control pieces [CLS] [SEP] [MASK], the same
    user-defined pieces and character coverage); SentencePiece samples `input_sentence_size` lines with a
    fixed seed, so the same inputs and seed give the same model.
    """
    from albert_lm.data.corpus import iter_text_lines

    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(p.name not in (MODEL_FILE, CONFIG_FILE, "spiece.vocab") for p in out.iterdir()):
        raise FileExistsError(f"{out}: folder holds other files; give an empty or new --output folder")
    out.mkdir(parents=True, exist_ok=True)

    counts = {"lines": 0}

    def sentences() -> Iterator[str]:
        for path in inputs:
            for line in iter_text_lines(Path(path), strip_gutenberg=strip_gutenberg):
                text = preprocess_text(line, lower=do_lower_case)
                if text:
                    counts["lines"] += 1
                    yield text

    spm.set_random_generator_seed(seed)
    with tempfile.TemporaryDirectory(dir=out, prefix=".train-") as tmp:
        prefix = Path(tmp) / "spiece"
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=sentences(),
                model_prefix=str(prefix),
                model_type="unigram",
                vocab_size=vocab_size,
                pad_id=0,
                unk_id=1,
                bos_id=-1,
                eos_id=-1,
                control_symbols=["[CLS]", "[SEP]", "[MASK]"],
                user_defined_symbols=list(USER_DEFINED_SYMBOLS),
                character_coverage=character_coverage,
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                num_threads=num_threads or os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as e:
            if counts["lines"] == 0:
                raise ValueError(f"no text lines in {[str(p) for p in inputs]}") from None
            raise ValueError(f"SentencePiece training failed: {e}") from None
        for name in ("spiece.model", "spiece.vocab"):
            os.replace(prefix.with_suffix(Path(name).suffix), out / name)
    tok = AlbertTokenizer(out / MODEL_FILE, do_lower_case=do_lower_case)
    tok.save_pretrained(out)
    logger.info("trained a %d-piece unigram model on %d lines -> %s", tok.vocab_size, counts["lines"], out)
    return tok
