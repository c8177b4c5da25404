"""Hostile cases on identity checked by content, not by shape (benchmarks/tools/hostile_round.py loads this
family): WordPiece vocabularies whose ids are not 0..V-1 once each (a repeated vocab.txt line, two pieces
on one id, a gap, an added token on a taken id) and tokenizer configs with a string where a boolean
belongs, in every command that reads a WordPiece model folder or a teacher; and teacher caches holding
another teacher's outputs of the same texts, rows, width and dtype.

The world here is a WordPiece one: a tokenizer of the world's words, its data, a tiny ALBERT pretrained
on it and fine-tuned on the world's task, tiny BERT teachers made offline (two of each kind, of one shape,
and two saved in shards whose index.json and config.json are byte-identical), and their teacher caches
filled by real runs. A bad folder is a copy of a good one with one thing changed. A cache case copies
teacher A's cache, puts each entry where teacher B's belongs, runs B and then checks the entries hold B's
outputs: A's used as B's is a traceback ("another teacher's cached outputs were used"), and so is a rebuild
without a warning naming meta.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAMILY = "tokenizer identities and caches of another teacher"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT: dict[str, Any] = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128)  # fmt: skip
TINY = ["--model-override", "hidden_size=32", "--model-override", "embedding_size=16", "--model-override",
        "num_attention_heads=2", "--model-override", "intermediate_size=64", "--model-override",
        "num_hidden_layers=2", "--model-override", "max_position_embeddings=64"]  # fmt: skip
QUICK = ["--max-steps", "2", "--warmup-steps", "1", "--batch-size", "8", "--log-every", "1", "--eval-every", "2",
         "--precision", "fp32", "--no-tensorboard", "--no-plot"]  # fmt: skip
# Bad tokenizers: each is a copy of a good folder (tokenizer.json, vocab.txt, tokenizer_config.json) with
# one thing changed; every command that reads one refuses it.
VARIANTS = ("repeated-line", "two-pieces-one-id", "gap", "added-token-on-taken-id", "chinese-chars-string",
            "lower-case-string", "basic-tokenize-string")  # fmt: skip
MODEL_VARIANTS = ("repeated-line", "two-pieces-one-id", "gap", "chinese-chars-string")  # copied into models
TASK_VARIANTS = ("gap", "basic-tokenize-string")  # copied into a task teacher
TWIN = 7  # the id two pieces share, the id a gap leaves out, the id an added token takes


# --------------------------------------------------------------------------- the bad tokenizers
def _vocab_of(folder: Path) -> dict[str, int]:
    return dict(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"])


def _edit_tokenizer_json(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    state = json.loads((folder / "tokenizer.json").read_text())
    change(state)
    (folder / "tokenizer.json").write_text(json.dumps(state))


def _edit_config(folder: Path, **changes: Any) -> None:
    file = folder / "tokenizer_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))


def _variant(folder: Path, name: str) -> None:
    """One identity defect in the tokenizer files of `folder`."""
    pieces = sorted(_vocab_of(folder).items(), key=lambda kv: kv[1])
    if name == "repeated-line":  # one line repeated: every later line's id moves by one
        lines = (folder / "vocab.txt").read_text().splitlines()
        lines.insert(20, lines[10])
        (folder / "vocab.txt").write_text("\n".join(lines) + "\n")
        (folder / "tokenizer.json").unlink()  # transformers and albert-lm then read vocab.txt
    elif name == "two-pieces-one-id":
        _edit_tokenizer_json(folder, lambda s: s["model"]["vocab"].update({pieces[TWIN + 1][0]: TWIN}))
    elif name == "gap":
        _edit_tokenizer_json(folder, lambda s: s["model"]["vocab"].update({pieces[TWIN][0]: len(pieces)}))
    elif name == "added-token-on-taken-id":
        token = {"id": TWIN, "content": "[NEW]", "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": True}  # fmt: skip
        _edit_tokenizer_json(folder, lambda s: s.setdefault("added_tokens", []).append(token))
    elif name == "chinese-chars-string":
        _edit_config(folder, tokenize_chinese_chars="false")
    elif name == "lower-case-string":
        _edit_config(folder, do_lower_case="false")
    elif name == "basic-tokenize-string":
        _edit_config(folder, do_basic_tokenize="false")


def _named(folder: Path, name: str) -> list[str]:
    """What the refusal of `name` in `folder` must name: the file, and the piece, id or field."""
    files = {"repeated-line": "vocab.txt", "two-pieces-one-id": "tokenizer.json", "gap": "tokenizer.json",
             "added-token-on-taken-id": "tokenizer.json"}  # fmt: skip
    what = {"repeated-line": "again (first on line 11)", "two-pieces-one-id": f"id {TWIN} is given to 2 pieces",
            "gap": f"no piece has id {TWIN}", "added-token-on-taken-id": "'[NEW]'",
            "chinese-chars-string": 'tokenize_chinese_chars: expected true or false, got "false"',
            "lower-case-string": 'do_lower_case: expected true or false, got "false"',
            "basic-tokenize-string": 'do_basic_tokenize: expected true or false, got "false"'}  # fmt: skip
    return [str(folder / files.get(name, "tokenizer_config.json")), what[name]]


# --------------------------------------------------------------------------- the world
def _albert(argv: list[str]) -> None:
    _run([sys.executable, "-m", "albert_lm.cli", *argv])


def _run(command: list[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run(command, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"building the identity world failed: {' '.join(command)}\n{r.stderr[-3000:]}")


def _vocabulary(p: dict[str, Path]) -> list[str]:
    """WordPiece vocabulary of the world's text and task words (lowercased, as BertTokenizer reads)."""
    words = {w.strip(".").lower() for line in p["a.txt"].read_text().splitlines() for w in line.split()}
    words |= {f"word{i}" for i in range(10)} | {"river", "."}
    return SPECIALS + sorted(w for w in words if w)


