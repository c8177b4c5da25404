"""Hostile cases on `albert export --format web`'s inputs (benchmarks/tools/hostile_round.py loads this
family): model folders whose tokenizer is not the model's or whose labels are not the classifier's outputs,
weights that are not finite (NaN, infinity: in an embedding row, a layer, a layer norm, the classifier,
the masked-LM head) or not floating-point, npm folders whose files are empty, missing or damaged and
whose package.json files are of other types, names or versions, and outputs that are, lie inside or hold
the npm folder or the model folder, with and without --overwrite.

The models are copies of the world's fine-tuned classifier (ft/best) and pretraining run with one thing
changed. A bad npm folder is made of tiny stand-ins (every refusal comes before the export, and the
world is hashed before and after each case, so it stays small); the good one, which the valid cases and
the output cases use, holds the real files of `make web` where they are installed (.web/node_modules or
$ALBERT_WEB_MODULES), else stand-ins that pass the checks.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from albert_lm.deploy.web_files import BUNDLED, LICENCE_FILES, installed_package

FAMILY = "the web export's inputs"
ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "albert_lm" / "deploy" / "web"
DEEP = "[" * 100_000 + "]" * 100_000  # far past the json module's recursion limit
TRANSFORMERS_JSON = "@huggingface/transformers/package.json"
ORT_JSON = "onnxruntime-web/package.json"
LIBRARY = "@huggingface/transformers/dist/transformers.min.js"
MJS = "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs"
WASM = "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm"
LICENSE = "@huggingface/transformers/LICENSE"
Case = tuple[str, list[str], str, list[str]]


def _versions() -> tuple[str, str]:
    """(transformers.js, onnxruntime-web) as the page pins them (albert_lm/deploy/web/)."""
    pinned = json.loads((PAGE / "package.json").read_text())["dependencies"]["@huggingface/transformers"]
    lock = json.loads((PAGE / "package-lock.json").read_text())
    return pinned, lock["packages"]["node_modules/onnxruntime-web"]["version"]


# --------------------------------------------------------------------------- npm folders
def _write(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))


def _stand_ins(root: Path) -> Path:
    """A node_modules of tiny files at the pinned versions: it passes every check."""
    transformers, ort = _versions()
    _write(
        root / TRANSFORMERS_JSON,
        {
            "name": "@huggingface/transformers",
            "version": transformers,
            "dependencies": {"onnxruntime-web": ort},
        },
    )
    _write(root / ORT_JSON, {"name": "onnxruntime-web", "version": ort, "license": "MIT"})
    _write(root / LIBRARY, "export const env = {};\n")
    _write(root / MJS, "export default function () {}\n")
    _write(root / WASM, b"\0asm\x01\0\0\0")
    # the other packages whose code the page ships: only their licences are read (ONNX Runtime's, MIT,
    # written from package.json, as npm's packages have no licence file)
    _write(root / LICENSE, "Apache License 2.0 (stand-in)\n")
    for package, licence in (("@huggingface/tokenizers", "Apache-2.0"), ("@huggingface/jinja", "MIT")):
        _write(root / package / "package.json", {"name": package, "license": licence})
        _write(root / package / "LICENSE", f"{licence} licence (stand-in)\n")
    _write(root / "onnxruntime-common" / "package.json", {"name": "onnxruntime-common", "license": "MIT"})
    return root


def _good_npm(root: Path) -> Path:
    """The files the export copies, from `make web`'s install where there is one."""
    source = Path(os.environ.get("ALBERT_WEB_MODULES") or ROOT / ".web" / "node_modules")
    if not (source / TRANSFORMERS_JSON).is_file():
        return _stand_ins(root)
    names = [TRANSFORMERS_JSON, ORT_JSON, LIBRARY, MJS, WASM]
    for package, (_, parent) in BUNDLED.items():  # each shipped package's package.json and licence
        folder = installed_package(source, package, parent)
        if folder is not None:
            names += [str((folder / f).relative_to(source)) for f in ("package.json", *LICENCE_FILES)]
    for name in names:
        if (source / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, root / name)
    return root


def _edit_package(file: str, **fields: Any) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        values = json.loads((root / file).read_text())
        values.update(fields)
        (root / file).write_text(json.dumps(values))

    return change


