"""The README.md of an `albert export --format onnx` folder: what each file is, what the export was
checked against, and where the running code is; for a token classifier, how to tag words with the graph
(each word tokenized alone, its tag read at its first piece, as `albert predict` does). The folder
travels alone to a device, without the model folder's card or albert-lm's docs beside it, so it says
this itself."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.predict import NotFineTuned, model_task
from albert_lm.files import atomic_write
from albert_lm.runtime.finetuned import read_saved_settings

DOCS = 'albert-lm\'s docs/deploy.md, "Running the ONNX file"'
# How `albert predict` tags words, with onnxruntime, tokenizers and numpy alone; docs/deploy.md carries the
# same code with the special ids read from tokenizer.json (under "Running the ONNX file").
TOKEN_RECIPE = """\
import json

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

folder = {folder}
config = json.load(open(f"{{folder}}/config.json"))
tokenizer = Tokenizer.from_file(f"{{folder}}/tokenizer.json")
cls, sep, unk = {cls}, {sep}, {unk}  # this tokenizer's [CLS], [SEP] and unknown piece
words = ["Anna", "lives", "in", "Berlin", "."]
ids, firsts = [cls], []
for word in words:  # each word alone, as albert predict reads a list of words
    firsts.append(len(ids))
    ids += tokenizer.encode(word, add_special_tokens=False).ids or [unk]
ids.append(sep)
inputs = {{
    "input_ids": np.array([ids], dtype=np.int64),
    "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
    "token_type_ids": np.zeros((1, len(ids)), dtype=np.int64),
}}
session = ort.InferenceSession(f"{{folder}}/model.onnx", providers=["CPUExecutionProvider"])
(logits,) = session.run(["logits"], inputs)  # (1, pieces, tags)
tags = [config["id2label"][str(i)] for i in logits[0, firsts].argmax(-1)]  # at each word's first piece
"""


def write_export_card(
    folder: Path, model_dir: Path, record: dict[str, Any], output: str, tokenizer: AlbertTokenizer
) -> Path:
    """`folder`/README.md (the folder renamed `output`, the --output as given, later) for the export of
    `model_dir`, from its export.json `record`."""
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
    names = [n for n in ("tokenizer.json", "spiece.model", "vocab.txt") if (folder / n).is_file()]
    rows.append((", ".join(names), "the tokenizer: `tokenizer.json` runs in the `tokenizers` library, no "
                                   "albert-lm or torch needed"))  # fmt: skip
    rows.append(("config.json", "the model's settings (label names in `id2label` for a classifier)"))
    rows.append(("export.json", "the figures below, each file's bytes, the versions used"))
    text = "\n".join(
        [
            f"# ONNX export of `{model_dir}`",
            "",
            f"Made by `albert export --model {shlex.quote(str(model_dir))} --output {shlex.quote(output)}{int8}`.",
            "",
            "| file | what |",
            "|---|---|",
            *(f"| {name} | {what} |" for name, what in rows),
            "",
            *(f"- {c}" for c in _checks(record)),
            "",
            f"Running it with onnxruntime, tokenizers and numpy alone (a small machine): {DOCS}.",
            "",
            *_token_section(model_dir, record, output, tokenizer),
        ]
    )
    return atomic_write(folder / "README.md", text)


def _checks(record: dict[str, Any]) -> list[str]:
    """What the export was checked against, from its export.json `record`."""
    checks = [f"ONNX Runtime {record['onnxruntime']} ran the graph on two shapes of input, padding included: "
              f"at most {record['max_abs_diff_fp32']:.1e} from PyTorch {record['torch']} (fp32)"]  # fmt: skip
    if record["outputs"] == ["last_hidden_state"]:  # an encoder: its sentence vector, as `albert embed`'s
        checks.append(
            "a sentence vector: `last_hidden_state` averaged over `attention_mask` (albert embed's)"
        )
    if record.get("int8_cosine") is not None:
        checks.append(f"int8: cosine {record['int8_cosine']:.4f} with PyTorch's outputs")
    return checks


def _token_section(
    model_dir: Path, record: dict[str, Any], output: str, tokenizer: AlbertTokenizer
) -> list[str]:
    """For a token classifier, the README's lines on tagging words as `albert predict` does; none for any
    other model."""
    if record["outputs"] != ["logits"]:
        return []
    try:
        if model_task(model_dir)[0].head != "token_classification":
            return []
    except NotFineTuned:  # a pretraining checkpoint's masked-LM logits
        return []
    length = int(read_saved_settings(model_dir).get("max_seq_length") or 512)
    ids = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "unk": tokenizer.unk_token_id}
    return [
        "## Tagging words",
        "",
        "`logits` is (texts, pieces, tags). `albert predict` tags a list of words by tokenizing each word "
        "alone, putting the pieces between [CLS] and [SEP], and reading each word's tag at its first piece "
        "(the tags of its other pieces are not used). With onnxruntime, tokenizers and numpy:",
        "",
        "```python",
        TOKEN_RECIPE.format(folder=json.dumps(output, ensure_ascii=False), **ids).rstrip("\n"),
        "```",
        "",
        f"A sentence takes at most {length} pieces with [CLS] and [SEP] (the model's max_seq_length); "
        "`albert predict` reads a longer one in windows of whole words that overlap by half, each word "
        "tagged from the window where it has the most words on its shorter side. A text rather than a list "
        "of words: split it on whitespace, as `albert predict` does.",
        "",
    ]
