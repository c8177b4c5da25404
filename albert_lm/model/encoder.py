"""The ALBERT encoder: factorized embeddings and cross-layer parameter sharing (paper Section 3.1).

Reads top to bottom: embeddings (V x E) -> projection (E -> H) -> L layer applications that draw
their attention and feed-forward blocks from small shared pools -> pooler. Which block a layer uses
is a fixed schedule computed from the config (see `AlbertEncoder`), so "all", "attention", "ffn" and
"none" sharing are one code path. Parameter names are our own; transformers' names live only in
`hf_interop.py`. `AlbertPreTrainedModel.forward` is the one forward of the encoder and of every head
(`heads.py`): encode, then what the head adds.

Numerics follow transformers' AlbertModel (post-LayerNorm blocks, tanh pooler on [CLS]) so weights
move between the two with identical outputs. Two deliberate differences: Q, K and V come from one
fused matrix multiply, and hidden dropout is applied to the feed-forward output before the residual
add, as google-research does (transformers leaves it out; with the v2 configs' dropout 0 the two
agree). Which kernel computes a product or the attention is decided in `albert_lm.kernels`, never here.
A padded batch runs unpadded: every layer on its N kept tokens, attention alone on (B, S) (`unpad.py`).
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any, TypeVar

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from albert_lm.kernels.attention import attention, padding_mask
from albert_lm.kernels.linear import Linear, shared_weights
from albert_lm.model.config import AlbertConfig
from albert_lm.model.outputs import BaseModelOutputWithPooling, ModelOutput
from albert_lm.model.unpad import Unpadding
from albert_lm.model.unpad import for_mask as unpadding_for
from albert_lm.model.unpad import use_unpadding as use_unpadding  # the switch, beside the model it turns

logger = logging.getLogger(__name__)


_Model = TypeVar("_Model", bound="AlbertPreTrainedModel")
# input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds: `forward`'s order
Inputs = tuple[torch.Tensor | None, ...]


class AlbertEmbeddings(nn.Module):
    """Token, position and segment embeddings of size E (the factorized part), then LayerNorm."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        e = config.embedding_size
        self.word_embeddings = nn.Embedding(config.vocab_size, e, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, e)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, e)
        self.norm = nn.LayerNorm(e, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, S, E)
        seq_len = x.shape[1]
        if seq_len > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_position_embeddings "
                f"{self.position_embeddings.num_embeddings}"
            )
        if position_ids is None:
            x = x + self.position_embeddings.weight[:seq_len]  # broadcast over the batch, no gather
        else:
            x = x + self.position_embeddings(position_ids)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(x))