def _bert(
    folder: Path, vocab: list[str], seed: int, classifier: bool = False, shard: str | None = None
) -> Path:
    """A random tiny BERT (a no/yes classifier with `classifier`; in shards of `shard` bytes at most) with
    its tokenizer, saved as transformers saves them."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(seed)
    labels: dict[str, Any] = (
        {"id2label": {0: "no", 1: "yes"}, "label2id": {"no": 0, "yes": 1}} if classifier else {}
    )
    config = BertConfig(vocab_size=len(vocab), **BERT, **labels)
    model = BertForSequenceClassification(config) if classifier else BertModel(config)
    saving: dict[str, Any] = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **saving)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def _general(
    p: dict[str, Path], teacher: Path | str, output: str, cache: Path | str, *more: str
) -> list[str]:
    return ["distill", "general", "--teacher", str(teacher), "--text", str(p["a.txt"]), "--tokenizer",
            str(p["tok_a"]), "--output", output, "--cache", str(cache), "--max-segments", "300", *TINY, *QUICK,
            *more]  # fmt: skip


def _task(p: dict[str, Path], teacher: Path | str, output: str, cache: Path | str, *more: str) -> list[str]:
    return ["distill", "task", "--task", "classification", "--model", str(p["run"]), "--teacher", str(teacher),
            "--data", str(p["task"]), "--output", output, "--cache", str(cache), "--max-seq-length", "32", *QUICK,
            *more]  # fmt: skip


NAMES = ("wordpiece", "wp-data", "wp-run", "wp-ft", "teacher-a", "teacher-b", "task-a", "task-b", "shard-a",
         "shard-b", "cache-teacher-a", "cache-teacher-b", "cache-task-a", "cache-task-b", "cache-shard-a",
         "cache-shard-b")  # fmt: skip


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """A WordPiece tokenizer, its data, a model pretrained and fine-tuned on it, teachers A and B of each
    kind, their filled caches, and a bad copy of each per variant."""
    d = world / "identity"
    made = {f"id:{n}": d / n for n in NAMES}
    for kinds, variants in (
        (("tok", "teacher"), VARIANTS),
        (("run", "ft"), MODEL_VARIANTS),
        (("task",), TASK_VARIANTS),
    ):
        made |= {f"id:{kind}-{v}": d / "bad" / f"{kind}-{v}" for kind in kinds for v in variants}
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    vocab = _vocabulary(p)
    _wordpiece_world(p, d, vocab)
    _bert(d / "teacher-a", vocab, 0)
    _bert(d / "teacher-b", vocab, 1)
    _bert(d / "task-a", vocab, 0, classifier=True)
    _bert(d / "task-b", vocab, 1, classifier=True)
    for name, seed in (("shard-a", 0), ("shard-b", 1)):  # one shape: the same config.json and index
        _bert(d / name, vocab, seed, shard="40KB")
    for name in ("teacher-a", "teacher-b", "shard-a", "shard-b"):
        _albert(_general(p, d / name, str(d / f"run-{name}"), d / f"cache-{name}"))
    for name in ("task-a", "task-b"):
        _albert(_task(p, d / name, str(d / f"run-{name}"), d / f"cache-{name}"))
    sources = {"tok": d / "wordpiece", "teacher": d / "teacher-a", "task": d / "task-a", "run": d / "wp-run",
               "ft": d / "wp-ft" / "best"}  # fmt: skip
    for key, folder in made.items():
        kind, _, variant = key.removeprefix("id:").partition("-")
        if variant in VARIANTS and kind in sources:
            shutil.copytree(sources[kind], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
            _variant(folder, variant)
    (d / "READY").write_text("")
    return made


def _wordpiece_world(p: dict[str, Path], d: Path, vocab: list[str]) -> None:
    """The WordPiece tokenizer (saved by albert-lm: tokenizer.json, vocab.txt, tokenizer_config.json), data
    made with it, a tiny ALBERT pretrained on the data and fine-tuned on the world's task."""
    (d / "vocab").mkdir()
    (d / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    save = "from albert_lm.data.tokenizer import AlbertTokenizer as T; import sys; T.from_pretrained(sys.argv[1])"
    _run(
        [sys.executable, "-c", f"{save}.save_pretrained(sys.argv[2])", str(d / "vocab"), str(d / "wordpiece")]
    )
    _albert(["data", "create", "--input", str(p["a.txt"]), "--tokenizer", str(d / "wordpiece"), "--output",
             str(d / "wp-data"), "--max-seq-length", "48", "--eval-fraction", "0.2", "--workers", "1",
             "--no-progress"])  # fmt: skip
    _albert(["pretrain", "--data", str(d / "wp-data"), "--output", str(d / "wp-run"), "--preset", "albert-tiny",
             *TINY, "--batch-size", "4", "--max-steps", "2", "--no-tensorboard", "--no-plot"])  # fmt: skip
    _albert(["finetune", "--task", "classification", "--model", str(d / "wp-run"), "--data", str(p["task"]),
             "--output", str(d / "wp-ft"), "--max-steps", "2", "--batch-size", "8"])  # fmt: skip


# --------------------------------------------------------------------------- the cache cases
# Teacher A's cache copied, each entry put where teacher B's entry of the same texts belongs (its record
# edited by EDIT), then B run on it: every entry of B must then hold B's outputs (as B's own cache does),
# and the rebuild must have been told, naming meta.json.
ANOTHER = """import json, logging, shutil, sys
from pathlib import Path
import numpy as np
from albert_lm.cli import main
src, ref, cache = Path({src!r}), Path({ref!r}), Path({cache!r})
shutil.copytree(src, cache)
def texts(entry):
    return json.loads((entry / "meta.json").read_text())["texts_sha256"]
theirs = {{texts(e): e.name for e in ref.iterdir() if (e / "meta.json").is_file()}}
for entry in sorted(e for e in cache.iterdir() if (e / "meta.json").is_file()):
    if {rename} and texts(entry) in theirs and entry.name != theirs[texts(entry)]:
        entry = entry.rename(cache / theirs[texts(entry)])
    meta = json.loads((entry / "meta.json").read_text())
    {edit}
    (entry / "meta.json").write_text(json.dumps(meta))
told = []
class Told(logging.Handler):
    def emit(self, record):
        told.append(record.getMessage())
logging.getLogger("albert_lm.distill.cache").addHandler(Told(logging.WARNING))
code = main({argv!r})
if code == 0:
    for e in ref.iterdir():
        if (e / "values.npy").is_file():
            if not (cache / e.name / "values.npy").is_file():
                raise RuntimeError("the teacher's own entry was never computed: another's outputs were used")
            want = np.load(e / "values.npy").astype(np.float32)
            now = np.load(cache / e.name / "values.npy").astype(np.float32)
            if now.shape != want.shape or not np.allclose(now, want, atol=2e-3):
                raise RuntimeError("another teacher's cached outputs were used")
    if {rename} and not any("meta.json" in m for m in told):
        raise RuntimeError("another teacher's entry was computed again without a warning naming meta.json")
sys.exit(code)
"""
EDITS = {
    "its own record": "pass",
    "no fingerprint (an older cache)": "meta.pop('teacher_fingerprint', None)",
    "a fingerprint that is not text": "meta['teacher_fingerprint'] = 12345",
    "an empty fingerprint": "meta['teacher_fingerprint'] = ''",
}


def _cache_cases(
    p: dict[str, Path], out: Callable[[str], str]
) -> list[tuple[str, list[str], str, list[str]]]:
    """A's cache put where B's belongs and read by B, for each kind of teacher; sharded teachers of one
    shape whose only difference is a shard; a valid run on a teacher's own cache."""
    cs: list[tuple[str, list[str], str, list[str]]] = []
    d = {n: p[f"id:{n}"] for n in NAMES}

    def case(
        a: str, b: str, edit: str, rename: bool = True, klass: str = "caches of another teacher"
    ) -> None:
        cache = out("cache")
        command = _task if b.startswith("task") else _general
        code = ANOTHER.format(src=str(d[f"cache-{a}"]), ref=str(d[f"cache-{b}"]), cache=cache, rename=rename,
                              edit=edit, argv=command(p, d[b], out("out"), cache))  # fmt: skip
        valid = klass.startswith("valid")
        cs.append((klass if valid else f"identity: {klass}", ["@python", code], "ok" if valid else "either",
                   [] if valid else ["meta.json"]))  # fmt: skip

    for edit in EDITS.values():
        case("teacher-a", "teacher-b", edit)
    case("task-a", "task-b", EDITS["its own record"])
    case("task-a", "task-b", EDITS["no fingerprint (an older cache)"])
    # shards: one config.json and index.json, other weights: their entries differ by the shards alone
    case("shard-a", "shard-b", EDITS["its own record"], rename=False)
    case("teacher-a", "teacher-a", EDITS["its own record"], rename=False, klass="valid (identity)")
    return cs


# --------------------------------------------------------------------------- the cases
def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    """The family's cases: each bad tokenizer in each command that reads it (refused, naming the file and
    the piece, id or field), caches of another teacher (computed again), valid runs."""
    cs: list[tuple[str, list[str], str, list[str]]] = []
    bad = {key.removeprefix("id:"): path for key, path in p.items() if key.startswith("id:")}
    d = {n: p[f"id:{n}"] for n in NAMES}
    best = d["wp-ft"] / "best"

    def add(klass: str, argv: list[str], folder: Path, variant: str) -> None:
        cs.append((f"identity: {klass}", argv, "refuse", _named(folder, variant)))

    for v in VARIANTS:
        add("tokenizers (data create)", _data_create(p, bad[f"tok-{v}"], out("data")), bad[f"tok-{v}"], v)
        add(
            "teachers' tokenizers",
            _general(p, bad[f"teacher-{v}"], out("out"), out("cache")),
            bad[f"teacher-{v}"],
            v,
        )
    for v in TASK_VARIANTS:
        add("teachers' tokenizers", _task(p, bad[f"task-{v}"], out("out"), out("cache")), bad[f"task-{v}"], v)
    for v in ("repeated-line", "lower-case-string"):  # the student's own tokenizer
        argv = _general(p, d["teacher-a"], out("out"), out("cache"))
        argv[argv.index("--tokenizer") + 1] = str(bad[f"tok-{v}"])
        add("tokenizers (distill)", argv, bad[f"tok-{v}"], v)
    for v in MODEL_VARIANTS:
        run, ft = bad[f"run-{v}"], bad[f"ft-{v}"]
        add("tokenizers (embed)", ["embed", "--model", str(run), "--text", "word1 river", "--output", out("e.jsonl")],
            run, v)  # fmt: skip
        add("tokenizers (predict)", ["predict", "--model", str(ft), "--input", str(p["rows.jsonl"]), "--output",
            out("p.jsonl")], ft, v)  # fmt: skip
        add("tokenizers (evaluate)", ["evaluate", "--task", "classification", "--model", str(ft), "--data",
            str(p["task"]), "--output", out("eval")], ft, v)  # fmt: skip
        add("tokenizers (finetune)", ["finetune", "--task", "classification", "--model", str(run), "--data",
            str(p["task"]), "--output", out("ft"), "--max-steps", "1", "--batch-size", "8"], run, v)  # fmt: skip
        add("tokenizers (export)", ["export", "--model", str(ft), "--output", out("onnx")], ft, v)
    add("tokenizers (fill-mask)", ["fill-mask", "--model", str(bad["run-gap"]), "--text", "word1 [MASK]"],
        bad["run-gap"], "gap")  # fmt: skip
    cs += _cache_cases(p, out)
    valid = "valid (identity)"
    cs.append((valid, _data_create(p, d["wordpiece"], out("data")), "ok", []))
    cs.append((valid, ["embed", "--model", str(d["wp-run"]), "--text", "word1 river", "--output", out("e.jsonl")],
               "ok", []))  # fmt: skip
    cs.append((valid, ["predict", "--model", str(best), "--input", str(p["rows.jsonl"]), "--output",
               out("p.jsonl")], "ok", []))  # fmt: skip
    cs.append((valid, _general(p, d["shard-b"], out("out"), out("cache")), "ok", []))
    return cs


def _data_create(p: dict[str, Path], tokenizer: Path, output: str) -> list[str]:
    return ["data", "create", "--input", str(p["a.txt"]), "--tokenizer", str(tokenizer), "--output", output,
            "--max-seq-length", "48", "--workers", "1", "--no-progress"]  # fmt: skip
