"""Fine-tuning settings: google-research ALBERT's per-task table and the FinetuneConfig dataclass.

The table is the paper's Appendix A.4 / google-research's README (learning rate, batch, warmup, steps,
max length, encoder dropout per task). `FinetuneConfig` fields left None take the task's row;
`schedule` turns a config and the training-set size into step counts, keeping the table's warmup
fraction when the steps or epochs are changed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from albert_lm.files import InputError
from albert_lm.runtime.exits import EXIT_COUNTS, ExitSettings
from albert_lm.runtime.finetuned import RUN_FOLDERS, SAVED_FILE
from albert_lm.settings import Precision, check_fields, check_ranges, device_name
from albert_lm.training.loop_settings import LoopSettings
from albert_lm.values import documented, setting


@dataclass(frozen=True)
class TaskDefaults:
    """One row of google-research ALBERT's fine-tuning table (README / paper Appendix A.4)."""

    learning_rate: float
    batch_size: int
    warmup_steps: int
    max_steps: int | None  # None: train for `epochs`
    max_seq_length: int
    dropout: float = 0.0  # "ALBERT DR"; the classifier's dropout is 0.1 everywhere
    epochs: float | None = None


TASK_DEFAULTS: dict[str, TaskDefaults] = {
    "cola": TaskDefaults(1e-5, 16, 320, 5336, 512),
    "sst2": TaskDefaults(1e-5, 32, 1256, 20935, 512),
    "mrpc": TaskDefaults(2e-5, 32, 200, 800, 512),
    "stsb": TaskDefaults(2e-5, 16, 214, 3598, 512),
    "qqp": TaskDefaults(5e-5, 128, 1000, 14000, 512, dropout=0.1),
    "mnli": TaskDefaults(3e-5, 128, 1000, 10000, 512),
    "qnli": TaskDefaults(1e-5, 32, 1986, 33112, 512),
    "rte": TaskDefaults(3e-5, 32, 200, 800, 512, dropout=0.1),
    "wnli": TaskDefaults(2e-5, 16, 250, 2000, 512, dropout=0.1),
    # SQuAD 1.1: the table's 3649 steps at batch 48 are its 2 epochs; warmup 365 = 10%.
    "squad1": TaskDefaults(5e-5, 48, 365, None, 384, epochs=2.0),
    "squad2": TaskDefaults(3e-5, 48, 814, 8144, 512),
    "race": TaskDefaults(1e-5, 32, 1000, 12000, 512, dropout=0.1),
    # Users' own data: no table row; transformers' example defaults (3 epochs, 10% warmup).
    "classification": TaskDefaults(2e-5, 32, 10, None, 128, epochs=3.0),
    "regression": TaskDefaults(2e-5, 32, 10, None, 128, epochs=3.0),
    "token-classification": TaskDefaults(5e-5, 32, 10, None, 128, epochs=3.0),
}
# Fraction of training spent warming up when no step count is given: from the table, else 10%.
DEFAULT_WARMUP_FRACTION = 0.1


def rows_folder(output: Path, digest: str) -> Path:
    """Where `finetune_rows` writes a run's rows in memory as files: beside `output`, named by their
    content, so that the same rows are found again by a resumed run."""
    return output.parent / f".{output.name}.rows-{digest}"


def is_rows_folder(data: str, output: str) -> bool:
    """Whether `data` is the rows folder `finetune_rows` made for the run in `output`."""
    rows, out = Path(data).absolute(), Path(output).absolute()
    return rows.parent == out.parent and rows.name.startswith(f".{out.name}.rows-")


