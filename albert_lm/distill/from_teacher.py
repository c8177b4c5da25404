"""A student that starts from its teacher: ALBERT's two reductions applied to a trained BERT-style encoder.

`albert distill general --teacher-init mean|first` builds the student's first weights from the teacher's
instead of random numbers:

1. **The embedding, factorised.** Each piece of the student's own SentencePiece vocabulary gets the mean of
   the teacher's embeddings of the WordPiece tokens its text splits into (a word-initial piece "▁house" as
   the word "house"; a continuation "ing" as "##ing" where the teacher knows it); special pieces take the
   teacher's [CLS], [SEP], [MASK], [PAD], [UNK] (a student of the teacher's own vocabulary,
   `--tokenizer teacher`, takes the teacher's table as it is). That V x H table is cut by SVD to rank E: the student's
   V x E table is U S, and its E -> H projection is the top E right singular vectors, scaled by the
   teacher's embedding LayerNorm gain (with its bias as the projection's bias) and by sqrt(H / E), since
   the student normalises in E dimensions before it projects. Positions and segments go through the same
   rank-E basis.
2. **The layers, kept or shared.** Application j of the student's L stands for teacher layer
   floor(j * L_teacher / L); each of the student's distinct blocks (one under sharing "all") starts from the
   mean of the teacher layers its applications stand for (`mean`) or from the first of them (`first`).

The student must have the teacher's width (hidden size, heads, FFN size, activation): the caller sets them
from the teacher. This is a start, not a conversion: the factorised embedding and a shared layer cannot
compute what the teacher does, but they begin nearer to it than random numbers (measured in
docs/notes/distill_goals.md).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from albert_lm.data.tokenizer import SPIECE_UNDERLINE, AlbertTokenizer
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining

logger = logging.getLogger(__name__)

TEACHER_INIT = ("no", "mean", "first")
WIDTH = ("hidden_size", "num_attention_heads", "intermediate_size", "hidden_act")
_SPECIAL = {"[CLS]": "cls_token_id", "[SEP]": "sep_token_id", "[MASK]": "mask_token_id",
            "<pad>": "pad_token_id", "<unk>": "unk_token_id"}  # fmt: skip


def bert_parts(model: Any, teacher: str) -> tuple[Any, list[Any]]:
    """(embeddings, layers) of a transformers BERT-style encoder; refused for another architecture."""
    embeddings, encoder = getattr(model, "embeddings", None), getattr(model, "encoder", None)
    layers = list(getattr(encoder, "layer", []) or [])
    needed = ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm")
    if embeddings is None or not layers or not all(hasattr(embeddings, n) for n in needed):
        raise ValueError(
            f"--teacher-init: the teacher {teacher} ({type(model).__name__}) is not a BERT-style encoder "
            "(embeddings with word, position and token-type tables, encoder.layer); start from random numbers"
        )
    return embeddings, layers


def teacher_width(hf_config: Any) -> dict[str, Any]:
    """The student config fields that must equal the teacher's for its layers to be copied."""
    act = getattr(hf_config, "hidden_act", "gelu")
    return {
        "hidden_size": hf_config.hidden_size,
        "num_attention_heads": hf_config.num_attention_heads,
        "intermediate_size": hf_config.intermediate_size,
        "hidden_act": act if isinstance(act, str) else "gelu",
    }


@torch.no_grad()
def piece_table(tokenizer: AlbertTokenizer, teacher_tokenizer: Any, table: torch.Tensor) -> torch.Tensor:
    """(V, H): each student piece as the mean of the teacher embeddings of the tokens its text is."""
    vocab = teacher_tokenizer.get_vocab()
    if (
        tokenizer.get_vocab() == vocab and len(vocab) == table.shape[0]
    ):  # the teacher's own (--tokenizer teacher)
        return table.clone()
    unk = teacher_tokenizer.unk_token_id
    special = {getattr(tokenizer, attr): name for name, attr in _SPECIAL.items()}
    teacher_special = {"[CLS]": teacher_tokenizer.cls_token_id, "[SEP]": teacher_tokenizer.sep_token_id,
                       "[MASK]": teacher_tokenizer.mask_token_id, "<pad>": teacher_tokenizer.pad_token_id,
                       "<unk>": unk}  # fmt: skip
    rows = torch.empty(tokenizer.vocab_size, table.shape[1])
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))):
        if i in special and teacher_special[special[i]] is not None:
            ids = [teacher_special[special[i]]]
        elif piece.startswith(SPIECE_UNDERLINE) or f"##{piece}" not in vocab:
            text = piece.replace(SPIECE_UNDERLINE, " ").strip()
            ids = teacher_tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
        else:
            ids = [vocab[f"##{piece}"]]
        rows[i] = table[ids or [unk]].mean(0)
    return rows


