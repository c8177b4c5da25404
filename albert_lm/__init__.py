"""albert-lm: ALBERT (Lan et al., ICLR 2020) end to end in PyTorch."""

from albert_lm.config import PRESETS, AlbertConfig
from albert_lm.dataset import PretrainingDataset, PretrainingSampler, collate_pretraining
from albert_lm.finetune import FinetuneConfig, evaluate_model
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
from albert_lm.pretrain import PretrainConfig
from albert_lm.pretraining_data import DataConfig
from albert_lm.tokenizer import AlbertTokenizer

# The fine-tuning function stays `albert_lm.finetune.finetune` and the pretraining one
# `albert_lm.pretrain.pretrain`: exported here they would shadow their modules.
__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AlbertConfig",
    "AlbertForMaskedLM",
    "AlbertForMultipleChoice",
    "AlbertForPreTraining",
    "AlbertForQuestionAnswering",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertModel",
    "AlbertPreTrainedModel",
    "AlbertTokenizer",
    "AdamW",
    "Lamb",
    "PretrainConfig",
    "DataConfig",
    "PretrainingDataset",
    "PretrainingSampler",
    "collate_pretraining",
    "FinetuneConfig",
    "__version__",
    "evaluate_model",
]