@documented
@dataclass
class FinetuneConfig(LoopSettings):
    """Fine-tuning settings. Fields left None take the task's row of TASK_DEFAULTS."""

    task: str = setting(group="data and output")
    """the task (GLUE name, squad1, squad2, race, classification, regression, token-classification)"""
    model: str = setting(group="data and output", recorded=False)
    """pretrained model folder (config.json, weights and its tokenizer: spiece.model, or a distilled
    student's WordPiece vocab.txt), or hub id org/name[@rev]"""
    data: str = setting(group="data and output", recorded=False)
    """the task's folder (train/dev files) or one file"""
    output: str = setting(group="data and output", resume=True, recorded=False)
    """output folder"""
    tokenizer: str | None = setting(None, group="data and output", recorded=False)
    """spiece.model (or its folder) when --model has none"""
    max_steps: int | None = setting(None, group="batch and optimizer", resume=True)
    """optimizer steps (default: the task's)"""
    epochs: float | None = setting(None, group="batch and optimizer", resume=True)
    """train for this many epochs instead of --max-steps (--max-steps wins where both are given)"""
    batch_size: int | None = setting(None, group="batch and optimizer")
    """training batch size (default: the task's)"""
    eval_batch_size: int | None = setting(None, group="sizes")
    """evaluation batch size (default: twice the training batch)"""
    learning_rate: float | None = setting(None, group="batch and optimizer")
    """peak learning rate (default: the task's)"""
    warmup_steps: int | None = setting(None, group="batch and optimizer")
    """warmup steps (default: the task's warmup fraction of the steps)"""
    max_seq_length: int | None = setting(None, group="sizes")
    """tokens per example (default: the task's: 512 for GLUE, SQuAD 2.0 and RACE, 384 for SQuAD 1.1,
    128 for classification and token-classification)"""
    gradient_accumulation_steps: int = setting(1, group="batch and optimizer")
    """batches per optimizer step"""
    dropout: float | None = setting(None, group="batch and optimizer")
    """encoder dropout, hidden and attention (default: the task's, 0 or 0.1)"""
    classifier_dropout: float = setting(0.1, group="batch and optimizer")
    """dropout before the task head"""
    exit_heads: bool = setting(False, group="the model")
    """also train a classifier after every layer (PABEE's weighting: deeper ones weigh more), saved in
    exit_heads.safetensors beside the model, for early exit in predict and evaluate (--patience,
    --exit-confidence, --depth); classification and regression tasks"""
    classifier_pooling: Literal["cls", "mean"] | None = setting(None, group="the model")
    """what a sequence classifier reads: cls, the [CLS] vector (ALBERT's; transformers reads it), or mean,
    the mean of the tokens' vectors, which `albert distill general` teaches (transformers'
    AlbertForSequenceClassification would read [CLS] instead: such a folder's outputs are albert-lm's);
    default: the model folder's own (cls unless it says mean)"""
    bi_encoder: bool = setting(False, group="the model")
    """STS-B, or regression on your own pairs: fine-tune as a bi-encoder (sentence-BERT): each text encoded
    alone, the pair scored by the cosine of their mean vectors mapped onto the scale (STS-B's 0 to 5; the
    training scores' lowest to highest), trained towards the gold score; the folder is then also a
    sentence embedder (`albert embed`), and predict, evaluate and export score pairs as usual"""
    eval_every: int | None = setting(None, group="evaluation and records")
    """evaluate every N steps (default: once per epoch and at the end)"""
    max_train_examples: int | None = setting(None, group="sizes")
    """use only the first N training examples (quick runs)"""
    max_eval_examples: int | None = setting(None, group="sizes")
    """use only the first N dev examples"""
    doc_stride: int = setting(128, group="question answering and multiple choice")
    """SQuAD: window stride in tokens"""
    max_query_length: int = setting(64, group="question answering and multiple choice")
    """SQuAD: question tokens kept"""
    n_best: int = setting(20, group="question answering and multiple choice")
    """SQuAD: start/end candidates per window"""
    max_answer_length: int = setting(30, group="question answering and multiple choice")
    """SQuAD: longest answer in tokens"""
    null_score_diff_threshold: float | None = setting(None, group="question answering and multiple choice")
    """SQuAD 2.0: answer '' when null score - best span score exceeds this (default: best F1 on dev)"""
    max_qa_length: int = setting(128, group="question answering and multiple choice")
    """RACE: question + option tokens kept"""
    text_column: str = setting("text", group="your own data's columns")
    """classification, regression: text column"""
    text_pair_column: str | None = setting("text_pair", group="your own data's columns")
    """classification, regression: optional second text column"""
    label_column: str = setting("label", group="your own data's columns")
    """classification: label column; regression: the score's column"""
    tokens_column: str = setting("tokens", group="your own data's columns")
    """token classification: tokens column"""
    tags_column: str = setting("tags", group="your own data's columns")
    """token classification: tags column"""

    def __post_init__(self) -> None:
        check_fields(self)  # types and choices (precision is a Literal)
        device_name(self.device)
        if self.task not in TASK_DEFAULTS:
            raise ValueError(f"unknown task {self.task!r}; choose one of: {', '.join(TASK_DEFAULTS)}")
        check_ranges(
            self,
            at_least_one=(
                "max_steps",
                "batch_size",
                "eval_batch_size",
                "max_seq_length",
                "gradient_accumulation_steps",
                "log_every",
                "eval_every",
                "max_train_examples",
                "max_eval_examples",
                "doc_stride",
                "max_query_length",
                "n_best",
                "max_answer_length",
                "max_qa_length",
            ),
            positive=("epochs", "learning_rate", "max_grad_norm"),
            non_negative=("warmup_steps", "weight_decay", "seed", "save_every", "keep_last"),
            fraction=("dropout", "classifier_dropout"),
            batch=("batch_size", "eval_batch_size", "gradient_accumulation_steps"),
            length=("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "max_qa_length"),
            steps=("max_steps", "warmup_steps", "log_every", "eval_every", "save_every"),
            epochs=("epochs",),
            count=("max_train_examples", "max_eval_examples", "n_best", "keep_last"),
            seed=("seed",),
        )
        if self.max_seq_length is not None and self.max_seq_length < 8:
            raise ValueError(
                f"max_seq_length {self.max_seq_length}: expected at least 8 ([CLS], [SEP] and some text)"
            )

    def resolved(self) -> FinetuneConfig:
        """A copy with the task's defaults filled in (steps and warmup are resolved in `finetune`)."""
        d = TASK_DEFAULTS[self.task]
        out = dataclasses.replace(self)
        for name in ("learning_rate", "batch_size", "max_seq_length", "dropout"):
            if getattr(out, name) is None:
                setattr(out, name, getattr(d, name))
        assert out.batch_size is not None  # filled in from the task's row just above
        if out.eval_batch_size is None:
            out.eval_batch_size = 2 * out.batch_size
        return out

    def task_options(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "doc_stride",
                "max_query_length",
                "n_best",
                "max_answer_length",
                "null_score_diff_threshold",
                "max_qa_length",
                "text_column",
                "text_pair_column",
                "label_column",
                "tokens_column",
                "tags_column",
            )
        }


