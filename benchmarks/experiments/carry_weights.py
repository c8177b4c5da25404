"""Carry a transformers encoder to a machine that takes only a few MiB (docs/gpu.md, round 3).

A lent GPU machine takes 64 MiB of files a call and has no network; all-MiniLM-L6-v2 is 87 MiB in fp32
(45 in fp16). `pack` stores each matrix as int8 with one fp16 scale per row (symmetric, absmax / 127)
and every vector (biases, LayerNorm) in fp16: about a quarter of fp32. `unpack` restores an fp32
folder that transformers and albert-lm read as they read the original. The round trip changes each
weight by at most half a quantization step of its row (the scale is rounded to fp16 before the weights
are quantized with it); `check` measures what that does to the encoder's mean-pooled vectors on a file
of sentences (cosine against the original's). Other weight files of a hub snapshot (PyTorch, ONNX,
OpenVINO, TensorFlow, Rust) are left out.

    python benchmarks/experiments/carry_weights.py pack SRC_FOLDER PACKED_FOLDER
    python benchmarks/experiments/carry_weights.py unpack PACKED_FOLDER OUT_FOLDER
    python benchmarks/experiments/carry_weights.py check SRC_FOLDER OUT_FOLDER --sentences FILE
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS = "model.safetensors"


OTHER_WEIGHTS = {
    "pytorch_model.bin",
    "tf_model.h5",
    "rust_model.ot",
    "flax_model.msgpack",
    "onnx",
    "openvino",
}


def copy_rest(src: Path, dst: Path, skip: str) -> None:
    """The folder's other files (config, tokenizer, sentence-transformers' pooling folders) as they are;
    not the same weights in other formats."""
    for f in src.iterdir():
        if f.name == skip or f.name.startswith(".") or f.name in OTHER_WEIGHTS:
            continue
        if f.is_dir():
            shutil.copytree(f, dst / f.name, dirs_exist_ok=True)
        else:
            shutil.copy2(f, dst / f.name)


def pack(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    for name, w in load_file(src / WEIGHTS).items():
        w = w.float()
        if w.dim() == 2:
            scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).half().float().clamp_min(2**-24)
            out[name + ".int8"] = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
            out[name + ".scale"] = scale.half()
        else:
            out[name] = w.half()
    save_file(out, dst / "packed.safetensors")
    copy_rest(src, dst, skip=WEIGHTS)


def unpack(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    packed = load_file(src / "packed.safetensors")
    out: dict[str, torch.Tensor] = {}
    for name, t in packed.items():
        if name.endswith(".int8"):
            base = name[: -len(".int8")]
            out[base] = t.float() * packed[base + ".scale"].float()
        elif not name.endswith(".scale"):
            out[name] = t.float()
    save_file({k: v.contiguous() for k, v in out.items()}, dst / WEIGHTS, metadata={"format": "pt"})
    copy_rest(src, dst, skip="packed.safetensors")


def check(a: Path, b: Path, sentences: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    texts = [t for t in sentences.read_text(encoding="utf-8").splitlines() if t.strip()][:2000]
    tok = AutoTokenizer.from_pretrained(a)
    vecs = []
    for folder in (a, b):
        model = AutoModel.from_pretrained(folder).eval()
        rows = []
        with torch.no_grad():
            for i in range(0, len(texts), 64):
                enc = tok(
                    texts[i : i + 64], padding=True, truncation=True, max_length=128, return_tensors="pt"
                )
                h = model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).float()
                rows.append((h * m).sum(1) / m.sum(1))
        vecs.append(torch.cat(rows))
    cos = torch.nn.functional.cosine_similarity(vecs[0], vecs[1])
    print(f"{len(texts)} sentences: cosine original/restored mean {cos.mean():.6f} min {cos.min():.6f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=["pack", "unpack", "check"])
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--sentences", type=Path)
    args = p.parse_args()
    if args.verb == "pack":
        pack(args.src, args.dst)
    elif args.verb == "unpack":
        unpack(args.src, args.dst)
    else:
        if args.sentences is None:
            p.error("check needs --sentences FILE")
        check(args.src, args.dst, args.sentences)


if __name__ == "__main__":
    main()
