"""A hostile user's round over every `albert` command, counted (docs/notes/hostile_rounds.md).

Each case runs `python -m albert_lm.cli ...` in a process of its own against a small world of real
inputs (two tokenizers, their data, a pretrained and a fine-tuned tiny model, task files), with a time
limit, and is classified by what happened:
- clean refusal: exit 1, one `error:` line naming what the case says it must name, no traceback;
- handled: a valid case that exits 0 (or a case where refusing and succeeding are both right);
- weak message: refused, but the line misses what it must name (the option, file or value);
- wrong result exit 0: a case that must be refused exits 0;
- traceback; hang (over the time limit); user files changed: any file of the world (every input of
  every case) differs afterwards, by sha256.

    python benchmarks/tools/hostile_round.py --work /tmp/hostile [--only CLASS] [--workers 2]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ALBERT_DATA", ROOT.parent / "shared" / "data"))
TINY = ["hidden_size=32", "embedding_size=16", "num_attention_heads=2", "intermediate_size=64",
        "num_hidden_layers=2", "max_position_embeddings=64"]  # fmt: skip
OVER = [x for kv in TINY for x in ("--model-override", kv)]


@dataclass
class Case:
    klass: str  # the class of mistake (docs/errors.md)
    argv: list[str]
    expect: str  # "refuse" | "ok" | "either"
    mention: list[str] = field(default_factory=list)  # what the error line must name ("a|b": a or b)
    outcome: str = ""
    seconds: float = 0.0
    detail: str = ""


# A Python API case runs its code under this wrapper: an exception of the kinds the API documents for
# bad arguments (ValueError, its InputError, OSError, TypeError) is a refusal, printed as one line with
# exit 1; any other escapes as a traceback.
API_WRAPPER = """import sys
try:
    exec(compile(sys.argv[1], "<case>", "exec"), {})
except (ValueError, OSError, TypeError) as e:
    print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