def _drop(file: str, *keys: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        values = json.loads((root / file).read_text())
        (root / file).write_text(json.dumps({k: v for k, v in values.items() if k not in keys}))

    return change


def _set(file: str, content: Any) -> Callable[[Path], None]:
    return lambda root: _write(root / file, content)


def _remove(file: str, folder: bool = False) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        (root / file).unlink()
        if folder:
            (root / file).mkdir()

    return change


# name -> (the change to a stand-in node_modules, the file the refusal names)
NPM_VARIANTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty-library": (_set(LIBRARY, ""), LIBRARY),
    "empty-loader": (_set(MJS, ""), MJS),
    "empty-runtime": (_set(WASM, b""), WASM),
    "runtime-an-html-page": (_set(WASM, b"<html>404 Not Found</html>"), WASM),
    "library-of-zeros": (_set(LIBRARY, b"\0" * 4096), LIBRARY),
    "library-binary": (_set(LIBRARY, bytes(range(256)) * 4), LIBRARY),
    "library-missing": (_remove(LIBRARY), LIBRARY),
    "runtime-missing": (_remove(WASM), WASM),
    "loader-a-folder": (_remove(MJS, folder=True), MJS),
    "package-json-missing": (_remove(ORT_JSON), ORT_JSON),
    "package-json-empty": (_set(TRANSFORMERS_JSON, ""), TRANSFORMERS_JSON),
    "package-json-not-json": (_set(ORT_JSON, "name: onnxruntime-web\n"), ORT_JSON),
    "package-json-deep": (_set(TRANSFORMERS_JSON, DEEP), TRANSFORMERS_JSON),
    "package-json-a-list": (_set(TRANSFORMERS_JSON, [1, 2, 3]), TRANSFORMERS_JSON),
    "package-json-a-string": (_set(ORT_JSON, '"1.31.0"'), ORT_JSON),
    "package-json-null": (_set(ORT_JSON, "null"), ORT_JSON),
    "version-an-object": (
        _edit_package(TRANSFORMERS_JSON, version={"major": 4, "minor": 3}),
        TRANSFORMERS_JSON,
    ),
    "version-a-number": (_edit_package(ORT_JSON, version=1.31), ORT_JSON),
    "version-null": (_edit_package(TRANSFORMERS_JSON, version=None), TRANSFORMERS_JSON),
    "version-a-list": (_edit_package(ORT_JSON, version=[1, 31, 0]), ORT_JSON),
    "version-missing": (_drop(TRANSFORMERS_JSON, "version"), TRANSFORMERS_JSON),
    "version-latest": (_edit_package(TRANSFORMERS_JSON, version="latest"), TRANSFORMERS_JSON),
    "name-of-another-package": (_edit_package(ORT_JSON, name="left-pad"), ORT_JSON),
    "transformers-3": (_edit_package(TRANSFORMERS_JSON, version="3.7.6"), TRANSFORMERS_JSON),
    "runtime-of-another-version": (_edit_package(ORT_JSON, version="1.18.0"), ORT_JSON),
}


