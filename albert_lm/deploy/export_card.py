"""The README.md of an `albert export --format onnx` folder: what each file is, what the export was
checked against, and where the running code is. The folder travels alone to a device, without the
model folder's card or albert-lm's docs beside it, so it says this itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from albert_lm.files import atomic_write

DOCS = 'albert-lm\'s docs/deploy.md, "Running the ONNX file"'


def write_export_card(folder: Path, model_dir: Path, record: dict[str, Any], name: str) -> Path:
    """`folder`/README.md (the folder renamed `name` later) for the export of `model_dir`, from its
    export.json `record`."""
    sizes = record.get("bytes", {})
    mb = lambda name: f"{sizes[name] / 2**20:.1f} MiB" if name in sizes else "?"  # noqa: E731
    inputs = ", ".join(f"`{n}`" for n in record["inputs"])
    int8 = " --int8" if "model.int8.onnx" in sizes else ""
    outputs = ", ".join(f"`{n}`" for n in record["outputs"])
    rows = [
        ("model.onnx", f"the graph in fp32 ({mb('model.onnx')}, opset {record['opset']}): inputs {inputs} "
                       f"(int64, batch x sequence, both axes dynamic), outputs {outputs}"),
    ]  # fmt: skip
    if "model.int8.onnx" in sizes:
        rows.append(("model.int8.onnx", f"int8 weights ({mb('model.int8.onnx')}); ONNX Runtime's own fused ops, "
                                        "so for ONNX Runtime only"))  # fmt: skip
    tokenizer = [n for n in ("tokenizer.json", "spiece.model", "vocab.txt") if (folder / n).is_file()]
    rows.append((", ".join(tokenizer), "the tokenizer: `tokenizer.json` runs in the `tokenizers` library, no "
                                       "albert-lm or torch needed"))  # fmt: skip
    rows.append(("config.json", "the model's settings (label names in `id2label` for a classifier)"))
    rows.append(("export.json", "the figures below, each file's bytes, the versions used"))
    checks = [f"ONNX Runtime {record['onnxruntime']} ran the graph on two shapes of input, padding included: "
              f"at most {record['max_abs_diff_fp32']:.1e} from PyTorch {record['torch']} (fp32)"]  # fmt: skip
    if record["outputs"] == [
        "last_hidden_state"
    ]:  # an encoder: its sentence vector, as `albert embed` takes it
        checks.append(
            "a sentence vector: `last_hidden_state` averaged over `attention_mask` (albert embed's)"
        )
    if record.get("int8_cosine") is not None:
        checks.append(f"int8: cosine {record['int8_cosine']:.4f} with PyTorch's outputs")
    text = "\n".join(
        [
            f"# ONNX export of `{model_dir}`",
            "",
            f"Made by `albert export --model {model_dir} --output {name}{int8}`.",
            "",
            "| file | what |",
            "|---|---|",
            *(f"| {name} | {what} |" for name, what in rows),
            "",
            *(f"- {c}" for c in checks),
            "",
            f"Running it with onnxruntime, tokenizers and numpy alone (a small machine): {DOCS}.",
            "",
        ]
    )
    return atomic_write(folder / "README.md", text)