"""


def albert(
    argv: list[str], timeout: float = 300, env: dict[str, str] | None = None, fsize: int | None = None
) -> subprocess.CompletedProcess:
    """`python -m albert_lm.cli ARGV` (or, for ["@python", CODE], CODE under API_WRAPPER) with `env` added
    and, with `fsize`, the file-size limit of `ulimit -f` (bytes)."""
    env = dict(
        os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **(env or {})
    )
    command = (
        [sys.executable, "-c", API_WRAPPER, argv[1]]
        if argv[0] == "@python"
        else [sys.executable, "-m", "albert_lm.cli", *argv]
    )

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        preexec_fn=limit if fsize is not None else None,
    )


def must(argv: list[str]) -> None:
    p = albert(argv)
    if p.returncode != 0:
        raise SystemExit(f"building the world failed: albert {' '.join(argv)}\n{p.stderr[-3000:]}")


# --------------------------------------------------------------------------- the world
def corpus(path: Path, seed: int) -> Path:
    import random

    rng = random.Random(seed)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(300)]
    docs = [
        "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 15))) + "." for _ in range(8))
        for _ in range(150)
    ]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def build_world(w: Path) -> dict[str, Path]:
    """The inputs every case reads (built once; a finished world is reused)."""
    p = {
        name: w / name
        for name in (
            "a.txt",
            "b.txt",
            "tok_a",
            "tok_b",
            "data_a",
            "data_b",
            "run",
            "task",
            "ft",
            "glue",
            "rows.jsonl",
            "bad.txt",
            "empty.txt",
            "binary.bin",
        )
    }
    if (w / "READY").is_file():
        return p
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    corpus(p["a.txt"], 0)
    corpus(p["b.txt"], 1)
    for x in "ab":
        must(
            [
                "tokenizer",
                "train",
                "--input",
                str(p[f"{x}.txt"]),
                "--vocab-size",
                "120",
                "--output",
                str(p[f"tok_{x}"]),
            ]
        )
        must(
            [
                "data",
                "create",
                "--input",
                str(p[f"{x}.txt"]),
                "--tokenizer",
                str(p[f"tok_{x}"]),
                "--output",
                str(p[f"data_{x}"]),
                "--max-seq-length",
                "48",
                "--eval-fraction",
                "0.2",
                "--workers",
                "1",
                "--no-progress",
            ]
        )
    must(
        [
            "pretrain",
            "--data",
            str(p["data_a"]),
            "--output",
            str(p["run"]),
            "--preset",
            "albert-tiny",
            *OVER,
            "--batch-size",
            "4",
            "--max-steps",
            "2",
            "--save-every",
            "1",
            "--no-tensorboard",
            "--no-plot",
        ]
    )
    p["task"].mkdir()
    for split, n in (("train", 40), ("dev", 20)):
        rows = [
            json.dumps({"text": f"word{i % 7} river", "label": "yes" if i % 2 else "no"}) for i in range(n)
        ]
        (p["task"] / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    must(
        [
            "finetune",
            "--task",
            "classification",
            "--model",
            str(p["run"]),
            "--data",
            str(p["task"]),
            "--output",
            str(p["ft"]),
            "--max-steps",
            "2",
            "--batch-size",
            "8",
        ]
    )
    for task in ("CoLA", "SST-2", "MRPC", "STS-B", "RTE"):
        src, dst = SHARED / "glue" / task, p["glue"] / task
        dst.mkdir(parents=True)
        for split in ("train", "dev"):
            lines = (src / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[:41]
            (dst / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    p["rows.jsonl"].write_text("".join(json.dumps({"text": f"word{i} river"}) + "\n" for i in range(5)))
    p["bad.txt"].write_bytes(
        p["a.txt"].read_bytes()[:5000] + b"\n\xff\xfe broken \xc3\x28 line\n" + b"more text.\n"
    )
    p["empty.txt"].write_text("")
    p["binary.bin"].write_bytes(bytes(range(256)) * 40)
    (w / "READY").write_text("")
    return p


def world_hash(w: Path) -> dict[str, str]:
    out = {}
    for f in sorted(w.rglob("*")):
        if f.is_file():
            out[str(f.relative_to(w))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------- the cases
def cases(p: dict[str, Path], scratch: Path) -> list[Case]:  # noqa: C901 (one list, read top to bottom)
    n = iter(range(10**6))

    def out(name: str = "out") -> str:
        return str(scratch / f"{next(n):04d}-{name}")

    def pre(data: Path, o: str, *more: str) -> list[str]:
        return [
            "pretrain",
            "--data",
            str(data),
            "--output",
            o,
            "--preset",
            "albert-tiny",
            *OVER,
            "--batch-size",
            "4",
            "--max-steps",
            "1",
            "--no-tensorboard",
            "--no-plot",
            *more,
        ]

    def ft(o: str, *more: str, model: Path = p["run"], data: Path = p["task"]) -> list[str]:
        return [
            "finetune",
            "--task",
            "classification",
            "--model",
            str(model),
            "--data",
            str(data),
            "--output",
            o,
            "--max-steps",
            "1",
            "--batch-size",
            "8",
            *more,
        ]

    def tok(o: str, *more: str, inp: Path = p["a.txt"]) -> list[str]:
        return ["tokenizer", "train", "--input", str(inp), "--vocab-size", "120", "--output", o, *more]

    def dc(o: str, *more: str, inp: tuple[Path, ...] = (p["a.txt"],), tk: Path = p["tok_a"]) -> list[str]:
        return [
            "data",
            "create",
            "--input",
            *map(str, inp),
            "--tokenizer",
            str(tk),
            "--output",
            o,
            "--max-seq-length",
            "48",
            "--no-progress",
            *more,
        ]

    best = p["ft"] / "best"  # the fine-tuned model (its run folder is p["ft"])

    def ev(o: str, *more: str, model: Path = best) -> list[str]:
        return [
            "evaluate",
            "--task",
            "classification",
            "--model",
            str(model),
            "--data",
            str(p["task"]),
            "--output",
            o,
            *more,
        ]

    def pr(o: str, *more: str, inp: Path = p["rows.jsonl"], model: Path = best) -> list[str]:
        return ["predict", "--model", str(model), "--input", str(inp), "--output", o, *more]

    def gl(o: str, *more: str, model: Path = p["run"]) -> list[str]:
        return [
            "glue",
            "--model",
            str(model),
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

    def ex(o: str, *more: str, model: Path = best) -> list[str]:
        return ["export", "--model", str(model), "--output", o, *more]

    def rp(o: str, *more: str) -> list[str]:
        return [
            "reproduce",
            "sharing",
            "--data",
            str(p["data_a"]),
            "--output",
            o,
            "--max-steps",
            "1",
            "--seeds",
            "1",
            *more,
        ]

    cs: list[Case] = []

    def add(klass: str, argv: list[str], expect: str = "refuse", *mention: str) -> None:
        cs.append(Case(klass, argv, expect, list(mention)))

    # 1. outputs that are, hold or lie inside an input (with and without --overwrite)
    for extra in ((), ("--overwrite",)):
        add("1 output vs input", pre(p["data_a"], str(p["data_a"] / "train"), *extra), "refuse", "--data")
        add("1 output vs input", pre(p["data_a"], str(p["data_a"]), *extra), "refuse", "--data")
        add(
            "1 output vs input",
            pre(p["data_a"], str(p["run"] / "x"), "--init-from", str(p["run"]), *extra),
            "refuse",
            "--init-from",
        )
        add("1 output vs input", ft(str(p["run"]), *extra), "refuse", "--model")
        add("1 output vs input", ft(str(p["task"]), *extra), "refuse", "--data")
        add(
            "1 output vs input",
            ft(str(p["ft"] / "best" / "x"), *extra, model=p["ft"] / "best"),
            "refuse",
            "--model",
        )
        add(
            "1 output vs input", tok(str(p["tok_a"] / "x"), *extra, inp=p["tok_a"] / "spiece.model"), "refuse"
        )
        add("1 output vs input", ev(str(p["ft"]), *extra), "refuse", str(p["ft"]))
        add("1 output vs input", ev(str(p["task"]), *extra), "refuse")
        add("1 output vs input", gl(str(p["run"]), *extra), "refuse", "--model")
        add("1 output vs input", gl(str(p["glue"]), *extra), "refuse", "--data")
        add("1 output vs input", ex(str(best), *extra), "refuse", "model")
        add("1 output vs input", ex(str(best / "onnx"), *extra), "refuse", "model")
        add("1 output vs input", rp(str(p["data_a"]), *extra), "refuse", "--data")
    add("1 output vs input", pr(str(p["rows.jsonl"])), "refuse", "--input")
    add("1 output vs input", pr(str(best / "config.json")), "refuse", "--model")
    add("1 output vs input", dc(str(p["data_a"])), "refuse")
    add("1 output vs input", dc(str(p["tok_a"])), "refuse", "--tokenizer")
    add("1 output vs input", dc(str(p["tok_a"] / "data")), "refuse", "--tokenizer")
    add("1 output vs input", tok(str(p["a.txt"])), "refuse")
    add(
        "1 output vs input",
        ["bench", "--only", "gemm", "--data", str(p["a.txt"].parent), "--json", str(p["a.txt"])],
        "refuse",
        "--data",
    )

    # 2. special files as outputs
    for target, expect in (("/dev/full", "refuse"), ("/dev/null", "either")):
        add("2 special outputs", pr(target), expect)
    add("2 special outputs", pr("/dev/stdout"), "ok")
    add("2 special outputs", pr("/sys/albert-hostile.jsonl"), "refuse", "/sys")
    add("2 special outputs", ft("/dev/null"), "refuse")
    add("2 special outputs", ex("/dev/null"), "refuse")
    add("2 special outputs", tok("/dev/null"), "refuse")
    add("2 special outputs", dc("/dev/null"), "refuse")
    add("2 special outputs", pre(p["data_a"], "/dev/null"), "refuse")

    # 3. damaged data files: every file a run reads is checked
    for rel in (
        "word_start.npy",
        "train/00000/tokens.npy",
        "train/00000/offsets.npy",
        "train/00000/labels.npy",
        "train/00000/a_lens.npy",
        "spiece.model",
        "manifest.json",
    ):
        add("3 damaged files", ["@damage", rel, *pre(Path("@copy"), out())], "refuse", rel.split("/")[-1])

    # 4. two writers (a held lock on the output)
    # reproduce writes (and locks) one folder per ablation inside its --output: the lock is held there
    for argv in (
        pre(p["data_a"], "@locked"),
        ft("@locked"),
        tok("@locked"),
        dc("@locked"),
        gl("@locked"),
        ex("@locked"),
        ["@lock-sub", "sharing", *rp("@locked")],
        ev("@locked"),
    ):
        add("4 two writers", argv, "refuse", "another albert command")

    # 5-6. reused work and tokenizers that do not match
    add("6 tokenizer vs model", pre(p["data_b"], out(), "--init-from", str(p["run"])), "refuse", "tokenizer")
    add("6 tokenizer vs model", ft(out(), "--tokenizer", str(p["tok_b"])), "refuse", "tokenizer")
    add("6 tokenizer vs model", ["@swap-spiece", *pr(out())], "refuse", "tokenizer")
    add("5 reused work", ["@glue-twice", *gl("@same")], "refuse", "seq")

    # 7. models that are not what they seem
    add("7 models", ev(out(), model=p["run"]), "refuse", str(p["run"]))
    add("7 models", pr(out(), model=p["run"]), "refuse", str(p["run"]))
    add("7 models", ft(out(), model=p["task"]), "refuse", str(p["task"]))
    add("7 models", ex(out(), model=p["task"]), "refuse", str(p["task"]))
    add("7 models", pr(out(), model=p["ft"]), "refuse", str(best))  # the run's folder: its best/ is named
    add("7 models", pr(out(), inp=p["ft"]), "refuse", "is a folder")  # --input a folder
    add("7 models", pr(out() + ".npz"), "refuse", "NumPy archive")  # JSON Lines under another format's name
    add("7 models", ["@no-weights", *ft(out(), model=Path("@copy-run"))], "refuse", "model.safetensors")
    add("7 models", ["@truncate-weights", *ft(out(), model=Path("@copy-run"))], "refuse", "model.safetensors")
    add("7 models", pre(p["data_a"], out(), "--init-from", str(p["task"])), "refuse", "--init-from")

    # 8. values that silently mean something else (and plain bad values), option by option
    bad_ints = ("0", "-1", "2.5", "abc", "", "1e400")
    bad_floats = ("nan", "inf", "-1", "abc", "")
    int_opts = {
        "pretrain": (lambda *m: pre(p["data_a"], out(), *m), ("--batch-size", "--max-steps", "--log-every",
                     "--gradient-accumulation-steps", "--eval-batches")),
        "finetune": (lambda *m: ft(out(), *m), ("--max-steps", "--batch-size", "--max-seq-length",
                     "--gradient-accumulation-steps", "--eval-batch-size")),
        "evaluate": (lambda *m: ev(out(), *m), ("--batch-size", "--max-seq-length")),
        "predict": (lambda *m: pr(out(), *m), ("--batch-size", "--max-seq-length")),
        "glue": (lambda *m: gl(out(), *m), ("--batch-size", "--max-seq-length")),
        "data create": (lambda *m: dc(out(), *m), ("--max-seq-length", "--max-ngram", "--dupe-factor",
                        "--max-predictions-per-seq")),
        "tokenizer train": (lambda *m: tok(out(), *m), ("--vocab-size", "--max-line-bytes")),
        "reproduce": (lambda *m: rp(out(), *m), ("--max-steps", "--eval-batches")),
        "export": (lambda *m: ex(out(), *m), ("--opset",)),
    }  # fmt: skip
    for command, (make, options) in int_opts.items():
        for option in options:
            for value in bad_ints:
                add(f"8 values ({command})", make(option, value), "refuse", option.lstrip("-").split("-")[0])
    float_opts = {
        "pretrain": (lambda *m: pre(p["data_a"], out(), *m), ("--learning-rate", "--weight-decay",
                     "--masked-lm-prob")),
        "finetune": (lambda *m: ft(out(), *m), ("--learning-rate", "--epochs", "--dropout")),
        "glue": (lambda *m: gl(out(), *m), ("--epochs",)),
        "export": (lambda *m: ex(out(), *m), ("--tolerance",)),
        "data create": (lambda *m: dc(out(), *m), ("--masked-lm-prob", "--short-seq-prob", "--eval-fraction")),
        "reproduce": (lambda *m: rp(out(), *m), ("--minutes",)),
    }  # fmt: skip
    for command, (make, options) in float_opts.items():
        for option in options:
            for value in bad_floats:
                add(f"8 values ({command})", make(option, value), "refuse", option.lstrip("-").split("-")[0])
    add("8 values (pretrain)", pre(p["data_a"], out(), "--time-budget", "10"), "refuse", "time")
    add("8 values (pretrain)", pre(p["data_a"], out(), "--time-budget", "0s"), "refuse", "time")
    add("8 values (glue)", gl(out(), "--learning-rates", "1e-4,abc"), "refuse", "learning")
    add("8 values (glue)", gl(out(), "--tasks", "mnli"), "refuse", "tasks")
    add("8 values (reproduce)", rp(out(), "--seeds", "1,x"), "refuse", "seeds")
    add(
        "8 values (recipe)",
        ["@recipe", '{"tokenizer": {"vocab_size": "big"}}', *tok(out(), "--recipe", "@file")],
        "refuse",
        "vocab_size",
    )
    add(
        "8 values (recipe)",
        ["@recipe", '{"tokenizer": {"vocab_sise": 100}}', *tok(out(), "--recipe", "@file")],
        "refuse",
        "vocab_sise",
    )

    # 9. environments
    for argv in (
        pre(p["data_a"], "/sys/albert-hostile"),
        ft("/sys/albert-hostile"),
        tok("/sys/albert-hostile"),
        dc("/sys/albert-hostile"),
        ex("/sys/albert-hostile"),
        gl("/sys/albert-hostile"),
        ev("/sys/albert-hostile"),
        rp("/sys/albert-hostile"),
    ):
        add("9 environment", argv, "refuse", "/sys/albert-hostile")
    if not _has_cuda():
        for argv in (
            ft(out(), "--device", "cuda"),
            pr(out(), "--device", "cuda"),
            ev(out(), "--device", "cuda"),
            pre(p["data_a"], out(), "--device", "cuda"),
            gl(out(), "--device", "cuda"),
        ):
            add("9 environment", argv, "refuse", "cuda")

    # 10. errors inside workers
    add(
        "10 worker errors",
        dc(out(), "--workers", "2", inp=(p["a.txt"], p["bad.txt"], p["b.txt"])),
        "refuse",
        "bad.txt",
    )
    add("10 worker errors", tok(out(), inp=p["bad.txt"]), "refuse", "bad.txt")
    add("10 worker errors", ["@broken-glue", *gl(out(), "--workers", "2")], "refuse", "train.tsv")

    # other inputs: missing, empty, binary, wrong kinds of path
    for path in (p["empty.txt"], p["binary.bin"], Path("/nonexistent/x.txt"), p["tok_a"], Path("/dev/null")):
        add("other inputs", tok(out(), inp=path), "refuse", str(path))
        add("other inputs", dc(out(), inp=(path,)), "refuse", str(path))
        # an empty input predicts nothing and says so ("0 of 0 rows"): refusing is right too
        add("other inputs", pr(out(), inp=path), "either" if path == p["empty.txt"] else "refuse", str(path))
    for path in (Path("/nonexistent"), p["a.txt"], p["empty.txt"], p["tok_a"]):
        add("other inputs", pre(path, out()), "refuse", str(path))
        add("other inputs", ft(out(), model=path), "refuse", str(path))
        add("other inputs", ft(out(), data=path), "refuse", str(path))
        add("other inputs", ex(out(), model=path), "refuse", str(path))
        add("other inputs", gl(out(), model=path), "refuse", str(path))
    # valid runs, so a fix that refuses everything does not count as clean
    add("valid", ["params", "--preset", "albert-tiny"], "ok")
    add("valid", tok(out()), "ok")
    add("valid", dc(out(), "--workers", "1"), "ok")
    add("valid", pre(p["data_a"], out()), "ok")
    add("valid", ft(out()), "ok")
    add("valid", ev(out()), "ok")
    add("valid", pr(out()), "ok")
    return cs


def families() -> list[Any]:
    """The case families of other modules beside this one (benchmarks/tools/hostile_*.py): each has FAMILY,
    build(world, p) for its own inputs and cases(p, out) -> [(class, argv, expect, mention)]."""
    found = []
    for file in sorted(Path(__file__).parent.glob("hostile_*.py")):
        if file.stem != Path(__file__).stem:
            spec = importlib.util.spec_from_file_location(file.stem, file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[file.stem] = module  # dataclasses look their module up there
            spec.loader.exec_module(module)
            found.append(module)
    return found


def all_cases(p: dict[str, Path], scratch: Path, w: Path) -> list[Case]:
    """This module's cases, then each family's, with the family's inputs built into the world."""
    cs = cases(p, scratch)
    n = iter(range(10**6))
    for family in families():
        p.update(family.build(w, p))
        for klass, argv, expect, mention in family.cases(
            p, lambda name="out": str(scratch / f"f{next(n):04d}-{name}")
        ):
            cs.append(Case(klass, argv, expect, list(mention)))
    return cs


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