@torch.no_grad()
def init_from_teacher(
    student: AlbertForPreTraining, tokenizer: AlbertTokenizer, teacher_model: Any, teacher_tokenizer: Any,
    rule: str, teacher: str,
) -> dict[str, float]:  # fmt: skip
    """Set the student's embeddings, projection and layers from the teacher (module docstring); returns
    the share of the piece table's energy the rank-E factorisation keeps."""
    if rule not in TEACHER_INIT[1:]:
        raise ValueError(f"--teacher-init {rule}: expected one of {', '.join(TEACHER_INIT)}")
    embeddings, layers = bert_parts(teacher_model, teacher)
    config: AlbertConfig = student.config
    ours: Any = student.albert.embeddings
    e, h = config.embedding_size, config.hidden_size
    if e >= h or config.has_projection is False:
        raise ValueError(f"--teacher-init: the student needs E < H to factorise (E {e}, H {h})")
    table = piece_table(tokenizer, teacher_tokenizer, embeddings.word_embeddings.weight.float())
    u, s, vt = torch.linalg.svd(table, full_matrices=False)
    basis = vt[:e]  # (E, H)
    ours.word_embeddings.weight.copy_(u[:, :e] * s[:e])
    positions = embeddings.position_embeddings.weight.float()[: config.max_position_embeddings]
    ours.position_embeddings.weight[: len(positions)].copy_(positions @ basis.T)
    ours.token_type_embeddings.weight.copy_(embeddings.token_type_embeddings.weight.float() @ basis.T)
    ours.norm.weight.fill_(1.0)
    ours.norm.bias.zero_()
    norm = embeddings.LayerNorm
    projection: Any = student.albert.encoder.embedding_projection
    projection.weight.copy_(norm.weight.float()[:, None] * basis.T * math.sqrt(h / e))
    projection.bias.copy_(norm.bias.float())
    _layers(student, layers, rule)
    kept = float((s[:e] ** 2).sum() / (s**2).sum())
    logger.info(
        "student started from the teacher: rank-%d embedding keeps %.1f%% of the table's energy",
        e,
        100 * kept,
    )
    return {"embedding_energy_kept": kept}


def _layers(student: AlbertForPreTraining, layers: list[Any], rule: str) -> None:
    encoder: Any = student.albert.encoder  # its blocks' parameters, by name
    schedule = encoder.full_schedule
    stand_for = [j * len(layers) // len(schedule) for j in range(len(schedule))]
    for block, attention in enumerate(encoder.attention):
        sources = [layers[t] for (a, _), t in zip(schedule, stand_for, strict=True) if a == block]
        sources = sources[:1] if rule == "first" else sources
        _set(
            attention.qkv.weight,
            [torch.cat([_self(x).query.weight, _self(x).key.weight, _self(x).value.weight]) for x in sources],
        )
        _set(
            attention.qkv.bias,
            [torch.cat([_self(x).query.bias, _self(x).key.bias, _self(x).value.bias]) for x in sources],
        )
        _set(attention.out.weight, [x.attention.output.dense.weight for x in sources])
        _set(attention.out.bias, [x.attention.output.dense.bias for x in sources])
        _set(attention.norm.weight, [x.attention.output.LayerNorm.weight for x in sources])
        _set(attention.norm.bias, [x.attention.output.LayerNorm.bias for x in sources])
    for block, ffn in enumerate(encoder.ffn):
        sources = [layers[t] for (_, f), t in zip(schedule, stand_for, strict=True) if f == block]
        sources = sources[:1] if rule == "first" else sources
        _set(ffn.up.weight, [x.intermediate.dense.weight for x in sources])
        _set(ffn.up.bias, [x.intermediate.dense.bias for x in sources])
        _set(ffn.down.weight, [x.output.dense.weight for x in sources])
        _set(ffn.down.bias, [x.output.dense.bias for x in sources])
        _set(ffn.norm.weight, [x.output.LayerNorm.weight for x in sources])
        _set(ffn.norm.bias, [x.output.LayerNorm.bias for x in sources])


def _self(layer: Any) -> Any:
    return layer.attention.self


def _set(target: torch.Tensor, sources: list[torch.Tensor]) -> None:
    target.copy_(torch.stack([x.detach().float() for x in sources]).mean(0))


__all__ = ["TEACHER_INIT", "WIDTH", "init_from_teacher", "teacher_width"]
