"""albert-lm: ALBERT (Lan et al., ICLR 2020) end to end in PyTorch.

Exports load on first use (PEP 562), so `import albert_lm` is cheap and data-creation workers, which
need only the tokenizer and numpy, never import torch (about 3 CPU-seconds and 200 MB per process).
The modules are laid out by stage (data/, kernels/, model/, tasks/, training/, deploy/, bench/); the names
below are the public ones, importable from `albert_lm` itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "PRESETS": "model.config",
    "AlbertConfig": "model.config",
    "AlbertModel": "model.encoder",
    "AlbertPreTrainedModel": "model.encoder",
    "AlbertForMaskedLM": "model.heads",
    "AlbertForMultipleChoice": "model.heads",
    "AlbertForPreTraining": "model.heads",
    "AlbertForQuestionAnswering": "model.heads",
    "AlbertForSentenceSimilarity": "model.heads",
    "AlbertForSequenceClassification": "model.heads",
    "AlbertForTokenClassification": "model.heads",
    "AlbertTokenizer": "data.tokenizer",
    "DataConfig": "data.examples",
    "train_tokenizer": "data.tokenizer_training",
    "create_pretraining_data": "data.shards",
    "PretrainingDataset": "data.dataset",
    "PretrainingSampler": "data.dataset",
    "collate_pretraining": "data.dataset",
    "AdamW": "training.optim",
    "Lamb": "training.optim",
    "PretrainConfig": "training.pretrain_config",
    "FinetuneConfig": "training.finetune_config",
    "evaluate_model": "training.evaluation",
    "finetune": "training.finetune",
    "FinetuneStopped": "training.finetune",
    "finetune_rows": "training.in_memory",
    "pretrain": "training.pretrain",
    "LoopResult": "training.loop",
    "PredictConfig": "deploy.predict_config",
    "predict": "deploy.predict",
    "PredictSummary": "deploy.predict",
    "Predictor": "deploy.api",
    "quantize_int8": "deploy.int8",
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
    "AlbertForSentenceSimilarity",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertTokenizer",
    "DataConfig",
    "train_tokenizer",
    "create_pretraining_data",
    "PretrainingDataset",
    "PretrainingSampler",
    "collate_pretraining",
    "AdamW",
    "Lamb",
    "PretrainConfig",
    "FinetuneConfig",
    "evaluate_model",
    "finetune",
    "FinetuneStopped",
    "finetune_rows",
    "pretrain",
    "LoopResult",
    "PredictConfig",
    "predict",
    "PredictSummary",
    "Predictor",
    "quantize_int8",
    "__version__",
]


if not TYPE_CHECKING:  # hidden from type checkers, which then take the imports below and refuse a typo

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
    from albert_lm.data.dataset import PretrainingDataset, PretrainingSampler, collate_pretraining
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.data.tokenizer_training import train_tokenizer
    from albert_lm.deploy.api import Predictor
    from albert_lm.deploy.int8 import quantize_int8
    from albert_lm.deploy.predict import PredictSummary, predict
    from albert_lm.deploy.predict_config import PredictConfig
    from albert_lm.model.config import PRESETS, AlbertConfig
    from albert_lm.model.encoder import AlbertModel, AlbertPreTrainedModel
    from albert_lm.model.heads import (
        AlbertForMaskedLM,
        AlbertForMultipleChoice,
        AlbertForPreTraining,
        AlbertForQuestionAnswering,
        AlbertForSentenceSimilarity,
        AlbertForSequenceClassification,
        AlbertForTokenClassification,
    )
    from albert_lm.training.evaluation import evaluate_model
    from albert_lm.training.finetune import FinetuneStopped, finetune
    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.in_memory import finetune_rows
    from albert_lm.training.loop import LoopResult
    from albert_lm.training.optim import AdamW, Lamb
    from albert_lm.training.pretrain import pretrain
    from albert_lm.training.pretrain_config import PretrainConfig
