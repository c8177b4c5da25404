"""Hostile cases on the surfaces every command shares (benchmarks/tools/hostile_round.py loads this family):
JSON nested too deeply for the parser, outputs that are symbolic links, file-size limits (`ulimit -f`),
empty values, `--config` files and the Python API."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

FAMILY = "shared surfaces"
DEEP = "[" * 100_000 + "]" * 100_000  # far past the json module's recursion limit
TINY = ["--model-override", "hidden_size=32", "--model-override", "embedding_size=16", "--model-override",
        "num_attention_heads=2", "--model-override", "intermediate_size=64", "--model-override",
        "num_hidden_layers=2", "--model-override", "max_position_embeddings=64"]  # fmt: skip


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """Files nested too deeply, copies of the world's folders with one file replaced, and --config files."""
    d = world / "surfaces"
    names = [
        "deep.json",
        "deep.jsonl",
        "deep_object.json",
        "run_deep_config",
        "tok_deep_config",
        "cfg",
        "mask.txt",
    ]
    made = {f"s:{n}": d / n for n in names}
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    (d / "deep.json").write_text(DEEP)
    (d / "mask.txt").write_text("".join(f"word{i} [MASK] river\n" for i in range(3)))
    (d / "deep_object.json").write_text('{"max_steps": ' + DEEP + "}")
    (d / "deep.jsonl").write_text(json.dumps({"text": "a fine line"}) + "\n" + '{"text": ' + DEEP + "}\n")
    shutil.copytree(p["run"], d / "run_deep_config", ignore=shutil.ignore_patterns("checkpoint-*"))
    (d / "run_deep_config" / "config.json").write_text('{"hidden_size": ' + DEEP + "}")
    shutil.copytree(p["tok_a"], d / "tok_deep_config")
    (d / "tok_deep_config" / "tokenizer_config.json").write_text('{"do_lower_case": ' + DEEP + "}")
    cfg = d / "cfg"
    cfg.mkdir()
    configs = {
        "string_for_int.json": {"warmup_steps": "3"},
        "bool_for_int.json": {"seed": True},
        "empty_string.json": {"model": ""},
        "unknown_key.json": {"max_stepz": 3},
        "null_required.json": {"model": None},
        "list.json": [1, 2, 3],
        "nan.json": '{"learning_rate": NaN}',
        "huge_int.json": '{"max_steps": ' + "9" * 5000 + "}",
        "not_utf8.json": b'{"max_steps": "\xff\xfe"}',
        "empty.json": "",
    }
    for name, value in configs.items():
        if isinstance(value, bytes):
            (cfg / name).write_bytes(value)
        else:
            (cfg / name).write_text(value if isinstance(value, str) else json.dumps(value))
    (d / "READY").write_text("")
    return made


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    cs: list[tuple[str, list[str], str, list[str]]] = []
    best = p["ft"] / "best"
    s = {k[2:]: v for k, v in p.items() if k.startswith("s:")}

    def pre(data: Path, o: str, *more: str) -> list[str]:
        return [
            "pretrain",
            "--data",
            str(data),
            "--output",
            o,
            "--preset",
            "albert-tiny",
            *TINY,
            "--batch-size",
            "4",
            "--max-steps",
            "1",
            "--no-tensorboard",
            "--no-plot",
            *more,
        ]

    def ft(o: str, *more: str, model: Path = p["run"]) -> list[str]:
        return [
            "finetune",
            "--task",
            "classification",
            "--model",
            str(model),
            "--data",
            str(p["task"]),
            "--output",
            o,
            "--max-steps",
            "1",
            "--batch-size",
            "8",
            *more,
        ]

    def pr(o: str, *more: str, inp: Path = p["rows.jsonl"], model: Path = best) -> list[str]:
        return ["predict", "--model", str(model), "--input", str(inp), "--output", o, *more]

    def dc(o: str, *more: str, inp: Path = p["a.txt"], tk: Path = p["tok_a"]) -> list[str]:
        return [
            "data",
            "create",
            "--input",
            str(inp),
            "--tokenizer",
            str(tk),
            "--output",
            o,
            "--max-seq-length",
            "48",
            "--no-progress",
            "--workers",
            "1",
            *more,
        ]

    def tok(o: str, *more: str) -> list[str]:
        return ["tokenizer", "train", "--input", str(p["a.txt"]), "--vocab-size", "120", "--output", o, *more]

    def ev(o: str, *more: str) -> list[str]:
        return [
            "evaluate",
            "--task",
            "classification",
            "--model",
            str(best),
            "--data",
            str(p["task"]),
            "--output",
            o,
            *more,
        ]

    def gl(o: str, *more: str) -> list[str]:
        return [
            "glue",
            "--model",
            str(p["run"]),
            "--data",
            str(p["glue"]),
            "--output",
            o,
            "--tasks",
            "rte",
            "--seeds",
            "1",
            "--learning-rates",
            "1e-4",
            "--epochs",
            "1",
            "--workers",
            "1",
            *more,
        ]

    def emb(o: str, *more: str) -> list[str]:
        return ["embed", "--model", str(p["run"]), "--input", str(p["rows.jsonl"]), "--output", o, *more]

    def fm(o: str, *more: str) -> list[str]:
        return ["fill-mask", "--model", str(p["run"]), "--input", str(s["mask.txt"]), "--output", o, *more]

    def ex(o: str, *more: str) -> list[str]:
        return ["export", "--model", str(best), "--output", o, *more]

    def add(klass: str, argv: list[str], expect: str = "refuse", *mention: str) -> None:
        cs.append((klass, argv, expect, list(mention)))

    # 12. JSON nested deeper than the parser goes, wherever a command reads JSON
    deep, deep_obj = str(s["deep.json"]), str(s["deep_object.json"])
    for make in (
        lambda *m: pre(p["data_a"], out(), *m),
        lambda *m: ft(out(), *m),
        lambda *m: gl(out(), *m),
        lambda *m: pr(out(), *m),
        lambda *m: emb(out(), *m),
    ):
        add("12 nested JSON", make("--config", deep), "refuse", "deep.json")
        add("12 nested JSON", make("--config", deep_obj), "refuse", "deep_object.json")
    add("12 nested JSON", tok(out(), "--recipe", deep), "refuse", "deep.json")
    add("12 nested JSON", pre(p["data_a"], out(), "--model-config", deep_obj), "refuse", "deep_object.json")
    add(
        "12 nested JSON",
        pre(p["data_a"], out(), "--model-override", "hidden_size=" + "[" * 5000),
        "refuse",
        "hidden_size",
    )
    add("12 nested JSON", ft(out(), model=s["run_deep_config"]), "refuse", "config.json")
    add("12 nested JSON", pr(out(), model=s["run_deep_config"]), "refuse", "config.json")
    add("12 nested JSON", emb(out(), "--model", str(s["run_deep_config"])), "refuse", "config.json")
    add("12 nested JSON", dc(out(), inp=s["deep.jsonl"]), "refuse", "deep.jsonl")
    add("12 nested JSON", dc(out(), tk=s["tok_deep_config"]), "refuse", "tokenizer_config.json")
    add("12 nested JSON", pr(out(), inp=s["deep.jsonl"]), "refuse", "deep.jsonl")

    # 13. outputs that are symbolic links: written through, the link kept, nothing stray beside it
    for kind in ("file", "dangling", "stdout"):
        add("13 linked outputs", ["@link", kind, *pr("@LINK")], "ok")
        add("13 linked outputs", ["@link", kind, *emb("@LINK")], "ok")
        add("13 linked outputs", ["@link", kind, *fm("@LINK")], "ok")
    for argv in (
        ft("@LINK"),
        ev("@LINK"),
        tok("@LINK"),
        dc("@LINK"),
        pre(p["data_a"], "@LINK"),
        ex("@LINK"),
        gl("@LINK"),
    ):
        add("13 linked outputs", ["@link", "folder", *argv], "ok")

    # 14. file-size limits (`ulimit -f`): the write fails, named; no half-written file is left
    for limit, argv in (
        ("2000", pre(p["data_a"], "@here/o")),
        ("2000", ft("@here/o")),
        ("100", pr("@here/o.jsonl")),
        ("1000", tok("@here/o")),
        ("2000", dc("@here/o")),
        ("50", ev("@here/o")),
        ("100", emb("@here/o.jsonl")),
        ("2000", ex("@here/o")),
        ("1000", gl("@here/o")),
    ):
        add("14 file-size limit", ["@fsize", limit, *argv], "refuse", "File too large")

    # 15. empty values: never the current folder, a default or nothing
    for argv in (
        pre(p["data_a"], out(), "--init-from", ""),
        ["pretrain", "--data", "", "--output", out()],
        ft(out(), "--tokenizer", ""),
        ["finetune", "--task", "classification", "--model", "", "--data", str(p["task"]), "--output", out()],
        pr(""),
        ["predict", "--model", "", "--input", str(p["rows.jsonl"]), "--output", out()],
        ["predict", "--model", str(best), "--input", "", "--output", out()],
        dc(""),
        tok(""),
        ev(""),
        ex(""),
        gl(""),
        emb(""),
        ["params", "--preset", ""],
        ft(out(), "--config", ""),
        ["bench", "--only", "gemm", "--data", "", "--json", out()],
        ["convert", "--from-tf", "", "--output", out()],
    ):
        add("15 empty values", argv, "refuse", "empty value")

    # 16. --config files: every key checked like the option it stands for, the file named
    cfg = s["cfg"]
    for name, mention in (
        ("string_for_int.json", "warmup_steps"),
        ("bool_for_int.json", "seed"),
        ("unknown_key.json", "max_stepz"),
        ("list.json", "list.json"),
        ("nan.json", "learning_rate"),
        ("huge_int.json", "huge_int.json"),
        ("not_utf8.json", "not_utf8.json"),
        ("empty.json", "empty.json"),
    ):
        add("16 config files", ft(out(), "--config", str(cfg / name)), "refuse", mention)
        add("16 config files", pre(p["data_a"], out(), "--config", str(cfg / name)), "refuse", mention)
    add(
        "16 config files",
        [
            "finetune",
            "--config",
            str(cfg / "empty_string.json"),
            "--task",
            "classification",
            "--data",
            str(p["task"]),
            "--output",
            out(),
        ],
        "refuse",
        "model",
    )
    add(
        "16 config files",
        [
            "finetune",
            "--config",
            str(cfg / "null_required.json"),
            "--task",
            "classification",
            "--data",
            str(p["task"]),
            "--output",
            out(),
        ],
        "refuse",
        "model",
    )
    add("16 config files", ft(out(), "--config", str(cfg)), "refuse", str(cfg))
    add("16 config files", ft(out(), "--config", str(cfg / "missing.json")), "refuse", "missing.json")

    # 17. the Python API: bad arguments are refused with what is wrong, never a traceback from inside
    run, model = repr(str(p["run"])), repr(str(best))
    api = (
        ("from albert_lm import Predictor; Predictor('')", ["model"]),
        ("from albert_lm import Predictor; Predictor('/nonexistent/model')", ["/nonexistent/model"]),
        (f"from albert_lm import Predictor; Predictor({run}).predict(['a text'])", [str(p["run"])]),
        (f"from albert_lm import Predictor; Predictor({model}).predict('a text')", ["list"]),
        (f"from albert_lm import Predictor; Predictor({model}).predict([None])", ["inputs:1"]),
        (f"from albert_lm import Predictor; Predictor({model}).predict([{{'txt': 'x'}}])", ["text"]),
        (f"from albert_lm import Predictor; Predictor({model}).predict([''])", ["text"]),
        (f"from albert_lm import Predictor; Predictor({model}, batch_size=0)", ["batch_size"]),
        (f"from albert_lm import Predictor; Predictor({model}, device='tpu')", ["tpu"]),
        (f"from albert_lm import Predictor; Predictor({model}, precision='fp8')", ["fp8"]),
        (f"from albert_lm import Predictor; Predictor({run}).embed(['a'], pooling='max-ish')", ["max-ish"]),
        (f"from albert_lm import Predictor; Predictor({run}).embed([''])", ["texts:1"]),
        (f"from albert_lm import Predictor; Predictor({run}).fill_mask(['no mask'], top_k=0)", ["top_k"]),
        (f"from albert_lm import Predictor; Predictor({model}).fill_mask(['a [MASK]'])", [str(best)]),
        ("from albert_lm import AlbertConfig; AlbertConfig(hidden_size=-1)", ["hidden_size"]),
        ("from albert_lm import AlbertConfig; AlbertConfig(hidden_size='big')", ["hidden_size"]),
        ("from albert_lm import AlbertConfig; AlbertConfig(hidden_size=30, num_attention_heads=4)", ["hidden_size"]),
        ("from albert_lm import AlbertConfig; AlbertConfig.from_pretrained('')", ["empty"]),
        ("from albert_lm import AlbertTokenizer; AlbertTokenizer.from_pretrained('')", ["empty"]),
        ("from albert_lm import AlbertTokenizer; AlbertTokenizer.from_pretrained('/nonexistent/tok')",
         ["/nonexistent/tok"]),
        (f"from albert_lm import FinetuneConfig, finetune; finetune(FinetuneConfig(task='classification', model={run}, "
         f"data='', output={out()!r}))", ["data"]),
        (f"from albert_lm import FinetuneConfig; FinetuneConfig(task='classification', model={run}, data='x', "
         f"output='o', max_steps='3')", ["max_steps"]),
        (f"from albert_lm import PredictConfig, predict; predict(PredictConfig(model={model}, input='', "
         f"output={out()!r}))", ["input"]),
        (f"from albert_lm import finetune_rows; finetune_rows({run}, [('text', 'yes')], output={out()!r})", []),
        ("from albert_lm import quantize_int8; quantize_int8('not a model')", ["model"]),
    )  # fmt: skip
    for code, mention in api:
        add("17 Python API", ["@python", code], "refuse", *mention)
    add(
        "17 Python API",
        ["@python", f"from albert_lm import Predictor; print(Predictor({model}).predict(['a']))"],
        "ok",
    )
    add(
        "17 Python API",
        ["@python", f"from albert_lm import Predictor; print(Predictor({run}).embed(['a']).shape)"],
        "ok",
    )
    return cs
