"""A BERT WordPiece vocabulary as an ALBERT model's tokenizer: a student that reads its teacher's tokens.

ALBERT's factorised embedding makes a large vocabulary cheap (BERT's 30,522 pieces x E 128 = 3.9M
parameters), and a student whose tokens are its teacher's can learn from the teacher token by token
(`albert distill general --tokenizer teacher`). The folder layout is transformers' BertTokenizer's:
`tokenizer.json` (HF `tokenizers`' own file, which carries the normalizer: lower-casing, accents,
Chinese characters) and `vocab.txt`, with `tokenizer_config.json` naming `BertTokenizer`, so that
`transformers.AutoTokenizer` reads the student's folder as it reads the teacher's.

The encoding is HF `tokenizers`' (the library transformers' fast BERT tokenizer runs), so a student's ids
are its teacher's ids for the same text (tests/test_wordpiece.py checks it against transformers). The
interface is `AlbertTokenizer`'s (pairs, truncation, padding, special ids, fingerprint), which every
albert-lm command takes; `AlbertTokenizer.from_pretrained` returns one of these for a folder that holds
a WordPiece vocabulary and no spiece.model.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from albert_lm.data.call_args import checked_ids
from albert_lm.data.normalization import check_booleans
from albert_lm.data.tokenizer import CONFIG_FILE, MODEL_FILE, AlbertTokenizer
from albert_lm.files import InputError, atomic_write, read_json_object

TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
WORDPIECE_FILES = (TOKENIZER_JSON, VOCAB_TXT)
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
CONTINUATION = "##"


class WordPieceTokenizer(AlbertTokenizer):
    """BERT's WordPiece tokenizer with AlbertTokenizer's interface (module docstring)."""

    def __init__(self, backend: Any, source: Path, do_lower_case: bool = True) -> None:
        # Not AlbertTokenizer.__init__: no SentencePiece model. The shared methods (encode_pair, __call__,
        # build_inputs_with_special_tokens, batch_decode) use only what is set here.
        self.model_file = source
        self.do_lower_case, self.remove_space, self.keep_accents = do_lower_case, True, not do_lower_case
        backend.no_truncation()  # albert-lm truncates and pads itself, as for SentencePiece
        backend.no_padding()
        self.backend = backend
        ids = [backend.token_to_id(t) for t in SPECIAL_TOKENS]
        missing = [t for t, i in zip(SPECIAL_TOKENS, ids, strict=True) if i is None]
        if missing:
            raise ValueError(f"{source}: the vocabulary has no {', '.join(missing)} (BERT's special tokens)")
        self.pad_token, self.unk_token, self.cls_token, self.sep_token, self.mask_token = SPECIAL_TOKENS
        self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id = ids
        self.all_special_ids = list(ids)
        self.all_special_tokens = list(SPECIAL_TOKENS)

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def folder_of(cls, path: Path) -> Path | None:
        """`AlbertTokenizer.from_pretrained` reads BERT's vocabulary here: tokenizer.json or vocab.txt, or
        a folder holding one and no spiece.model (which is read first)."""
        if path.is_file() and path.name in WORDPIECE_FILES:
            return path.parent
        return path if is_wordpiece_folder(path) and not (path / MODEL_FILE).is_file() else None

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> WordPieceTokenizer:
        """A folder holding tokenizer.json (preferred) or vocab.txt, as transformers saves a BERT tokenizer.
        Its ids must be 0..V-1, one piece each (`check_wordpiece_ids`), and its config's booleans JSON
        booleans."""
        import tokenizers as tk  # imported where a WordPiece tokenizer is loaded

        folder = Path(path)
        config_file = folder / CONFIG_FILE
        config = read_json_object(config_file, "tokenizer config") if config_file.is_file() else {}
        check_booleans(config, config_file)
        lower = kwargs.get("do_lower_case", config.get("do_lower_case", True))
        if not isinstance(lower, bool):
            raise ValueError(f"do_lower_case: expected true or false, got {lower!r}")
        source = check_wordpiece_ids(folder)
        if source is None:
            raise FileNotFoundError(f"{folder}: no {TOKENIZER_JSON} or {VOCAB_TXT} (a WordPiece tokenizer)")
        if source.name == TOKENIZER_JSON:
            try:
                backend = tk.Tokenizer.from_file(str(source))
            except Exception as e:  # the library raises Exception for every malformed file
                raise ValueError(
                    f"{source}: not a tokenizers file ({str(e).splitlines()[0][:200]})"
                ) from None
            kind = type(backend.model).__name__
            if kind != "WordPiece":
                raise ValueError(f"{source}: a {kind} tokenizer; expected a WordPiece one (BERT's)")
        else:
            chinese = config.get("tokenize_chinese_chars")
            backend = _from_vocab(tk, source, lower, chinese is not False, config.get("strip_accents"))
        return cls(backend, source, lower)

    def save_pretrained(self, save_directory: str | os.PathLike) -> list[Path]:
        """tokenizer.json, vocab.txt and tokenizer_config.json (BertTokenizer's) into `save_directory`."""
        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        written = [out / TOKENIZER_JSON, out / VOCAB_TXT, out / CONFIG_FILE]
        atomic_write(written[0], self.backend.to_str())
        atomic_write(written[1], "".join(f"{p}\n" for p in self.pieces))
        config = {
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": self.do_lower_case,
            "unk_token": self.unk_token,
            "sep_token": self.sep_token,
            "pad_token": self.pad_token,
            "cls_token": self.cls_token,
            "mask_token": self.mask_token,
            "model_max_length": 512,
        }
        atomic_write(written[2], json.dumps(config, indent=2) + "\n")
        return written

    # ------------------------------------------------------------------ vocabulary
    @functools.cached_property
    def pieces(self) -> list[str]:
        return [self.backend.id_to_token(i) or "" for i in range(self.vocab_size)]

    def word_start_table(self) -> np.ndarray:
        """(V,) bool: a piece begins a word unless it continues one ("##")."""
        return np.array([not p.startswith(CONTINUATION) for p in self.pieces], dtype=bool)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of the normalizer, the pre-tokenizer and every piece in order (AlbertTokenizer's)."""
        state = json.loads(self.backend.to_str())
        rule = json.dumps([state.get("normalizer"), state.get("pre_tokenizer")], sort_keys=True)
        h = hashlib.sha256(f"wordpiece;{rule}".encode())
        for p in self.pieces:
            h.update(f"\n{p}".encode())
        return h.hexdigest()[:16]

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend.get_vocab(with_added_tokens=True))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        def one(t: str) -> int:
            i = self.backend.token_to_id(t)
            return self.unk_token_id if i is None else int(i)

        return one(tokens) if isinstance(tokens, str) else [one(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        if isinstance(ids, (int, np.integer)):
            return self.pieces[int(ids)]
        return [self.pieces[int(i)] for i in ids]

    # ------------------------------------------------------------------ encoding
    def preprocess(self, text: str) -> str:
        return text  # the normalizer inside tokenizer.json does it

    def preprocess_batch(self, texts: Sequence[str]) -> list[str]:
        return list(texts)

    def tokenize(self, text: str) -> list[str]:
        return list(self.backend.encode(text, add_special_tokens=False).tokens)

    def encode_batch(
        self, texts: Sequence[str], num_threads: int = 1, preprocess: bool = True
    ) -> list[list[int]]:
        return [list(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def encode_flat(
        self, texts: Sequence[str], dtype: npt.DTypeLike = np.int32, num_threads: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        batch = self.encode_batch(texts)
        lens = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
        flat = np.fromiter(itertools.chain.from_iterable(batch), dtype=dtype, count=int(lens.sum()))
        return flat, lens

    # ------------------------------------------------------------------ decoding
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        ids = [i for i in checked_ids(ids, self.vocab_size) if i != self.pad_token_id]
        return str(self.backend.decode(ids, skip_special_tokens=skip_special_tokens))


AlbertTokenizer.other_kinds.append(WordPieceTokenizer)


def _from_vocab(tk: Any, vocab: Path, lower: bool, chinese: bool, strip_accents: bool | None) -> Any:
    """BERT's tokenizer from a vocab.txt alone (what transformers' BertTokenizerFast builds from one, with
    the config's tokenize_chinese_chars and strip_accents: None follows the lower-casing)."""
    try:
        model = tk.models.WordPiece.from_file(str(vocab), unk_token="[UNK]")
    except Exception as e:  # the library raises Exception for an unreadable file
        raise ValueError(f"{vocab}: not a WordPiece vocabulary ({str(e).splitlines()[0][:200]})") from None
    backend = tk.Tokenizer(model)
    backend.normalizer = tk.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=chinese, strip_accents=strip_accents, lowercase=lower
    )
    backend.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    backend.decoder = tk.decoders.WordPiece(prefix=CONTINUATION)
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    if cls_id is not None and sep_id is not None:
        backend.post_processor = tk.processors.BertProcessing(("[SEP]", sep_id), ("[CLS]", cls_id))
    return backend


# --------------------------------------------------------------------------- ids 0..V-1, one piece each
def check_wordpiece_ids(folder: Path) -> Path | None:
    """The vocabulary file a WordPiece folder is read from (tokenizer.json first, else vocab.txt; None
    where it has neither), refused where its ids are not 0..V-1 with one piece each: a repeated line of
    vocab.txt leaves its first id without a piece and gives a later piece an id past the embedding rows,
    and a tokenizer.json with two pieces on one id or a gap does alike. transformers reads them the same
    way, so a teacher's folder is checked here too. A tokenizer.json of another model (BPE, Unigram) is
    left to its reader."""
    if (folder / TOKENIZER_JSON).is_file():
        source = folder / TOKENIZER_JSON
        try:
            state = read_json_object(source, "tokenizers file")
        except ValueError:
            return source  # not JSON: the tokenizers library's reader names what is wrong
        model = state.get("model")
        if isinstance(model, dict) and model.get("type") == "WordPiece":
            _check_json_ids(source, model.get("vocab"), state.get("added_tokens"))
        return source
    if (folder / VOCAB_TXT).is_file():
        _check_vocab_lines(folder / VOCAB_TXT)
        return folder / VOCAB_TXT
    return None


def _check_vocab_lines(vocab: Path) -> None:
    """Each line of vocab.txt one piece, none twice (read as `tokenizers` reads it: line by line, the
    trailing spaces left out)."""
    try:
        text = vocab.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            vocab, f"not UTF-8 text (byte {e.start}); expected one WordPiece piece a line"
        ) from None
    first: dict[str, int] = {}
    for number, line in enumerate(text.split("\n")[: -1 if text.endswith("\n") else None], start=1):
        piece = line.rstrip()
        if piece in first:
            shown = repr(piece) if piece else "an empty piece"
            raise InputError(
                vocab,
                f"the piece {shown} again (first on line {first[piece]}): line N is the piece of id N-1, so "
                f"a repeated line leaves id {first[piece] - 1} without a piece and moves the ids the model was "
                "trained with; remove the repeated line, or give the vocabulary the model was trained with",
                number,
            )
        first[piece] = number


def _check_json_ids(source: Path, vocab: Any, added: Any) -> None:
    """tokenizer.json's vocabulary (and added tokens) give the ids 0..V-1, one piece each."""
    if not isinstance(vocab, dict) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()
    ):
        raise InputError(source, "model.vocab: expected an object of pieces and their integer ids")
    pieces: dict[int, list[str]] = {}
    for piece, i in vocab.items():
        pieces.setdefault(i, []).append(piece)
    for token in added if isinstance(added, list) else []:
        content, i = (token.get("content"), token.get("id")) if isinstance(token, dict) else (None, None)
        if isinstance(i, int) and vocab.get(content) != i:  # an added token not in the vocabulary
            pieces.setdefault(i, []).append(str(content))
    how = "; give the tokenizer the model was trained with (its ids are the model's embedding rows)"
    for i in sorted(pieces):
        if len(pieces[i]) > 1:
            shown = " and ".join(repr(p) for p in pieces[i][:4])
            raise InputError(
                source, f"id {i} is given to {len(pieces[i])} pieces, {shown}: one piece an id{how}"
            )
        if i < 0:
            raise InputError(source, f"{pieces[i][0]!r} has id {i}: ids start at 0{how}")
    missing = next((i for i in range(len(pieces)) if i not in pieces), None)
    if missing is not None:
        top = max(pieces)
        raise InputError(
            source,
            f"no piece has id {missing}, yet {pieces[top][0]!r} has id {top}: the ids of {len(pieces)} pieces "
            f"are 0..{len(pieces) - 1}, each once, with no gap{how}",
        )


def is_wordpiece_folder(folder: Path) -> bool:
    """A folder with BERT's WordPiece files (and no spiece.model, which AlbertTokenizer reads first)."""
    return folder.is_dir() and any((folder / f).is_file() for f in WORDPIECE_FILES)


def has_tokenizer(folder: str | os.PathLike) -> bool:
    """Does a model folder hold a tokenizer `AlbertTokenizer.from_pretrained` reads: spiece.model, or
    BERT's WordPiece files?"""
    return (Path(folder) / MODEL_FILE).is_file() or is_wordpiece_folder(Path(folder))


__all__ = [
    "WORDPIECE_FILES",
    "WordPieceTokenizer",
    "check_wordpiece_ids",
    "has_tokenizer",
    "is_wordpiece_folder",
]
