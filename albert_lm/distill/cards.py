"""The model cards (README.md) of distilled students: how each was taught and what it scored, as
`albert finetune`'s card says it of a fine-tuned model (`albert_lm.model.card`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from albert_lm.distill.config import GeneralDistillConfig, TaskDistillConfig
from albert_lm.distill.distiller import CONFIG_FILE
from albert_lm.model.card import write_model_card
from albert_lm.tasks import Task
from albert_lm.training.evaluation import COUNT_FIELDS
from albert_lm.training.run_cards import columns_read, dev_examples

HEAD_FILE = "distill_head.safetensors"  # a general student's projection to the teacher's space


def write_general_card(
    out: Path,
    cfg: GeneralDistillConfig,
    teacher: dict[str, Any],
    sentences: int,
    held: int,
    last: dict[str, Any],
    warmup: int,
) -> None:
    """The student folder's card: how it was taught (`sentences` trained on, `held` out; the `warmup`
    steps its schedule took), its held-out losses and zero-shot scores (`last`)."""
    losses = {"sentence embedding": cfg.embedding_weight, "in-batch relations": cfg.relation_weight,
              "masked LM": cfg.mlm_weight}  # fmt: skip
    made_by = {
        "command": "albert distill general",
        "teacher": f"{teacher['name']} ({teacher['pooling']})",
        "text": f"{sentences:,} sentences of {len(cfg.text)} file{'' if len(cfg.text) == 1 else 's'} "
                f"({held:,} more held out)",
        "losses (weights)": ", ".join(f"{k} {v:g}" for k, v in losses.items() if v),
        "sentence vector": _sentence_vector(cfg, teacher["pooling"]),
        "learning rate": _schedule(cfg, warmup),
        "batch size": cfg.batch_size,
        "max sequence length": cfg.max_seq_length,
        "time budget": cfg.time_budget,
        "seed": cfg.seed,
        "every setting": f"`{CONFIG_FILE}` beside this card; the projection to the teacher's space in "
                         f"`{HEAD_FILE}`",
    }  # fmt: skip
    scores = {
        ("zero-shot STS-B " + k.removeprefix("sts_")) if k.startswith("sts_") else f"held-out {k}": v
        for k, v in last.items()
        if isinstance(v, float)
    }
    write_model_card(out, title=f"ALBERT distilled from {teacher['name']}", made_by=made_by, scores=scores)


def write_task_card(
    folder: Path,
    cfg: TaskDistillConfig,
    task: Task,
    record: dict[str, Any],
    teacher_dev: dict[str, Any],
    steps: int,
    location: Path,
    warmup: int,
) -> None:
    """The card of a task-distilled student's best/ (`folder`, renamed to `location` later): how it
    learnt the teacher's logits, its dev scores (`record`) beside the teacher's (`teacher_dev`)."""
    teacher_score = teacher_dev.get(task.main_metric)
    made_by = {
        "command": "albert distill task",
        "task": cfg.task,
        "student": cfg.model,
        "teacher": cfg.teacher if teacher_score is None
                   else f"{cfg.teacher} (dev {task.main_metric} {teacher_score:.4f})",
        "data": cfg.data,
        "augmented text": f"{cfg.augment} variants of each training text, labelled by the teacher"
                          if cfg.augment else "no",
        "reads": columns_read(task),
        "losses": _task_losses(cfg, task),
        "steps": f"{steps:,}; this model is step {record['step']:,}, the best dev {task.main_metric}",
        "learning rate": _schedule(cfg, warmup),
        "batch size": cfg.batch_size,
        "max sequence length": cfg.max_seq_length,
        "dev examples": dev_examples(record),
        "seed": cfg.seed,
        "every setting": f"`{CONFIG_FILE}` and `finetune_config.json` beside this card",
    }  # fmt: skip
    scores = {f"dev {k}": v for k, v in record.items() if k not in ("step", "epoch", *COUNT_FIELDS)}
    write_model_card(
        folder,
        title=f"ALBERT distilled on {cfg.task}",
        made_by=made_by,
        scores=scores,
        location=location,
        replaces=location,
    )


def _task_losses(cfg: TaskDistillConfig, task: Task) -> str:
    """What a task-distilled student learnt from: the teacher's soft labels, or a regression teacher's
    scores (the squared difference), and the gold labels where they weigh."""
    regression = task.problem_type == "regression"
    taught = "the teacher's scores (squared difference)" if regression else (
        f"the teacher's soft labels at temperature {cfg.temperature:g}")  # fmt: skip
    gold = f", gold {'scores' if regression else 'labels'} at weight {cfg.hard_label_weight:g}"
    return taught + (gold if cfg.hard_label_weight else "")


def _sentence_vector(cfg: GeneralDistillConfig, pooling: str) -> str | None:
    """What the student's sentence vectors were taught, by the losses that were on (None: no sentence
    loss, an MLM- or token-level-only student)."""
    taught = [
        *(["through a projection, to match the teacher's vector"] if cfg.embedding_weight else []),
        *(["to relate the batch's texts as the teacher's vectors do"] if cfg.relation_weight else []),
    ]
    if not taught:
        return None
    pooler = (
        f"the pooler's output ([CLS]) was taught the same (--cls-weight {cfg.cls_weight:g})"
        if cfg.cls_weight
        else "the pooler and [CLS] were not taught"
    )
    return (
        f"the mean of the last layer over the text's tokens (albert embed's default), taught "
        f"{' and '.join(taught)} ({pooling}); {pooler}"
    )


def _schedule(cfg: GeneralDistillConfig | TaskDistillConfig, warmup: int) -> str:
    """The rate and its schedule: the warm-up the run took, and the --warmup-steps it was fitted from."""
    fitted = f" (--warmup-steps {cfg.warmup_steps}, fitted to the run)" if warmup != cfg.warmup_steps else ""
    steps = f"{warmup} step{'' if warmup == 1 else 's'}"
    return f"{cfg.learning_rate:g} ({cfg.optimizer}, warmup {steps}{fitted}, linear decay)"
