"""Task heads on the ALBERT encoder, with transformers' class, argument and output names.

Pretraining (paper Section 3.1/4.1): masked-LM head tied to the input embeddings plus the
sentence-order-prediction head on the pooled [CLS]. Fine-tuning heads follow transformers so that
switching is an import change: classification/regression on the pooled output, per-token
classification, extractive QA (start/end logits), multiple choice (one score per choice).

Every head shares one forward (`AlbertPreTrainedModel.forward`: the inputs, the options, the encoder
call); a head writes only its own part, `_head(out, <its targets>)`: its logits from the encoder
output, their loss when the targets are given, and its output class.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.kernels.linear import Linear, linear
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertModel, AlbertPreTrainedModel, Inputs, mean_pool
from albert_lm.model.outputs import (
    AlbertForPreTrainingOutput,
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)


def head_in_fp32(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A task head's last linear (classes, a score, spans, choices) in fp32, also under bf16 autocast. bf16
    keeps about three significant digits (a SQuAD 2.0 null score difference was 0 or -0.03125, nothing
    between): STS-B scores near 2.5 come out in steps of 1/64, so a regressor whose predictions
    differ by less than that (early in fine-tuning, or a small model) answered one value for every pair
    and scored Pearson 0, and its loss was computed on the rounded values. The layer is a sliver of the
    model's compute; outside autocast (fp32, a graph being exported) it runs as it is."""
    if torch.is_autocast_enabled(x.device.type):
        with torch.autocast(x.device.type, enabled=False):
            return layer(x.float())
    return layer(x)


class AlbertMLMHead(nn.Module):
    """H -> E dense, activation, LayerNorm, then the tied E -> V decoder (the embedding table) + bias."""

    def __init__(self, config: AlbertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_size)
        self.act = config.hidden_act  # AlbertConfig has checked the name
        self.norm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied: one Parameter, two names
        self.decoder.tied = True  # type: ignore[assignment]  # initialised once, as the embedding table (keeps its zero pad row)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: (..., H), e.g. (B, S, H) or only the masked positions (N, H) -> (..., V)
        return linear(self.norm(self.dense(hidden, self.act)), self.decoder.weight, self.bias)


class AlbertSOPHead(nn.Module):
    """Sentence-order (or next-sentence) prediction from the pooled [CLS].

    Sized by config.num_labels (2 for pretraining) because transformers sizes it so.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled))  # (B, num_labels)


def _token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position (masked LM, token classification); IGNORE_INDEX labels skipped."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


class _Head(AlbertPreTrainedModel):
    """A head on the encoder: the encoder is `self.albert`, built first, as transformers orders them; the
    subclass builds its own layers after this `__init__` and writes `_head`."""

    def __init__(self, config: AlbertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.albert = AlbertModel(config, add_pooling_layer=add_pooling_layer)


class AlbertForPreTraining(_Head):
    """Encoder + MLM head + SOP head; loss = MLM + SOP when both label sets are given."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        self.sop_classifier = AlbertSOPHead(config)
        self.post_init()

    def _head(
        self,
        out: BaseModelOutputWithPooling,
        labels: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
    ) -> AlbertForPreTrainingOutput:
        logits = self.predictions(out.last_hidden_state)  # (B, S, V)
        sop_logits = self.sop_classifier(out.pooler_output)  # (B, 2)
        loss = None
        if labels is not None and sentence_order_label is not None:
            loss = _token_loss(logits, labels) + F.cross_entropy(sop_logits, sentence_order_label.view(-1))
        return AlbertForPreTrainingOutput(loss, logits, sop_logits, out.hidden_states)


