"""Training an ALBERT SentencePiece model: unigram, ALBERT's special pieces at ids 0-4 (`<pad> <unk> [CLS]
[SEP] [MASK]`), the released model's trainer settings, on text normalized by `preprocess_text` with the
rule of the language (`albert_lm.data.languages`), saved with the model.

Memory stays bounded however large the corpus: the inputs are streamed line by line into SentencePiece,
which keeps a uniform sample of `input_sentence_size` lines (reservoir sampling, with
`shuffle_input_sentence`), so memory grows with the sample, not with the corpus.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from albert_lm.data.languages import ENGLISH_COVERAGE
from albert_lm.data.sources import expand_inputs
from albert_lm.data.tokenizer import (
    CONFIG_FILE,
    MODEL_FILE,
    SPIECE_UNDERLINE,
    USER_DEFINED_SYMBOLS,
    AlbertTokenizer,
)
from albert_lm.data.training_lines import MAX_SENTENCE_BYTES, Rule, Sentences
from albert_lm.files import atomic_write, check_output_apart, describe_folder, folder_lock

logger = logging.getLogger(__name__)


def train_tokenizer(
    inputs: Sequence[str | os.PathLike],
    output_dir: str | os.PathLike,
    vocab_size: int = 30000,
    do_lower_case: bool = True,
    strip_gutenberg: bool = False,
    character_coverage: float = ENGLISH_COVERAGE,
    input_sentence_size: int = 10_000_000,
    seed: int = 12345,
    num_threads: int | None = None,
    overwrite: bool = False,
    skip_invalid_utf8: bool = False,
    max_line_bytes: int = 1 << 20,
    keep_accents: bool = False,
    text_column: str = "text",
    add_dummy_prefix: bool = True,
    language: str | None = None,
) -> AlbertTokenizer:
    """Train a unigram SentencePiece model the way the released ALBERT model was trained.

    `inputs`: files (text, compressed, JSON Lines or Parquet with the text in `text_column`), folders,
    glob patterns (`albert_lm.data.sources.expand_inputs`). The normalization rule (`do_lower_case`,
    `keep_accents`: `albert_lm.data.languages` has each language's) is applied here and saved in
    tokenizer_config.json for every later stage; `add_dummy_prefix=False` is saved in the model itself.
    `language`: the text's language code, where it was said, recorded there for the model cards.
    Each non-empty line (after `preprocess_text`; lines wrapped inside a word of text without spaces
    joined first) is one training sentence. Trainer settings copy the released model's
    (`albert_trainer_settings`); SentencePiece samples `input_sentence_size` lines with a fixed seed, so
    the same inputs and seed give the same model, byte for byte. Lines longer than SentencePiece's limit
    are split at sentence ends (then at spaces), never dropped. `overwrite`: replace a tokenizer already
    in `output_dir`. A failure (bad input, a vocabulary too large for the text, Ctrl-C) leaves
    `output_dir` as it was: not created if it did not exist, the tokenizer it held untouched.
    """
    from albert_lm.data.corpus import check_input_file, warn_gutenberg_markers
    from albert_lm.data.languages import warn_english_rule

    _check_settings(vocab_size, max_line_bytes, character_coverage, input_sentence_size)
    out = Path(output_dir)
    for given in inputs:  # --overwrite must never delete or replace an input, nor a folder of them
        check_output_apart(out, {"--input": given})
    inputs = expand_inputs(inputs)
    for path in inputs:
        check_input_file(Path(path))  # a missing, empty, binary or special file (a FIFO)
        check_output_apart(out, {"--input": path})
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    warn_gutenberg_markers(inputs, strip_gutenberg)
    if not keep_accents:
        warn_english_rule(inputs, text_column)
    rule = Rule(
        do_lower_case, keep_accents, strip_gutenberg, skip_invalid_utf8, max_line_bytes, text_column, language
    )
    settings = albert_trainer_settings(vocab_size, character_coverage, input_sentence_size, num_threads)
    if not add_dummy_prefix:  # only then: the English settings stay the released model's, byte for byte
        # and a space keeps a piece of its own, even where the training text has none (else: <unk>)
        settings.update(add_dummy_prefix=False, required_chars=SPIECE_UNDERLINE)
    return _train_into(out, overwrite, inputs, rule, settings, seed)


def _train_into(
    out: Path, overwrite: bool, inputs: list[str], rule: Rule, settings: dict[str, Any], seed: int
) -> AlbertTokenizer:
    """Train, then write into `out`. --output is made only once there is a model to write, so that a run
    killed while it reads or trains (minutes on a large text) leaves no empty folder behind; one there
    already is checked, and held, from the start: a second run on it is refused at once."""
    existed = out.is_dir()
    with folder_lock(out) if existed else contextlib.nullcontext():
        if existed:
            _output_folder(out, overwrite)
        else:
            _check_can_make(out)
        model, sentences = _train(inputs, rule, settings, seed)
        with contextlib.nullcontext() if existed else folder_lock(out):
            return _finish(_output_folder(out, overwrite), model, rule, settings, sentences)


def _check_can_make(out: Path) -> None:
    """Refuse at once an --output that could not be made once the model is trained: one under a file,
    or in a folder this process may not write."""
    there = next((p for p in out.parents if p.exists() or p.is_symlink()), Path("."))
    if not there.is_dir():
        raise NotADirectoryError(f"--output {out}: {there} is not a folder")
    if not os.access(there, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"cannot make a folder in {there}", str(out))


MIN_VOCAB_SIZE = 5 + len(USER_DEFINED_SYMBOLS) + 1  # the special pieces, the user-defined ones, one more


def _check_settings(vocab_size: Any, max_line_bytes: Any, coverage: Any, sample: Any) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size {vocab_size!r}: expected a whole number of at least {MIN_VOCAB_SIZE} (ALBERT's "
            f"{5 + len(USER_DEFINED_SYMBOLS)} special pieces and the text's characters)"
        )
    if isinstance(max_line_bytes, bool) or not isinstance(max_line_bytes, int) or max_line_bytes < 1:
        raise ValueError(f"max_line_bytes {max_line_bytes!r}: expected a whole number of at least 1")
    if isinstance(coverage, bool) or not isinstance(coverage, int | float) or not 0.98 <= coverage <= 1:
        raise ValueError(
            f"character_coverage {coverage!r}: expected a share of the characters from 0.98 to 1 (0.9995 for "
            "Chinese or Japanese, 1.0 for small alphabets)"
        )
    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise ValueError(f"input_sentence_size {sample!r}: expected a whole number of lines, at least 1")


_STOP_WAIT_S = 5.0
_SPM_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_SPM_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


# a line this often while SentencePiece chooses the pieces (minutes on a large text); the reading has its bar
HEARTBEAT_S = 30.0


def _in_thread(
    work: Callable[[], object],
    halt: Callable[[], bool] | None = None,
    heartbeat: Callable[[float], None] | None = None,
) -> None:
    """Run `work` in a thread while this one waits: SentencePiece trains in C++ with the GIL released, so
    the main thread stays free to take Ctrl-C and SIGTERM (Python runs signal handlers only there, and not
    while it is inside a C++ call that can run for minutes). Its exception is raised here.

    When this thread is interrupted, `halt()` asks the worker to stop; where it says the worker will
    (True), the worker is given a few seconds to end: one still running Python when the interpreter
    exits (SentencePiece pulling lines from the reader) aborts the process ("terminate called without
    an active exception") instead of letting it exit 130."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # handed to the caller
            failure.append(e)

    worker = threading.Thread(target=run, name="sentencepiece", daemon=True)
    start = said = time.monotonic()
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
            if heartbeat is not None and time.monotonic() - said >= HEARTBEAT_S:
                said = time.monotonic()
                heartbeat(said - start)
    except BaseException:
        if halt is not None and halt():
            worker.join(_STOP_WAIT_S)
        raise
    if failure:
        raise failure[0]


def _train(
    inputs: Sequence[str | os.PathLike], rule: Rule, settings: dict[str, Any], seed: int
) -> tuple[bytes, Sentences]:
    """The training of `train_tokenizer`: the model's bytes, and what was read."""
    sentences = Sentences(inputs, rule)
    logger.info(
        "reading %d file%s (%.1f MB) for the tokenizer",
        len(inputs),
        "" if len(inputs) == 1 else "s",
        sentences.total_bytes / 1e6,
    )
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        _in_thread(
            lambda: spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences), model_writer=model, **settings
            ),
            sentences.halt,
            lambda elapsed_s: _heartbeat(sentences, elapsed_s),
        )
    except RuntimeError as e:
        if sentences.error is not None:  # the reader's own error (bad input, Ctrl-C), not SentencePiece's
            raise sentences.error from None
        if sentences.lines == 0:
            raise ValueError(
                f"no text lines in {', '.join(str(p) for p in inputs)}{sentences.left_out()}"
            ) from None
        raise _vocabulary_error(e) from None
    if sentences.error is not None:
        raise sentences.error
    return model.getvalue(), sentences


