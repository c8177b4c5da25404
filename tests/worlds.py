"""The command lines and small files many tests build, written once (tests/ is on sys.path: `from worlds
import ...`). The worlds built once per session from them are fixtures in conftest.py.

Each `*_argv` gives the words of one `albert` command with its paths, then `more` as given (options in
`more` come last, so they win over a default given before them)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

# A random BERT teacher of a few thousand parameters (transformers' BertConfig fields but the vocabulary).
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=128)  # fmt: skip
# The tiny model as `--model-override` values (on the albert-tiny preset).
TINY_OVERRIDES = ["hidden_size=32", "embedding_size=16", "num_attention_heads=2", "intermediate_size=64",
                  "num_hidden_layers=2", "max_position_embeddings=64"]  # fmt: skip


def made_up_text(path: Path, seed: int) -> Path:
    """150 documents of 8 sentences of made-up words (a sentence per line, a blank line between
    documents), the same for the same seed; written to `path`, returned."""
    rng = np.random.default_rng(seed)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["".join(rng.choice(syll, size=int(rng.integers(1, 4)))) for _ in range(300)]
    docs = [
        "\n".join(" ".join(rng.choice(words, size=int(rng.integers(4, 16)))) + "." for _ in range(8))
        for _ in range(150)
    ]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def labelled_rows(
    folder: Path, words: Mapping[str, Sequence[str]], sizes: Mapping[str, int], seed: int = 0
) -> Path:
    """A classification set in JSON Lines: `folder/SPLIT.jsonl` for each split of `sizes` with that many
    rows of 4 words drawn from the words of a label chosen at random (numpy's generator of `seed`)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    labels = list(words)
    for split, n in sizes.items():
        rows = []
        for _ in range(n):
            label = str(rng.choice(labels))
            rows.append(json.dumps({"text": " ".join(rng.choice(words[label], size=4)), "label": label}))
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def tokenizer_argv(corpus: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert tokenizer train --input CORPUS --output OUTPUT MORE...`."""
    return ["tokenizer", "train", "--input", str(corpus), "--output", str(output), *more]


def data_argv(corpus: Path | str, tokenizer: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert data create --input CORPUS --tokenizer TOKENIZER --output OUTPUT MORE...`."""
    return ["data", "create", "--input", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output),
            *more]  # fmt: skip


def pretrain_argv(data: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert pretrain --data DATA --output OUTPUT MORE...`."""
    return ["pretrain", "--data", str(data), "--output", str(output), *more]


def finetune_argv(
    task: str, model: Path | str, data: Path | str, output: Path | str, *more: str
) -> list[str]:
    """`albert finetune --task TASK --model MODEL --data DATA --output OUTPUT MORE...`."""
    return ["finetune", "--task", task, "--model", str(model), "--data", str(data), "--output", str(output),
            *more]  # fmt: skip


def tiny_pretrain_argv(data: Path | str, output: Path | str, *more: str) -> list[str]:
    """Two steps of pretraining the tiny model (batch 4, logged every step, no TensorBoard or plot)."""
    over = [x for kv in TINY_OVERRIDES for x in ("--model-override", kv)]
    return pretrain_argv(data, output, "--preset", "albert-tiny", *over, "--batch-size", "4", "--warmup-steps",
                         "1", "--learning-rate", "0.005", "--log-every", "1", "--no-tensorboard", "--no-plot",
                         "--max-steps", "2", *more)  # fmt: skip


def two_step_finetune_argv(model: Path | str, data: Path | str, output: Path | str, *more: str) -> list[str]:
    """Two steps of fine-tuning on a classification task, batch 8."""
    return finetune_argv(
        "classification", model, data, output, "--max-steps", "2", "--batch-size", "8", *more
    )


def distill_general_argv(
    teacher: Path | str,
    text: Path | str,
    tokenizer: Path | str,
    output: Path | str,
    cache: Path | str,
    *more: str,
) -> list[str]:
    """`albert distill general --teacher TEACHER --text TEXT --tokenizer TOKENIZER --output OUTPUT --cache
    CACHE MORE...`."""
    return ["distill", "general", "--teacher", str(teacher), "--text", str(text), "--tokenizer", str(tokenizer),
            "--output", str(output), "--cache", str(cache), *more]  # fmt: skip


def distill_task_argv(
    model: Path | str,
    teacher: Path | str,
    data: Path | str,
    output: Path | str,
    cache: Path | str,
    *more: str,
) -> list[str]:
    """`albert distill task --task classification --model MODEL --teacher TEACHER --data DATA --output OUTPUT
    --cache CACHE MORE...`."""
    return ["distill", "task", "--task", "classification", "--model", str(model), "--teacher", str(teacher),
            "--data", str(data), "--output", str(output), "--cache", str(cache), *more]  # fmt: skip
