"""The tokenizer of a web export: `tokenizer.json` (the Hugging Face tokenizers format, which transformers.js
reads) and `tokenizer_config.json`, built to give the ids of `albert_lm.data.tokenizer.AlbertTokenizer`.

What tokenizer.json does, step by step (transformers.js runs it in the browser):

1. transformers.js itself collapses whitespace and strips the ends when tokenizer_config.json says
   `remove_space` (the tokenizer's own rule key, kept).
2. Normalizers, the tokenizer's rule (`albert_lm.data.normalization.preprocess_text`): the separators
   Python's `str.split` knows and JavaScript's `\\s` does not become spaces; NFKD with the combining
   marks removed (a `Replace` of exactly the characters `unicodedata.combining` names, not
   transformers.js's `StripAccents`, which removes every mark) unless `keep_accents`; lower-casing unless
   `do_lower_case` is off.
3. The model's SentencePiece normalization (`nmt_nfkc`), spelled out: transformers.js does not read a
   precompiled charsmap (its `Precompiled` is NFKC with a few fixed rules), so the characters where the
   charsmap and NFKC differ are replaced before NFKC (removed, made spaces, or carried through it under a
   noncharacter). Where combining marks reach it (rules keeping accents), the text is cut by a
   noncharacter NFKC joins to nothing (removed after it) where the charsmap maps apart what NFKC would
   reorder or join: two marks no decomposition holds side by side, U+0344, a Hangul syllable and a
   trailing jamo. Then SentencePiece's whitespace handling (runs of spaces collapsed, ends stripped).
   Characters Python's Unicode tables do not know yet pass every albert-lm step unchanged, unknown to
   the vocabulary; a browser's newer tables might decompose them, so they become one noncharacter
   first, unknown alike.
4. `Metaspace`: spaces become "▁", with SentencePiece's dummy prefix when the model adds one.
5. `Unigram` with the model's scores; user-defined pieces get the score SentencePiece gives them
   (always whole pieces). Pieces SentencePiece never matches in text (`<pad>`, `<unk>`, `[CLS]`, `[SEP]`,
   `[MASK]`, unused pieces) and pieces the digit-comma rule splits ("▁1,") are renamed with a space,
   which no text reaches after `Metaspace`, so they are never chosen (ids unchanged).
6. `TemplateProcessing`: `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, type ids 0 then 1.

Known differences from albert-lm's ids:
- An empty second text: transformers.js reads `text_pair=""` as no pair ([CLS] a [SEP], not
  [CLS] a [SEP] [SEP]); the web page builds pairs from each text's ids itself.
- U+FEFF under `remove_space`, for a model whose normalization does not make it a space (identity
  normalization): transformers.js's own collapse (JavaScript's `\\s`) takes it for a space.
- Ties: SentencePiece adds scores in float32, transformers.js in float64, so segmentations scoring the
  same, or within float32's rounding, may be chosen differently ("nnn" after an unknown character).
- The digit-comma rule: its pieces are never chosen, which gives the rule's pieces wherever the best
  segmentation without them is the rule's; where a piece with a comma inside scores better ("1,4" in
  "31,454", where albert-lm gives "▁31" "," "45" "4"), transformers.js takes it.
- Rules keeping accents, on text not in a canonical form: NFKC joins a combining mark to a character
  whose decomposition the charsmap's entries do not pair with that mark (℅ + U+0328 is "c/ǫ" for NFKC,
  "c/o" + U+0328 for SentencePiece).

tokenizer_config.json keeps the keys already there (albert-lm reads its rule keys from it) and adds
transformers.js's: the tokenizer class and the special tokens (their renamed strings, so that
transformers.js finds their ids).
"""

from __future__ import annotations

import functools
import importlib
import json
import unicodedata
from pathlib import Path
from typing import Any

from albert_lm.data.tokenizer import CONFIG_FILE, SPECIAL_PIECES, SPIECE_UNDERLINE, AlbertTokenizer
from albert_lm.data.wordpiece import WordPieceTokenizer
from albert_lm.files import atomic_write

__all__ = ["TOKENIZER_FILE", "tokenizer_json", "write_web_tokenizer"]

TOKENIZER_FILE = "tokenizer.json"
HIDDEN = " "  # appended to pieces text must never reach: no text holds a space after Metaspace
FLT_MIN = 1.1754943508222875e-38  # SentencePiece's starting "max score" of user-defined pieces
# Noncharacters (never assigned, never normalized): what characters every step must leave alone become
# for NFKC's time, and then become again; the first stands in for characters no piece holds.
STAND_IN = "\ufdd0"
PLACEHOLDERS = tuple(chr(cp) for cp in range(0xFDD1, 0xFDEF))
BLOCKER = "\ufdef"  # a starter NFKC joins to nothing: cuts the text where the charsmap cuts it
SPECIAL_KEYS = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")