def _heartbeat(sentences: Sentences, elapsed_s: float) -> None:
    """A line every HEARTBEAT_S once the reading (which has its bar) has ended: SentencePiece chooses the
    pieces then, in C++, with nothing to count."""
    if sentences.finished:
        logger.info(
            "tokenizer: %d lines all read; SentencePiece is choosing the pieces (%.0f s)",
            sentences.lines,
            elapsed_s,
        )


def _finish(
    out: Path, model: bytes, rule: Rule, settings: dict[str, Any], sentences: Sentences
) -> AlbertTokenizer:
    """The writing of `train_tokenizer`, in its locked and checked output folder, and what it says."""
    tok = _write(out, model, rule)
    if sentences.split:
        logger.info(
            "%d lines over %d bytes were split at sentence ends to fit SentencePiece's limit",
            sentences.split,
            MAX_SENTENCE_BYTES,
        )
    if sentences.lines > settings["input_sentence_size"]:
        logger.info(
            "SentencePiece trained on a uniform sample of %d of the %d lines (input_sentence_size)",
            settings["input_sentence_size"],
            sentences.lines,
        )
    _warn_small_vocabulary(tok)
    logger.info(
        "trained a %d-piece unigram model on %d lines%s -> %s",
        tok.vocab_size,
        sentences.lines,
        sentences.left_out(),
        out,
    )
    return tok


