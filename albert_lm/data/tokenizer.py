"""ALBERT's SentencePiece tokenizer: loading, encoding exactly as google-research does, and training.

Reference behaviour (google-research/albert `tokenization.py`, the rule every released ALBERT model was
trained with, and which transformers 4.x's sentencepiece-based `AlbertTokenizer` reproduces):

1. `preprocess_text` (`albert_lm.data.normalization`): whitespace runs collapsed to one space and the ends
   stripped (`" ".join(s.split())`), NFKD normalization with combining marks removed (accents dropped),
   then lower-casing: the released models' rule; `keep_accents` and `do_lower_case=False` (saved in
   tokenizer_config.json) give other languages theirs (`albert_lm.data.languages`).
2. SentencePiece `EncodeAsPieces` (the model's own `nmt_nfkc` normalization runs inside).
3. `encode_pieces`' digit-comma rule: a piece longer than one character that ends with "," after a digit
   (e.g. "▁1,") is re-encoded without the comma and any "▁", the leading "▁" is dropped again when the
   original piece had none, and "," is appended as its own piece. So "1,000" never learns a "1," piece.

Differences, written down:
- transformers 4.x additionally maps "``" and "''" to '"' before normalizing; google-research does not, and
  neither do we (we follow the rule the released models were trained with).
- transformers 5's fast tokenizer (the only ALBERT tokenizer left in transformers 5) is a different
  implementation: on about one book line in five it yields other ids (e.g. "vine-clad" becomes
  `vine - ▁clad` instead of `vine - clad`), so we do not use it.
- Special-token strings inside the text ("[MASK]") are not parsed as special tokens (google-research).

The API is transformers-like (`from_pretrained`, `encode`, `decode`, `__call__` for (pairs of) texts with
truncation and padding, `save_pretrained`, ...). Training one: `albert_lm.data.tokenizer_training`; a BERT
WordPiece vocabulary behind the same API: `albert_lm.data.wordpiece`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np
import numpy.typing as npt
import sentencepiece as spm

from albert_lm.data.call_args import PADDINGS, TRUNCATIONS, checked_ids, texts_and_pairs
from albert_lm.data.masking import word_start_table
from albert_lm.data.normalization import (
    RULE_KEYS,
    drop_combining,
    preprocess_text,
    read_rule,
    warn_unreachable,
)
from albert_lm.data.truncation import truncate_pair_from_end
from albert_lm.files import atomic_write

__all__ = ["RULE_KEYS", "AlbertTokenizer", "load_sentencepiece", "preprocess_text"]


SPIECE_UNDERLINE = "\u2581"
MODEL_FILE = "spiece.model"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
# The released model's user-defined pieces (google-research README): always whole pieces.
USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac")


class AlbertTokenizer:
    """SentencePiece ALBERT tokenizer with google-research's normalization and digit-comma rule."""

    model_input_names = ("input_ids", "token_type_ids", "attention_mask")
    model_max_length = 512  # what `truncation=True` cuts to without a max_length: ALBERT's positions

    def __init__(
        self,
        model_file: str | os.PathLike,
        do_lower_case: bool = True,
        remove_space: bool = True,
        keep_accents: bool = False,
        language: str | None = None,
    ) -> None:
        self.model_file = Path(model_file)
        self.language = language  # the text's language code, where its training said it: for model cards
        self.do_lower_case = do_lower_case
        self.remove_space = remove_space
        self.keep_accents = keep_accents
        self.sp = load_sentencepiece(self.model_file)
        self.pad_token, self.unk_token, self.cls_token, self.sep_token, self.mask_token = SPECIAL_PIECES
        self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id = (
            range(5)
        )
        self.all_special_ids = [0, 1, 2, 3, 4]
        self.all_special_tokens = list(SPECIAL_PIECES)
        # Pieces the digit-comma rule rewrites: a lookup table makes the rule cost one vectorised check.
        pieces = [self.sp.id_to_piece(i) for i in range(self.vocab_size)]
        self._digit_comma = np.array([_is_digit_comma(p) for p in pieces], dtype=bool)
        self._digit_comma_ids = frozenset(np.flatnonzero(self._digit_comma).tolist())

    # ------------------------------------------------------------------ loading and saving
    # Other vocabularies behind this interface, tried before spiece.model: subclasses that say which paths
    # are theirs (`folder_of`). BERT's WordPiece is one (its module adds it; `albert_lm.data` imports it).
    other_kinds: ClassVar[list[type[AlbertTokenizer]]] = []

    @classmethod
    def folder_of(cls, path: Path) -> Path | None:
        """The folder of this kind's tokenizer that `path` names, or None: spiece.model is read last."""
        return None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> AlbertTokenizer:
        """Load a `spiece.model` file, or a folder holding one, with the normalization rule of the
        tokenizer_config.json in that folder (beside the file; keyword arguments win). Without one the
        rule is the released models' (lower-cased, accents removed), and a vocabulary that rule cannot
        reach (upper-case or accented pieces) is warned about."""
        if not str(path).strip():  # Path("") is the current folder: never what an empty value meant
            raise ValueError("tokenizer path: empty; expected a spiece.model file or a folder holding one")
        path = Path(path)
        for kind in AlbertTokenizer.other_kinds:  # BERT's WordPiece (a student of a BERT teacher)
            if (folder := kind.folder_of(path)) is not None:
                return kind.from_pretrained(folder, **kwargs)
        if path.is_dir():
            model_file = path / MODEL_FILE
            if not model_file.is_file():
                raise FileNotFoundError(
                    f"{path}: folder holds no {MODEL_FILE} (expected a SentencePiece model) and no "
                    "tokenizer.json or vocab.txt (a WordPiece one)"
                )
        elif path.is_file():
            model_file = path
        else:
            raise FileNotFoundError(f"{path}: no such tokenizer file or folder")
        config_file = model_file.parent / CONFIG_FILE
        saved = read_rule(config_file) if config_file.is_file() else {}
        for key, value in saved.items():
            kwargs.setdefault(key, value)
        tok = cls(model_file, **kwargs)
        if not saved:
            warn_unreachable(tok, CONFIG_FILE)
        return tok

    def save_pretrained(self, save_directory: str | os.PathLike) -> list[Path]:
        """Write spiece.model and tokenizer_config.json into `save_directory` (created if missing)."""
        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        model_out = out / MODEL_FILE
        if not (model_out.exists() and model_out.samefile(self.model_file)):
            atomic_write(model_out, self.sp.serialized_model_proto())
        config = {
            "tokenizer_class": "AlbertTokenizer",
            "do_lower_case": self.do_lower_case,
            "remove_space": self.remove_space,
            "keep_accents": self.keep_accents,
        }
        if self.language is not None:
            config["language"] = self.language
        config_out = out / CONFIG_FILE
        atomic_write(config_out, json.dumps(config, indent=2) + "\n")
        return [model_out, config_out]

    # ------------------------------------------------------------------ vocabulary
    @functools.cached_property
    def fingerprint(self) -> str:
        """The vocabulary's identity: a hash of every piece with its score and type, and of the
        normalization rule (case, accents, spaces). Equal for copies and for the same training
        repeated; differs for any other vocabulary of the same size. Compared wherever a model meets
        data or a tokenizer (docs/errors.md)."""
        rule = f"lower={self.do_lower_case};accents={self.keep_accents}"
        if not self.remove_space:  # added later: fingerprints of the usual rule stay as they were
            rule += ";space=kept"
        h = hashlib.sha256(rule.encode())
        for i in range(self.vocab_size):
            h.update(
                f"\n{self.sp.id_to_piece(i)}\t{self.sp.get_score(i)!r}\t{self.sp.is_control(i)}".encode()
            )
        return h.hexdigest()[:16]

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        return {self.sp.id_to_piece(i): i for i in range(self.vocab_size)}

    @functools.cached_property
    def pieces(self) -> list[str]:
        """Every piece, by id."""
        return [self.sp.id_to_piece(i) for i in range(self.vocab_size)]

    def word_start_table(self) -> np.ndarray:
        """(V,) bool: does the piece begin a word (whole-word masking's grouping, `masking.is_start_piece`)."""
        return word_start_table(self.pieces)

    # str is itself a Sequence[str]: mypy calls the overloads overlapping, but the str one comes first,
    # as the isinstance check below does.
    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int: ...  # type: ignore[overload-overlap]
    @overload
    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...
    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return self.sp.piece_to_id(tokens)
        return [self.sp.piece_to_id(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        if isinstance(ids, (int, np.integer)):
            return self.sp.id_to_piece(int(ids))
        return [self.sp.id_to_piece(int(i)) for i in ids]

    # ------------------------------------------------------------------ encoding
    def preprocess(self, text: str) -> str:
        return preprocess_text(text, self.do_lower_case, self.remove_space, self.keep_accents)

    def preprocess_batch(self, texts: Sequence[str]) -> list[str]:
        """`preprocess` of many texts, with one pass of each step over all of them.

        Same result as one call per text: after the whitespace collapse the texts are joined by NUL, which
        is neither cased nor decomposable, so NFKD and lower-casing act on each side of it independently.
        Texts holding a NUL go one by one.
        """
        if not texts:
            return []
        if self.remove_space:
            texts = [" ".join(t.split()) for t in texts]  # faster than any regex over the joined text
        big = "\0".join(texts)
        if big.count("\0") != len(texts) - 1:
            return [self.preprocess(t) for t in texts]
        if not self.keep_accents and not big.isascii():
            big = drop_combining(unicodedata.normalize("NFKD", big))
        if self.do_lower_case:
            big = big.lower()
        return big.split("\0")

    def tokenize(self, text: str) -> list[str]:
        """Pieces of `text` (google-research `encode_pieces`, after `preprocess_text`)."""
        pieces = self.sp.encode(self.preprocess(text), out_type=str)
        out: list[str] = []
        for piece in pieces:
            out.extend(self._split_digit_comma(piece) if _is_digit_comma(piece) else [piece])
        return out

    def _split_digit_comma(self, piece: str) -> list[str]:
        new = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
        if piece[0] != SPIECE_UNDERLINE and new and new[0][0] == SPIECE_UNDERLINE:
            new = new[1:] if len(new[0]) == 1 else [new[0][1:], *new[1:]]
        return [*new, piece[-1]]

    def encode_batch(
        self, texts: Sequence[str], num_threads: int = 1, preprocess: bool = True
    ) -> list[list[int]]:
        """Ids of many texts without special tokens; SentencePiece encodes the batch in C++ threads."""
        if preprocess:
            texts = self.preprocess_batch(texts)
        batch = self.sp.encode(list(texts), num_threads=num_threads)
        for k, ids in enumerate(batch):
            # The rule is rare (a few pieces per thousand lines): only rewrite lines that need it.
            if not self._digit_comma_ids.isdisjoint(ids):
                batch[k] = self._apply_digit_comma(ids)
        return batch

    def encode_flat(
        self, texts: Sequence[str], dtype: npt.DTypeLike = np.int32, num_threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """`encode_batch` as one array: ((N,) ids of all texts back to back, (len(texts),) lengths).

        The digit-comma check runs vectorised over the whole batch; the few texts it hits are redone.
        """
        # One thread by default: the data pipeline runs one process per core (SentencePiece's default, -1,
        # would start a thread per core in every process).
        batch = self.sp.encode(self.preprocess_batch(texts), num_threads=num_threads)
        lens = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
        flat: np.ndarray = np.fromiter(
            itertools.chain.from_iterable(batch), dtype=dtype, count=int(lens.sum())
        )
        hits = np.flatnonzero(self._digit_comma[flat])
        if len(hits):
            ends = np.cumsum(lens)
            parts, done = [], 0
            for row in np.unique(np.searchsorted(ends, hits, side="right")).tolist():
                start = int(ends[row] - lens[row])
                fixed = self._apply_digit_comma(batch[row])
                parts += [flat[done:start], np.array(fixed, dtype=dtype)]
                done = int(ends[row])
                lens[row] = len(fixed)
            flat = np.concatenate([*parts, flat[done:]])  # splice the rewritten texts in
        return flat, lens

    def _apply_digit_comma(self, ids: list[int]) -> list[int]:
        out: list[int] = []
        for i in ids:
            if i in self._digit_comma_ids:
                out.extend(self.sp.piece_to_id(p) for p in self._split_digit_comma(self.sp.id_to_piece(i)))
            else:
                out.append(i)
        return out

    def encode(self, text: str, text_pair: str | None = None, **options: Any) -> list[int]:
        """Ids of `text` (and `text_pair`): `[CLS] A [SEP] (B [SEP])` when `add_special_tokens`.
        `options` are `encode_pair`'s: add_special_tokens, max_length, truncation."""
        return self.encode_pair(text, text_pair, **options)["input_ids"]

    def build_inputs_with_special_tokens(self, ids_a: list[int], ids_b: list[int] | None = None) -> list[int]:
        out = [self.cls_token_id, *ids_a, self.sep_token_id]
        if ids_b is not None:
            out += [*ids_b, self.sep_token_id]
        return out

    def encode_pair(
        self,
        text: str,
        text_pair: str | None = None,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: bool | str = False,
    ) -> dict[str, list[int]]:
        """input_ids, token_type_ids (0 for A, 1 for B) and attention_mask of one (pair of) text(s).

        truncation: False, True / "longest_first" (drop the last token of the longer side until it fits,
        as transformers does), "only_first" or "only_second"; to `max_length`, else `model_max_length`.
        """
        if not isinstance(text, str) or not isinstance(
            text_pair, str | None
        ):  # WordPiece joins a tuple's halves
            raise TypeError(f"encode_pair: expected a text and an optional second text, got {text!r:.80}")
        if truncation not in TRUNCATIONS:
            raise ValueError(
                f"truncation={truncation!r}: expected one of {', '.join(map(repr, TRUNCATIONS))}"
            )
        ids_a = self.encode_batch([text])[0]
        ids_b = None if text_pair is None else self.encode_batch([text_pair])[0]
        if truncation and truncation != "do_not_truncate":
            max_length = self.model_max_length if max_length is None else max_length
            specials = (3 if ids_b is not None else 2) if add_special_tokens else 0
            ids_a, ids_b = truncate_pair_from_end(ids_a, ids_b, max_length - specials, truncation)
        if add_special_tokens:
            input_ids = self.build_inputs_with_special_tokens(ids_a, ids_b)
            token_type_ids = [0] * (len(ids_a) + 2) + ([1] * (len(ids_b) + 1) if ids_b is not None else [])
        else:
            input_ids = ids_a + (ids_b or [])
            token_type_ids = [0] * len(ids_a) + [1] * len(ids_b or [])
        return {
            "input_ids": input_ids,
            "token_type_ids": token_type_ids,
            "attention_mask": [1] * len(input_ids),
        }

    def __call__(
        self,
        text: str | Sequence[str],
        text_pair: str | Sequence[str] | None = None,
        add_special_tokens: bool = True,
        max_length: int | None = None,
        truncation: bool | str = False,
        padding: bool | str = False,
        return_tensors: str | None = None,
    ) -> dict[str, Any]:
        """transformers-style call: one text or pair, or a batch of them; padding True/"longest"/"max_length".

        Pairs: two lists, `tok([a1, a2], [b1, b2])`, or `tok([(a1, b1), (a2, b2)])`, as in transformers.
        return_tensors="pt" gives (B, T) int64 tensors, "np" numpy arrays (a single text: a batch of one).
        """
        if padding not in PADDINGS:
            raise ValueError(f"padding={padding!r}: expected one of {', '.join(map(repr, PADDINGS))}")
        single = isinstance(text, str)
        texts, pairs = texts_and_pairs(text, text_pair)
        rows = [
            self.encode_pair(a, b, add_special_tokens, max_length, truncation)
            for a, b in zip(texts, pairs, strict=True)
        ]
        if padding and padding != "do_not_pad":
            if padding == "max_length":
                if max_length is None:
                    raise ValueError("padding='max_length' needs max_length")
                width = max_length
            else:
                width = max((len(r["input_ids"]) for r in rows), default=0)
            for r in rows:
                n = width - len(r["input_ids"])
                r["input_ids"] += [self.pad_token_id] * n
                r["token_type_ids"] += [0] * n
                r["attention_mask"] += [0] * n
        out = {k: [r[k] for r in rows] for k in self.model_input_names}
        if return_tensors in ("pt", "np"):
            import numpy as np

            if len({len(x) for x in out["input_ids"]}) > 1:
                raise ValueError(
                    f"return_tensors={return_tensors!r} needs rows of equal length: pass padding=True"
                )
            arrays = {
                k: np.array(v, dtype=np.int64).reshape(len(rows), -1 if rows else 0) for k, v in out.items()
            }
            if return_tensors == "np":
                return arrays
            import torch

            return {k: torch.from_numpy(v) for k, v in arrays.items()}
        if return_tensors is not None:
            raise ValueError(f"return_tensors={return_tensors!r}: only 'pt', 'np' or None")
        return {k: v[0] for k, v in out.items()} if single else out

    def __repr__(self) -> str:
        rule = f"do_lower_case={self.do_lower_case}, keep_accents={self.keep_accents}"
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, {rule})"

    # ------------------------------------------------------------------ decoding
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`; special tokens shown as their strings unless skipped (pad is always dropped)."""
        ids = checked_ids(ids, self.vocab_size)
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in (self.pad_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id):
                if run:
                    parts.append(self.sp.decode(run))
                    run = []
                if not skip_special_tokens and i != self.pad_token_id:
                    parts.append(self.sp.id_to_piece(i))
            else:
                run.append(i)
        if run:
            parts.append(self.sp.decode(run))
        return " ".join(p for p in parts if p)

    def batch_decode(self, batch: Iterable[Iterable[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(ids, skip_special_tokens) for ids in batch]


def _is_digit_comma(piece: str) -> bool:
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def load_sentencepiece(model_file: Path) -> spm.SentencePieceProcessor:
    """Load and check an ALBERT SentencePiece model: ids 0-4 must be `<pad> <unk> [CLS] [SEP] [MASK]`."""
    if not model_file.is_file():
        raise FileNotFoundError(f"{model_file}: no such SentencePiece model file")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(model_file))
    except (RuntimeError, OSError) as e:
        raise ValueError(f"{model_file}: not a SentencePiece model file ({e})") from None
    got = tuple(sp.id_to_piece(i) for i in range(min(5, sp.get_piece_size())))
    if got != SPECIAL_PIECES:
        raise ValueError(f"{model_file}: ids 0-4 are {list(got)}, expected ALBERT's {list(SPECIAL_PIECES)}")
    return sp
