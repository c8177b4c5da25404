"""Task heads on the ALBERT encoder, with transformers' class, argument and output names.

Pretraining (paper Section 3.1/4.1): masked-LM head tied to the input embeddings plus the
sentence-order-prediction head on the pooled [CLS]. Fine-tuning heads follow transformers so that
switching is an import change: classification/regression on the pooled output, per-token
classification, extractive QA (start/end logits), multiple choice (one score per choice).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.kernels.linear import Linear, linear
from albert_lm.model.config import AlbertConfig
from albert_lm.model.encoder import AlbertModel, AlbertPreTrainedModel
from albert_lm.model.outputs import (
    AlbertForPreTrainingOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)


class AlbertMLMHead(nn.Module):
    """H -> E dense, activation, LayerNorm, then the tied E -> V decoder (the embedding table) + bias."""

    def __init__(self, config: AlbertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.embedding_size)
        self.act = config.hidden_act  # AlbertConfig has checked the name
        self.norm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # tied: one Parameter, two names
        self.decoder.tied = True  # initialised once, as the embedding table (keeps its zero pad row)
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


def _masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


class AlbertForPreTraining(AlbertPreTrainedModel):
    """Encoder + MLM head + SOP head; loss = MLM + SOP when both label sets are given."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        self.sop_classifier = AlbertSOPHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> AlbertForPreTrainingOutput | tuple:
        out = self.albert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states
        )
        logits = self.predictions(out.last_hidden_state)  # (B, S, V)
        sop_logits = self.sop_classifier(out.pooler_output)  # (B, 2)
        loss = None
        if labels is not None and sentence_order_label is not None:
            loss = _masked_lm_loss(logits, labels) + F.cross_entropy(
                sop_logits, sentence_order_label.view(-1)
            )
        res = AlbertForPreTrainingOutput(loss, logits, sop_logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res


class AlbertForMaskedLM(AlbertPreTrainedModel):
    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> MaskedLMOutput | tuple:
        out = self.albert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states
        )
        logits = self.predictions(out.last_hidden_state)
        loss = _masked_lm_loss(logits, labels) if labels is not None else None
        res = MaskedLMOutput(loss, logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res


class AlbertForSequenceClassification(AlbertPreTrainedModel):
    """num_labels == 1: regression (MSE); integer labels: cross-entropy; float multi-hot: BCE."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        out = self.albert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states
        )
        logits = self.classifier(self.dropout(out.pooler_output))  # (B, num_labels)
        loss = None
        if labels is not None:
            problem = self.config.problem_type
            if problem is None:
                if self.num_labels == 1:
                    problem = "regression"
                elif labels.dtype in (torch.long, torch.int):
                    problem = "single_label_classification"
                else:
                    problem = "multi_label_classification"
                self.config.problem_type = problem
            if problem == "regression":
                loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(logits.shape[0]))
            elif problem == "single_label_classification":
                loss = F.cross_entropy(logits, labels.view(-1))
            else:
                loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        res = SequenceClassifierOutput(loss, logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res


class AlbertForTokenClassification(AlbertPreTrainedModel):
    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> TokenClassifierOutput | tuple:
        out = self.albert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states
        )
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (B, S, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
        res = TokenClassifierOutput(loss, logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res


class AlbertForQuestionAnswering(AlbertPreTrainedModel):
    """Extractive QA: a start and an end logit per token; positions past the sequence are ignored."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringModelOutput | tuple:
        out = self.albert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, output_hidden_states
        )
        logits = self.qa_outputs(out.last_hidden_state)  # (B, S, 2)
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
        res = QuestionAnsweringModelOutput(loss, start_logits, end_logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res


class AlbertForMultipleChoice(AlbertPreTrainedModel):
    """Inputs (B, C, S): each choice is encoded on its own, scored from its pooled [CLS]; logits (B, C)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        return_dict: bool | None = None,
    ) -> MultipleChoiceModelOutput | tuple:
        ref = input_ids if input_ids is not None else inputs_embeds
        num_choices = ref.shape[1]

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(-1, *t.shape[2:])  # (B, C, ...) -> (B*C, ...)

        out = self.albert(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            flat(inputs_embeds),
            output_hidden_states,
        )
        logits = self.classifier(self.dropout(out.pooler_output)).view(-1, num_choices)  # (B, C)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        res = MultipleChoiceModelOutput(loss, logits, out.hidden_states)
        return res.to_tuple() if return_dict is False else res
