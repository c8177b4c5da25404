"""Hostile cases on what fine-tuning, evaluation, prediction and export read and write (benchmarks/
tools/hostile_round.py loads this family): task rows with null, missing or non-text values, a fine-tuned
model's finetune_config.json and config.json with values of the wrong type or range, damaged
safetensors weights, outputs cut short by a file-size limit (`ulimit -f`), and JSON nested too deeply
for the parser inside task files, predict inputs and model files."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAMILY = "task files, configs and weights"
DEEP = "[" * 100_000 + "]" * 100_000  # far past the json module's recursion limit


def _rows(*rows: Any) -> str:
    """JSON Lines of `rows`; a str is written as it is (a line that is not plain JSON of a dict)."""
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def _good(n: int, start: int = 0) -> list[dict[str, str]]:
    return [
        {"text": f"word{i % 7} river", "label": "yes" if i % 2 else "no"} for i in range(start, start + n)
    ]


def _token_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"tokens": ["word1", f"word{i % 5}", "river"], "tags": ["O", "B-X" if i % 2 else "O", "O"]}
        for i in range(n)
    ]


# Task folders (train.jsonl / dev.jsonl, or .csv) with one bad row each: line 3 of train, line 2 of dev.
def _task_folders() -> dict[str, dict[str, str]]:
    good_train, good_dev = _rows(*_good(12)), _rows(*_good(6, 12))
    bad = {
        "text_null": {"text": None, "label": "yes"},
        "text_missing": {"label": "yes"},
        "text_list": {"text": ["word1", "river"], "label": "yes"},
        "text_object": {"text": {"a": "word1"}, "label": "no"},
        "label_null": {"text": "word1 river", "label": None},
        "label_missing": {"text": "word1 river"},
        "label_list": {"text": "word1 river", "label": ["yes"]},
        "pair_object": {"text": "word1 river", "text_pair": {"b": 1}, "label": "yes"},
    }
    folders: dict[str, dict[str, str]] = {}
    for name, row in bad.items():
        folders[name] = {"train.jsonl": _rows(*_good(2), row, *_good(9, 3)), "dev.jsonl": good_dev}
    folders["dev_text_null"] = {"train.jsonl": good_train,
                                "dev.jsonl": _rows(*_good(1), {"text": None, "label": "no"}, *_good(4))}  # fmt: skip
    folders["dev_label_null"] = {
        "train.jsonl": good_train,
        "dev.jsonl": _rows(*_good(1), {"text": "word1", "label": None}, *_good(4)),
    }
    csv_good = "text,label\n" + "".join(f"word{i % 7} river,{'yes' if i % 2 else 'no'}\n" for i in range(12))
    folders["csv_valid"] = {"train.csv": csv_good, "dev.csv": csv_good}
    folders["csv_empty_text"] = {"train.csv": "text,label\nword1,yes\n,no\nword2,yes\n", "dev.csv": csv_good}
    # Excel's "CSV" of ';' whose texts hold commas; a label column under another name
    folders["csv_semicolon_commas"] = {"train.csv": "text;label\nword1, river;yes\nword2, hill;no\n",
                                       "dev.csv": csv_good}  # fmt: skip
    folders["csv_other_label_name"] = {"train.csv": csv_good.replace("text,label", "text,sentiment", 1),
                                       "dev.csv": csv_good}  # fmt: skip
    folders["csv_no_text_column"] = {
        "train.csv": "sentence,label\nword1,yes\nword2,no\n",
        "dev.csv": csv_good,
    }
    deep_row = '{"text": ' + DEEP + ', "label": "yes"}'
    folders["deep_train"] = {"train.jsonl": _rows(*_good(1), deep_row, *_good(10)), "dev.jsonl": good_dev}
    folders["deep_dev"] = {"train.jsonl": good_train, "dev.jsonl": _rows(*_good(1), deep_row, *_good(4))}
    tokens = _token_rows(10)
    folders["tokens_null"] = {"train.jsonl": _rows(*tokens[:2], {"tokens": None, "tags": ["O"]}, *tokens[2:]),
                              "dev.jsonl": _rows(*tokens[:4])}  # fmt: skip
    folders["tokens_with_null"] = {
        "train.jsonl": _rows(*tokens[:2], {"tokens": ["word1", None], "tags": ["O", "O"]}, *tokens[2:]),
        "dev.jsonl": _rows(*tokens[:4]),
    }
    folders["tags_null"] = {"train.jsonl": _rows(*tokens[:2], {"tokens": ["word1"], "tags": None}, *tokens[2:]),
                            "dev.jsonl": _rows(*tokens[:4])}  # fmt: skip
    folders["tokens_valid"] = {"train.jsonl": _rows(*tokens), "dev.jsonl": _rows(*tokens[:4])}
    folders["conll_untagged_word"] = {
        "train.conll": "word1 O\nword2\nword3 O\n\n" + _conll(tokens),
        "dev.conll": _conll(tokens[:4]),
    }
    folders["conll_tab_no_word"] = {"train.conll": "word1\tO\n\tB-X\n\n" + _conll(tokens),
                                    "dev.conll": _conll(tokens[:4])}  # fmt: skip
    tagged = ["tokens,tags", *(f"{' '.join(r['tokens'])},{' '.join(r['tags'])}" for r in tokens)]
    python_list = "\"['word1', 'river']\",O O"  # pandas' to_csv of a list column, on line 3
    folders["tokens_python_list"] = {"train.csv": "\n".join([*tagged[:2], python_list, *tagged[2:]]) + "\n",
                                     "dev.csv": "\n".join(tagged) + "\n"}  # fmt: skip
    scored = [{"text": r["text"], "label": float(i % 5) / 4} for i, r in enumerate(_good(12))]
    for name, score in (("score_word", "high"), ("score_nan", "NaN"), ("score_list", [0.5])):
        folders[name] = {"train.jsonl": _rows(*scored[:2], {"text": "word1 river", "label": score}, *scored[2:]),
                         "dev.jsonl": _rows(*scored[:6])}  # fmt: skip
    folders["score_one_value"] = {"train.jsonl": _rows(*({**r, "label": 1.0} for r in scored)),
                                  "dev.jsonl": _rows(*scored[:6])}  # fmt: skip
    folders["score_valid"] = {"train.jsonl": _rows(*scored), "dev.jsonl": _rows(*scored[:6])}
    return folders


def _conll(rows: list[dict[str, Any]]) -> str:
    """Token rows as a CoNLL file: a word and its tag a line, a blank line after each sentence."""
    return "".join(
        "".join(f"{w} {t}\n" for w, t in zip(r["tokens"], r["tags"], strict=True)) + "\n" for r in rows
    )


def _race(article: Any, question: Any = "What is it?", options: Any = ("a", "b", "c", "d")) -> str:
    good = {"example_id": "middle1.txt", "article": "word1 river word2.", "question": "What?",
            "options": ["a", "b", "c", "d"], "answer": "A"}  # fmt: skip
    second = {
        **good,
        "example_id": "middle2.txt",
        "article": article,
        "question": question,
        "options": list(options),
    }
    return _rows(good, second, good)


def _squad(answers: Any, qas_extra: dict[str, Any] | None = None) -> str:
    context = "word1 river word2 stone"
    qas = [{"id": "q1", "question": "Which river?", "answers": [{"text": "river", "answer_start": 6}]},
           {"id": "q2", "question": "Which stone?", "answers": answers, **(qas_extra or {})}]  # fmt: skip
    return json.dumps(
        {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]},
        indent=1,
    )


def _other_tasks() -> dict[str, dict[str, str]]:
    """RACE and SQuAD folders with a null where text belongs, and a GLUE STS-B folder with an empty text."""
    stsb = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    rows = [f"{i}\tg\tf\t2012\t{i}\ts\ts\tword{i} river\tword{i} stone\t{i % 5}.0\n" for i in range(8)]
    empty = "8\tg\tf\t2012\t8\ts\ts\t\tword2 stone\t3.0\n"
    return {
        "race_article_null": {"train.jsonl": _race(None), "dev.jsonl": _race("word1 river.")},
        "race_question_list": {
            "train.jsonl": _race("word1 river.", ["q"]),
            "dev.jsonl": _race("word1 river."),
        },
        "squad_answers_null": {
            "train.json": _squad(None),
            "dev.json": _squad([{"text": "stone", "answer_start": 18}]),
        },
        "squad_qas_object": {
            "train.json": _squad([], {"is_impossible": "no"}),
            "dev.json": _squad([{"text": "stone", "answer_start": 18}]),
        },
        "squad_id_twice": {  # in dev (training takes repeated ids, with a warning)
            "train.json": _squad([{"text": "stone", "answer_start": 18}]),
            "dev.json": _squad([{"text": "stone", "answer_start": 18}], {"id": "q1"}),
        },
        "squad_no_answer_start": {
            "train.json": _squad([{"text": "stone"}]),
            "dev.json": _squad([{"text": "stone", "answer_start": 18}]),
        },
        "squad_predictions_other": {
            "dev.json": _squad([{"text": "stone", "answer_start": 18}]),
            "predictions.json": json.dumps({"x1": "river", "x2": "stone"}),
        },
        "race_option_empty": {
            "train.jsonl": _race("word1 river.", options=["a", "", "c", "d"]),
            "dev.jsonl": _race("word1 river."),
        },
        "stsb_empty_text": {
            "train.tsv": stsb + "".join(rows[:2]) + empty + "".join(rows[2:]),
            "dev.tsv": stsb + "".join(rows),
        },
    }


# Copies of the fine-tuned model (best/) with one value of finetune_config.json or config.json changed.
FINETUNE_CONFIG_EDITS: dict[str, tuple[str, Any]] = {
    "ftc_seq_string": ("max_seq_length", "abc"),
    "ftc_seq_negative": ("max_seq_length", -5),
    "ftc_task_unknown": ("task", "nonsense"),
    "ftc_labels_string": ("labels", "yes"),
    "ftc_labels_null_item": ("labels", ["no", None]),
    "ftc_fingerprint_number": ("tokenizer_fingerprint", 5),
    "ftc_threshold_string": ("null_score_diff_threshold", "high"),
    "ftc_batch_string": ("eval_batch_size", "16"),
}
CONFIG_EDITS: dict[str, tuple[str, Any]] = {
    "cfg_hidden_string": ("hidden_size", "32"),
    "cfg_hidden_negative": ("hidden_size", -32),
    "cfg_heads_indivisible": ("num_attention_heads", 3),
    "cfg_activation_unknown": ("hidden_act", "swishy"),
    "cfg_dropout_over_one": ("hidden_dropout_prob", 1.5),
    "cfg_id2label_bad_key": ("id2label", {"0": "no", "one": "yes"}),
    "cfg_pad_outside_vocab": ("pad_token_id", 100000),
    "cfg_eps_string": ("layer_norm_eps", "tiny"),
}


def _safetensors_header(header: dict[str, Any], data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def _damaged_weights(whole: bytes) -> dict[str, bytes]:
    """model.safetensors replaced: cut short, a damaged header, enormous shapes, an impossible length."""
    return {
        "w_truncated": whole[: len(whole) // 2],
        "w_header_cut": whole[:40],
        "w_empty": b"",
        "w_header_garbage": whole[:8] + b"\xff" * 64 + whole[72:],
        "w_huge_header_length": struct.pack("<Q", 1 << 60) + whole[8:],
        "w_enormous_shape": _safetensors_header(
            {
                "albert.embeddings.word_embeddings.weight": {
                    "dtype": "F32",
                    "shape": [1 << 31, 1 << 31],
                    "data_offsets": [0, 16],
                }
            },
            b"\0" * 16,
        ),
        "w_offsets_past_end": _safetensors_header(
            {
                "albert.embeddings.word_embeddings.weight": {
                    "dtype": "F32",
                    "shape": [2, 2],
                    "data_offsets": [0, 1 << 40],
                }
            },
            b"\0" * 16,
        ),
    }


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """Task folders with bad rows, model copies with one setting or the weights damaged, a token
    classification model (to predict token lists from CSV), and predict inputs."""
    d = world / "inputs"
    folders = {**_task_folders(), **_other_tasks()}
    models = [*FINETUNE_CONFIG_EDITS, *CONFIG_EDITS, *_damaged_weights(b"x" * 200), "w_deep_index",
              "ftc_deep", "results_deep", "run_truncated"]  # fmt: skip
    names = [*folders, *models, "tok_model", "pred_null.jsonl", "pred_deep_tokens.csv", "pred_list.jsonl",
             "pred_blank.txt", "pred_header.csv"]  # fmt: skip
    made = {f"i:{n}": d / n for n in names}
    ready = "\n".join(names)  # a world made before a new input was added is made again
    if (d / "READY").is_file() and (d / "READY").read_text() == ready:
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for name, files in folders.items():
        (d / name).mkdir()
        for file, text in files.items():
            (d / name / file).write_text(text, encoding="utf-8")
    best = p["ft"] / "best"

    def copy(name: str, source: Path = best) -> Path:
        shutil.copytree(source, d / name, ignore=shutil.ignore_patterns("checkpoint-*"))
        return d / name

    for edits, file in ((FINETUNE_CONFIG_EDITS, "finetune_config.json"), (CONFIG_EDITS, "config.json")):
        for name, (key, value) in edits.items():
            settings = json.loads((copy(name) / file).read_text())
            settings[key] = value
            (d / name / file).write_text(json.dumps(settings, indent=2))
    for name, raw in _damaged_weights((best / "model.safetensors").read_bytes()).items():
        (copy(name) / "model.safetensors").write_bytes(raw)
    (copy("w_deep_index") / "model.safetensors").unlink()
    (d / "w_deep_index" / "model.safetensors.index.json").write_text('{"weight_map": ' + DEEP + "}")
    (copy("ftc_deep") / "finetune_config.json").write_text('{"task": ' + DEEP + "}")
    (copy("results_deep") / "eval_results.json").write_text('{"null_score_diff_threshold": ' + DEEP + "}")
    weights = copy("run_truncated", p["run"]) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    _token_model(d, p)
    (d / "pred_null.jsonl").write_text(_rows({"text": "word1 river"}, {"text": None}, {"text": "word2"}))
    (d / "pred_list.jsonl").write_text(_rows({"text": "word1 river"}, {"text": ["a", "b"]}))
    (d / "pred_blank.txt").write_text("\n  \n\n")  # no text: refused, nothing written
    (d / "pred_header.csv").write_text("text\n")
    (d / "pred_deep_tokens.csv").write_text('tokens\n"[""word1""]"\n"' + "[" * 100_000 + '"\n')
    (d / "READY").write_text(ready)
    return made


def _token_model(d: Path, p: dict[str, Path]) -> None:
    """A token classification model fine-tuned for one step (its best/ is `tok_model`)."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "albert_lm.cli",
            "finetune",
            "--task",
            "token-classification",
            "--model",
            str(p["run"]),
            "--data",
            str(d / "tokens_valid"),
            "--output",
            str(d / "tok_run"),
            "--max-steps",
            "1",
            "--batch-size",
            "4",
            "--no-tensorboard",
            "--no-plot",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    if run.returncode != 0:
        raise SystemExit(f"building the token classification model failed:\n{run.stderr[-2000:]}")
    shutil.move(str(d / "tok_run" / "best"), str(d / "tok_model"))
    shutil.rmtree(d / "tok_run")


