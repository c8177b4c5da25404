"""Hostile cases on `albert distill`'s teachers and teacher caches (benchmarks/tools/hostile_round.py loads
this family): teachers whose tokenizer cannot read the text, task teachers without a trained head,
teacher folders with damaged, foreign or code-carrying files, and caches edited between runs or shared by
two runs at once.

Every teacher is a tiny BERT made here offline (transformers' BertModel or BertForSequenceClassification,
H 32, a WordPiece vocabulary of the world's words); a case's bad teacher is a copy of a good one with one
thing changed. A cache case copies the world's filled cache, edits it, runs the command on the copy and
then checks what it holds: an edited cache used as it was is a traceback ("the edited teacher cache was
used"), so only a rebuild or a refusal naming the file counts as handled.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FAMILY = "teachers and caches"
DEEP = "[" * 100_000 + "]" * 100_000  # far past the json module's recursion limit
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
)
STUDENT = ["--model-override", "hidden_size=32", "--model-override", "embedding_size=16", "--model-override",
           "num_attention_heads=2", "--model-override", "intermediate_size=64", "--model-override",
           "num_hidden_layers=2", "--model-override", "max_position_embeddings=64"]  # fmt: skip
QUICK = ["--max-steps", "2", "--warmup-steps", "1", "--batch-size", "8", "--log-every", "1", "--eval-every", "2",
         "--precision", "fp32", "--no-tensorboard", "--no-plot", "-q"]  # fmt: skip
# Bad teachers: name -> (the good teacher it copies, what is changed). Each is refused by every command.
SENTENCE_VARIANTS = ("no-tokenizer", "tokenizer-config-only", "tiny-vocabulary", "foreign-vocabulary",
                     "tokenizer-larger-than-model", "vocab-not-text", "tokenizer-json-broken",
                     "tokenizer-config-deep", "weights-renamed", "pickle-bin", "truncated-safetensors",
                     "garbage-safetensors", "empty-safetensors", "weights-folder", "config-not-json",
                     "config-deep", "unknown-model-type", "remote-code", "hidden-size-string",
                     "shape-mismatch", "nan-weights", "modules-deep", "pooling-not-json")  # fmt: skip
TASK_VARIANTS = ("no-head", "no-head-bin", "id2label-list", "num-labels-string")
NAMED = {  # what a refusal of each bad teacher must name besides its folder
    "no-tokenizer": "tokenizer.json", "tokenizer-config-only": "vocab.txt", "tiny-vocabulary": "vocab.txt",
    "foreign-vocabulary": "[UNK]", "tokenizer-larger-than-model": "vocab_size", "vocab-not-text": "vocab.txt",
    "tokenizer-json-broken": "tokenizer.json", "tokenizer-config-deep": "tokenizer_config.json",
    "weights-renamed": "model.safetensors", "pickle-bin": "pytorch_model.bin",
    "truncated-safetensors": "model.safetensors", "garbage-safetensors": "model.safetensors",
    "empty-safetensors": "model.safetensors", "weights-folder": "model.safetensors",
    "config-not-json": "config.json", "config-deep": "config.json", "unknown-model-type": "hostile-bert",
    "remote-code": "hostile-bert", "hidden-size-string": "hidden_size", "shape-mismatch": "model.safetensors",
    "nan-weights": "model.safetensors", "modules-deep": "modules.json", "pooling-not-json": "config.json",
    "no-head": "classifier.weight", "no-head-bin": "classifier.weight", "id2label-list": "config.json",
    "num-labels-string": "config.json",
}  # fmt: skip
MARKER = "CODE-RAN"  # a teacher's own code, if it ever ran, would write this file into the world


class _Pickled:
    """An object whose unpickling opens (creates) a file: what a hostile pytorch_model.bin holds."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


# --------------------------------------------------------------------------- the teachers
def _vocabulary(p: dict[str, Path]) -> list[str]:
    """WordPiece vocabulary of the world's text and task words (lowercased, as BertTokenizer reads)."""
    words = {w.strip(".").lower() for line in p["a.txt"].read_text().splitlines() for w in line.split()}
    words |= {f"word{i}" for i in range(10)} | {"river", "."}
    return SPECIALS + sorted(w for w in words if w)