def write_web_tokenizer(tokenizer: AlbertTokenizer, folder: Path) -> list[Path]:
    """Write tokenizer.json and tokenizer_config.json into `folder` (created if missing): transformers.js's
    `AutoTokenizer.from_pretrained(folder)` then gives `tokenizer`'s ids, type ids and attention mask."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config_out = folder / CONFIG_FILE
    config = _read_config(config_out)  # first: an unreadable one leaves the folder as it was
    if isinstance(tokenizer, WordPieceTokenizer):  # BERT's own tokenizer.json, which transformers.js reads
        written = tokenizer.save_pretrained(folder)
        atomic_write(
            config_out, json.dumps({**config, **json.loads(config_out.read_text())}, indent=2) + "\n"
        )
        return written
    spec = tokenizer_json(tokenizer)
    tok_out = folder / TOKENIZER_FILE
    atomic_write(tok_out, json.dumps(spec, ensure_ascii=False, separators=(",", ":")) + "\n")
    names = _special_names(spec)
    config.update(
        tokenizer_class="AlbertTokenizer",
        do_lower_case=tokenizer.do_lower_case,
        remove_space=tokenizer.remove_space,
        keep_accents=tokenizer.keep_accents,
        clean_up_tokenization_spaces=False,
        padding_side="right",
        **{key: names[i] for i, key in enumerate(SPECIAL_KEYS)},
    )
    atomic_write(config_out, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return [tok_out, config_out]


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return saved


def _special_names(spec: dict[str, Any]) -> list[str]:
    vocab = spec["model"]["vocab"]
    return [vocab[i][0] for i in range(len(SPECIAL_PIECES))]


def model_proto(tokenizer: AlbertTokenizer) -> Any:
    """The tokenizer's SentencePiece model (protocol buffer): scores, piece types, normalizer settings."""
    model_pb2: Any = importlib.import_module("sentencepiece.sentencepiece_model_pb2")
    proto = model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.sp.serialized_model_proto())
    return proto


def tokenizer_json(tokenizer: AlbertTokenizer) -> dict[str, Any]:
    """tokenizer.json's content for `tokenizer` (see the module's docstring)."""
    proto = model_proto(tokenizer)
    norm = proto.normalizer_spec
    if proto.trainer_spec.treat_whitespace_as_suffix:
        raise ValueError(f"{tokenizer.model_file}: treat_whitespace_as_suffix models are not supported")
    if proto.trainer_spec.model_type != proto.trainer_spec.UNIGRAM:
        raise ValueError(f"{tokenizer.model_file}: not a unigram SentencePiece model")
    if proto.trainer_spec.byte_fallback:
        raise ValueError(f"{tokenizer.model_file}: byte-fallback models are not supported by transformers.js")
    prepend = "always" if norm.add_dummy_prefix else "never"
    vocab = _vocab(tokenizer, proto)
    names = [vocab[i][0] for i in range(len(SPECIAL_PIECES))]
    cls, sep = names[2], names[3]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": {"type": "Sequence", "normalizers": _normalizers(tokenizer, proto)},
        "pre_tokenizer": {"type": "Metaspace", "replacement": SPIECE_UNDERLINE, "prepend_scheme": prepend,
                          "split": True},
        "post_processor": _template(cls, sep, tokenizer.cls_token_id, tokenizer.sep_token_id),
        "decoder": {"type": "Metaspace", "replacement": SPIECE_UNDERLINE, "prepend_scheme": prepend,
                    "split": True},
        "model": {"type": "Unigram", "unk_id": tokenizer.unk_token_id, "vocab": vocab, "byte_fallback": False},
    }  # fmt: skip