def _vocabulary_error(e: RuntimeError) -> ValueError:
    """SentencePiece's failure in the command's words."""
    if m := _SPM_TOO_HIGH.search(str(e)):
        return ValueError(
            f"--vocab-size {m[1]}: this text supports at most {m[2]} pieces; give a smaller --vocab-size "
            f"(at most {m[2]}), or more text"
        )
    if m := _SPM_TOO_LOW.search(str(e)):
        return ValueError(
            f"--vocab-size {m[1]}: fewer pieces than this text's characters and ALBERT's special pieces "
            f"need; at least {m[2]} here (or a lower --character-coverage)"
        )
    return ValueError(f"SentencePiece training failed: {e}")


SINGLE_CHARACTER_SHARE = 0.5  # above it a vocabulary is mostly characters: too small for words


def _warn_small_vocabulary(tok: AlbertTokenizer) -> None:
    """Warn when most pieces are single characters (a large character set, Chinese or Japanese, in a
    small vocabulary): few words or word parts fit, and sequences grow to a piece per character."""
    single = sum(len(tok.sp.id_to_piece(i).lstrip(SPIECE_UNDERLINE)) <= 1 for i in range(5, tok.vocab_size))
    if single > SINGLE_CHARACTER_SHARE * tok.vocab_size:
        logger.warning(
            "%d of the %d pieces are single characters: the vocabulary has little room for words; for a "
            "large character set (Chinese, Japanese) give a --vocab-size of a few times the characters "
            "(e.g. %d)",
            single,
            tok.vocab_size,
            4 * single,
        )


def _write(out: Path, model: bytes, rule: Rule) -> AlbertTokenizer:
    """The tokenizer's files written in `out`. They are made in a `.train-PID` folder there first, then
    moved in, the model last: a failure while they are made leaves an earlier tokenizer whole."""
    stage = out / f".train-{os.getpid()}"
    norm: dict[str, Any] = {
        "do_lower_case": rule.do_lower_case,
        "keep_accents": rule.keep_accents,
        "language": rule.language,
    }
    try:
        stage.mkdir()
        atomic_write(stage / MODEL_FILE, model)
        tok = AlbertTokenizer(stage / MODEL_FILE, **norm)
        tok.save_pretrained(stage)
        vocab = "".join(f"{tok.sp.id_to_piece(i)}\t{tok.sp.get_score(i):g}\n" for i in range(tok.vocab_size))
        atomic_write(stage / "spiece.vocab", vocab)
        for name in ("spiece.vocab", CONFIG_FILE, MODEL_FILE):
            os.replace(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return AlbertTokenizer(out / MODEL_FILE, **norm)


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
    Leftovers of a killed training (a `.train-*` folder, see `_write`) are removed."""
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