Cases = list[tuple[str, list[str], str, list[str]]]


class _Commands:
    """The argv of each command on the world's inputs (`p`), this family's (`i`) and fresh outputs."""

    def __init__(self, p: dict[str, Path], out: Callable[[str], str]) -> None:
        self.p, self.out, self.best = p, out, p["ft"] / "best"
        self.i = {k[2:]: v for k, v in p.items() if k.startswith("i:")}

    def ft(
        self,
        data: Path,
        *more: str,
        task: str = "classification",
        model: Path | None = None,
        o: str | None = None,
    ) -> list[str]:
        return [
            "finetune",
            "--task",
            task,
            "--model",
            str(model or self.p["run"]),
            "--data",
            str(data),
            "--output",
            o or self.out("ft"),
            "--max-steps",
            "1",
            "--batch-size",
            "4",
            "--no-tensorboard",
            "--no-plot",
            *more,
        ]

    def ev(self, data: Path | None = None, model: Path | None = None, o: str | None = None) -> list[str]:
        return [
            "evaluate",
            "--task",
            "classification",
            "--model",
            str(model or self.best),
            "--data",
            str(data or self.p["task"]),
            "--output",
            o or self.out("ev"),
        ]

    def pr(
        self, inp: Path | None = None, model: Path | None = None, *more: str, o: str | None = None
    ) -> list[str]:
        return [
            "predict",
            "--model",
            str(model or self.best),
            "--input",
            str(inp or self.p["rows.jsonl"]),
            "--output",
            o or self.out("p.jsonl"),
            *more,
        ]

    def ex(self, model: Path | None = None, o: str | None = None) -> list[str]:
        return ["export", "--model", str(model or self.best), "--output", o or self.out("ex")]

    def embed(self, model: Path) -> list[str]:
        return [
            "embed",
            "--model",
            str(model),
            "--input",
            str(self.p["rows.jsonl"]),
            "--output",
            self.out("e.jsonl"),
        ]