def schedule(cfg: FinetuneConfig, num_train_features: int, say: bool = True) -> tuple[int, int, int]:
    """(total optimizer steps, warmup steps, steps per epoch) from the config and the task's row (`say`:
    log which of --max-steps and --epochs the run follows, where both are given)."""
    d = TASK_DEFAULTS[cfg.task]
    if cfg.batch_size is None:
        raise ValueError("schedule() takes a resolved config (FinetuneConfig.resolved())")
    per_step = cfg.batch_size * cfg.gradient_accumulation_steps
    steps_per_epoch = max(1, math.ceil(num_train_features / per_step))
    if cfg.max_steps is not None:
        total = cfg.max_steps
        if cfg.epochs is not None and say:  # both typed: say which one the run follows
            logging.getLogger(__name__).info(
                steps_override_line(total, cfg.epochs, max(1, math.ceil(cfg.epochs * steps_per_epoch)))
            )
    elif cfg.epochs is not None:
        total = max(1, math.ceil(cfg.epochs * steps_per_epoch))
    elif d.max_steps is not None:
        total = d.max_steps
    else:
        total = max(1, math.ceil((d.epochs or 1.0) * steps_per_epoch))
    if cfg.warmup_steps is not None:
        from albert_lm.training.optim import fit_warmup  # torch: only when a run is scheduled, not for --help

        warmup = fit_warmup(cfg.warmup_steps, total, DEFAULT_WARMUP_FRACTION, "finetune")
    elif d.max_steps is not None:
        warmup = round(total * d.warmup_steps / d.max_steps)
    else:
        warmup = round(total * DEFAULT_WARMUP_FRACTION)
    return total, warmup, steps_per_epoch


NOTHING_LEARNED = "best dev %s %.4f is no better than %s: the model learned nothing it can use. %s"
RATE_CAUSE = ("At hidden size %d the usual cause is the rate: --learning-rate %g; %s. Else check the labels and "
              "the columns read")  # fmt: skip  # defaults: H 768's
RATE_WAYS = ("small models want 1e-4 to 1e-3 (albert glue's grid)",  # one inside can fail where another works:
             "try the other rates of albert glue's grid (1e-4, 3e-4, 1e-3)")  # fmt: skip