# --------------------------------------------------------------------------- running one case
@dataclass
class Run:
    """How one case runs: its argv, a process to keep alive meanwhile (a lock holder), environment
    variables and a file-size limit to add, and a check of what must hold afterwards ("" when it does)."""

    argv: list[str]
    hold: object = None
    env: dict[str, str] = field(default_factory=dict)
    fsize: int | None = None
    after: object = None  # a callable returning "" or what went wrong


LINK_TARGETS = ("file", "dangling", "stdout", "folder")


def link_output(here: Path, kind: str) -> tuple[Path, object]:
    """A symbolic link as an output (`kind` in LINK_TARGETS) and the check that writing through it kept
    the link and reached its target."""
    link = here / "link-out"
    target = {
        "file": here / "target.txt",
        "dangling": here / "new-target.txt",
        "folder": here / "target-dir",
        "stdout": Path("/proc/self/fd/1"),
    }[kind]
    if kind == "file":
        target.write_text("the user's file\n")
    if kind == "folder":
        target.mkdir()
    os.symlink(target, link)

    def after() -> str:
        if not link.is_symlink():
            return f"the link {link.name} was replaced"
        if kind in ("file", "dangling") and target.exists() and target.read_text() == "the user's file\n":
            return "nothing reached the link's target"
        stray = sorted(q.name for q in here.iterdir() if q.name not in {link.name, target.name})
        return f"stray files beside the link: {', '.join(stray)}" if stray else ""

    return link, after


