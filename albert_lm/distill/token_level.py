"""Token-level distillation: a student that reads its teacher's tokens (`--tokenizer teacher`) learns
from every token, not one vector per sentence.

Two losses, both from one teacher pass over the student's own input ids (the same ids: the vocabulary
is the teacher's, so no alignment is needed). The pass runs in each training step, or once per sentence
into the teacher cache (`--token-cache`, `cached_token_teacher`): a step then reads the sentence's
padded rows and runs the student alone, at the cost of disk (max_seq_length x 4 x the teacher's width
fp16 values per sentence, 196 KB at 64 pieces and width 384):

- self-attention relations (MiniLMv2, Wang et al. 2021): of the last layer, the scaled dot products
  among the queries, among the keys and among the values, each split into R relation heads (R divides
  both widths, so student and teacher may differ in width and in attention heads), as softmax
  distributions over the sequence; the loss is KL(teacher || student), summed over keys, averaged over
  the real query tokens, the heads and the three relations;
- hidden states: 1 - cosine between each token's last-layer state, through the student's projection to
  the teacher's width (the sentence loss's projection: the mean of projected tokens is the projected
  mean), and the teacher's.

The student's Q, K and V are read from its last attention application by a forward hook on the fused
QKV layer; the teacher's from its last layer's query, key and value layers (BERT's module layout; other
encoders are refused with the reason).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.distill.cache import TeacherCache, cached_teacher_outputs
from albert_lm.distill.data import Encoded, collate_ids
from albert_lm.model.heads import AlbertForPreTraining

logger = logging.getLogger(__name__)

MAX_RELATION_HEADS = 16


def relation_heads(student_width: int, teacher_width: int, asked: int = 0) -> int:
    """R: `asked`, or the largest R <= 16 dividing both widths; refused where it does not divide both."""
    if asked:
        if student_width % asked or teacher_width % asked:
            raise ValueError(
                f"--relation-heads {asked}: must divide the student's width {student_width} and the "
                f"teacher's {teacher_width}"
            )
        return asked
    return max(r for r in range(1, MAX_RELATION_HEADS + 1) if not student_width % r and not teacher_width % r)


def relation_kl(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """KL(teacher || student) of the (B, R, S, S) relations of (B, S, W_s) and (B, S, W_t) vectors; pads
    are masked as keys and left out as queries."""
    b, s, _ = student.shape
    keep = mask.bool()  # (B, S)
    blocked = ~keep[:, None, None, :]  # (B, 1, 1, S): pad keys

    def log_relations(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // heads
        x = x.float().view(b, s, heads, d).transpose(1, 2)  # (B, R, S, d)
        scores = (x @ x.transpose(-1, -2)) / math.sqrt(d)  # (B, R, S, S)
        return F.log_softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)

    log_s, log_t = log_relations(student), log_relations(teacher)
    p_t = log_t.exp()
    kl = (p_t * (log_t - log_s)).masked_fill(blocked, 0.0).sum(-1)  # (B, R, S)
    queries = keep[:, None, :].expand_as(kl)
    return kl[queries].mean()


def hidden_loss(projected: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - cosine per real token of (B, S, D) projected student states and the teacher's (B, S, D)."""
    keep = mask.bool()
    return (1.0 - F.cosine_similarity(projected[keep].float(), teacher[keep].float(), dim=-1)).mean()


class StudentQKV:
    """Q, K and V (each (B, S, H)) of the student's last attention application, caught by hooks."""

    def __init__(self, model: AlbertForPreTraining) -> None:
        self.caught: torch.Tensor | None = None
        attention = model.albert.encoder.attention
        qkv: list[nn.Module] = [block.get_submodule("qkv") for block in attention]
        self.hooks = [layer.register_forward_hook(self._catch) for layer in qkv]

    def _catch(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self.caught = output  # the last application's output is the one left when the forward ends

    def take(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.caught is None or self.caught.dim() != 3:
            raise RuntimeError("the student's Q, K, V were not caught (a forward runs padded first)")
        q, k, v = self.caught.chunk(3, dim=-1)
        self.caught = None
        return q, k, v


class TeacherTokens:
    """The teacher's last-layer Q, K, V and hidden states on the student's ids (BERT-style encoders)."""

    def __init__(self, model: Any, name: str) -> None:
        try:
            self_attention = model.encoder.layer[-1].attention.self
            parts = [self_attention.query, self_attention.key, self_attention.value]
        except (AttributeError, IndexError, TypeError):
            raise ValueError(
                f"--teacher {name}: token-level losses read a BERT-style encoder's last layer "
                f"(encoder.layer[-1].attention.self.query/key/value); {type(model).__name__} has none"
            ) from None
        self.model, self.width = model, int(model.config.hidden_size)
        self.caught: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(parts):
            layer.register_forward_hook(lambda m, a, out, i=i: self.caught.__setitem__(i, out))

    @torch.no_grad()
    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: Any = None
    ) -> dict[str, torch.Tensor]:
        """The teacher's q, k, v and hidden (each (B, S, W)); `rows` (the sentences' indices) unused."""
        self.caught.clear()
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=torch.zeros_like(input_ids),
        )
        return {
            "q": self.caught[0],
            "k": self.caught[1],
            "v": self.caught[2],
            "hidden": out.last_hidden_state,
        }


