"""AlbertConfig: the model's shape, its presets, and the cross-layer sharing strategies.

Field names are transformers' (`embedding_size`, `num_hidden_groups`, `inner_group_num`, ...), so a
config.json written by transformers loads here and ours loads there. Two fields are ours:
`embedding_projection` (below) and `sharing`, the paper's ablation axis (Section 3.1 "Cross-layer
parameter sharing", Table 4):

- "all":       every layer uses the weights of its group; layer l of L uses group int(l * G / L)
               (G = num_hidden_groups), as google-research and transformers do. G = 1 is ALBERT.
- "attention": one attention block per group shared across depth; a feed-forward block per layer.
- "ffn":       one feed-forward block per group shared across depth; an attention block per layer.
- "none":      every layer its own weights (BERT). Stored as G = L groups in transformers' layout.

`embedding_projection`: google-research has an E -> H projection only when E != H, and so do we by
default; transformers always has one. True keeps one when E == H too: set when loading a transformers
checkpoint with E == H whose projection was trained (not the identity we write), so it loads exactly.

Presets follow the paper's Table 1 with the v2 release settings (gelu_new, no dropout).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albert_lm.files import read_json_object, write_json
from albert_lm.settings import check_fields

__all__ = ["ACTIVATIONS", "POOLINGS", "PRESETS", "SHARING", "AlbertConfig", "read_json_object"]

logger = logging.getLogger(__name__)

SHARING = ("all", "attention", "ffn", "none")
POOLINGS = ("cls", "mean")
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu", "swish")


@dataclass
class AlbertConfig:
    """An ALBERT's shape and head settings, with transformers' `AlbertConfig` field names and defaults
    (the defaults are albert-xxlarge's, as transformers has them): `AlbertConfig.from_preset("albert-base")`
    for the paper's configurations (`PRESETS`), `AlbertConfig.from_pretrained(folder)` for a saved model,
    or fields by keyword. Checked when made: an impossible shape is a ValueError naming the field.
    albert-lm's own fields: `sharing` (which parts of a layer are shared across depth),
    `embedding_projection` and `classifier_pooling`."""

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    classifier_dropout_prob: float = 0.1
    pad_token_id: int = 0
    bos_token_id: int = 2
    eos_token_id: int = 3
    # Heads (transformers' names): label count, regression/classification, label names.
    num_labels: int = 2
    problem_type: str | None = None
    id2label: dict[int, str] | None = None
    # albert-lm's own field: which parts of a layer are shared across depth (module docstring).
    sharing: str = "all"
    # albert-lm's own field: an E -> H projection even when E == H (module docstring).
    embedding_projection: bool = False
    # albert-lm's own field: what pooler_output reads, the [CLS] vector (ALBERT's, transformers') or the mean
    # of the tokens' vectors ("mean": what general distillation teaches; transformers reads [CLS] instead).
    classifier_pooling: str = "cls"
    # Anything else found in a config.json (transformers adds its own bookkeeping); kept, written back.
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"AlbertConfig: {msg}")

        check_fields(self, "AlbertConfig")

        need(self.sharing in SHARING, f"sharing must be one of {SHARING}, got {self.sharing!r}")
        need(
            self.classifier_pooling in POOLINGS,
            f"classifier_pooling must be one of {POOLINGS}, got {self.classifier_pooling!r}",
        )
        need(
            self.hidden_act in ACTIVATIONS,
            f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}",
        )
        for name in (
            "vocab_size",
            "embedding_size",
            "hidden_size",
            "num_hidden_layers",
            "num_hidden_groups",
            "num_attention_heads",
            "intermediate_size",
            "inner_group_num",
            "max_position_embeddings",
            "type_vocab_size",
            "num_labels",
        ):
            need(int(getattr(self, name)) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")
        need(
            self.hidden_size % self.num_attention_heads == 0,
            f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}",
        )
        if self.sharing == "none":
            # Every layer its own weights is G = L groups; keeping it explicit makes the saved
            # config.json mean the same thing to transformers.
            self.num_hidden_groups = self.num_hidden_layers
        need(
            self.num_hidden_groups <= self.num_hidden_layers,
            f"num_hidden_groups {self.num_hidden_groups} > num_hidden_layers {self.num_hidden_layers}",
        )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            need(
                0 <= getattr(self, name) <= 1,
                f"{name} must be a probability in [0, 1], got {getattr(self, name)}",
            )
        need(self.layer_norm_eps > 0, f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        need(self.initializer_range >= 0, f"initializer_range must be >= 0, got {self.initializer_range}")
        need(
            0 <= self.pad_token_id < self.vocab_size,
            f"pad_token_id {self.pad_token_id} is not a token id of the vocabulary (0 to {self.vocab_size - 1})",
        )
        self._fit_labels()

    def _fit_labels(self) -> None:
        """id2label checked (integer ids, text names) and num_labels taken from it, as transformers reads
        a config: a num_labels that contradicts the names is said, and the names win."""
        if self.id2label is None:
            return
        self.id2label = _label_names(self.id2label)
        if self.num_labels not in (2, len(self.id2label)):  # 2: the default, taken as not given
            logger.warning(
                "AlbertConfig: num_labels %d, but id2label names %d labels: %d labels",
                self.num_labels,
                len(self.id2label),
                len(self.id2label),
            )
        self.num_labels = len(self.id2label)

    # ----------------------------------------------------------------- derived
    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in (self.id2label or {}).items()}

    def group_of_layer(self, layer: int) -> int:
        """The hidden group that layer `layer` (0-based) uses: int(l * G / L), as transformers."""
        return int(layer / (self.num_hidden_layers / self.num_hidden_groups))

    @property
    def has_projection(self) -> bool:
        """Whether the encoder maps the embeddings through a learnt E -> H projection."""
        return self.embedding_size != self.hidden_size or bool(self.embedding_projection)

    @property
    def transformers_compatible(self) -> bool:
        """transformers' ALBERT shares whole layers only ("all", or "none" as G = L)."""
        return self.sharing in ("all", "none")

    # ----------------------------------------------------------------- presets
    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> AlbertConfig:
        """The configuration of preset `name` (`PRESETS`: albert-base ... albert-xxlarge, their tiny and
        BERT counterparts), with `overrides` (fields by keyword) changed."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        values = dict(PRESETS[name])
        values.update(known_overrides(overrides))
        return cls(**values)

    # ----------------------------------------------------------------- JSON (transformers' format)
    def to_dict(self, model_type: str = "albert") -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out: dict[str, Any] = dict(self.extra)
        out.update(d)
        if not self.embedding_projection:  # the default: config.json as transformers writes it
            out.pop("embedding_projection")
        if self.classifier_pooling == "cls":  # the same
            out.pop("classifier_pooling")
        if self.id2label is None:
            out.pop("id2label")
        else:
            out["id2label"] = {str(k): v for k, v in self.id2label.items()}
            out["label2id"] = self.label2id
        if self.problem_type is None:
            out.pop("problem_type")
        out["model_type"] = model_type
        return dict(sorted(out.items()))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AlbertConfig:
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        values = {k: v for k, v in d.items() if k in known}
        # transformers writes label2id beside id2label, and model_type; both are derived here.
        extra = {k: v for k, v in d.items() if k not in known and k not in ("label2id", "model_type")}
        if "num_labels" not in values and "id2label" in values:
            values["num_labels"] = len(values["id2label"])
        return cls(**values, extra=extra)

    def to_json_string(self, model_type: str = "albert") -> str:
        return json.dumps(self.to_dict(model_type), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def save_pretrained(self, path: str | os.PathLike, model_type: str = "albert") -> Path:
        """Write `path/config.json` (the folder made if need be) atomically; returns the file.

        model_type "albert-lm" marks albert-lm's native layout, which transformers must not load.
        """
        return write_json(Path(path) / "config.json", self.to_dict(model_type))

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **overrides: Any) -> AlbertConfig:
        """Read a config.json, or the config.json inside a folder."""
        if not str(path).strip():  # Path("") is the current folder: never what an empty value meant
            raise ValueError("config path: empty; expected a config.json file or a model folder")
        p = Path(path)
        file = p / "config.json" if p.is_dir() else p
        d = read_json_object(file, "config.json")
        model_type = d.get("model_type", "albert")
        if model_type not in ("albert", "albert-lm"):
            raise ValueError(f"{file}: model_type is {model_type!r}, expected 'albert'")
        d.update(known_overrides(overrides))
        # another label count asked for: the folder's label names no longer apply (as in transformers)
        names = d.get("id2label") or {}
        if "num_labels" in overrides and "id2label" not in overrides and d.get("num_labels") != len(names):
            d.pop("id2label", None)
            d.pop("label2id", None)
        try:
            return cls.from_dict(d)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{file}: {e}") from e


def _label_names(id2label: dict[Any, Any]) -> dict[int, str]:
    """`id2label` with integer ids (JSON writes them as strings) and text names; anything else, such as
    a key that is no number or a name that is a list, is refused naming the field."""
    out: dict[int, str] = {}
    for key, name in id2label.items():
        try:
            label_id = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"AlbertConfig: id2label: key {key!r} is not a label id (an integer)") from None
        if isinstance(name, bool) or not isinstance(name, str | int | float):
            raise ValueError(
                f"AlbertConfig: id2label: the name of label {label_id} is {name!r}, expected text"
            )
        out[label_id] = str(name)
    if sorted(out) != list(range(len(out))):
        raise ValueError(f"AlbertConfig: id2label: label ids {sorted(out)}, expected 0 to {len(out) - 1}")
    return out


def known_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """`overrides`, refused with the list of fields if one of them is not an AlbertConfig field."""
    known = [f.name for f in dataclasses.fields(AlbertConfig) if f.name != "extra"]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(
            f"unknown model field(s) {', '.join(map(repr, unknown))} in the model overrides; "
            f"AlbertConfig fields are: {', '.join(known)}"
        )
    return overrides


def _albert(h: int, layers: int) -> dict[str, Any]:
    return dict(
        hidden_size=h,
        num_hidden_layers=layers,
        num_attention_heads=h // 64,
        intermediate_size=4 * h,
        embedding_size=128,
    )


def _bert(h: int, layers: int) -> dict[str, Any]:
    # BERT: ALBERT's shape with E = H and no sharing; BERT's own defaults are gelu and dropout 0.1.
    return _albert(h, layers) | dict(
        embedding_size=h,
        sharing="none",
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )


PRESETS: dict[str, dict[str, Any]] = {
    "albert-base": _albert(768, 12),
    "albert-large": _albert(1024, 24),
    "albert-xlarge": _albert(2048, 24),
    "albert-xxlarge": _albert(4096, 12),
    "bert-base": _bert(768, 12),
    "bert-large": _bert(1024, 24),
    # For tests and the laptop demo: ~0.4M parameters with a 5000-piece vocabulary.
    "albert-tiny": dict(
        vocab_size=5000,
        embedding_size=32,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=512,
        max_position_embeddings=512,
    ),
}