def _bert(folder: Path, vocab: list[str], num_labels: int | None = None) -> Path:
    """A random tiny BERT (a 2-label classifier of the task's labels with `num_labels`), its vocab.txt
    and tokenizer, saved as transformers saves them."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    if num_labels is None:
        model: Any = BertModel(BertConfig(vocab_size=len(vocab), **BERT))
    else:
        labels = {0: "no", 1: "yes"}
        config = BertConfig(
            vocab_size=len(vocab), num_labels=2, id2label=labels, label2id={"no": 0, "yes": 1}, **BERT
        )
        model = BertForSequenceClassification(config)
    model.save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def _sentence_files(folder: Path) -> None:
    """sentence-transformers' pooling files: mean pooling, normalized."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))


def _edit_json(file: Path, **changes: Any) -> None:
    values = json.loads(file.read_text())
    values.update(changes)
    file.write_text(json.dumps(values))


def _edit_weights(folder: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    from safetensors.torch import load_file, save_file

    weights = folder / "model.safetensors"
    save_file(change(load_file(weights)), weights, metadata={"format": "pt"})


def _tokenizer_variant(f: Path, name: str, world: Path) -> None:
    """The tokenizer changes: files missing, a vocabulary of other words, too small, too large, damaged."""
    if name in ("no-tokenizer", "tokenizer-config-only"):
        for file in ("vocab.txt", "tokenizer.json", "special_tokens_map.json"):
            (f / file).unlink(missing_ok=True)
        if name == "no-tokenizer":
            (f / "tokenizer_config.json").unlink()
    elif name in ("tiny-vocabulary", "foreign-vocabulary", "tokenizer-larger-than-model"):
        words = {
            "tiny-vocabulary": ["a", "b"],
            "foreign-vocabulary": [f"english{i}" for i in range(150)],
            "tokenizer-larger-than-model": [f"extra{i}" for i in range(1000)],
        }[name]
        if name == "tokenizer-larger-than-model":
            words = (f / "vocab.txt").read_text().split()[len(SPECIALS) :] + words
        (f / "tokenizer.json").unlink()
        (f / "vocab.txt").write_text("\n".join(SPECIALS + words) + "\n")
    elif name == "vocab-not-text":
        (f / "tokenizer.json").unlink()
        (f / "vocab.txt").write_bytes(bytes(range(256)) * 8)
    elif name == "tokenizer-json-broken":
        (f / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    elif name == "tokenizer-config-deep":
        (f / "tokenizer_config.json").write_text('{"do_lower_case": ' + DEEP + "}")


def _weights_variant(f: Path, name: str, world: Path) -> None:
    """The weights' changes: renamed, pickled, truncated, damaged, empty, a folder, not finite."""
    import torch

    weights = f / "model.safetensors"
    if name == "weights-renamed":
        _edit_weights(f, lambda w: {"other." + k: v for k, v in w.items()})
    elif name == "pickle-bin":
        weights.unlink()
        with open(f / "pytorch_model.bin", "wb") as out:
            pickle.dump({"embeddings.word_embeddings.weight": _Pickled(str(world / MARKER))}, out)
    elif name == "truncated-safetensors":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif name == "garbage-safetensors":
        weights.write_bytes(
            b"\x20\x00\x00\x00\x00\x00\x00\x00{this is not a safetensors header}" + b"\0" * 64
        )
    elif name == "empty-safetensors":
        weights.write_bytes(b"")
    elif name == "weights-folder":
        weights.unlink()
        weights.mkdir()
    elif name == "nan-weights":
        _edit_weights(f, lambda w: {k: v * torch.nan if "LayerNorm.weight" in k else v for k, v in w.items()})


def _config_variant(f: Path, name: str, world: Path) -> None:
    """config.json and the pooling files: not JSON, nested too deeply, of no known model, asking for
    the folder's own code, values of the wrong type or shape."""
    config = f / "config.json"
    if name == "config-not-json":
        config.write_text('{"model_type": "bert",')
    elif name == "config-deep":
        config.write_text('{"model_type": "bert", "hidden_size": ' + DEEP + "}")
    elif name == "unknown-model-type":
        _edit_json(config, model_type="hostile-bert")
    elif name == "remote-code":
        _edit_json(
            config,
            model_type="hostile-bert",
            auto_map={"AutoConfig": "modeling_hostile.C", "AutoModel": "modeling_hostile.M"},
        )
        (f / "modeling_hostile.py").write_text(f"open({str(world / MARKER)!r}, 'w').write('ran')\n")
    elif name == "hidden-size-string":
        _edit_json(config, hidden_size="32")
    elif name == "shape-mismatch":
        _edit_json(config, hidden_size=64, num_attention_heads=4)
    elif name == "modules-deep":
        (f / "modules.json").write_text(DEEP)
    elif name == "pooling-not-json":
        (f / "1_Pooling" / "config.json").write_text("pooling: mean\n")
    elif name == "id2label-list":
        _edit_json(config, id2label=["no", "yes"])
    elif name == "num-labels-string":
        _edit_json(config, num_labels="2", id2label=None, label2id=None)


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """A sentence teacher and a task teacher of the world's words, a bad copy of one of them per
    variant, and a teacher cache filled by a general distillation (what the cache cases edit)."""
    d = world / "teachers"
    made = {
        f"t:{n}": d / n
        for n in ("sentence", "task", "cache", "remote-code-known-type", *SENTENCE_VARIANTS, *TASK_VARIANTS)
    }
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    vocab = _vocabulary(p)
    _sentence_files(_bert(d / "sentence", vocab))
    _bert(d / "task", vocab, num_labels=2)
    for name in SENTENCE_VARIANTS:
        shutil.copytree(d / "sentence", d / name)
        for change in (_tokenizer_variant, _weights_variant, _config_variant):
            change(d / name, name, world)
    for name in TASK_VARIANTS:
        source = "sentence" if name.startswith("no-head") else "task"
        shutil.copytree(d / source, d / name)
        _config_variant(d / name, name, world)
        if name == "no-head-bin":  # a BertModel's weights as torch.save writes them
            import torch
            from safetensors.torch import load_file

            torch.save(load_file(d / name / "model.safetensors"), d / name / "pytorch_model.bin")
            (d / name / "model.safetensors").unlink()
    shutil.copytree(d / "sentence", d / "remote-code-known-type")  # a bert that names code: never run
    _edit_json(d / "remote-code-known-type" / "config.json", auto_map={"AutoModel": "modeling_hostile.M"})
    (d / "remote-code-known-type" / "modeling_hostile.py").write_text(f"open({str(world / MARKER)!r}, 'w')\n")
    _fill_cache(d, p)
    (d / "READY").write_text("")
    return made


def _general(
    p: dict[str, Path], teacher: Path | str, output: str, cache: Path | str, *more: str
) -> list[str]:
    return [
        "distill",
        "general",
        "--teacher",
        str(teacher),
        "--text",
        str(p["a.txt"]),
        "--tokenizer",
        str(p["tok_a"]),
        "--output",
        output,
        "--cache",
        str(cache),
        "--max-segments",
        "300",
        *STUDENT,
        *QUICK,
        *more,
    ]


def _task(p: dict[str, Path], teacher: Path | str, output: str, cache: Path | str, *more: str) -> list[str]:
    return [
        "distill",
        "task",
        "--task",
        "classification",
        "--model",
        str(p["run"]),
        "--teacher",
        str(teacher),
        "--data",
        str(p["task"]),
        "--output",
        output,
        "--cache",
        str(cache),
        "--max-seq-length",
        "32",
        *QUICK,
        *more,
    ]


def must_run(argv: list[str], what: str) -> None:
    """`albert ARGV` in a process of its own, building `what` of the world; a failure ends the round."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "albert_lm.cli", *argv], capture_output=True, text=True, env=env
    )
    if r.returncode != 0:
        raise SystemExit(f"building {what} failed: albert {' '.join(argv)}\n{r.stderr[-3000:]}")


def _fill_cache(d: Path, p: dict[str, Path]) -> None:
    """The world's teacher cache: the sentence teacher's vectors of the text, by a real run."""
    must_run(_general(p, d / "sentence", str(d / "cache-run"), d / "cache"), "the teacher cache")


# --------------------------------------------------------------------------- the cache cases
# Each edits a copy of the world's cache (`entry`: its one folder), runs the command on it, and fails
# with a traceback where the run exits 0 with the edited values still there.
CACHE_CASE = """import shutil, sys
from pathlib import Path
import numpy as np
from albert_lm.cli import main
src, cache = Path({src!r}), Path({cache!r})
shutil.copytree(src, cache)
entry = next(cache.glob("sentence-*"))
values, progress, meta = entry / "values.npy", entry / "progress.json", entry / "meta.json"
good = np.load(values).astype(np.float32)
{edit}
code = main({argv!r})
if code == 0:
    now = np.load(values).astype(np.float32)
    if now.shape != good.shape or not np.allclose(now, good, atol=2e-3):
        raise RuntimeError("the edited teacher cache was used as it was")
{after}
sys.exit(code)
"""
CACHE_EDITS = {
    "values truncated": ("values.write_bytes(values.read_bytes()[: values.stat().st_size // 2])", ""),
    "values zeroed, progress kept": ("v = np.load(values, mmap_mode='r+'); v[:] = 0; v.flush(); del v", ""),
    "values replaced by others of the same shape": (
        "np.save(values, np.random.default_rng(0).normal(size=good.shape).astype(np.float16))",
        "",
    ),
    "values a pickle": ("np.save(values, np.array([{'a': 1}], dtype=object), allow_pickle=True)", ""),
    "values a folder": ("values.unlink(); values.mkdir()", ""),
    "values a link to another file": (
        "target = cache / 'user.npy'; np.save(target, np.zeros((2, 2), np.float16)); before = target.read_bytes()\n"
        "values.unlink(); values.symlink_to(target)",
        "if target.read_bytes() != before:\n    raise RuntimeError('the cache wrote through a link into another file')",
    ),
    "progress claims more chunks": ('progress.write_text(\'{"chunks_done": 99, "teacher_s": 1.0}\')', ""),
    "progress not JSON": ("progress.write_text('{')", ""),
    "index rows changed": (
        "import json; m = json.loads(meta.read_text()); m['rows'] = 5; meta.write_text(json.dumps(m))",
        "",
    ),
    "index nested too deeply": ("meta.write_text('[' * 100000 + ']' * 100000)", ""),
}
TWO_RUNS = """import subprocess, sys
from pathlib import Path
import numpy as np
argvs, cache, good = {argvs!r}, Path({cache!r}), Path({good!r})
runs = [subprocess.Popen([sys.executable, "-m", "albert_lm.cli", *a], stderr=subprocess.PIPE, text=True)
        for a in argvs]
errors = [r.communicate()[1] for r in runs]
if any(r.returncode for r in runs):
    print("error: " + " | ".join(e.strip().splitlines()[-1] for e in errors if e.strip()), file=sys.stderr)
    sys.exit(1)
entry = next(cache.glob("sentence-*"))
if not np.allclose(np.load(entry / "values.npy").astype(np.float32),
                   np.load(next(good.glob("sentence-*")) / "values.npy").astype(np.float32), atol=2e-3):
    raise RuntimeError("two runs sharing the cache left it wrong")
"""


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    """The family's cases: teachers that cannot teach (refused, naming the folder and the file), caches
    edited between runs (rebuilt, or refused naming the file), two runs on one cache, valid runs."""
    cs: list[tuple[str, list[str], str, list[str]]] = []
    t = {
        name: p[f"t:{name}"]
        for name in (
            "sentence",
            "task",
            "cache",
            "remote-code-known-type",
            *SENTENCE_VARIANTS,
            *TASK_VARIANTS,
        )
    }
    klass = {"tokenizer": "teachers: tokenizers", "head": "teachers: heads", "other": "teachers: files"}
    for name in SENTENCE_VARIANTS:
        kind = "tokenizer" if "token" in name or "vocab" in name else "other"
        cs.append(
            (
                klass[kind],
                _general(p, t[name], out("out"), out("cache")),
                "refuse",
                [str(t[name]), NAMED[name]],
            )
        )
    for name in TASK_VARIANTS:
        kind = "head" if name.startswith("no-head") else "other"
        cs.append(
            (klass[kind], _task(p, t[name], out("out"), out("cache")), "refuse", [str(t[name]), NAMED[name]])
        )
    for name in (
        "no-tokenizer",
        "foreign-vocabulary",
        "config-deep",
    ):  # task distillation reads teachers alike
        cs.append(
            (
                klass["tokenizer" if "token" in name or "vocab" in name else "other"],
                _task(p, t[name], out("out"), out("cache")),
                "refuse",
                [str(t[name]), NAMED[name]],
            )
        )
    cs.append(
        ("teachers: files", _general(p, t["remote-code-known-type"], out("out"), out("cache")), "either", [])
    )
    cs.append(
        ("teachers: files", _general(p, t["sentence"], out("out"), p["a.txt"]), "refuse", [str(p["a.txt"])])
    )
    cs += _api_cases(t)
    cs += _cache_cases(p, t, out)
    cs.append(("valid (teachers)", _general(p, t["sentence"], out("out"), out("cache")), "ok", []))
    cs.append(("valid (teachers)", _task(p, t["task"], out("out"), out("cache")), "ok", []))
    cs.append(("valid (teachers)", _general(p, t["sentence"], out("out"), t["cache"]), "ok", []))  # read only
    return cs


def _api_cases(t: dict[str, Path]) -> list[tuple[str, list[str], str, list[str]]]:
    """The teachers' Python API: the same checks as the commands."""
    head = "import torch\nfrom albert_lm.distill.teacher import SentenceTeacher, TaskTeacher\n"
    return [
        (
            "teachers: API",
            [
                "@python",
                head + f"SentenceTeacher({str(t['no-tokenizer'])!r}, torch.device('cpu'))(['ba ke di'])",
            ],
            "refuse",
            [str(t["no-tokenizer"])],
        ),
        (
            "teachers: API",
            ["@python", head + f"TaskTeacher({str(t['no-head'])!r}, torch.device('cpu'))([('ba ke', None)])"],
            "refuse",
            [str(t["no-head"]), "classifier"],
        ),
        (
            "teachers: API",
            [
                "@python",
                head + f"TaskTeacher({str(t['pickle-bin'])!r}, torch.device('cpu'))([('ba ke', None)])",
            ],
            "refuse",
            [str(t["pickle-bin"]), "pytorch_model.bin"],
        ),
    ]


def _cache_cases(
    p: dict[str, Path], t: dict[str, Path], out: Callable[[str], str]
) -> list[tuple[str, list[str], str, list[str]]]:
    """A copy of the world's cache edited, then used; two runs filling one new cache at once."""
    cs = []
    for name, (edit, after) in CACHE_EDITS.items():
        cache = out("cache")
        argv = _general(p, t["sentence"], out("out"), cache)
        code = CACHE_CASE.format(src=str(t["cache"]), cache=cache, edit=edit, argv=argv, after=after)
        mention = ["values.npy"] if name.startswith("values") else []
        cs.append(("teachers: caches", ["@python", code], "either", mention))
    cache = out("cache")
    argvs = [_general(p, t["sentence"], out("out"), cache) for _ in range(2)]
    cs.append(
        (
            "teachers: caches",
            ["@python", TWO_RUNS.format(argvs=argvs, cache=cache, good=str(t["cache"]))],
            "ok",
            [],
        )
    )
    return cs
