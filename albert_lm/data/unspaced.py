"""Text written without spaces between words (Chinese, Japanese, Thai, ...): joining wrapped lines,
and the sentence ends Bling Fire misses there.

- **Wrapped lines.** A book wrapped at a fixed width breaks lines inside words. Between two characters
  of such scripts a line break is dropped, not read as a space (a space there would make a word start,
  `▁`, in the middle of a word); elsewhere it stays a space, as in English.
- **Sentence ends.** Bling Fire (`albert_lm.data.corpus`) ends sentences at `。！？`, but it leaves the
  closing quote that follows (`」` `”` `』` `）` ...) at the start of the next sentence, and does not end
  them at the full-width full stop `．` (the 紅樓夢 edition here writes every sentence end with it).
  `split_unspaced` fixes both on Bling Fire's output: closers go back to the sentence they close, and
  sentences end after `．` (and after an ellipsis `……` that closing quotes follow). Semicolons `；﹔`
  do not end a sentence, as `;` does not in English: they join the clauses of one sentence, and the
  sentences of the books are short without them (median 17-22 characters, 90% under 47). Measured on
  the five Chinese books: docs/data.md.
- Thai, Lao, Khmer and Myanmar write no sentence punctuation (a space between sentences), which no
  rule here can tell from a space between phrases: give such text a sentence per line (`--format lines`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# Scripts written without spaces between words: Thai, Lao, Myanmar, Khmer; CJK radicals, symbols and
# punctuation, kana, bopomofo, enclosed and compatibility CJK, the ideographs (and extensions), CJK
# compatibility and small forms, half- and full-width forms. Hangul is not among them: Korean has spaces.
NO_SPACE = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f"
    "\u3190-\u31ff\u3200-\u33ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe6f\uff00-\uffef"
    "\U00020000-\U0003134f"
)
_NO_SPACE_CHAR = re.compile(f"[{NO_SPACE}]")
# Sentence ends of CJK text (Bling Fire ends sentences at 。！？ itself, not at the others).
TERMINALS = "。！？｡﹒﹗﹖．"
# Closing brackets and quotes that never begin a sentence (’ ' " may: ’Tis, quotes that open).
CLOSERS = "」』”）》〉】〕〗〙〛"
_QUOTES = "“”‘’\"'"
_UNWRAP = re.compile(
    rf"(?<=[{NO_SPACE}{_QUOTES}])[ \t]*\n[ \t\u3000]*(?=[{NO_SPACE}])"
    rf"|(?<=[{NO_SPACE}])[ \t]*\n[ \t\u3000]*(?=[{_QUOTES}])"
)
_CLOSER_AT_START = re.compile(f"\n([{CLOSERS}]+)")
# A run of sentence ends (a full-width full stop between digits, 3．14, is a decimal point) with its
# closers, or an ellipsis that closing quotes follow; then the next sentence's first character.
_END = re.compile(
    rf"((?:[。！？｡﹒﹗﹖]|．(?![0-9０-９]))+[{CLOSERS}’]*|[…⋯]+[{CLOSERS}’]+)"
    rf"(?=[^\s{CLOSERS}{TERMINALS}…⋯’,，、:：])"
)


def unwrap(text: str) -> str:
    """`text` with the line breaks between two characters of scripts written without spaces removed
    (with the spaces and indentation around them); other line breaks are left for the caller."""
    return _UNWRAP.sub("", text)


def split_unspaced(segmented: str) -> str:
    """Bling Fire's output (a sentence per line) with CJK sentence ends fixed: a closing quote or
    bracket put back at the end of the sentence it closes, and new lines after the ends Bling Fire
    does not know (`．`, an ellipsis before closing quotes). Text without CJK punctuation is
    returned as it is."""
    if segmented.isascii():
        return segmented
    return _END.sub("\\1\n", _CLOSER_AT_START.sub("\\1\n", segmented))


def unwrap_lines(lines: Iterable[str], limit: int = 1 << 16) -> Iterator[str]:
    """`lines` with a line that ends mid-sentence in a script without spaces joined to the next when
    that one starts in such a script with no indentation (a wrapped line of a book), up to `limit`
    characters. Lines that end a sentence, lines of other scripts and blank lines pass as they are."""
    held: str | None = None
    for line in lines:
        if held is not None and line[:1] and _NO_SPACE_CHAR.match(line) and not line[0].isspace():
            held += line
        else:
            if held is not None:
                yield held
            held = line
        if not _runs_on(held) or len(held) >= limit:
            yield held
            held = None
    if held is not None:
        yield held


def _runs_on(line: str) -> bool:
    last = line[-1:]
    return bool(last) and bool(_NO_SPACE_CHAR.match(last)) and last not in TERMINALS + CLOSERS + "\u3000"


def has_no_space_letter(piece: str) -> bool:
    """Whether a SentencePiece piece holds a character of a script written without spaces."""
    return bool(_NO_SPACE_CHAR.search(piece))


def word_count(text: str) -> int:
    """Words in `text`: the runs between spaces, except that each character of a script written without
    spaces counts as one (a Chinese word is one or two characters: a lower bound on no count at all)."""
    return sum(max(1, sum(c.isalnum() for c in _NO_SPACE_CHAR.findall(w))) for w in text.split())