# --------------------------------------------------------------------------- model folders
def _tensors(folder: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


def _save(folder: Path, tensors: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _edit_json(file: Path, **changes: Any) -> None:
    _write(file, {**json.loads(file.read_text()), **changes})


def _resize_vocabulary(folder: Path, rows: int) -> None:
    """The embedding (and the masked-LM head's rows) cut or padded to `rows`; the tokenizer kept."""
    import torch

    tensors = _tensors(folder)
    vocab = tensors[next(n for n in tensors if n.endswith("word_embeddings.weight"))].shape[0]
    for name, t in tensors.items():
        if t.shape and t.shape[0] == vocab and ("word_embeddings" in name or "predictions" in name):
            extra = torch.zeros((max(rows - vocab, 0), *t.shape[1:]), dtype=t.dtype)
            tensors[name] = torch.cat([t[:rows], extra]).contiguous()
    _save(folder, tensors)
    _edit_json(folder / "config.json", vocab_size=rows)


# name -> (source model "cls" or "pre", the tensor whose name ends so, the value, the flat index)
NON_FINITE = {
    "nan-embedding-row": ("cls", "word_embeddings.weight", "nan", "row1"),
    "inf-embedding-row": ("cls", "word_embeddings.weight", "inf", "row1"),
    "inf-position-embedding": ("cls", "position_embeddings.weight", "-inf", "last"),
    "nan-layer-ffn": ("cls", "ffn.weight", "nan", "first"),
    "inf-layer-query": ("cls", "query.weight", "inf", "first"),
    "nan-layer-norm": ("cls", "full_layer_layer_norm.weight", "nan", "first"),
    "nan-classifier": ("cls", "classifier.weight", "nan", "first"),
    "inf-classifier-bias": ("cls", "classifier.bias", "inf", "last"),
    "nan-pooler": ("cls", "pooler.weight", "nan", "first"),
    "inf-mlm-dense": ("pre", "predictions.dense.weight", "inf", "last"),
    "nan-mlm-bias": ("pre", "predictions.bias", "nan", "first"),
    "inf-pretrained-embedding": ("pre", "word_embeddings.weight", "inf", "row1"),
}
# name -> (source model, the tensors whose names end so ("" every one), the dtype, expected outcome)
DTYPES = {
    "int32-classifier": ("cls", "classifier.weight", "int32", "refuse"),
    "int64-embedding": ("cls", "word_embeddings.weight", "int64", "refuse"),
    "bool-layer-norm": ("cls", "embeddings.LayerNorm.weight", "bool", "refuse"),
    "int8-mlm-dense": ("pre", "predictions.dense.weight", "int8", "refuse"),
    "float64-everywhere": ("cls", "", "float64", "either"),
    "float16-everywhere": ("cls", "", "float16", "either"),
}


def _non_finite(folder: Path, suffix: str, value: str, where: str) -> str:
    tensors = _tensors(folder)
    name = next(n for n in sorted(tensors) if n.endswith(suffix))
    t = tensors[name].clone()
    index = {"first": 0, "last": t.numel() - 1, "row1": t.shape[-1] if t.dim() > 1 else 1}[where]
    t.view(-1)[index] = float(value)
    tensors[name] = t
    _save(folder, tensors)
    return name


def _dtype(folder: Path, suffix: str, dtype: str) -> str:
    import torch

    tensors = _tensors(folder)
    names = [n for n in sorted(tensors) if n.endswith(suffix) and tensors[n].is_floating_point()]
    to = getattr(torch, dtype)
    for name in names:
        tensors[name] = tensors[name].to(to) if to.is_floating_point else tensors[name].round().to(to)
    _save(folder, tensors)
    return names[0]


def _model_variants(d: Path, cls: Path, pre: Path, p: dict[str, Path]) -> dict[str, str]:
    """Every bad model folder under d/models/; {variant: the tensor it names}."""
    m = d / "models"
    named: dict[str, str] = {}
    for name, folder in (("cls", cls), ("pre", pre)):
        shutil.copytree(folder, m / name, ignore=shutil.ignore_patterns("checkpoint-*"))
    for name, source, rows in (("cls-tokenizer-larger", "cls", 100), ("pre-tokenizer-larger", "pre", 100),
                               ("cls-tokenizer-smaller", "cls", 140)):  # fmt: skip
        shutil.copytree(m / source, m / name)
        _resize_vocabulary(m / name, rows)
    shutil.copytree(m / "cls", m / "cls-fingerprint-other")
    _edit_json(m / "cls-fingerprint-other" / "finetune_config.json", tokenizer_fingerprint="0" * 16)
    shutil.copytree(m / "cls", m / "cls-tokenizer-swapped")
    shutil.copy(p["tok_b"] / "spiece.model", m / "cls-tokenizer-swapped" / "spiece.model")
    shutil.copytree(m / "cls", m / "cls-three-labels")
    _edit_json(m / "cls-three-labels" / "finetune_config.json", labels=["red", "green", "blue"])
    for name, (source, suffix, value, where) in NON_FINITE.items():
        shutil.copytree(m / source, m / name)
        named[name] = _non_finite(m / name, suffix, value, where)
    for name, (source, suffix, dtype, _) in DTYPES.items():
        shutil.copytree(m / source, m / name)
        named[name] = _dtype(m / name, suffix, dtype)
    return named


def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """The model variants (under web/models/), the npm variants (under web/npm/), the good npm folder
    inside a site folder (web/site/node_modules) and a link to it."""
    d = world / "web"
    made = {"w:root": d}
    if (d / "READY").is_file():
        return made
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    named = _model_variants(d, p["ft"] / "best", p["run"], p)
    (d / "tensors.json").write_text(json.dumps(named, indent=1))
    _good_npm(d / "site" / "node_modules")
    os.symlink(d / "site" / "node_modules", d / "link-to-npm")
    for name, (change, _) in NPM_VARIANTS.items():
        change(_stand_ins(d / "npm" / name))
    (d / "READY").write_text("")
    return made


# --------------------------------------------------------------------------- the cases
def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    """Bad model folders and npm folders (refused, naming the file), outputs at an input (refused, naming
    the option, whatever --overwrite says) and valid exports."""
    d = p["w:root"]
    m, npm = d / "models", d / "site" / "node_modules"
    named = json.loads((d / "tensors.json").read_text())

    def ex(model: Path, o: str, *more: str, modules: Path | None = npm) -> list[str]:
        given = ["--npm-modules", str(modules)] if modules is not None else []
        return ["export", "--format", "web", "--model", str(model), "--output", o, *given, *more]

    cs: list[Case] = [
        ("web: tokenizer", ex(m / "cls-tokenizer-larger", out("web")), "refuse", ["spiece.model", "100 embedding"]),
        ("web: tokenizer", ex(m / "pre-tokenizer-larger", out("web")), "refuse", ["spiece.model", "100 embedding"]),
        ("web: tokenizer", ex(m / "cls-tokenizer-smaller", out("web")), "refuse", ["spiece.model", "140 embedding"]),
        ("web: tokenizer", ex(m / "cls-tokenizer-larger", out("web"), "--task", "feature-extraction"), "refuse",
         ["spiece.model", "embedding rows"]),
        ("web: tokenizer", ex(m / "cls-fingerprint-other", out("web")), "refuse", ["fingerprint", "0" * 16]),
        ("web: tokenizer", ex(m / "cls-tokenizer-swapped", out("web")), "refuse", ["spiece.model", "fingerprint"]),
        ("web: tokenizer", ex(m / "cls-three-labels", out("web")), "refuse",
         [str(m / "cls-three-labels"), "2 outputs"]),
    ]  # fmt: skip
    for name in NON_FINITE:
        task = ["--task", "feature-extraction"] if name == "inf-pretrained-embedding" else []
        cs.append(
            ("web: weights", ex(m / name, out("web"), *task), "refuse", ["model.safetensors", named[name]])
        )
    for name, (_, _, dtype, expect) in DTYPES.items():
        mention = ["model.safetensors", named[name], dtype] if expect == "refuse" else []
        cs.append(("web: weights", ex(m / name, out("web")), expect, mention))
    for name, (_, file) in NPM_VARIANTS.items():
        bad = d / "npm" / name
        cs.append(("web: npm files", ex(m / "pre", out("web"), modules=bad), "refuse", [str(bad / file)]))
    cs += _output_cases(d, m, npm, out)
    cs += [
        ("valid (web)", ex(m / "cls", out("web")), "ok", []),
        ("valid (web)", ex(m / "pre", out("web")), "ok", []),
        ("valid (web)", ex(m / "cls", out("web"), "--task", "feature-extraction"), "ok", []),
        ("valid (web)", ["@env", f"ALBERT_WEB_MODULES={npm}", *ex(m / "pre", out("web"), modules=None)], "ok", []),
    ]  # fmt: skip
    return cs


def _output_cases(d: Path, m: Path, npm: Path, out: Callable[[str], str]) -> list[Case]:
    """Outputs that are, lie inside or hold the npm folder (given by --npm-modules, by
    $ALBERT_WEB_MODULES, or through a link) or the model folder, with and without --overwrite."""
    cs: list[Case] = []
    model = m / "cls"
    base = ["export", "--format", "web", "--model", str(model), "--output"]
    for overwrite in ([], ["--overwrite"]):
        for o in (npm, npm / "web", d / "site"):
            cs.append(("web: outputs", [*base, str(o), "--npm-modules", str(npm), *overwrite], "refuse",
                       ["--npm-modules", str(npm)]))  # fmt: skip
        for o in (model, model / "web", m):
            cs.append(("web: outputs", [*base, str(o), "--npm-modules", str(npm), *overwrite], "refuse",
                       ["--model", str(model)]))  # fmt: skip
    env = ["@env", f"ALBERT_WEB_MODULES={npm}"]
    for o in (npm, d / "site"):
        cs.append(("web: outputs", [*env, *base, str(o), "--overwrite"], "refuse", ["$ALBERT_WEB_MODULES"]))
    link = d / "link-to-npm"
    cs.append(("web: outputs", [*base, str(link), "--npm-modules", str(npm), "--overwrite"], "refuse",
               ["--npm-modules", str(link)]))  # fmt: skip
    cs.append(("web: outputs", [*base, str(npm), "--npm-modules", str(link), "--overwrite"], "refuse",
               ["--npm-modules", str(link)]))  # fmt: skip
    return cs