class AlbertForMaskedLM(_Head):
    """Encoder + MLM head (no pooler, no SOP head): logits (B, S, V) over the vocabulary at every
    position; loss = cross-entropy where `labels` are not IGNORE_INDEX (-100)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        self.post_init()

    def _head(self, out: BaseModelOutputWithPooling, labels: torch.Tensor | None = None) -> MaskedLMOutput:
        logits = self.predictions(out.last_hidden_state)  # (B, S, V)
        loss = _token_loss(logits, labels) if labels is not None else None
        return MaskedLMOutput(loss, logits, out.hidden_states)


class AlbertForSequenceClassification(_Head):
    """num_labels == 1: regression (MSE); integer labels: cross-entropy; float multi-hot: BCE."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=True)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _head(
        self, out: BaseModelOutputWithPooling, labels: torch.Tensor | None = None
    ) -> SequenceClassifierOutput:
        logits = head_in_fp32(self.classifier, self.dropout(out.pooler_output))  # (B, num_labels), fp32
        loss = self._loss(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, out.hidden_states)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        problem = self.config.problem_type
        if problem is None:  # decided by the first labels seen, then kept in the config, as transformers
            if self.num_labels == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
            self.config.problem_type = problem
        if problem == "regression":
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(logits.shape[0]))
        if problem == "single_label_classification":
            return F.cross_entropy(logits, labels.view(-1))
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class AlbertForTokenClassification(_Head):
    """A label per token (NER, POS): a linear over each position's vector; labels IGNORE_INDEX are skipped
    (padding, a word's pieces after its first)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _head(
        self, out: BaseModelOutputWithPooling, labels: torch.Tensor | None = None
    ) -> TokenClassifierOutput:
        logits = head_in_fp32(self.classifier, self.dropout(out.last_hidden_state))  # (B, S, num_labels)
        loss = _token_loss(logits, labels) if labels is not None else None
        return TokenClassifierOutput(loss, logits, out.hidden_states)


class AlbertForQuestionAnswering(_Head):
    """Extractive QA: a start and an end logit per token; positions past the sequence are ignored."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.num_labels = config.num_labels
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _head(
        self,
        out: BaseModelOutputWithPooling,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> QuestionAnsweringModelOutput:
        assert out.last_hidden_state is not None
        logits = head_in_fp32(self.qa_outputs, out.last_hidden_state)  # (B, S, 2)
        start_logits, end_logits = (t.squeeze(-1).contiguous() for t in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, ignored)
            end = end_positions.view(-1).clamp(0, ignored)
            loss = (
                F.cross_entropy(start_logits, start, ignore_index=ignored)
                + F.cross_entropy(end_logits, end, ignore_index=ignored)
            ) / 2
        return QuestionAnsweringModelOutput(loss, start_logits, end_logits, out.hidden_states)


class AlbertForMultipleChoice(_Head):
    """Inputs (B, C, S): each choice is encoded on its own, scored from its pooled [CLS]; logits (B, C)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=True)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def _encode(self, inputs: Inputs, output_hidden_states: bool) -> BaseModelOutputWithPooling:
        """The B x C choices encoded as B*C sequences; pooler_output comes back per choice, (B, C, H)."""

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(-1, *t.shape[2:])  # (B, C, ...) -> (B*C, ...)

        out = super()._encode(tuple(flat(t) for t in inputs), output_hidden_states)
        input_ids, inputs_embeds = inputs[0], inputs[-1]
        ref = input_ids if input_ids is not None else inputs_embeds
        assert ref is not None and out.pooler_output is not None  # AlbertModel has checked both
        return dataclasses.replace(out, pooler_output=out.pooler_output.view(*ref.shape[:2], -1))

    def _head(
        self, out: BaseModelOutputWithPooling, labels: torch.Tensor | None = None
    ) -> MultipleChoiceModelOutput:
        logits = head_in_fp32(self.classifier, self.dropout(out.pooler_output)).squeeze(-1)  # (B, C)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        return MultipleChoiceModelOutput(loss, logits, out.hidden_states)


def split_pair(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, token_type_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of pairs read as one sequence each, [CLS] a [SEP] b [SEP] (segments 0 and 1), as the two
    texts' own sequences: (2B, W) ids and mask, rows 0..B-1 [CLS] a [SEP] and rows B..2B-1 [CLS] b [SEP],
    each from position 0, as a text encoded alone is. W is the longest of them, or S while a graph is
    being captured (a captured width would be one batch's)."""
    keep = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    first, second = keep & (token_type_ids == 0), keep & (token_type_ids != 0)
    len_a, len_b = first.sum(1), second.sum(1) + 1  # b's sequence gains the row's [CLS]
    width = input_ids.shape[1]
    capturing = torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
    if not capturing:  # one host sync: the pairs' halves are about half the pair's length
        width = int(torch.maximum(len_a.max(), len_b.max()))
    j = torch.arange(width, device=input_ids.device)
    ids_a = input_ids[:, :width]  # a's tokens are the pair's prefix
    # b's row: position 0 takes the pair's [CLS], position j > 0 the pair's token len_a + j - 1
    source = torch.where(j == 0, 0, len_a[:, None] + j - 1).clamp(max=input_ids.shape[1] - 1)
    ids_b = torch.gather(input_ids, 1, source)
    mask_a, mask_b = j < len_a[:, None], j < len_b[:, None]
    return torch.cat([ids_a, ids_b]), torch.cat([mask_a, mask_b]).to(input_ids.dtype)


class AlbertForSentenceSimilarity(_Head):
    """A pair scored as a bi-encoder (Reimers and Gurevych's sentence-BERT): each text encoded alone, the
    score the cosine of the two mean-pooled vectors, mapped onto the task's scale by `similarity` (one
    weight and a bias, set to the scale's width and low end; STS-B: score = 5 x cosine). Regression: MSE.

    albert-lm's own head (transformers has none): it takes a pair as the cross-encoder does, [CLS] a [SEP]
    b [SEP] with token_type_ids 0 and 1, and splits it (`split_pair`), so batches, exports and predict
    are the sequence classifier's. The encoder it trains is a sentence embedder as it is: `albert embed`
    (mean pooling) gives the vectors whose cosine it scores, and transformers' AlbertModel reads it."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.similarity = nn.Linear(1, 1)
        self.post_init()
        self.set_scale(0.0, 1.0)

    def set_scale(self, low: float, high: float) -> None:
        """Scores from `low` (cosine 0) to `high` (cosine 1): STS-B's 0 to 5."""
        with torch.no_grad():
            self.similarity.weight.fill_(high - low)
            self.similarity.bias.fill_(low)

    def _encode(self, inputs: Inputs, output_hidden_states: bool) -> BaseModelOutputWithPooling:
        """Both texts of every pair encoded as 2B sequences; pooler_output is each one's mean vector over
        its tokens ([CLS] and [SEP] included), (2B, H): the B first texts, then the B second ones."""
        input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds = inputs
        if (
            input_ids is None
            or token_type_ids is None
            or position_ids is not None
            or inputs_embeds is not None
        ):
            raise ValueError(
                "AlbertForSentenceSimilarity takes input_ids and token_type_ids (the pair's segments) only"
            )
        ids, mask = split_pair(input_ids, attention_mask, token_type_ids)
        out = super()._encode((ids, mask, None, None, None), output_hidden_states)
        assert out.last_hidden_state is not None  # the encoder's output always has it
        return dataclasses.replace(out, pooler_output=mean_pool(out.last_hidden_state, mask))

    def _head(
        self, out: BaseModelOutputWithPooling, labels: torch.Tensor | None = None
    ) -> SequenceClassifierOutput:
        assert out.pooler_output is not None  # _encode pools
        pooled = out.pooler_output.float()  # fp32: a cosine's small differences are the signal
        u, v = pooled.view(2, -1, pooled.shape[-1]).unbind(0)  # the first texts, the second ones
        cosine = F.cosine_similarity(u, v, dim=-1)[:, None]  # (B, 1)
        logits = head_in_fp32(self.similarity, cosine)
        loss = F.mse_loss(logits.squeeze(-1), labels.float().view(-1)) if labels is not None else None
        return SequenceClassifierOutput(loss, logits, out.hidden_states)