def prepare(case: Case, p: dict[str, Path], scratch: Path, i: int) -> Run:
    """Replace the case's @-markers with real paths (copies, locks, swapped files, links) and settings
    (environment, file-size limit)."""
    argv, hold = list(case.argv), None
    here = scratch / f"case-{i:04d}"
    here.mkdir(parents=True, exist_ok=True)
    run = Run(argv)
    lock_sub = ""
    while argv[0] in ("@env", "@fsize", "@link", "@lock-sub"):
        marker, value, argv = argv[0], argv[1], argv[2:]
        if marker == "@env":
            key, _, val = value.partition("=")
            run.env[key] = val.replace("@here", str(here))
        elif marker == "@fsize":
            run.fsize = int(value)
        elif marker == "@lock-sub":
            lock_sub = value
        else:
            link, run.after = link_output(here, value)
            argv = [str(link) if a == "@LINK" else a for a in argv]
    argv = [a.replace("@here", str(here)) if a.startswith("@here") else a for a in argv]
    if run.fsize is not None:  # a write cut short must leave no half-written file behind
        run.after = lambda: ", ".join(
            sorted(str(q.relative_to(here)) for q in here.rglob("*") if ".tmp" in q.name)
        )
    if argv[0] == "@damage":
        rel, argv = argv[1], argv[2:]
        copy = here / "data"
        shutil.copytree(p["data_a"], copy)
        target = copy / rel
        target.write_bytes(b"\0" * max(1, target.stat().st_size))
        argv = [str(copy) if a == "@copy" else a for a in argv]
    if argv[0] in ("@no-weights", "@truncate-weights"):
        kind, argv = argv[0], argv[1:]
        copy = here / "model"
        shutil.copytree(p["run"], copy, ignore=shutil.ignore_patterns("checkpoint-*"))
        weights = copy / "model.safetensors"
        if kind == "@no-weights":
            weights.unlink()
        else:
            weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        argv = [str(copy) if a == "@copy-run" else a for a in argv]
    if argv[0] == "@swap-spiece":
        argv = argv[1:]
        copy = here / "model"
        shutil.copytree(p["ft"] / "best", copy)
        shutil.copy(p["tok_b"] / "spiece.model", copy / "spiece.model")
        argv = [str(copy) if a == str(p["ft"] / "best") else a for a in argv]
    if argv[0] == "@broken-glue":
        argv = argv[1:]
        copy = here / "glue"
        shutil.copytree(p["glue"], copy)
        (copy / "RTE" / "train.tsv").write_text("index\tsentence1\nnot\tenough\tcolumns\there\n")
        argv = [str(copy) if a == str(p["glue"]) else a for a in argv]
    if argv[0] == "@recipe":
        text, argv = argv[1], argv[2:]
        (here / "recipe.json").write_text(text)
        argv = [str(here / "recipe.json") if a == "@file" else a for a in argv]
    if argv[0] == "@glue-twice":
        argv = argv[1:]
        folder = str(here / "glue")
        argv = [folder if a == "@same" else a for a in argv]
        first = albert(argv)
        if first.returncode != 0:
            return Run(["@setup-failed", first.stderr[-500:]])
        argv = [*argv, "--max-seq-length", "32"]
    if "@locked" in argv:
        folder = here / "locked"
        argv = [str(folder) if a == "@locked" else a for a in argv]
        held = folder / lock_sub if lock_sub else folder
        hold = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import time\nfrom albert_lm.files import folder_lock\nwith folder_lock({str(held)!r}):\n"
                "    print('held', flush=True); time.sleep(3600)",
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        assert hold.stdout is not None and hold.stdout.readline().strip() == "held"
    run.argv, run.hold = argv, hold
    return run


