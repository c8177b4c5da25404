"""Whether a tokenizer and a task belong to a model folder: the checks made before a model is run on
text, so that a replaced vocabulary or a head fine-tuned on another task is one clear error instead of
wrong ids or scores."""

from __future__ import annotations

from pathlib import Path

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.model.config import AlbertConfig
from albert_lm.tasks import Task


def check_tokenizer_fits(
    tokenizer: AlbertTokenizer, model_dir: str | Path, config: AlbertConfig, recorded: str | None = None
) -> None:
    """Refuse a tokenizer that does not belong to the model: one whose vocabulary size is not the
    number of rows of the model's embedding (ids past the table crash; a smaller vocabulary means
    other pieces behind the same ids), or, where the model folder records the fingerprint of the
    tokenizer it was fine-tuned with (`recorded`), another vocabulary of the same size."""
    where = tokenizer.model_file
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(
            f"{where}: {tokenizer.vocab_size} pieces, but the model in {model_dir} has {config.vocab_size} "
            "embedding rows: this tokenizer is not the model's; use the one it was trained with"
        )
    if recorded and recorded != tokenizer.fingerprint:
        raise ValueError(
            f"{where}: vocabulary fingerprint {tokenizer.fingerprint}, but {model_dir} was fine-tuned with "
            f"the tokenizer of fingerprint {recorded} (finetune_config.json): this tokenizer was replaced; "
            "put back the one the model was trained with"
        )


def sequence_length(
    given: int | None,
    fallback: int,
    config: AlbertConfig,
    model_dir: str | Path,
    option: str = "--max-seq-length",
) -> int:
    """Tokens per feature: `given` (`option`: the command's --max-seq-length, or the Python API's
    max_seq_length), else `fallback` (what the model was fine-tuned with, or a command's default) capped
    by the model's positions. A length given past the positions is refused, not quietly lowered: the user
    asked for texts the model cannot read whole."""
    positions = config.max_position_embeddings
    if given is not None and given > positions:
        raise ValueError(
            f"{option} {given}: the model in {model_dir} has {positions} positions "
            f"(config.json max_position_embeddings); give at most {positions}, or leave it out"
        )
    return min(given or fallback, positions)


def check_head_fits(task: Task, config: AlbertConfig, model_dir: Path) -> None:
    """The model's classifier has one output per label of the task (or one for a regression)."""
    if task.head not in ("sequence_classification", "token_classification"):
        return
    if task.num_labels != config.num_labels:
        labels = ", ".join(task.labels) or "a regression score"
        raise ValueError(
            f"--model {model_dir}: its classifier has {config.num_labels} outputs, the task {task.name} "
            f"needs {len(task.labels) or 1} ({labels}): the model was not fine-tuned on this task"
        )
