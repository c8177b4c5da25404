"""Model outputs with transformers' field names.

Users switching from transformers read `out.logits` or index `out[0]`; both work here. Indexing
skips fields that are None, as transformers' ModelOutput does, so `out[0]` is the loss when one was
computed and the first logits otherwise; an output also unpacks (`loss, logits = out`) and has a
length, so code written for transformers' return_dict=False tuples reads it unchanged and the models
never build a tuple of their own. Written by hand because transformers' ModelOutput would make
transformers a runtime dependency, which albert-lm avoids.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch


@dataclass
class ModelOutput:
    def _present(self) -> list[Any]:
        """The fields that are not None, in order: what indexing, unpacking and len() see."""
        return [v for f in fields(self) if (v := getattr(self, f.name)) is not None]

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            return getattr(self, key)
        present = self._present()[key]
        return tuple(present) if isinstance(key, slice) else present

    def __iter__(self) -> Iterator[Any]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


@dataclass
class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: torch.Tensor | None = None  # (B, S, H)
    pooler_output: torch.Tensor | None = None  # (B, H)
    hidden_states: tuple[torch.Tensor, ...] | None = None  # (L + 1) x (B, S, H)


@dataclass
class AlbertForPreTrainingOutput(ModelOutput):
    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None  # (B, S, V)
    sop_logits: torch.Tensor | None = None  # (B, 2)
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class LogitsOutput(ModelOutput):
    """The output of a head with one logits tensor; its subclasses differ in name and logits shape."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class MaskedLMOutput(LogitsOutput):
    """logits: (B, S, V)."""


@dataclass
class SequenceClassifierOutput(LogitsOutput):
    """logits: (B, num_labels)."""


@dataclass
class TokenClassifierOutput(LogitsOutput):
    """logits: (B, S, num_labels)."""


@dataclass
class QuestionAnsweringModelOutput(ModelOutput):
    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None  # (B, S)
    end_logits: torch.Tensor | None = None  # (B, S)
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class MultipleChoiceModelOutput(LogitsOutput):
    """logits: (B, num_choices)."""
