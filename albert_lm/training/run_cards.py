"""What pretraining and fine-tuning say on the model cards of the folders they save.

`albert_lm.model.card` writes the card; this module gives it each run's part: how the model was made
(the command's key settings; every setting is in the pretrain_config.json / finetune_config.json beside
the card) and its scores (pretraining: the held-out evaluations of that step, where one ran;
fine-tuning: the dev metrics of eval_results.json).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from albert_lm.model.card import write_model_card
from albert_lm.tasks.text_classification import TextClassificationTask, TokenClassificationTask
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import preflight
from albert_lm.training.evaluation import COUNT_FIELDS
from albert_lm.training.optim import scheduled_warmup

if TYPE_CHECKING:
    from albert_lm.tasks import Task
    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.pretrain_setup import Run

# Names of pretraining's evaluation sets and metrics, as a card says them.
_EVAL_SETS = {"eval": "held-out", "eval_text": "plain text (--eval-text)"}
_EVAL_METRICS = {"mlm_acc": "MLM accuracy", "sop_acc": "SOP accuracy", "mlm_loss": "MLM loss"}


# --------------------------------------------------------------------------- pretraining
def checkpoint_extras(run: Run) -> Callable[[Path], None]:
    """What a checkpoint folder holds besides the model (`save_checkpoint`'s `save_extra`): the
    tokenizer, if the run has one, and the model card."""
    final = run.out / f"{ckpt.PREFIX}{run.step}"

    def extras(folder: Path) -> None:
        if run.tokenizer is not None:
            run.tokenizer.save_pretrained(folder)
        write_pretraining_card(run, folder, final, f"ALBERT pretraining checkpoint at step {run.step:,}")

    return extras


def final_cards(run: Run) -> None:
    """The finished model's card in the output folder, and the card of the checkpoint of the same step
    again: it was saved before the final evaluation, whose scores are known now."""
    write_pretraining_card(run, run.out, run.out, f"ALBERT pretrained with albert-lm ({run.step:,} steps)")
    last = run.out / f"{ckpt.PREFIX}{run.step}"
    if last.is_dir():
        write_pretraining_card(run, last, last, f"ALBERT pretraining checkpoint at step {run.step:,}")


def write_pretraining_card(run: Run, folder: Path, location: Path, title: str) -> Path | None:
    """The card of a model this run saved at its current step into `folder` (read later at `location`)."""
    evaluations = run.metrics.evaluations_at(run.step) if run.metrics is not None else {}
    sentence = run.objective.sentence_objective.upper()
    scores = {}
    for split, record in evaluations.items():
        for key, name in _EVAL_METRICS.items():
            if key in record:
                label, n = _eval_set(run, split)
                on = f" ({n:,} sequences)" if n else ""
                scores[f"{label} {name.replace('SOP', sentence)}{on}"] = record[key]
    return write_model_card(
        folder,
        title=title,
        made_by=pretraining_settings(run),
        scores=scores,
        location=location,
        replaces=location,
    )


def _eval_set(run: Run, split: str) -> tuple[str, int]:
    """An evaluation set as a card names it, and the sequences its scores are on (the first
    --eval-batches batches of the held-out split; the --eval-text file's windows)."""
    data = run.evals.get(split)
    n = len(data) if data is not None else 0
    if split == "eval":
        n = min(n, run.cfg.eval_batches * run.cfg.batch_size)
    return _EVAL_SETS.get(split, split).replace("--eval-text", f"--eval-text {run.cfg.eval_text}"), n


def pretraining_settings(run: Run) -> dict[str, Any]:
    """The key settings of a pretraining run, as its cards show them."""
    cfg, step, global_batch = run.cfg, run.step, run.sampler.global_batch
    dataset = run.loader.dataset
    seq = getattr(dataset, "max_seq_length", None) or len(dataset[0]["input_ids"])
    masking = getattr(dataset, "config", None)
    sentence = run.objective.sentence_objective.upper()
    changed = ", ".join(f"{k}={v}" for k, v in sorted(cfg.model_overrides.items()))
    return {
        "command": "albert pretrain",
        "model": cfg.model_config or f"preset {cfg.preset}" + (f" with {changed}" if changed else ""),
        "warm start from": cfg.init_from,
        "data": cfg.data,
        "objective": f"masked LM + {sentence} (weight {cfg.sop_weight:g})"
        if cfg.sop_weight
        else "masked LM only",
        "masked tokens": f"{masking.masked_lm_prob:.0%}" if masking is not None else None,
        "steps": f"{step:,}"
        + (f" (time budget {cfg.time_budget})" if cfg.time_budget else f" of {cfg.max_steps:,}"),
        "global batch": f"{global_batch} sequences of up to {seq} tokens",
        "sequences seen": f"{step * global_batch:,}",
        "tokens seen": f"up to {step * global_batch * seq:,} (sequences x their length cap)",
        "optimizer": f"{cfg.optimizer}, peak learning rate {cfg.learning_rate:g}, {_warmup(run)}",
        "precision": cfg.precision,
        "seed": cfg.seed,
        "every setting": f"`{preflight.SETTINGS_FILE}` beside this card",
    }


# --------------------------------------------------------------------------- fine-tuning
def _warmup(run: Run) -> str:
    """The run's warm-up, and the --warmup-steps it was fitted from where they differ."""
    given = run.cfg.warmup_steps
    steps = scheduled_warmup(run.scheduler, given, run.cfg.max_steps)
    fitted = f" (--warmup-steps {given}, fitted to the run)" if steps != given else ""
    return f"warmup {steps} step{'' if steps == 1 else 's'}{fitted}"


def write_finetune_card(
    folder: Path,
    cfg: FinetuneConfig,
    task: Task,
    record: dict[str, Any],
    *,
    steps: int,
    location: Path,
    model_given: str | None = None,
    train_examples: int = 0,
) -> Path | None:
    """The card of a fine-tuned model: `record` is its evaluation (eval_results.json), `steps` the
    run's, `train_examples` the examples it trained on; `model_given` the hub id typed as --model, where
    it was one (cfg.model: its snapshot)."""
    base = model_given if model_given not in (None, cfg.model) else None
    made_by = {
        "command": "albert finetune",
        "task": cfg.task,
        "base model": base or cfg.model,
        "data": cfg.data,
        "training examples": f"the first {train_examples:,} of the training split (--max-train-examples)"
                             if cfg.max_train_examples == train_examples
                             else f"all {train_examples:,} of the training split",
        "steps": f"{steps:,}; this model is step {record['step']:,} (epoch {record['epoch']:g}), "
                 f"the best dev {task.main_metric}",
        "learning rate": f"{cfg.learning_rate:g} (AdamW, linear warmup and decay)",
        "batch size": cfg.batch_size if cfg.gradient_accumulation_steps == 1
                      else f"{cfg.batch_size} x {cfg.gradient_accumulation_steps} accumulated",
        "max sequence length": cfg.max_seq_length,
        "reads": columns_read(task),
        "dev examples": _dev_examples_of(cfg, record),
        "dev scores": _SCORES.get(task.name),
        "dropout": cfg.dropout,
        "early exit": "a classifier after every layer in `exit_heads.safetensors` (PABEE); transformers reads "
                      "the last one, the model's own; `albert predict --patience 2` stops each row early"
                      if cfg.exit_heads else "no (full depth only)",
        "classifier reads": _classifier_reads(cfg),
        "precision": cfg.precision,
        "seed": cfg.seed,
        "every setting": "`finetune_config.json` beside this card",
    }  # fmt: skip
    scores = {f"dev {k}": v for k, v in record.items() if k not in ("step", "epoch", *COUNT_FIELDS)}
    own_data = (
        f" ({Path(cfg.data).name})"
        if cfg.task in ("classification", "regression", "token-classification")
        else ""
    )
    return write_model_card(
        folder,
        title=f"ALBERT fine-tuned on {cfg.task}{own_data}",
        made_by=made_by,
        scores=scores,
        location=location,
        replaces=location,
        base_model=base.split("@")[0] if base else None,
    )


def _dev_examples_of(cfg: FinetuneConfig, record: dict[str, Any]) -> str | None:
    """`dev_examples`, and where one file was given for every split, that it was the training file."""
    counted = dev_examples(record)
    if counted is not None and Path(cfg.data).is_file():
        return f"{counted} (the training file itself: the dev scores below are not held-out scores)"
    return counted


def columns_read(task: Task) -> str | None:
    """The columns a model fine-tuned on one's own data reads (what `albert predict` reads by default)."""
    if isinstance(task, TokenClassificationTask):
        return f"the words in `{task.tokens_column}`, tagged as `{task.tags_column}` was"
    if not isinstance(task, TextClassificationTask):  # regression's too
        return None
    pair = task.text_pair_column
    texts = f"a pair of texts, `{task.text_column}` and `{pair}`" if pair else f"a text, `{task.text_column}`"
    if task.problem_type != "regression":
        return f"{texts}; gives a label as `{task.label_column}` held in training"
    scale = f", {task.score_range[0]:g} to {task.score_range[1]:g} in training" if task.score_range else ""
    return f"{texts}; gives a score on the scale of `{task.label_column}`{scale}"


# What the dev scores of one's own data are, where their names leave it open
_SCORES = {
    "token-classification": "`f1`, `precision`, `recall` are entity-level, micro-averaged over all entities as "
                            "conlleval counts them (an entity is found only with its type and its first and last "
                            "word right); `f1_TYPE` per entity type (0 for a type training never had); `accuracy` "
                            "is per word",
    "regression": "Pearson and Spearman correlation with the gold scores, and `mse`, the mean squared error on "
                  "the data's scale",
    "classification": "`accuracy`, and `f1_macro`: the mean of each label's F1, which a rare label moves as "
                      "much as a common one",
}  # fmt: skip


# What the heads without a pooled classifier read, by task
_HEAD_READS = {
    "squad1": "each token's vector, scored as the answer's start and end (AlbertForQuestionAnswering); no pooler",
    "squad2": "each token's vector, scored as the answer's start and end (AlbertForQuestionAnswering; no "
              "answer: the [CLS] span); no pooler",
    "token-classification": "each token's vector, a word tagged at its first piece (AlbertForTokenClassification); "
                            "no pooler",
    "race": "the [CLS] vector through the pooler, once per option, the options' scores compared "
            "(AlbertForMultipleChoice)",
}  # fmt: skip


def _classifier_reads(cfg: FinetuneConfig) -> str:
    if cfg.task in _HEAD_READS:
        return _HEAD_READS[cfg.task]
    if cfg.bi_encoder:
        return (
            "no classifier: a bi-encoder (AlbertForSentenceSimilarity), each text encoded alone and the "
            "pair scored by the cosine of their mean vectors, on the task's scale; `albert embed` gives "
            "those vectors, and transformers' AlbertModel reads the encoder"
        )
    if cfg.classifier_pooling == "mean":
        return (
            "the mean of the tokens' vectors (`classifier_pooling` mean; transformers' "
            "AlbertForSequenceClassification reads [CLS]: use albert-lm)"
        )
    return "the [CLS] vector, through the pooler"


def dev_examples(record: dict[str, Any]) -> str | None:
    """The dev examples an evaluation record scored, as a card says them: "872", or "300 of 872 (capped by
    --max-eval-examples 300: not the whole dev set)"; per split where there are several."""
    counts, in_file = record.get("eval_examples") or {}, record.get("eval_examples_in_file") or {}
    parts = [
        f"{n:,}"
        + (f" of {in_file[split]:,}" if in_file.get(split, n) != n else "")
        + (f" ({split})" if len(counts) > 1 else "")
        for split, n in counts.items()
    ]
    cap = record.get("max_eval_examples")
    capped = f" (capped by --max-eval-examples {cap}: not the whole dev set)" if cap else ""
    return ", ".join(parts) + capped if parts else None
