"""google-research's names as albert-lm's: albert_config.json's fields as an AlbertConfig, and every
variable of modeling.py and run_pretraining.py (`bert/encoder/transformer/group_G/inner_group_J/...`,
`cls/predictions/...`) as the transformers-layout name it is converted to, with whether it is transposed
(TF stores dense kernels as (in, out), PyTorch as (out, in)) and its shape.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from albert_lm.files import read_json_object
from albert_lm.model.config import AlbertConfig
from albert_lm.model.tf_bundle import CheckpointError

CONFIG_NAME = "albert_config.json"
# albert_config.json fields that map one to one (google-research's defaults where the file omits one).
_SAME_FIELDS = {
    "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12, "num_hidden_groups": 1,
    "num_attention_heads": 64, "intermediate_size": 16384, "inner_group_num": 1,
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 512,
    "type_vocab_size": 2, "initializer_range": 0.02,
}  # fmt: skip
# Fields of google-research's experiments that albert-lm does not implement: converted only at the
# value that switches them off.
_OFF_FIELDS: dict[str, Any] = {
    "down_scale_factor": 1,
    "net_structure_type": 0,
    "gap_size": 0,
    "num_memory_blocks": 0,
    "layers_to_keep": [],
}
# modeling.py's gelu is the tanh approximation: transformers' (and our) "gelu_new".
_ACTIVATIONS = {"gelu": "gelu_new", "relu": "relu"}
# google-research's models have 12 to 24 layers; a config claiming more than this is not one of them
# (and a model of 10^12 shared layers would only hang the commands that run it).
_MAX_LAYERS = 1024


# --------------------------------------------------------------------------- the config
def google_config(file: Path) -> AlbertConfig:
    """google-research's albert_config.json as our AlbertConfig; a field we would convert wrongly is
    refused, naming it."""
    d = read_json_object(file, CONFIG_NAME)
    if not isinstance(d.get("vocab_size"), int):
        raise CheckpointError(file, "no integer vocab_size (is this google-research's albert_config.json?)")
    unknown = sorted(set(d) - set(_SAME_FIELDS) - set(_OFF_FIELDS) - {"vocab_size", "hidden_act"})
    if unknown:
        raise CheckpointError(
            file,
            f"unknown field(s) {', '.join(unknown)}: not part of google-research's "
            "AlbertConfig, so their meaning is unknown; remove them if they are notes",
        )
    for name, off in _OFF_FIELDS.items():
        if name in d and d[name] != off:
            raise CheckpointError(
                file,
                f"{name} = {d[name]!r}: albert-lm implements only {name} = {off!r} "
                "(google-research's default); this model cannot be converted faithfully",
            )
    act = d.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(
            file,
            f"hidden_act {act!r}: albert-lm implements {', '.join(_ACTIVATIONS)} of "
            "google-research's activations",
        )
    values = {k: d.get(k, default) for k, default in _SAME_FIELDS.items()}
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise CheckpointError(file, f"{k} must be a finite number, got {v!r}")
        if k.endswith("_prob") and not 0 <= v < 1:
            raise CheckpointError(file, f"{k} must be a probability in [0, 1), got {v!r}")
    if isinstance(values["num_hidden_layers"], int) and values["num_hidden_layers"] > _MAX_LAYERS:
        raise CheckpointError(
            file,
            f"num_hidden_layers = {values['num_hidden_layers']:,}: more than "
            f"{_MAX_LAYERS:,}, not a google-research ALBERT",
        )
    try:
        return AlbertConfig(
            vocab_size=d["vocab_size"], hidden_act=_ACTIVATIONS[act], layer_norm_eps=1e-12, **values
        )
    except ValueError as e:
        raise CheckpointError(file, str(e)) from e


# --------------------------------------------------------------------------- names
def tensor_map(config: AlbertConfig) -> dict[str, tuple[str, bool, tuple[int, ...]]]:
    """google-research's name -> (transformers' name, transpose?, TF shape) for `config`."""
    v, e, h, i = config.vocab_size, config.embedding_size, config.hidden_size, config.intermediate_size
    m: dict[str, tuple[str, bool, tuple[int, ...]]] = {
        "bert/embeddings/word_embeddings": ("albert.embeddings.word_embeddings.weight", False, (v, e)),
        "bert/embeddings/token_type_embeddings": (
            "albert.embeddings.token_type_embeddings.weight",
            False,
            (config.type_vocab_size, e),
        ),
        "bert/embeddings/position_embeddings": (
            "albert.embeddings.position_embeddings.weight",
            False,
            (config.max_position_embeddings, e),
        ),
        "bert/embeddings/LayerNorm/gamma": ("albert.embeddings.LayerNorm.weight", False, (e,)),
        "bert/embeddings/LayerNorm/beta": ("albert.embeddings.LayerNorm.bias", False, (e,)),
        "bert/pooler/dense/kernel": ("albert.pooler.weight", True, (h, h)),
        "bert/pooler/dense/bias": ("albert.pooler.bias", False, (h,)),
        "cls/predictions/transform/dense/kernel": ("predictions.dense.weight", True, (h, e)),
        "cls/predictions/transform/dense/bias": ("predictions.dense.bias", False, (e,)),
        "cls/predictions/transform/LayerNorm/gamma": ("predictions.LayerNorm.weight", False, (e,)),
        "cls/predictions/transform/LayerNorm/beta": ("predictions.LayerNorm.bias", False, (e,)),
        "cls/predictions/output_bias": ("predictions.bias", False, (v,)),
        "cls/seq_relationship/output_weights": ("sop_classifier.classifier.weight", False, (2, h)),
        "cls/seq_relationship/output_bias": ("sop_classifier.classifier.bias", False, (2,)),
    }
    if e != h:  # modeling.py projects E -> H only when they differ
        m["bert/encoder/embedding_hidden_mapping_in/kernel"] = (
            "albert.encoder.embedding_hidden_mapping_in.weight", True, (e, h))  # fmt: skip
        m["bert/encoder/embedding_hidden_mapping_in/bias"] = (
            "albert.encoder.embedding_hidden_mapping_in.bias", False, (h,))  # fmt: skip
    block = {  # inside inner_group_J: TF suffix -> (transformers suffix, transpose, shape)
        "attention_1/self/query/kernel": ("attention.query.weight", True, (h, h)),
        "attention_1/self/query/bias": ("attention.query.bias", False, (h,)),
        "attention_1/self/key/kernel": ("attention.key.weight", True, (h, h)),
        "attention_1/self/key/bias": ("attention.key.bias", False, (h,)),
        "attention_1/self/value/kernel": ("attention.value.weight", True, (h, h)),
        "attention_1/self/value/bias": ("attention.value.bias", False, (h,)),
        "attention_1/output/dense/kernel": ("attention.dense.weight", True, (h, h)),
        "attention_1/output/dense/bias": ("attention.dense.bias", False, (h,)),
        "LayerNorm/gamma": ("attention.LayerNorm.weight", False, (h,)),
        "LayerNorm/beta": ("attention.LayerNorm.bias", False, (h,)),
        "ffn_1/intermediate/dense/kernel": ("ffn.weight", True, (h, i)),
        "ffn_1/intermediate/dense/bias": ("ffn.bias", False, (i,)),
        "ffn_1/intermediate/output/dense/kernel": ("ffn_output.weight", True, (i, h)),
        "ffn_1/intermediate/output/dense/bias": ("ffn_output.bias", False, (h,)),
        "LayerNorm_1/gamma": ("full_layer_layer_norm.weight", False, (h,)),
        "LayerNorm_1/beta": ("full_layer_layer_norm.bias", False, (h,)),
    }
    for g in range(config.num_hidden_groups):
        for j in range(config.inner_group_num):
            tf_at = f"bert/encoder/transformer/group_{g}/inner_group_{j}/"
            hf_at = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{j}."
            for suffix, (name, transpose, shape) in block.items():
                m[tf_at + suffix] = (hf_at + name, transpose, shape)
    return m
