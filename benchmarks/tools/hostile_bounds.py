"""Hostile cases on the counts a user gives and on settings files (benchmarks/tools/hostile_round.py loads
this family): every command's counts at absurd values (a billion variants of each text, 10^11 worker
processes, a batch of a billion rows, 10^12 steps: refused before work starts, naming the option), and
`--config` files with values of the wrong type for several fields of every command that takes one (a
string for a number, true for an integer, a list, null, an object: refused naming the file and the
field), also where the command line gives the same option.

Each case runs on the world's real inputs, so a bound that is missing shows as a hang or a run that
starts, not as another refusal. The family's own inputs: a GLUE teachers folder (only its config.json is
read before the augment bound), a tiny BERT task teacher of the world's words (distill task reads its
training text through it before the bound), and the settings files.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAMILY = "bounds and settings files"
BIG = "1000000000000"  # 10^12: past every bound but the seed's
HUGE = "100000000000000000000000"  # 10^23: past a C long long too
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128)  # fmt: skip
TINY = ["--model-override", "hidden_size=32", "--model-override", "embedding_size=16", "--model-override",
        "num_attention_heads=2", "--model-override", "intermediate_size=64", "--model-override",
        "num_hidden_layers=2", "--model-override", "max_position_embeddings=64"]  # fmt: skip
Case = tuple[str, list[str], str, list[str]]


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """TEACHERS/RTE (a config.json: the glue bound comes before a teacher is read) and a tiny task teacher
    of the world's words (2 labels, as the world's task), saved as transformers saves it."""
    d = world / "bounds"
    made = {"b:teachers": d / "teachers", "b:teacher": d / "teacher"}
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    (d / "teachers" / "RTE").mkdir(parents=True)
    (d / "teachers" / "RTE" / "config.json").write_text("{}")
    _task_teacher(d / "teacher", p)
    (d / "READY").write_text("")
    return made


def _task_teacher(folder: Path, p: dict[str, Path]) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    words = {w.strip(".").lower() for line in p["a.txt"].read_text().splitlines() for w in line.split()}
    vocab = SPECIALS + sorted(w for w in words | {f"word{i}" for i in range(10)} | {"river", "."} if w)
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), num_labels=2, id2label={0: "no", 1: "yes"},
                        label2id={"no": 0, "yes": 1}, **BERT)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)


# --------------------------------------------------------------------------- each command on the world
def _commands(p: dict[str, Path], out: Callable[[str], str]) -> dict[str, Callable[..., list[str]]]:
    """command -> argv maker (the extra options last): a valid run of each on the world's inputs."""
    best, run, task = str(p["ft"] / "best"), str(p["run"]), str(p["task"])
    quick = ["--max-steps", "1", "--batch-size", "8"]
    return {
        "pretrain": lambda *m: ["pretrain", "--data", str(p["data_a"]), "--output", out("pre"), "--preset",
                                "albert-tiny", *TINY, "--batch-size", "4", "--max-steps", "1", "--no-tensorboard",
                                "--no-plot", *m],
        "finetune": lambda *m: ["finetune", "--task", "classification", "--model", run, "--data", task,
                                "--output", out("ft"), *quick, *m],
        "evaluate": lambda *m: ["evaluate", "--task", "classification", "--model", best, "--data", task,
                                "--output", out("ev"), *m],
        "predict": lambda *m: ["predict", "--model", best, "--input", str(p["rows.jsonl"]), "--output",
                               out("pr"), *m],
        "fill-mask": lambda *m: ["fill-mask", "--model", run, "--text", "word1 [MASK] river", "--output",
                                 out("fm"), *m],
        "embed": lambda *m: ["embed", "--model", run, "--input", str(p["rows.jsonl"]), "--output", out("em"), *m],
        "glue": lambda *m: ["glue", "--model", run, "--data", str(p["glue"]), "--output", out("gl"), "--tasks",
                            "rte", "--seeds", "1", "--learning-rates", "1e-4", "--epochs", "1", "--workers", "1",
                            *m],
        "distill general": lambda *m: ["distill", "general", "--teacher", str(p["b:teacher"]), "--text",
                                       str(p["a.txt"]), "--tokenizer", str(p["tok_a"]), "--output", out("dg"),
                                       "--cache", out("cache"), *TINY, "--max-steps", "1", *m],
        "distill task": lambda *m: ["distill", "task", "--task", "classification", "--model", run, "--data", task,
                                    "--teacher", str(p["b:teacher"]), "--output", out("dt"), "--cache",
                                    out("cache"), "--max-steps", "1", *m],
        "reproduce": lambda *m: ["reproduce", "sharing", "--data", str(p["data_a"]), "--output", out("rp"),
                                 "--max-steps", "1", "--seeds", "1", *m],
        "data create": lambda *m: ["data", "create", "--input", str(p["a.txt"]), "--tokenizer", str(p["tok_a"]),
                                   "--output", out("dc"), "--max-seq-length", "48", "--no-progress", *m],
        "bench": lambda *m: ["bench", "--only", "gemm", "--json", out("bench.json"), *m],
        "demo": lambda *m: ["demo", "--output", out("demo"), *m],
    }  # fmt: skip