def cases(p: dict[str, Path], out: Callable[[str], str]) -> Cases:
    c = _Commands(p, out)
    return [*_task_rows(c), *_model_settings(c), *_weights(c), *_write_limits(c), *_nested(c)]


def _task_rows(c: _Commands) -> Cases:
    """18. task rows with a null, a missing or a non-text value: refused with the file, line and column."""
    i, k = c.i, "18 task rows"
    cs: Cases = [
        (k, c.ft(i[name]), "refuse", ["train.jsonl:3", column])
        for name, column in (
            ("text_null", "text"),
            ("text_missing", "text"),
            ("text_list", "text"),
            ("text_object", "text"),
            ("label_null", "label"),
            ("label_missing", "label"),
            ("label_list", "label"),
            ("pair_object", "text_pair"),
        )
    ]
    cs += [
        (k, c.ft(i[name], task="token-classification"), "refuse", ["train.jsonl:3", column])
        for name, column in (("tokens_null", "tokens"), ("tokens_with_null", "tokens"), ("tags_null", "tags"))
    ]
    cs += [
        (k, c.ft(i["dev_text_null"]), "refuse", ["dev.jsonl:2", "text"]),
        (k, c.ev(i["dev_text_null"]), "refuse", ["dev.jsonl:2", "text"]),
        (k, c.ev(i["dev_label_null"]), "refuse", ["dev.jsonl:2", "label"]),
        (k, c.ft(i["csv_empty_text"]), "refuse", ["train.csv:3", "text"]),
        (k, c.ft(i["csv_no_text_column"]), "refuse", ["train.csv", "text"]),
        (k, c.ft(i["csv_semicolon_commas"]), "refuse", ["train.csv:2", "separated by ';'"]),
        (k, c.ft(i["csv_other_label_name"]), "refuse", ["train.csv:1", "--label-column sentiment"]),
        (k, c.pr(i["pred_blank.txt"]), "refuse", ["pred_blank.txt", "no texts"]),
        (k, c.pr(i["pred_header.csv"]), "refuse", ["pred_header.csv", "no texts"]),
        (k, c.pr(None, c.best / "model.safetensors"), "refuse", ["a weights file", "give its folder"]),
        (k, c.ft(i["race_article_null"], task="race"), "refuse", ["train.jsonl:2", "article"]),
        (k, c.ft(i["race_question_list"], task="race"), "refuse", ["train.jsonl:2", "question"]),
        (k, c.ft(i["squad_answers_null"], task="squad1"), "refuse", ["train.json", "answers"]),
        (k, c.ft(i["squad_qas_object"], task="squad1"), "refuse", ["train.json", "is_impossible"]),
        (k, c.ft(i["squad_id_twice"], task="squad1"), "refuse", ["dev.json", "q1"]),
        (k, c.ft(i["squad_no_answer_start"], task="squad1"), "refuse", ["train.json", "answer_start"]),
        (k, c.ft(i["race_option_empty"], task="race"), "refuse", ["train.jsonl:2", "option B"]),
        (
            k,
            [
                "evaluate",
                "--task",
                "squad1",
                "--data",
                str(i["squad_predictions_other"] / "dev.json"),
                "--predictions",
                str(i["squad_predictions_other"] / "predictions.json"),
            ],
            "refuse",
            ["predictions.json", "none of"],
        ),
        (k, c.ft(i["stsb_empty_text"], task="stsb"), "refuse", ["train.tsv:4", "sentence1"]),
        (k, c.ft(c.p["task"], "--bi-encoder"), "refuse", ["--bi-encoder", "stsb"]),
        (k, c.pr(i["pred_null.jsonl"]), "refuse", ["pred_null.jsonl:2", "text"]),
        (k, c.pr(i["pred_list.jsonl"]), "refuse", ["pred_list.jsonl:2", "text"]),
        (k, c.pr(i["pred_null.jsonl"], c.best, "--skip-bad"), "ok", []),  # the bad row counted and reported
        (k, c.ft(i["csv_valid"]), "ok", []),
        (k, c.ft(i["tokens_valid"], task="token-classification"), "ok", []),
        (k, c.ft(i["conll_untagged_word"], task="token-classification"), "refuse", ["train.conll:2", "tag"]),
        (
            k,
            c.ft(i["conll_tab_no_word"], task="token-classification"),
            "refuse",
            ["train.conll:2", "no word"],
        ),
        (
            k,
            c.ft(i["tokens_python_list"], task="token-classification"),
            "refuse",
            ["train.csv:3", "not JSON"],
        ),
        (k, c.ft(i["score_word"], task="regression"), "refuse", ["train.jsonl:3", "expected a number"]),
        (k, c.ft(i["score_nan"], task="regression"), "refuse", ["train.jsonl:3", "expected a number"]),
        (k, c.ft(i["score_list"], task="regression"), "refuse", ["train.jsonl:3", "label"]),
        (k, c.ft(i["score_one_value"], task="regression"), "refuse", ["label", "2 different scores"]),
        (k, c.ft(i["score_valid"], task="regression"), "ok", []),
        (
            k,
            c.ft(i["score_valid"], "--bi-encoder", task="regression"),
            "refuse",
            ["--bi-encoder", "single texts"],
        ),
    ]
    return cs