def classify(case: Case, p: dict[str, Path], scratch: Path, w: Path, i: int, limit: float) -> Case:
    before = world_hash(w)
    run = prepare(case, p, scratch, i)
    t0 = time.perf_counter()
    try:
        if run.argv[0] == "@setup-failed":
            case.outcome, case.detail = "setup failed", run.argv[1]
            return case
        try:
            r = albert(run.argv, timeout=limit, env=run.env, fsize=run.fsize)
        except subprocess.TimeoutExpired:
            case.outcome = "hang"
            return case
    finally:
        if run.hold is not None:
            run.hold.kill()  # type: ignore[attr-defined]
        case.seconds = round(time.perf_counter() - t0, 1)
    err = r.stderr
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    tail = err.strip().splitlines()
    case.detail = (lines[0] if lines else tail[-1] if tail else "")[:300]
    changed = [k for k, v in world_hash(w).items() if before.get(k) != v] + [
        k for k in before if not (w / k).exists()
    ]
    broken = run.after() if callable(run.after) else ""
    if changed or broken:
        case.outcome, case.detail = "user files changed", broken or ", ".join(changed[:5])
    elif "Traceback" in err:
        case.outcome = "traceback"
        case.detail = err.strip().splitlines()[-1][:300]
    elif "internal error" in err:
        case.outcome = "internal error"
    elif r.returncode == 0:
        case.outcome = "wrong result exit 0" if case.expect == "refuse" else "handled"
    elif case.expect == "ok":
        case.outcome = "refused a valid case"
    elif len(lines) >= 1 and all(any(alt in lines[0] for alt in m.split("|")) for m in case.mention):
        case.outcome = "clean refusal" if case.expect == "refuse" else "handled"
    else:
        case.outcome = "weak message"
    return case


