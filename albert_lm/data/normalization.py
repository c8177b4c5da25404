"""The normalization rule a tokenizer applies before SentencePiece: google-research's `preprocess_text`
(whitespace collapsed, accents removed by NFKD without combining marks, lower-casing), each step on or off
as tokenizer_config.json says (`do_lower_case`, `keep_accents`, `remove_space`, transformers'
AlbertTokenizer's names), and the checks that a vocabulary and a rule belong together.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from albert_lm.files import InputError

logger = logging.getLogger(__name__)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
RULE_KEYS = ("do_lower_case", "remove_space", "keep_accents")
# The booleans a tokenizer_config.json may hold (ours, and those transformers reads for BERT, ALBERT and
# other tokenizers): each is a JSON boolean or null (the default). "false" in quotes is a non-empty string,
# which Python and transformers read as true.
TOKENIZER_BOOLEANS = (*RULE_KEYS, "tokenize_chinese_chars", "strip_accents", "do_basic_tokenize",
                      "clean_up_tokenization_spaces", "add_prefix_space", "trim_offsets", "split_by_punct",
                      "add_bos_token", "add_eos_token", "legacy", "split_special_tokens")  # fmt: skip


def drop_combining(text: str) -> str:
    """Remove combining characters (`unicodedata.combining(c) != 0`), as the reference's per-character loop.

    Only the distinct non-ASCII characters of the text are looked up (combining marks are never ASCII),
    then one C-level regex pass deletes them.
    """
    marks = [c for c in set("".join(_NON_ASCII.findall(text))) if unicodedata.combining(c)]
    if not marks:
        return text
    return re.sub("[" + "".join(re.escape(c) for c in marks) + "]", "", text)


def preprocess_text(
    text: str, lower: bool = True, remove_space: bool = True, keep_accents: bool = False
) -> str:
    """google-research's `preprocess_text`: collapse whitespace, NFKD without combining marks, lower-case.

    Equal, character for character, to the reference's list comprehension over `unicodedata.combining`;
    ASCII text skips the Unicode steps since NFKD is the identity on it.
    """
    if remove_space:
        text = " ".join(text.split())
    if not keep_accents and not text.isascii():
        text = drop_combining(unicodedata.normalize("NFKD", text))
    if lower:
        text = text.lower()
    return text


def read_rule(config_file: Path) -> dict[str, Any]:
    """The normalization rule a tokenizer_config.json records (the keys it has), checked, and the text's
    `language` where it says one (a code, for model cards)."""
    try:
        saved = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else e
        raise ValueError(f"{config_file}: not readable JSON ({why})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{config_file}: expected a JSON object")
    check_booleans(saved, config_file)
    rule: dict[str, Any] = {key: saved[key] for key in RULE_KEYS if saved.get(key) is not None}
    if isinstance(saved.get("language"), str) and saved["language"].strip():
        rule["language"] = saved["language"].strip()
    return rule


def check_booleans(config: Mapping[str, Any], config_file: Path) -> None:
    """Refuse a tokenizer config whose boolean field (TOKENIZER_BOOLEANS) holds anything but true, false
    or null, naming the file and the field: `"do_lower_case": "false"` would otherwise read as true."""
    for key in TOKENIZER_BOOLEANS:
        value = config.get(key)
        if value is not None and not isinstance(value, bool):
            shown = json.dumps(value, ensure_ascii=False)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise InputError(
                config_file,
                f"{key}: expected true or false, got {shown} (a JSON boolean has no quotes; null "
                "means the default)",
            )


class RuledVocabulary(Protocol):
    """What `unreachable_pieces` reads of a tokenizer (AlbertTokenizer has it): named here so this
    module, which the tokenizer imports, does not import the tokenizer back."""

    @property
    def sp(self) -> Any: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def do_lower_case(self) -> bool: ...
    @property
    def keep_accents(self) -> bool: ...
    @property
    def model_file(self) -> Path: ...


def unreachable_pieces(tok: RuledVocabulary) -> list[str]:
    """Pieces holding a character the tokenizer's rule removes before SentencePiece sees the text: an
    upper-case letter under lower-casing, a letter with a removable accent under accent removal."""
    out = []
    for i in range(5, tok.vocab_size):  # ids 0-4: ALBERT's special pieces
        piece = tok.sp.id_to_piece(i)
        if tok.do_lower_case and piece.lower() != piece:
            out.append(piece)
        elif not tok.keep_accents and not piece.isascii():
            decomposed = unicodedata.normalize("NFKD", piece)
            if drop_combining(decomposed) != decomposed:
                out.append(piece)
    return out


_WARNED: set[str] = set()


def warn_unreachable(tok: RuledVocabulary, config_name: str) -> None:
    """Warn (once per file) when many pieces hold what the tokenizer's rule removes: a cased or accented
    vocabulary loaded without the tokenizer config (`config_name`) that says so."""
    if not (tok.do_lower_case or not tok.keep_accents) or str(tok.model_file) in _WARNED:
        return
    unreachable = unreachable_pieces(tok)
    if len(unreachable) > max(10, tok.vocab_size // 100):
        _WARNED.add(str(tok.model_file))
        logger.warning(
            "%s: %d of %d pieces hold upper-case or accented letters (e.g. %s) that this tokenizer's rule "
            "(do_lower_case %s, keep_accents %s) never produces, and no %s says otherwise: was it trained "
            "with --cased or --keep-accents? Keep the %s written beside the model by `albert tokenizer train`",
            tok.model_file,
            len(unreachable),
            tok.vocab_size,
            " ".join(unreachable[:5]),
            tok.do_lower_case,
            tok.keep_accents,
            config_name,
            config_name,
        )