# Every count of every command at an absurd value: (option, value, what the refusal names).
COUNTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "pretrain": (("--max-steps", BIG, "max_steps"), ("--batch-size", BIG, "batch_size"),
                 ("--gradient-accumulation-steps", BIG, "gradient_accumulation_steps"),
                 ("--warmup-steps", BIG, "warmup_steps"), ("--save-every", BIG, "save_every"),
                 ("--eval-every", BIG, "eval_every"), ("--eval-batches", BIG, "eval_batches"),
                 ("--keep-last", BIG, "keep_last"), ("--log-every", BIG, "log_every"),
                 ("--max-predictions-per-seq", BIG, "max_predictions_per_seq"),
                 ("--dropout-off-step", BIG, "dropout_off_step"), ("--dist-timeout-s", BIG, "dist_timeout_s"),
                 ("--seed", HUGE, "seed")),
    "finetune": (("--max-steps", BIG, "max_steps"), ("--epochs", "1e300", "epochs"),
                 ("--batch-size", BIG, "batch_size"), ("--eval-batch-size", BIG, "eval_batch_size"),
                 ("--gradient-accumulation-steps", BIG, "gradient_accumulation_steps"),
                 ("--warmup-steps", BIG, "warmup_steps"), ("--max-seq-length", BIG, "max_seq_length"),
                 ("--eval-every", BIG, "eval_every"), ("--log-every", BIG, "log_every"),
                 ("--max-train-examples", BIG, "max_train_examples"),
                 ("--max-eval-examples", BIG, "max_eval_examples"), ("--doc-stride", BIG, "doc_stride"),
                 ("--max-query-length", BIG, "max_query_length"), ("--n-best", BIG, "n_best"),
                 ("--max-answer-length", BIG, "max_answer_length"), ("--max-qa-length", BIG, "max_qa_length"),
                 ("--seed", HUGE, "seed")),
    "evaluate": (("--batch-size", BIG, "batch_size"), ("--max-seq-length", BIG, "max_seq_length"),
                 ("--patience", BIG, "patience"), ("--depth", BIG, "depth")),
    "predict": (("--batch-size", BIG, "batch_size"), ("--max-seq-length", BIG, "max_seq_length"),
                ("--patience", BIG, "patience"), ("--depth", BIG, "depth")),
    "fill-mask": (("--batch-size", BIG, "batch_size"), ("--max-seq-length", BIG, "max_seq_length"),
                  ("--top-k", BIG, "top_k"), ("--depth", BIG, "depth")),
    "embed": (("--batch-size", BIG, "batch_size"), ("--max-seq-length", BIG, "max_seq_length"),
              ("--depth", BIG, "depth")),
    "glue": (("--workers", "99999999999", "workers"), ("--batch-size", BIG, "batch_size"),
             ("--max-seq-length", BIG, "max_seq_length"), ("--epochs", "1e300", "epochs"),
             ("--max-train-examples", BIG, "max_train_examples"), ("--max-eval-examples", BIG, "max_eval_examples")),
    "distill general": (("--max-steps", BIG, "max_steps"), ("--batch-size", BIG, "batch_size"),
                        ("--teacher-batch-size", BIG, "teacher_batch_size"),
                        ("--max-seq-length", BIG, "max_seq_length"), ("--max-segments", BIG, "max_segments"),
                        ("--eval-segments", BIG, "eval_segments"), ("--min-words", BIG, "min_words"),
                        ("--relation-heads", BIG, "relation_heads"), ("--warmup-steps", BIG, "warmup_steps"),
                        ("--log-every", BIG, "log_every"), ("--eval-every", BIG, "eval_every"),
                        ("--save-every", BIG, "save_every"), ("--keep-last", BIG, "keep_last"),
                        ("--seed", HUGE, "seed")),
    "distill task": (("--augment", "1000000000", "--augment 1000000000"),
                     ("--teacher-batch-size", BIG, "teacher_batch_size"), ("--batch-size", BIG, "batch_size"),
                     ("--max-seq-length", BIG, "max_seq_length"), ("--epochs", "1e300", "epochs"),
                     ("--max-train-examples", BIG, "max_train_examples"),
                     ("--max-eval-examples", BIG, "max_eval_examples"), ("--max-steps", BIG, "max_steps")),
    "reproduce": (("--max-steps", BIG, "max_steps"), ("--eval-batches", BIG, "eval_batches")),
    "data create": (("--workers", "99999999999", "--workers"), ("--dupe-factor", BIG, "dupe_factor"),
                    ("--max-seq-length", BIG, "max_seq_length"),
                    ("--max-predictions-per-seq", BIG, "max_predictions_per_seq"),
                    ("--max-ngram", BIG, "max_ngram"), ("--seed", HUGE, "seed")),
    "bench": (("--repeats", "1000000000", "--repeats"),),
    "demo": (("--max-steps", BIG, "max_steps"),),
}  # fmt: skip