OUTCOMES = ("clean refusal", "handled", "weak message", "wrong result exit 0", "refused a valid case", "traceback",
            "internal error", "hang", "user files changed", "setup failed")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--work", default="/tmp/albert-hostile", help="folder for the world and the scratch outputs"
    )
    ap.add_argument(
        "--only", help="run only the classes whose names start with one of these (comma-separated)"
    )
    ap.add_argument("--merge", help="a --json file of an earlier round: its cases outside --only are kept")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before a case counts as a hang")
    ap.add_argument("--json", help="write every case and its outcome here")
    a = ap.parse_args()
    work = Path(a.work)
    w = work / "world"
    p = build_world(w)
    scratch = work / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    prefixes = tuple(a.only.split(",")) if a.only else ("",)
    todo = [c for c in all_cases(p, scratch, w) if c.klass.startswith(prefixes)]
    print(f"{len(todo)} cases", file=sys.stderr)
    # Cases that lock or copy work in their own scratch folders; the world is only read (and hashed).
    with ThreadPoolExecutor(a.workers) as pool:
        done = list(pool.map(lambda ic: classify(ic[1], p, scratch, w, ic[0], a.limit), enumerate(todo)))
    if a.merge:
        kept = [
            Case(**c) for c in json.loads(Path(a.merge).read_text()) if not c["klass"].startswith(prefixes)
        ]
        done = kept + done
    table: dict[str, dict[str, int]] = {}
    for c in done:
        table.setdefault(c.klass, dict.fromkeys(OUTCOMES, 0))[c.outcome] += 1
    total = dict.fromkeys(OUTCOMES, 0)
    for row in table.values():
        for k, v in row.items():
            total[k] += v
    shown = [o for o in OUTCOMES if total[o]]
    print("| class | cases | " + " | ".join(shown) + " |")
    print("|---|---|" + "---|" * len(shown))
    for klass, row in sorted(table.items(), key=lambda kv: (len(kv[0].split()[0]), kv[0])):
        print(f"| {klass} | {sum(row.values())} | " + " | ".join(str(row[o]) for o in shown) + " |")
    print(f"| all | {len(done)} | " + " | ".join(str(total[o]) for o in shown) + " |")
    for c in done:
        if c.outcome not in ("clean refusal", "handled"):
            print(f"- {c.outcome}: {c.klass}: albert {' '.join(c.argv)[:250]} -> {c.detail}")
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(c) for c in done], indent=1))


if __name__ == "__main__":
    main()