def _model_settings(c: _Commands) -> Cases:
    """19. a fine-tuned model's finetune_config.json and config.json: the file and the field named."""
    i, k = c.i, "19 model settings"
    cs: Cases = [
        (k, c.pr(model=i[name]), "refuse", ["finetune_config.json", key])
        for name, (key, _) in FINETUNE_CONFIG_EDITS.items()
    ]
    cs += [
        (k, c.pr(model=i[name]), "refuse", ["config.json", key]) for name, (key, _) in CONFIG_EDITS.items()
    ]
    cs += [
        (k, c.ev(model=i["ftc_seq_string"]), "refuse", ["finetune_config.json", "max_seq_length"]),
        (k, c.ev(model=i["ftc_batch_string"]), "refuse", ["finetune_config.json", "eval_batch_size"]),
        (k, c.ex(model=i["ftc_seq_string"]), "refuse", ["finetune_config.json", "max_seq_length"]),
        (
            k,
            c.ft(c.p["task"], model=i["ftc_fingerprint_number"]),
            "refuse",
            ["finetune_config.json", "tokenizer_fingerprint"],
        ),
        (k, c.ft(c.p["task"], model=i["cfg_hidden_string"]), "refuse", ["config.json", "hidden_size"]),
        (k, c.ex(model=i["cfg_activation_unknown"]), "refuse", ["config.json", "hidden_act"]),
        (k, c.embed(i["cfg_dropout_over_one"]), "refuse", ["config.json", "hidden_dropout_prob"]),
    ]
    return cs


