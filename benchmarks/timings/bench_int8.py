"""int8 inference against fp32: albert-lm's `quantize_int8` on each of PyTorch's quantized
engines, against albert-lm fp32, transformers fp32 and PyTorch's own `quantize_dynamic` of transformers'
model. Same random weights for all; tokens/s of the encoder forward (median of repeats, the paths
alternated within each repeat) and agreement with transformers fp32 (cosine of the last hidden states).

    python benchmarks/timings/bench_int8.py --preset albert-base --shapes 1x128 8x128 4x512 --repeats 5
Set ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 to act as an AVX2 CPU.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np
import sentencepiece
import torch
import torch.nn.functional as F
import transformers

from albert_lm import AlbertConfig, AlbertModel, quantize_int8
from albert_lm.bench.workloads import interleaved
from albert_lm.kernels.hardware import cpu_info


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="albert-base")
    p.add_argument("--shapes", nargs="+", default=["1x128", "8x128", "4x512"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--engines",
        default=",".join(
            e for e in ("x86", "fbgemm", "onednn") if e in torch.backends.quantized.supported_engines
        ),
    )
    p.add_argument(
        "--spiece",
        default="../shared/data/tokenizer/albert-30k/spiece.model",
        help="a spiece.model of as many pieces as the preset's vocabulary (the ONNX export checks the "
        "tokenizer against the embedding), put beside the model for the ONNX rows",
    )
    p.add_argument("--no-onnx", action="store_true", help="leave out ONNX Runtime")
    a = p.parse_args()
    if not a.no_onnx:  # checked before minutes of timing, not at the export after them
        if not Path(a.spiece).is_file():
            p.error(f"--spiece {a.spiece}: no such file; give one, or --no-onnx")
        pieces = sentencepiece.SentencePieceProcessor(model_file=a.spiece).get_piece_size()
        vocab = AlbertConfig.from_preset(a.preset).vocab_size
        if pieces != vocab:
            p.error(
                f"--spiece {a.spiece}: {pieces} pieces, the {a.preset} preset's vocabulary {vocab}: give a "
                f"spiece.model of {vocab} pieces, or --no-onnx"
            )
    torch.manual_seed(0)
    ours = AlbertModel(AlbertConfig.from_preset(a.preset), add_pooling_layer=False).eval()
    tmp = tempfile.TemporaryDirectory()
    d = Path(tmp.name)
    ours.save_pretrained(d / "model")
    print(
        f"size on disk: model.safetensors (fp32) {(d / 'model' / 'model.safetensors').stat().st_size / 2**20:.1f} MiB"
    )
    hf = transformers.AlbertModel.from_pretrained(d / "model", add_pooling_layer=False).eval()
    paths = {"transformers fp32": lambda x: hf(input_ids=x).last_hidden_state,
             "albert-lm fp32": lambda x: ours(input_ids=x).last_hidden_state}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_q = torch.ao.quantization.quantize_dynamic(hf, {torch.nn.Linear}, dtype=torch.qint8)
    paths["transformers + torch quantize_dynamic"] = lambda x: hf_q(input_ids=x).last_hidden_state
    for engine in a.engines.split(","):
        q = quantize_int8(ours, engine=engine)
        paths[f"albert-lm int8 ({engine})"] = lambda x, q=q, e=engine: _on(
            e, lambda: q(input_ids=x).last_hidden_state
        )
    if not a.no_onnx:
        shutil.copy(a.spiece, d / "model" / "spiece.model")
        paths.update(_onnx_paths(d / "model", d / "onnx"))
    cpu = cpu_info()
    print(
        f"CPU: {cpu.model} ({cpu.generation}, isa {cpu.isa}), {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, transformers {transformers.__version__}; {a.preset}, random weights"
    )
    for shape in a.shapes:
        _table(paths, shape, a.repeats, ours.config.vocab_size)


def _onnx_paths(model_dir: Path, out: Path) -> dict:
    """ONNX Runtime on `albert export`'s graphs (fp32 and int8) of the same weights."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    from albert_lm.deploy.export import export_onnx

    export_onnx(
        model_dir, out, int8=True
    )  # its int8 file: ORT's transformer optimizer, then quantize_dynamic
    # For the record, the two other graphs: the optimizer's fp32 (it fuses GELU and residual + LayerNorm
    # but finds no Attention pattern in ALBERT's graph) and the exported graph quantized as it is.
    config = AlbertConfig.from_pretrained(model_dir)
    optimized = optimize_model(
        str(out / "model.onnx"),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
    )
    print(
        "ONNX Runtime optimizer fused:",
        {k: v for k, v in optimized.get_fused_operator_statistics().items() if v},
    )
    optimized.save_model_to_file(str(out / "model.opt.onnx"))
    quantize_dynamic(
        out / "model.onnx", out / "model.raw.int8.onnx", weight_type=QuantType.QInt8, per_channel=True
    )
    for f in sorted(out.glob("*.onnx")):
        size = f.stat().st_size + sum(d.stat().st_size for d in out.glob(f.name + ".data"))
        print(f"size on disk: {f.name} {size / 2**20:.1f} MiB")
    paths = {}
    for name, file in (
        ("ONNX Runtime fp32", "model.onnx"),
        ("ONNX Runtime fp32, optimizer", "model.opt.onnx"),
        ("ONNX Runtime int8 (albert export --int8)", "model.int8.onnx"),
        ("ONNX Runtime int8 of the unoptimized graph", "model.raw.int8.onnx"),
    ):
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(str(out / file), options, providers=["CPUExecutionProvider"])
        paths[name] = lambda x, s=session: torch.from_numpy(
            s.run(
                None,
                {
                    "input_ids": x.numpy(),
                    "attention_mask": np.ones(tuple(x.shape), dtype=np.int64),
                    "token_type_ids": np.zeros(tuple(x.shape), dtype=np.int64),
                },
            )[0]
        )
    return paths


def _table(paths: dict, shape: str, repeats: int, vocab: int) -> None:
    """Tokens/s (median, paths alternated call by call) and cosine to transformers fp32 at one shape."""
    b, s = map(int, shape.split("x"))
    x = torch.randint(5, vocab, (b, s))
    with torch.no_grad():
        ref = paths["transformers fp32"](x).flatten()
        cos = {n: float(F.cosine_similarity(f(x).flatten(), ref, dim=0)) for n, f in paths.items()}
        times = interleaved({n: (lambda f=f: f(x)) for n, f in paths.items()}, repeats, warmup=0)
    base = statistics.median(times["transformers fp32"])
    print(f"\n{shape}: | path | tokens/s | vs transformers fp32 | cosine to transformers fp32 |")
    for n in paths:
        m = statistics.median(times[n])
        print(f"| {n} | {b * s / m:.0f} | {base / m:.2f}x | {cos[n]:.5f} |")


def _on(engine: str, fn):
    old = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        return fn()
    finally:
        torch.backends.quantized.engine = old


if __name__ == "__main__":
    main()
