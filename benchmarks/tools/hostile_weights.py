"""Hostile cases on model weights (benchmarks/tools/hostile_round.py loads this family): non-finite and
integer weights in every kind of model folder (pretrained with its masked-LM head, fine-tuned, a student
of `albert distill general`), damaged early-exit heads, and heads that never trained, each through every
command that loads such a folder.

Each bad folder is a copy of one of the world's good ones with one thing changed, made once into the
world. A case passes as a clean refusal only when its error line names the file and what is wrong with
it (the tensor, or the exit-heads file); a command that answers at exit 0 from such a folder is a wrong
result.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

FAMILY = "weights"
STUDENT = ["--model-override", "hidden_size=32", "--model-override", "embedding_size=16", "--model-override",
           "num_attention_heads=2", "--model-override", "intermediate_size=64", "--model-override",
           "num_hidden_layers=2", "--model-override", "max_position_embeddings=64"]  # fmt: skip
QUICK = ["--max-steps", "2", "--warmup-steps", "1", "--batch-size", "8", "--precision", "fp32", "--no-tensorboard",
         "--no-plot", "-q"]  # fmt: skip
# (damage name, a substring of the tensor's name, the change): one value set to NaN or +-infinity, or the
# whole tensor cast to an integer type.
DAMAGES = {
    "nan-layernorm": ("embeddings.LayerNorm.weight", "nan"),
    "inf-word-embeddings": ("word_embeddings.weight", "inf"),
    "neg-inf-attention": ("attention.query.weight", "-inf"),
    "int32-dense": ("ffn.weight", "int32"),
    "nan-classifier": ("classifier.weight", "nan"),
    "inf-mlm-bias": ("predictions.bias", "inf"),
}
# Which damages each kind of folder gets (the classifier only where there is one, the MLM bias likewise).
KINDS = {
    "finetuned": (
        "nan-layernorm",
        "inf-word-embeddings",
        "neg-inf-attention",
        "int32-dense",
        "nan-classifier",
    ),
    "pretrained": ("nan-layernorm", "inf-word-embeddings", "int32-dense", "inf-mlm-bias"),
    "student": ("nan-layernorm", "inf-word-embeddings", "int32-dense"),
}
EXIT_DAMAGES = ("nan", "inf", "int32", "fp16", "shape", "missing", "extra", "garbage", "empty", "truncated",
                "huge-header")  # fmt: skip


def _damage_weights(folder: Path, part: str, change: str) -> str:
    """Apply `change` to the first tensor of folder/model.safetensors whose name holds `part`; its name."""
    import torch
    from safetensors.torch import load_file, save_file

    file = folder / "model.safetensors"
    state = load_file(file)
    name = next(n for n in sorted(state) if part in n)
    if change == "int32":
        state[name] = state[name].to(torch.int32)
    else:
        state[name].view(-1)[0] = float(change)
    save_file(state, file)
    return name


def _damage_exit_heads(file: Path, kind: str) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    if kind in ("garbage", "empty", "truncated", "huge-header"):
        data = file.read_bytes()
        file.write_bytes(
            {
                "garbage": b"\x89not safetensors" * 20,
                "empty": b"",
                "truncated": data[: len(data) // 2],
                "huge-header": struct.pack("<Q", 2**62) + b"{}",
            }[kind]  # fmt: skip
        )
        return
    state = load_file(file)
    name = sorted(state)[0]
    if kind in ("nan", "inf"):
        state[name].view(-1)[0] = float(kind)
    elif kind in ("int32", "fp16"):
        state[name] = state[name].to(torch.int32 if kind == "int32" else torch.float16)
    elif kind == "shape":
        state[name] = state[name][..., :-1].contiguous()
    elif kind == "missing":
        del state[name]
    elif kind == "extra":
        state["classifiers.9.weight"] = state[name].clone()
    save_file(state, file)


def _albert(argv: list[str], world: Path) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run(
        [sys.executable, "-m", "albert_lm.cli", *argv], capture_output=True, text=True, env=env
    )
    if r.returncode != 0:
        raise SystemExit(f"building the weights family failed: albert {' '.join(argv)}\n{r.stderr[-3000:]}")


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """A fine-tuned classifier with exit heads and a student of the world's sentence teacher, then a
    damaged copy of each good folder per damage, and a damaged exit-heads file per kind."""
    d = world / "weights"
    made = {"w:finetuned": d / "finetuned" / "best", "w:pretrained": p["run"], "w:student": d / "student",
            "w:old-student": d / "old-student", "w:masked": d / "masked.txt"}  # fmt: skip
    for kind, damages in KINDS.items():
        made.update({f"w:{kind}:{name}": d / f"{kind}-{name}" for name in damages})
    made.update({f"w:exit:{name}": d / f"exit-{name}" for name in EXIT_DAMAGES})
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    _albert(["finetune", "--task", "classification", "--model", str(p["run"]), "--data", str(p["task"]), "--output",
             str(d / "finetuned"), "--max-steps", "2", "--batch-size", "8", "--exit-heads", "--no-tensorboard",
             "--no-plot", "-q"], world)  # fmt: skip
    _albert(["distill", "general", "--teacher", str(p["t:sentence"]), "--text", str(p["a.txt"]), "--tokenizer",
             str(p["tok_a"]), "--output", str(d / "student"), "--cache", str(d / "cache"), "--max-segments", "300",
             *STUDENT, *QUICK], world)  # fmt: skip
    shutil.rmtree(d / "cache")
    # A student as albert-lm saved them before: the random masked-LM head kept beside the encoder.
    shutil.copytree(p["run"], d / "old-student", ignore=shutil.ignore_patterns("checkpoint-*"))
    (d / "old-student" / "distill_config.json").write_text(json.dumps({"mlm_weight": 0.0}))
    (d / "masked.txt").write_text("ba [MASK] di mo.\n")
    for kind, damages in KINDS.items():
        for name in damages:
            copy = made[f"w:{kind}:{name}"]
            shutil.copytree(made[f"w:{kind}"], copy, ignore=shutil.ignore_patterns("checkpoint-*"))
            _damage_weights(copy, *DAMAGES[name])
    for name in EXIT_DAMAGES:
        copy = made[f"w:exit:{name}"]
        shutil.copytree(made["w:finetuned"], copy)
        _damage_exit_heads(copy / "exit_heads.safetensors", name)
    (d / "READY").write_text("")
    return made


def _commands(kind: str, model: Path, p: dict[str, Path], out: Callable[[str], str]) -> dict[str, list[str]]:
    """Every command that loads a folder of `kind`, on `model`."""
    embed = ["embed", "--model", str(model), "--input", str(p["rows.jsonl"]), "--output", out("e.npy")]
    export = ["export", "--model", str(model), "--output", out("onnx")]
    finetune = ["finetune", "--task", "classification", "--model", str(model), "--data", str(p["task"]),
                "--output", out("ft"), "--max-steps", "1", "--batch-size", "8", "--no-tensorboard",
                "--no-plot"]  # fmt: skip
    if kind == "finetuned":
        return {
            "predict": ["predict", "--model", str(model), "--input", str(p["rows.jsonl"]), "--output", out("p")],
            "evaluate": ["evaluate", "--task", "classification", "--model", str(model), "--data", str(p["task"]),
                         "--output", out("eval")],  # fmt: skip
            "embed": embed, "export": export, "finetune": finetune,
        }  # fmt: skip
    cmds = {"embed": embed, "export": export, "finetune": finetune}
    if kind == "pretrained":
        cmds["fill-mask"] = [
            "fill-mask",
            "--model",
            str(model),
            "--input",
            str(p["w:masked"]),
            "--output",
            out("f"),
        ]
        cmds["pretrain --init-from"] = [
            "pretrain", "--data", str(p["data_a"]), "--output", out("pre"), "--init-from", str(model), "--batch-size",
            "4", "--max-steps", "1", "--no-tensorboard", "--no-plot"]  # fmt: skip
    else:
        cmds["distill task"] = ["distill", "task", "--model", str(model), "--teacher", str(p["t:task"]),
                                "--data", str(p["task"]), "--task", "classification", "--output", out("task"),
                                "--cache", out("cache"), "--max-seq-length", "32", *QUICK]  # fmt: skip
    return cmds


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[tuple[str, list[str], str, list[str]]]:
    """Damaged weights through every command that loads them (refused, naming the file and the tensor's
    name), damaged exit heads through every early-exit rule and export (refused, naming the file), heads
    that never trained (refused), and the good folders (valid)."""
    cs: list[tuple[str, list[str], str, list[str]]] = []
    for kind, damages in KINDS.items():
        for name in damages:
            part, change = DAMAGES[name]
            what = "int32" if change == "int32" else "non-finite"
            for argv in _commands(kind, p[f"w:{kind}:{name}"], p, out).values():
                cs.append((f"weights: {kind}", argv, "refuse", ["model.safetensors", part, what]))
    best = str(p["w:finetuned"])
    # the world's model has 2 layers: no patience can stop a row before its last (refused as such)
    rules = (["--depth", "1"], ["--exit-confidence", "0.6"], ["--exit-confidence", "0.9"])
    for name in EXIT_DAMAGES:
        model = str(p[f"w:exit:{name}"])
        argvs = [
            ["predict", "--model", model, "--input", str(p["rows.jsonl"]), "--output", out("p"), *r]
            for r in rules
        ]
        argvs.append(["evaluate", "--task", "classification", "--model", model, "--data", str(p["task"]), "--output",
                      out("eval"), "--depth", "1"])  # fmt: skip
        argvs.append(["export", "--model", model, "--output", out("onnx")])
        expect = "ok" if name == "fp16" else "refuse"  # half precision is a valid copy of the heads
        for argv in argvs:
            cs.append(
                (
                    "weights: exit heads",
                    argv,
                    expect,
                    ["exit_heads.safetensors"] if expect == "refuse" else [],
                )
            )
    for student in ("w:student", "w:old-student"):
        argv = ["fill-mask", "--model", str(p[student]), "--input", str(p["w:masked"]), "--output", out("f")]
        cs.append(("weights: untrained heads", argv, "refuse", [str(p[student]), "masked-LM head"]))
    cs.append(("weights: untrained heads", ["@python", "from albert_lm.deploy.export import export_onnx\n"
               f"export_onnx({str(p['w:old-student'])!r}, {out('onnx')!r}, head='masked_lm')"], "refuse",
               ["never trained"]))  # fmt: skip
    for kind in KINDS:
        for argv in _commands(kind, p[f"w:{kind}"], p, out).values():
            cs.append(("valid (weights)", argv, "ok", []))
    cs.append(("valid (weights)", ["predict", "--model", best, "--input", str(p["rows.jsonl"]), "--output", out("p"),
               "--exit-confidence", "0.9"], "ok", []))  # fmt: skip
    return cs
