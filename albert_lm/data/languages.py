"""Per-language defaults of a tokenizer: the normalization rule (case, accents) and SentencePiece's
character coverage, chosen by `albert tokenizer train --language CODE`.

The rule is saved with the tokenizer (tokenizer_config.json: `do_lower_case`, `keep_accents`,
`remove_space`, transformers' AlbertTokenizer's names) and applied wherever the tokenizer is loaded
(data creation, pretraining, fine-tuning, prediction, export); it is part of the tokenizer's
fingerprint, so data and a model made with different rules are refused as different vocabularies are.

Why each (docs/data.md, "Languages"):
- Accents are removed only for English, as google-research's ALBERT did: English loses nothing by it.
  Everywhere else a decomposable mark is part of a letter: German schön/schon, French où/ou, Russian
  й (и + breve) and ё, Japanese が (か + dakuten), Thai's vowel and tone marks. So every other language
  keeps accents.
- Case: lower-cased like ALBERT's English (smaller vocabulary, proper nouns the only loss), except German,
  which capitalizes every noun (Essen the meal, essen to eat; Sie the polite you, sie she/they): there the
  case is grammar, and German models (GBERT, German BERT) are cased.
- No dummy prefix for the scripts written without spaces (Chinese, Japanese, Thai): SentencePiece marks a
  word start `▁` before every text it encodes, which there starts no word: each sentence began with a
  lone `▁` piece (4.5% of the tokens of the Chinese books' pretraining data, masked and predicted like
  words). Spaces in the text (a Latin word among Chinese) still become `▁`.
- Character coverage: SentencePiece's recommendations, 0.9995 for the large character sets of Chinese and
  Japanese (the rarest 0.05% of characters become `<unk>` instead of taking thousands of pieces) and 1.0
  for small alphabets (every character of the text kept: nothing is lost to `<unk>`); English keeps the
  released model's 0.99995.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Language:
    """A tokenizer's language defaults (`train_tokenizer` keyword arguments, via `settings()`)."""

    do_lower_case: bool
    keep_accents: bool
    character_coverage: float
    note: str
    add_dummy_prefix: bool = True

    def settings(self) -> dict[str, object]:
        """`train_tokenizer` keyword arguments: do_lower_case, keep_accents, character_coverage,
        add_dummy_prefix."""
        return {k: v for k, v in asdict(self).items() if k != "note"}


ENGLISH_COVERAGE = 0.99995  # the released ALBERT model's trainer setting
LANGUAGES: dict[str, Language] = {
    "en": Language(True, False, ENGLISH_COVERAGE, "lower-cased, accents removed: the released ALBERT models' rule"),
    "de": Language(False, True, 1.0, "cased (nouns are capitalized), accents kept (ä ö ü ß)"),
    "fr": Language(True, True, 1.0, "lower-cased, accents kept (é è à ç: où is not ou)"),
    "ru": Language(True, True, 1.0, "lower-cased, accents kept (й and ё are letters of their own)"),
    "zh": Language(True, True, 0.9995, "Latin text lower-cased, no accents removed; coverage for a large "
                   "character set", False),
    "ja": Language(True, True, 0.9995, "accents kept (dakuten: が is not か); coverage for a large character "
                   "set", False),
    "th": Language(True, True, 1.0, "accents kept (Thai vowel and tone marks are combining characters)", False),
}  # fmt: skip


def language(code: str) -> Language:
    """The defaults of a language code (en, de, fr, ru, zh, ja, th); a clear error for any other."""
    if code not in LANGUAGES:
        raise ValueError(
            f"--language {code!r}: expected one of {', '.join(LANGUAGES)} (for another language, give "
            "--cased/--no-cased, --keep-accents and --character-coverage yourself; docs/data.md#languages)"
        )
    return LANGUAGES[code]


SAMPLE_BYTES = 64 << 10  # read from the start of each input (at most SAMPLE_FILES of them)
SAMPLE_FILES = 16
ACCENTED_SHARE = 0.003  # of the letters: English text has far fewer (café), German ~1%, French ~3%


# Scripts written without spaces between words, by their letters' code point ranges (Han and its
# extension A, hiragana, katakana; Thai), and the --language of each.
UNSPACED = {"zh or ja": ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x3040, 0x30FF)), "th": ((0x0E00, 0x0E7F),)}
UNSPACED_SHARE = 0.3  # of the letters: above it the text is mostly such a script


def warn_english_rule(paths: Sequence[str | os.PathLike], text_column: str = "text") -> None:
    """One WARNING when the English rule (accents removed) is about to train on text of another language:
    letters carrying accents often enough (schöne becomes schone, й becomes и), or mostly a script written
    without spaces, which wants its language's rule (no word-start piece before every sentence, a large
    character set's coverage). Looks at the first SAMPLE_BYTES of the first SAMPLE_FILES inputs; the
    output does not change."""
    from albert_lm.data.sources import reading

    letters, marked, unspaced = 0, Counter[str](), Counter[str]()
    for path in list(paths)[:SAMPLE_FILES]:
        with reading(path, text_column) as f:
            text = f.read(SAMPLE_BYTES).decode("utf-8", errors="ignore")
        letters += sum(c.isalpha() for c in text)
        marked.update(c for c in text if c.isalpha() and _accented(c))
        unspaced.update(
            code for c in text if c.isalpha() for code, spans in UNSPACED.items() if _within(c, spans)
        )
    if letters and unspaced and unspaced.most_common(1)[0][1] / letters >= UNSPACED_SHARE:
        code, n = unspaced.most_common(1)[0]
        logger.warning(
            "%.0f%% of the letters at the start of the inputs are of a script written without spaces: give "
            "--language %s. Under the English rule every sentence starts with a word-start piece of its own "
            "(about 4%% of the tokens), and the coverage is not a large character set's",
            100 * n / letters,
            code,
        )
    elif letters and marked.total() / letters >= ACCENTED_SHARE:
        shown = " ".join(c for c, _ in marked.most_common(6))
        logger.warning(
            "%.1f%% of the letters at the start of the inputs carry accents (%s), which the English rule "
            "removes (%s becomes %s): for another language give --language (de, fr, ru, ...), or "
            "--keep-accents",
            100 * marked.total() / letters,
            shown,
            *_stripped_example(marked.most_common(1)[0][0]),
        )


def _stripped_example(c: str) -> tuple[str, str]:
    """The most frequent accented letter of the text, beside what the English rule makes of it (й, и)."""
    return c, "".join(x for x in unicodedata.normalize("NFD", c) if not unicodedata.combining(x))


def _within(c: str, spans: Sequence[tuple[int, int]]) -> bool:
    return any(low <= ord(c) <= high for low, high in spans)


def _accented(c: str) -> bool:
    """Whether letter `c` decomposes into a base and combining marks (é, ü, й, が; not ß, not ø)."""
    return any(unicodedata.combining(m) for m in unicodedata.normalize("NFD", c))