def _weights(c: _Commands) -> Cases:
    """20. damaged safetensors weights: one line naming the file."""
    i, k = c.i, "20 weights files"
    cs: Cases = [
        (k, c.pr(model=i[name]), "refuse", ["model.safetensors"]) for name in _damaged_weights(b"x" * 200)
    ]
    cs += [
        (k, c.ev(model=i["w_truncated"]), "refuse", ["model.safetensors"]),
        (k, c.ex(model=i["w_header_garbage"]), "refuse", ["model.safetensors"]),
        (k, c.ft(c.p["task"], model=i["run_truncated"]), "refuse", ["model.safetensors"]),
        (k, c.embed(i["w_enormous_shape"]), "refuse", ["model.safetensors"]),
        (k, c.pr(model=i["w_deep_index"]), "refuse", ["model.safetensors.index.json"]),
    ]
    return cs


def _write_limits(c: _Commands) -> Cases:
    """21. outputs cut short by a file-size limit (`@here/...` outputs: the round checks that no temporary
    file is left there): the output file and the cause named."""
    k = "21 write limits"
    weights = (
        "import resource, torch\nfrom pathlib import Path\nfrom albert_lm.model.weights import write_weights\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        f"write_weights(Path({c.out('w')!r}) / 'model.safetensors', {{'w': torch.zeros(4096)}})"
    )
    return [
        (
            k,
            ["@fsize", "20000", *c.ft(c.p["task"], o="@here/o")],
            "refuse",
            ["File too large", "model.safetensors"],
        ),
        (k, ["@fsize", "20000", *c.ex(o="@here/o")], "refuse", ["File too large", "model.onnx"]),
        (k, ["@fsize", "1000000", *c.ex(o="@here/o")], "either", ["File too large"]),
        (k, ["@fsize", "100", *c.pr(o="@here/o.jsonl")], "refuse", ["File too large", "o.jsonl"]),
        (k, ["@fsize", "200", *c.ev(o="@here/o")], "refuse", ["File too large", "predictions"]),
        (k, ["@python", weights], "refuse", ["model.safetensors", "File too large"]),
        (k, c.ex(o="/sys/albert-hostile-export"), "refuse", ["/sys/albert-hostile-export"]),
    ]


def _nested(c: _Commands) -> Cases:
    """22. JSON nested deeper than the parser goes, in task rows, predict inputs and model files."""
    i, k = c.i, "22 nested rows"
    fields = (
        "from albert_lm.deploy.inputs import Fields\n"
        "Fields('rows.csv').strings({'options': '[' * 100000}, 'options', 7)"
    )
    return [
        (k, c.ft(i["deep_train"]), "refuse", ["train.jsonl:2"]),
        (k, c.ft(i["deep_dev"]), "refuse", ["dev.jsonl:2"]),
        (k, c.ev(i["deep_dev"]), "refuse", ["dev.jsonl:2"]),
        (k, c.pr(i["pred_deep_tokens.csv"], i["tok_model"]), "refuse", ["pred_deep_tokens.csv:3", "tokens"]),
        (k, c.pr(model=i["ftc_deep"]), "refuse", ["finetune_config.json"]),
        (k, c.pr(model=i["results_deep"]), "refuse", ["eval_results.json"]),
        (k, ["@python", fields], "refuse", ["rows.csv:7", "options"]),
        (k, c.pr(c.p["rows.jsonl"], i["tok_model"]), "ok", []),
    ]