class AlbertAttention(nn.Module):
    """Multi-head self-attention, residual, post-LayerNorm. Q, K and V come from one (H -> 3H) matmul."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.qkv = Linear(h, 3 * h)
        self.out = Linear(h, h)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.attention_dropout = config.attention_probs_dropout_prob
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, unpadded: Unpadding | None = None
    ) -> torch.Tensor:
        """x (B, S, H), or (N, H) with `unpadded`: then only the attention kernel sees (B, S)."""
        qkv = self.qkv(x)  # (B, S, 3H) or (N, 3H)
        if unpadded is not None:
            qkv = unpadded.pad(qkv)  # (B, S, 3H), zeros at the pads (the mask hides them)
        b, s, _ = qkv.shape
        qkv = qkv.view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, nh, S, hd)
        dropout = self.attention_dropout if self.training else 0.0
        y = attention(q, k, v, mask, dropout)  # (B, nh, S, hd)
        y = y.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)
        if unpadded is not None:
            y = unpadded.unpad(y)  # (N, H)
        return self.norm(x + self.dropout(self.out(y)))


class AlbertFeedForward(nn.Module):
    """H -> 4H -> H with the config's activation, residual, post-LayerNorm."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.up = Linear(config.hidden_size, config.intermediate_size)
        self.down = Linear(config.intermediate_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.act = config.hidden_act  # AlbertConfig has checked the name
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the activation is passed to `up` so that a kernel can fuse it into the product
        return self.norm(x + self.dropout(self.down(self.up(x, self.act))))


def layer_schedule(config: AlbertConfig) -> list[tuple[int, int]]:
    """(attention block, feed-forward block) for each of the L x inner_group_num layer applications.

    Group blocks: layer l runs the inner_group_num layers of group int(l * G / L), as transformers and
    google-research do; block index = group * inner_group_num + inner index. A part that is not shared
    ("ffn" under sharing="attention", "attention" under sharing="ffn") gets one block per application.
    """
    k = config.inner_group_num
    grouped = [
        config.group_of_layer(layer) * k + inner
        for layer in range(config.num_hidden_layers)
        for inner in range(k)
    ]
    own = list(range(len(grouped)))
    if config.sharing == "attention":
        return list(zip(grouped, own, strict=True))
    if config.sharing == "ffn":
        return list(zip(own, grouped, strict=True))
    return list(zip(grouped, grouped, strict=True))  # "all", and "none" (G = L)


class AlbertEncoder(nn.Module):
    """The E -> H projection, then the L layer applications (attention, feed-forward) of the schedule."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        # As google-research: the E -> H projection exists only when E != H (BERT, E = H, has none),
        # unless config.embedding_projection asks for one (a transformers checkpoint that trained it).
        # transformers always has one; hf_interop writes it as an exact identity when we have none.
        self.embedding_projection: nn.Module
        if config.has_projection:
            self.embedding_projection = Linear(config.embedding_size, config.hidden_size)
        else:
            self.embedding_projection = nn.Identity()
        self.full_schedule = layer_schedule(config)
        n_attention = max(a for a, _ in self.full_schedule) + 1
        n_ffn = max(f for _, f in self.full_schedule) + 1
        self.set_depth(len(self.full_schedule))
        self.attention = nn.ModuleList(AlbertAttention(config) for _ in range(n_attention))
        self.ffn = nn.ModuleList(AlbertFeedForward(config) for _ in range(n_ffn))
        # Recompute each layer in backward instead of storing its activations (memory for compute).
        self.gradient_checkpointing = False

    def set_depth(self, depth: int) -> None:
        """Run the first `depth` layer applications only (ALBERT's depth is elastic: any prefix of the
        shared layer's applications is a complete model with the same weights); the full depth again with
        `depth = len(full_schedule)`."""
        full = self.full_schedule
        if not 1 <= depth <= len(full):
            raise ValueError(f"--depth {depth}: this model has {len(full)} layer applications")
        self.schedule = full[:depth]
        # How many times each weight in use is used per forward, at least (12 for albert-base, 1 unshared)
        counts = [sum(a == i for a, _ in self.schedule) for i in {a for a, _ in self.schedule}]
        counts += [sum(f == i for _, f in self.schedule) for i in {f for _, f in self.schedule}]
        self.uses_per_weight = min(counts)

    def _layer(
        self, x: torch.Tensor, mask: torch.Tensor | None, a: int, f: int, unpadded: Unpadding | None = None
    ) -> torch.Tensor:
        # the plain path calls attention as (x, mask), so a block swapped in with that signature still fits
        y = self.attention[a](x, mask) if unpadded is None else self.attention[a](x, mask, unpadded)
        return self.ffn[f](y)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, output_hidden_states: bool = False
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """x (B, S, E) and the padding mask -> (B, S, H) and, if asked, every layer's input and output.

        With padding (and unpadding on) the layers run on the N kept tokens; each state is padded back
        with zeros at the pads, so the outputs have the padded path's shapes and kept positions.
        """
        unpadded = unpadding_for(mask)
        if unpadded is not None:
            x = unpadded.unpad(x)  # (N, E): the projection already runs on kept tokens only
        x = self.embedding_projection(x)  # (B, S, H) or (N, H)
        states = [x] if output_hidden_states else None
        with shared_weights(self.uses_per_weight, x.device):  # each weight prepared once, used L times
            for a, f in self.schedule:
                if self.gradient_checkpointing and self.training:
                    x = checkpoint(self._layer, x, mask, a, f, unpadded, use_reentrant=False)
                else:
                    x = self._layer(x, mask, a, f, unpadded)
                if states is not None:
                    states.append(x)
        if unpadded is not None:
            x = unpadded.pad(x)
            states = [unpadded.pad(h) for h in states] if states is not None else None
        return x, (tuple(states) if states is not None else None)


class AlbertPreTrainedModel(nn.Module):
    """The one forward of the encoder and every head, weight initialisation, save/load in transformers'
    folder layout, and small conveniences."""

    base_model_prefix = "albert"

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        *targets: torch.Tensor | None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        return_dict: bool | None = None,
        **named_targets: torch.Tensor | None,
    ) -> ModelOutput:
        """The encoder's output for one batch, then what this model's head makes of it (`_head`).

        transformers' argument order: the five inputs, then the head's own targets (by position or by
        name: `labels`, `sentence_order_label`, `start_positions`, ...; a name the head does not take
        is a TypeError), then the options by name. return_dict is accepted for code written for
        transformers; the output is always the output class, which indexes (`out[0]`) and unpacks
        (`loss, logits = out`) as the tuple of return_dict=False would, so nothing needs a real tuple.
        """
        if output_attentions:
            raise ValueError(
                "output_attentions is not available: albert-lm computes attention with fused SDPA kernels "
                "that never materialise the attention matrix"
            )
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        return self._head(self._encode(inputs, output_hidden_states), *targets, **named_targets)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each model class shows its own arguments: `inspect.signature(cls.forward)` lists the five
        inputs, the targets its `_head` takes (labels, start_positions, ...) and the options, as
        transformers' classes do. Tools read it: transformers' Trainer keeps only the dataset columns
        the signature names, so a generic `*targets` would drop the labels."""
        super().__init_subclass__(**kwargs)
        if "_head" not in cls.__dict__ and "_encode" not in cls.__dict__:
            return
        shared = inspect.signature(AlbertPreTrainedModel.forward).parameters
        targets = list(inspect.signature(cls._head).parameters.values())[2:]  # after self and out
        kinds = inspect.Parameter
        params = [p for p in shared.values() if p.kind is kinds.POSITIONAL_OR_KEYWORD]
        params += [p.replace(kind=kinds.POSITIONAL_OR_KEYWORD) for p in targets]
        params += [p for p in shared.values() if p.kind is kinds.KEYWORD_ONLY]

        def forward(self: AlbertPreTrainedModel, *args: Any, **kwargs: Any) -> ModelOutput:
            return AlbertPreTrainedModel.forward(self, *args, **kwargs)

        forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        forward.__doc__ = AlbertPreTrainedModel.forward.__doc__
        cls.forward = forward  # type: ignore[method-assign]

    def _encode(self, inputs: Inputs, output_hidden_states: bool) -> BaseModelOutputWithPooling:
        """The encoder's output for the five inputs, in `forward`'s order: a head's encoder is
        `self.albert` (AlbertModel computes it itself, and multiple choice reshapes first)."""
        encoder = getattr(self, self.base_model_prefix)
        return encoder(*inputs, output_hidden_states=output_hidden_states)

    def _head(self, out: BaseModelOutputWithPooling) -> ModelOutput:
        """What this model returns from the encoder's output; a head adds its targets as arguments after
        `out`, with transformers' names, and computes its loss when they are given."""
        return out

    def _init_weights(self, module: nn.Module) -> None:
        # BERT/ALBERT initialisation: truncated-free normal(0, initializer_range), as transformers.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            if getattr(module, "tied", False):
                return
            nn.init.normal_(module.weight, 0.0, std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, 0.0, std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def post_init(self) -> None:
        self.apply(self._init_weights)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Unique parameters (tied weights counted once), optionally without the V x E table."""
        params = {id(p): p for p in self.parameters()}
        n = sum(p.numel() for p in params.values())
        if exclude_embeddings:
            n -= self.get_input_embeddings().weight.numel()
        return n

    def get_input_embeddings(self) -> nn.Embedding:
        base: Any = getattr(self, self.base_model_prefix, self)
        return base.embeddings.word_embeddings

    def set_dropout(self, hidden: float = 0.0, attention: float = 0.0) -> None:
        """Change dropout in place; the paper switches it off once the model no longer overfits."""
        for m in self.modules():
            if isinstance(m, nn.Dropout):
                m.p = hidden
            if isinstance(m, AlbertAttention):
                m.attention_dropout = attention

    def save_pretrained(self, path: str | os.PathLike, layout: str = "auto") -> None:
        """Write config.json + weights. layout: "auto" | "transformers" | "native" (see hf_interop)."""
        from albert_lm.model.hf_interop import save_model

        save_model(self, path, layout=layout)

    @classmethod
    def from_pretrained(
        cls: type[_Model], path: str | os.PathLike, config: AlbertConfig | None = None, **overrides: Any
    ) -> _Model:
        """Load a folder written by transformers' ALBERT or by albert-lm (config.json + weights).

        `overrides` change config fields (e.g. num_labels=3 for a new classifier). Heads absent from
        the checkpoint are initialised fresh with a warning; a missing, unexpected or mis-shaped tensor
        of the encoder is an error that names each one. The model comes back in eval mode (dropout off),
        as transformers' does: call `.train()` to train it (albert-lm's loops do).
        """
        from albert_lm.model.hf_interop import load_model

        model = load_model(cls, path, config=config, **overrides)
        assert isinstance(model, cls)
        return model.eval()


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, S, H), (B, S) -> (B, H): the mean over each text's tokens, padding left out (sentence-transformers'
    mean pooling: [CLS] and [SEP] are tokens of the text)."""
    keep = mask.unsqueeze(-1).to(hidden.dtype)  # (B, S, 1)
    return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)


def _check_ids(name: str, t: Any) -> None:
    """An input of ids or a mask is a (batch, sequence) tensor, ids of integers: a list, float ids or one
    row alone is refused by name, not left to fail inside the embedding or the attention's shapes. (Ids
    past the vocabulary are left to the embedding: a range check here would cost a device sync a call.)"""
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch tensor of shape (batch, sequence), got {type(t).__name__}")
    ids = name != "attention_mask"  # a mask may be float 0/1, as transformers takes it
    if (ids and (t.is_floating_point() or t.is_complex())) or t.dim() != 2:
        raise ValueError(
            f"{name}: expected {'integers' if ids else 'a mask'} of shape (batch, sequence), got {t.dtype} of "
            f"shape {tuple(t.shape)}" + ("; one sequence is a batch of one: t[None]" if t.dim() == 1 else "")
        )


class AlbertModel(AlbertPreTrainedModel):
    """The bare encoder: last_hidden_state (B, S, H) and pooler_output = tanh(W h_[CLS]) (B, H)."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertEncoder(config)
        self.pooler = Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        self.post_init()

    def _encode(self, inputs: Inputs, output_hidden_states: bool) -> BaseModelOutputWithPooling:
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds = inputs
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds")
        for name, t in (
            ("input_ids", input_ids),
            ("attention_mask", attention_mask),
            ("token_type_ids", token_type_ids),
        ):
            _check_ids(name, t)
        x = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, S, E)
        x, states = self.encoder(x, padding_mask(attention_mask), output_hidden_states)  # (B, S, H)
        pooled = self.pool(x, attention_mask) if self.pooler is not None else None  # (B, H)
        return BaseModelOutputWithPooling(last_hidden_state=x, pooler_output=pooled, hidden_states=states)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """pooler_output of `hidden` (B, S, H): tanh(W h_[CLS]), or with config.classifier_pooling "mean"
        tanh(W mean), the mean over the tokens the mask keeps (what general distillation teaches)."""
        assert self.pooler is not None
        if self.config.classifier_pooling == "cls":
            return torch.tanh(self.pooler(hidden[:, 0]))
        if attention_mask is None:
            return torch.tanh(self.pooler(hidden.mean(1)))
        return torch.tanh(self.pooler(mean_pool(hidden, attention_mask)))