OTHER_CAUSES = "Check the labels, the columns read and --learning-rate %g"


def nothing_learned(metric: str, best: float, guess: str, width: int, rate: float | None) -> str:
    """What a run whose best dev `metric` is no better than guessing (`guess`, `metrics.guessing`) is told:
    at a hidden size below 768 (`width`) the usual cause is the learning rate (`rate`)."""
    way = RATE_WAYS[rate is not None and 1e-4 <= rate <= 1e-3]
    cause = RATE_CAUSE % (width, rate, way) if width < 768 else OTHER_CAUSES % rate
    return NOTHING_LEARNED % (metric, best, guess, cause)


def steps_override_line(max_steps: int, epochs: float, epoch_steps: int) -> str:
    """The line a run logs where --max-steps comes before the end of its epochs (given, or a default)."""
    whose = f"{epochs:g} epoch" if epochs == 1 else f"{epochs:g} epochs"
    return f"--max-steps {max_steps} ends the run before its {whose} ({max_steps} of {epoch_steps} steps)"


def check_saved_config(folder: str | Path, saved: dict[str, Any]) -> None:
    """Every value of a fine-tuned model folder's saved settings (`read_saved_settings`, which checks what
    the model's readers use) checked as a FinetuneConfig field, the training ones included: an error
    names the file and the field, before a run or an evaluation takes its settings from there."""
    known = {f.name for f in dataclasses.fields(FinetuneConfig)}
    values: dict[str, Any] = {k: v for k, v in saved.items() if k in known and k not in RUN_FOLDERS}
    values.setdefault("task", "classification")  # absent: predict reads the task from config.json
    values.update(dict.fromkeys(RUN_FOLDERS, "-"))  # where the run was: not settings of the model
    try:
        FinetuneConfig(**values)
    except ValueError as e:
        raise InputError(Path(folder) / SAVED_FILE, str(e)) from None


@dataclass
class EvaluateConfig(ExitSettings):
    """Settings of `albert evaluate`: a SQuAD predictions file scored, or a fine-tuned model run on a
    task's dev set."""

    task: str
    """task name (squad1, squad2, rte, ...; with --model, default: the task its finetune_config.json
    records)"""
    data: str
    """the dev file (SQuAD JSON) or the task's data folder"""
    predictions: str | None = None
    """SQuAD predictions JSON to score"""
    na_probs: str | None = None
    """SQuAD 2.0: JSON of question id -> no-answer probability (or null-score diff)"""
    na_prob_thresh: float = 1.0
    """SQuAD 2.0: predict no answer above this"""
    model: str | None = None
    """fine-tuned model folder (config.json, model.safetensors, spiece.model), or hub id org/name[@rev]"""
    output: str | None = None
    """with --model: also write eval_results.json and predictions/ into this folder (apart from the model
    and the data)"""
    overwrite: bool = False
    """with --output: replace the eval_results.json and predictions/ already there (nothing else in the
    folder is touched)"""
    batch_size: int | None = None
    """with --model: evaluation batch size (default: the model's fine-tuning one, else twice the task's
    training batch)"""
    max_seq_length: int | None = None
    """with --model: tokens per example (default: what the model was fine-tuned with, else the task's)"""
    max_eval_examples: int | None = None
    """with --model: evaluate the first N examples of each dev file (the counts are in the results; default:
    all), as finetune and glue take it"""
    device: str = "auto"
    precision: Precision = "auto"
    text_column: str | None = None
    """your own data: the text's column (default: the one the model was fine-tuned on)"""
    text_pair_column: str | None = None
    """your own data: the second text's column (default: the model's)"""
    label_column: str | None = None
    """your own data: the label's (or the score's) column (default: the model's)"""
    tokens_column: str | None = None
    """your own data: the words' column of a token classifier (default: the model's)"""
    tags_column: str | None = None
    """your own data: the tags' column of a token classifier (default: the model's)"""

    def columns(self) -> dict[str, str]:
        """The columns given, by setting name, over the ones the model was fine-tuned on."""
        names = ("text_column", "text_pair_column", "label_column", "tokens_column", "tags_column")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def __post_init__(self) -> None:
        check_fields(self, "evaluate")
        device_name(self.device)
        counts = (*EXIT_COUNTS, "max_eval_examples")
        check_ranges(self, "evaluate", batch=("batch_size",), length=("max_seq_length",), count=counts)