# Fields of each command's settings given values of the wrong type in a --config file (one field of each
# file): (an integer field, a field of any type, a field that may not be null). Each command gets a
# string for a number, true for an integer, a list, an object and null.
CONFIG_FIELDS: dict[str, tuple[str, str, str]] = {
    "pretrain": ("max_steps", "preset", "learning_rate"),
    "finetune": ("batch_size", "label_column", "classifier_dropout"),
    "evaluate": ("patience", "device", "na_prob_thresh"),
    "predict": ("patience", "text_column", "batch_size"),
    "fill-mask": ("top_k", "output", "batch_size"),
    "embed": ("depth", "text_column", "normalize"),
    "glue": ("workers", "tasks", "epochs"),
    "distill general": ("max_segments", "teacher", "relation_weight"),
    "distill task": ("augment", "label_column", "temperature"),
    "reproduce": ("eval_batches", "cells", "time_budget"),
}


def _wrong_values(fields: tuple[str, str, str]) -> list[tuple[str, Any]]:
    """(field, value) pairs: the five kinds of wrong type over a command's three fields."""
    number, anything, required = fields
    return [(number, "3"), (number, True), (anything, ["a", "b"]), (anything, {"a": 1}), (required, None)]


# A wrong type in the file where the command line gives the same option (valid): still refused.
TYPED_TOO = {"finetune": ("--batch-size", "8", "batch_size"), "predict": ("--patience", "2", "patience"),
             "glue": ("--workers", "1", "workers"), "distill task": ("--augment", "1", "augment"),
             "reproduce": ("--max-steps", "1", "max_steps"), "pretrain": ("--max-steps", "1", "max_steps")}  # fmt: skip


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    """Every count at an absurd value, refused naming the option; settings files of wrong types for
    every command that takes --config, refused naming the file and the field; valid runs beside them."""
    make = _commands(p, out)
    cs: list[Case] = []
    for command, counts in COUNTS.items():
        for option, value, named in counts:
            # named by the option typed, or by its field where a file or recipe could have given it
            cs.append((f"bounds: {command}", make[command](option, value), "refuse", [f"{option}|{named}"]))
    cs.append(("bounds: glue", make["glue"]("--teachers", str(p["b:teachers"]), "--augment", "1000000000"),
               "refuse", ["--augment 1000000000", "5,000,000"]))  # fmt: skip
    cs += _settings_cases(p, out, make)
    cs.append(("bounds: valid", make["distill task"]("--augment", "2"), "ok", []))
    cs.append(("bounds: valid", make["predict"]("--batch-size", "65536"), "ok", []))
    return cs


def _settings_cases(
    p: dict[str, Path], out: Callable[[str], str], make: dict[str, Callable[..., list[str]]]
) -> list[Case]:
    """A settings file per (command, field, wrong value), written into the world's bounds/ folder (read
    only by the cases); the refusal names the file and the field."""
    folder = p["b:teachers"].parent / "settings"
    folder.mkdir(exist_ok=True)
    cs: list[Case] = []

    def config(name: str, values: dict[str, Any]) -> str:
        file = folder / f"{name.replace(' ', '-')}.json"
        file.write_text(json.dumps(values))
        return str(file)

    for command, fields in CONFIG_FIELDS.items():
        for field, value in _wrong_values(fields):
            file = config(f"{command}-{field}-{type(value).__name__}", {field: value})
            cs.append(("settings files: " + command, make[command]("--config", file), "refuse",
                       [Path(file).name, field]))  # fmt: skip
    for command, (option, good, field) in TYPED_TOO.items():
        file = config(f"{command}-{field}-typed-too", {field: [good]})
        cs.append(("settings files: typed too", make[command](option, good, "--config", file), "refuse",
                   [Path(file).name, field]))  # fmt: skip
    good = config("predict-valid", {"batch_size": 4, "text_column": "text"})
    cs.append(("settings files: valid", make["predict"]("--config", good), "ok", []))
    return cs
