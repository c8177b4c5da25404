"""albert-lm: ALBERT (Lan et al., ICLR 2020) end to end in PyTorch.

Exports load on first use (PEP 562), so `import albert_lm` is cheap and data-creation workers, which
need only the tokenizer and numpy, never import torch (about 3 CPU-seconds and 200 MB per process).
The fine-tuning function stays `albert_lm.finetune.finetune` and the pretraining one
`albert_lm.pretrain.pretrain`: exported here they would shadow their modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "PRESETS": "config",
    "AlbertConfig": "config",
    "AlbertModel": "model",
    "AlbertPreTrainedModel": "model",
    "AlbertForMaskedLM": "heads",
    "AlbertForMultipleChoice": "heads",
    "AlbertForPreTraining": "heads",
    "AlbertForQuestionAnswering": "heads",
    "AlbertForSequenceClassification": "heads",
    "AlbertForTokenClassification": "heads",
    "AlbertTokenizer": "tokenizer",
    "DataConfig": "pretraining_data",
    "PretrainingDataset": "dataset",
    "PretrainingSampler": "dataset",
    "collate_pretraining": "dataset",
    "AdamW": "optim",
    "Lamb": "optim",
    "PretrainConfig": "pretrain_config",
    "FinetuneConfig": "finetune_config",
    "evaluate_model": "finetune",
}

__all__ = [
    "PRESETS",
    "AlbertConfig",
    "AlbertModel",
    "AlbertPreTrainedModel",
    "AlbertForMaskedLM",
    "AlbertForMultipleChoice",
    "AlbertForPreTraining",
    "AlbertForQuestionAnswering",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertTokenizer",
    "DataConfig",
    "PretrainingDataset",
    "PretrainingSampler",
    "collate_pretraining",
    "AdamW",
    "Lamb",
    "PretrainConfig",
    "FinetuneConfig",
    "evaluate_model",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'albert_lm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"albert_lm.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))


if TYPE_CHECKING:  # static analysers and IDEs see the real names
    from albert_lm.config import PRESETS, AlbertConfig
    from albert_lm.dataset import PretrainingDataset, PretrainingSampler, collate_pretraining
    from albert_lm.finetune import evaluate_model
    from albert_lm.finetune_config import FinetuneConfig
    from albert_lm.heads import (
        AlbertForMaskedLM,
        AlbertForMultipleChoice,
        AlbertForPreTraining,
        AlbertForQuestionAnswering,
        AlbertForSequenceClassification,
        AlbertForTokenClassification,
    )
    from albert_lm.model import AlbertModel, AlbertPreTrainedModel
    from albert_lm.optim import AdamW, Lamb
    from albert_lm.pretrain_config import PretrainConfig
    from albert_lm.pretraining_data import DataConfig
    from albert_lm.tokenizer import AlbertTokenizer