PARTS = ("q", "k", "v", "hidden")


class CachedTeacherTokens:
    """The same outputs as `TeacherTokens`, read from the teacher cache by sentence index: the rows hold
    each sentence's (seq, 4, W) values padded to the student's max_seq_length, cut to the batch's width."""

    def __init__(self, values: np.ndarray, seq: int, width: int) -> None:
        self.values, self.seq, self.width = values, seq, width

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: Any
    ) -> dict[str, torch.Tensor]:
        b, s = input_ids.shape
        packed = self.values[np.asarray(rows)].reshape(b, self.seq, 4, self.width)
        # only the batch's own width converted to fp32: the rows are padded to max_seq_length
        states = torch.from_numpy(packed[:, :s].astype(np.float32)).to(input_ids.device)
        return {name: states[:, :, i] for i, name in enumerate(PARTS)}


def cached_token_teacher(
    live: TeacherTokens,
    tokenizer: AlbertTokenizer,
    sentences: list[str],
    cache: tuple[Path, str, int],
    max_seq_length: int,
    progress: bool = True,
) -> CachedTeacherTokens:
    """The teacher's token outputs for every sentence, filled once into the cache entry of
    cache = (root, teacher fingerprint, batch size) and read from it after; the student's ids of each
    sentence are made as the training step makes them ([CLS] pieces [SEP], cut at max_seq_length)."""
    root, fingerprint, batch_size = cache
    seq, width = max_seq_length, live.width
    limit = seq - 2
    entry = TeacherCache(
        root, "tokens", fingerprint, sentences, seq * 4 * width, "float16",
        {"what": f"last-layer q, k, v and states of the student's ids, {seq} pieces"},
    )  # fmt: skip
    logger.info(
        "teacher tokens: %d sentences x %d pieces x 4 x %d in fp16, %.2f GB in %s",
        len(sentences), seq, width, len(sentences) * seq * 4 * width * 2 / 1e9, entry.folder,
    )  # fmt: skip

    def compute(texts: list[str]) -> np.ndarray:
        encoded = Encoded.of(tokenizer, texts)
        t = tokenizer
        inputs = collate_ids(
            [encoded.row(i, limit) for i in range(len(texts))], t.cls_token_id, t.sep_token_id, t.pad_token_id
        )
        device = next(live.model.parameters()).device
        out = live(inputs["input_ids"].to(device), inputs["attention_mask"].to(device))
        states = torch.stack([out[name].float() for name in PARTS], dim=2).cpu().numpy()  # (B, S, 4, W)
        packed = np.zeros((len(texts), seq, 4, width), dtype=np.float32)
        packed[:, : states.shape[1]] = states
        return packed.reshape(len(texts), -1)

    values = cached_teacher_outputs(
        entry, compute, batch_size, [len(s) for s in sentences], "teacher tokens", progress=progress
    )
    return CachedTeacherTokens(values, seq, width)


@contextmanager
def padded_forward(on: bool) -> Iterator[None]:
    """The student's forward padded (not unpadded) while token-level losses read its Q, K, V."""
    if not on:
        yield
        return
    from albert_lm.model.unpad import use_unpadding

    with use_unpadding(False):
        yield


__all__ = [
    "CachedTeacherTokens",
    "StudentQKV",
    "TeacherTokens",
    "cached_token_teacher",
    "hidden_loss",
    "padded_forward",
    "relation_heads",
    "relation_kl",
]