def _vocab(tokenizer: AlbertTokenizer, proto: Any) -> list[list[Any]]:
    """[piece, score] per id; pieces SentencePiece never matches in text, and digit-comma pieces, renamed
    out of reach; user-defined pieces scored as SentencePiece scores them."""
    piece_type = type(proto).SentencePiece
    normal = [p.score for p in proto.pieces if p.type == piece_type.NORMAL]
    max_score = max([FLT_MIN, *normal])  # SentencePiece starts its maximum at FLT_MIN, not -FLT_MAX
    out: list[list[Any]] = []
    for p in proto.pieces:
        if p.type == piece_type.NORMAL and not _is_digit_comma(p.piece):
            out.append([p.piece, float(p.score)])
        elif p.type == piece_type.USER_DEFINED:  # always whole: SentencePiece's bonus for them
            out.append([p.piece, len(p.piece) * max_score - 0.1])
        else:  # control, unknown, unused, byte pieces, and the digit-comma rule's pieces
            out.append([p.piece + HIDDEN, 0.0 if p.type != piece_type.NORMAL else float(p.score)])
    names = [piece for piece, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{tokenizer.model_file}: pieces collide once renamed for the web tokenizer")
    return out


def _is_digit_comma(piece: str) -> bool:
    """A piece the digit-comma rule splits ("▁1,": a comma after a digit, `AlbertTokenizer.tokenize`)."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def _template(cls: str, sep: str, cls_id: int, sep_id: int) -> dict[str, Any]:
    def special(name: str, type_id: int) -> dict[str, Any]:
        return {"SpecialToken": {"id": name, "type_id": type_id}}

    def seq(name: str, type_id: int) -> dict[str, Any]:
        return {"Sequence": {"id": name, "type_id": type_id}}

    return {
        "type": "TemplateProcessing",
        "single": [special(cls, 0), seq("A", 0), special(sep, 0)],
        "pair": [special(cls, 0), seq("A", 0), special(sep, 0), seq("B", 1), special(sep, 1)],
        "special_tokens": {
            cls: {"id": cls, "ids": [cls_id], "tokens": [cls]},
            sep: {"id": sep, "ids": [sep_id], "tokens": [sep]},
        },
    }


def _char_class(cps: list[int]) -> str:
    """A regex character class of the code points `cps`, as ranges of \\x{...} escapes (Oniguruma's
    syntax, which transformers.js rewrites for JavaScript)."""
    cps = sorted(set(cps))
    parts = []
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        parts.append(_esc(cps[i]) if i == j else f"{_esc(cps[i])}-{_esc(cps[j])}")
        i = j + 1
    return "[" + "".join(parts) + "]"


def _esc(cp: int) -> str:
    return f"\\x{{{cp:X}}}"


def _replace(cps: list[int], content: str) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"Regex": _char_class(cps)}, "content": content}


def _regex(pattern: str, content: str) -> dict[str, Any]:
    return {"type": "Replace", "pattern": {"Regex": pattern}, "content": content}


@functools.cache
def _unicode_tables() -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Code points Python's `unicodedata` calls unassigned, the combining ones (class != 0), and the
    separators of `str.split`."""
    unassigned, combining, spaces = [], [], []
    for cp in range(0x110000):
        c = chr(cp)
        if unicodedata.category(c) == "Cn":
            unassigned.append(cp)
        elif unicodedata.combining(c):
            combining.append(cp)
        if c.isspace():
            spaces.append(cp)
    return tuple(unassigned), tuple(combining), tuple(spaces)


def _normalizers(tokenizer: AlbertTokenizer, proto: Any) -> list[dict[str, Any]]:
    """The rule (`preprocess_text`), then SentencePiece's own normalization."""
    unassigned, combining, spaces = _unicode_tables()
    charsmap = _Charsmap(proto.normalizer_spec.precompiled_charsmap, proto)
    steps: list[dict[str, Any]] = []
    if tokenizer.remove_space:  # str.split's separators; the runs are collapsed at the end
        steps.append(_replace(list(spaces), " "))
    # Characters newer than Python's Unicode tables pass every step unchanged in albert-lm, but a
    # browser's newer tables may decompose or lower-case them: they become one stand-in, unknown alike.
    strangers = [cp for cp in unassigned if charsmap.keeps(cp) and cp not in charsmap.vocab_chars]
    steps.append(_replace(strangers, STAND_IN))
    if not tokenizer.keep_accents:
        steps += [{"type": "NFKD"}, _replace(list(combining), "")]
    if tokenizer.do_lower_case:
        steps.append({"type": "Lowercase"})
    steps += charsmap.steps(marks=tokenizer.keep_accents)
    norm = proto.normalizer_spec
    if norm.remove_extra_whitespaces:
        steps += [_regex(" {2,}", " "), _regex("\\A | \\z", "")]
    return steps


class _Charsmap:
    """A model's precompiled charsmap as Replace steps around NFKC: where the map and NFKC differ."""

    def __init__(self, blob: bytes, proto: Any) -> None:
        from tokenizers import normalizers

        self.blob = blob
        self.vocab_chars = {ord(c) for p in proto.pieces for c in p.piece}
        if self.vocab_chars & {ord(c) for c in (STAND_IN, BLOCKER, *PLACEHOLDERS)}:
            raise ValueError("the vocabulary holds noncharacters (U+FDD0-U+FDEF): no web tokenizer for it")
        self._pre = normalizers.Precompiled(blob) if blob else None
        self._map = _single_char_map(self._pre) if self._pre else {}

    def keeps(self, cp: int) -> bool:
        return self._map.get(cp, chr(cp)) == chr(cp)

    def steps(self, marks: bool) -> list[dict[str, Any]]:
        """The charsmap's steps; `marks`: combining marks reach it (the rule keeps accents)."""
        if not self.blob:
            return []
        by_target: dict[str, list[int]] = {}
        kept: list[int] = []  # the map leaves them, NFKC would change them
        for cp, target in self._map.items():
            if target == chr(cp):
                kept.append(cp)
            elif target != unicodedata.normalize("NFKC", chr(cp)):
                by_target.setdefault(target, []).append(cp)
        steps = [_replace(cps, target) for target, cps in sorted(by_target.items())]
        unknown = [cp for cp in kept if cp not in self.vocab_chars]
        if unknown:
            steps.append(_replace(unknown, STAND_IN))
        known = [cp for cp in kept if cp in self.vocab_chars]
        if len(known) > len(PLACEHOLDERS):
            raise ValueError("the charsmap keeps too many characters of the vocabulary from NFKC")
        steps += [_replace([cp], ph) for cp, ph in zip(known, PLACEHOLDERS, strict=False)]
        cuts = self._cuts() if marks else None
        steps += [_regex(cuts, BLOCKER)] if cuts else []
        steps.append({"type": "NFKC"})
        steps += [_replace([ord(BLOCKER)], "")] if cuts else []
        steps += [_replace([ord(ph)], chr(cp)) for cp, ph in zip(known, PLACEHOLDERS, strict=False)]
        return steps

    def _cuts(self) -> str:
        """A regex matching between two characters the charsmap maps apart but NFKC would reorder or join:
        two combining marks no decomposition holds side by side (so no charsmap entry does: SentencePiece
        keeps them apart, in their order, while NFKC reorders them or joins the second to the letter
        before the first), a mark that decomposes into marks (U+0344) where the map never joins it to
        the letter before, and a Hangul syllable and a trailing jamo where the map never joins them."""
        marks = list(_unicode_tables()[1])
        together = "|".join(f"(?<={_esc(a)}){_char_class(list(b))}" for a, b in sorted(_mark_pairs().items()))
        branches = [f"(?<={_char_class(marks)})(?!{together})"]
        apart = [cp for cp in marks if self._never_joined(chr(cp))]
        if apart:
            branches.append(f"(?={_char_class(apart)})(?<=[\\x{{1}}-\\x{{10FFFF}}])")  # not at the start
        ahead = marks
        if self._pre is not None and self._pre.normalize_str("\uac00\u11a8") != "\uac01":
            trailing = list(range(0x11A8, 0x11C3))  # after a syllable without one, as NFKC joins them
            branches.append(f"(?={_char_class(trailing)})(?<={_char_class(list(range(0xAC00, 0xD7A4, 28)))})")
            ahead = [*marks, *trailing]
        return f"(?={_char_class(ahead)})(?:{'|'.join(branches)})"

    def _never_joined(self, mark: str) -> bool:
        decomposed = unicodedata.normalize("NFKD", mark)
        if len(decomposed) < 2 or self._pre is None:
            return False
        return all(
            self._pre.normalize_str(c + mark) == self._pre.normalize_str(c) + self._pre.normalize_str(mark)
            for c in "a\u03b9\u03c5"
        )


@functools.cache
def _mark_pairs() -> dict[int, frozenset[int]]:
    """Combining marks that some character's decomposition (NFD, NFKD or one step) holds side by side:
    {first: the marks that follow it there}."""
    marks = set(_unicode_tables()[1])
    pairs: dict[int, set[int]] = {}
    for cp in range(0x110000):
        c = chr(cp)
        if not unicodedata.decomposition(c):
            continue
        step = "".join(chr(int(h, 16)) for h in unicodedata.decomposition(c).split() if not h.startswith("<"))
        for form in (unicodedata.normalize("NFD", c), unicodedata.normalize("NFKD", c), step):
            for a, b in zip(form, form[1:], strict=False):
                if ord(a) in marks and ord(b) in marks:
                    pairs.setdefault(ord(a), set()).add(ord(b))
    return {a: frozenset(b) for a, b in pairs.items()}


def _single_char_map(pre: Any) -> dict[int, str]:
    """What the charsmap (`pre`, its `tokenizers` normalizer) does to each character alone, where that is
    not what Python's NFKC does (and every character it leaves unchanged although NFKC would change it)."""
    out = {}
    for cp in range(1, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        got = pre.normalize_str(c)
        if got != unicodedata.normalize("NFKC", c):
            out[cp] = got
    return out
