"""Hostile input to `albert export --format web`: every input checked as the commands it mirrors check it
(`predict`, `fill-mask`, `embed`), and the output kept apart from every input.

- the model folder: a tokenizer that is not the model's (more pieces than embedding rows, another
  fingerprint than fine-tuning recorded), labels that are not the classifier's outputs, weights that are
  not finite or not floating-point (refused by `load_model`, which the export loads through);
- the npm packages: files the page loads that are empty or damaged, package.json files of other types,
  names or versions than the page needs;
- the output: one that is, holds or lies inside the --npm-modules folder (or $ALBERT_WEB_MODULES), the
  model folder or the page's source, refused with or without --overwrite, before anything is written.

The npm packages are faked with tiny files where the real ones are not needed (every refusal comes before
the export); the check of the real install skips where `make web` has not run (fails under
ALBERT_REQUIRE_WEB=1, as CI sets it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import web_missing  # tests/ is on sys.path

from albert_lm.cli import main
from albert_lm.files import write_json

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "albert_lm" / "deploy" / "web"
MODULES = Path(os.environ.get("ALBERT_WEB_MODULES") or ROOT / ".web" / "node_modules")
TRANSFORMERS = json.loads((PAGE / "package.json").read_text())["dependencies"]["@huggingface/transformers"]
ORT = json.loads((PAGE / "package-lock.json").read_text())["packages"]["node_modules/onnxruntime-web"][
    "version"
]
LIBRARY = "@huggingface/transformers/dist/transformers.min.js"
MJS = "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs"
WASM = "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm"
TRANSFORMERS_JSON = "@huggingface/transformers/package.json"
ORT_JSON = "onnxruntime-web/package.json"
JINJA_JSON = "@huggingface/jinja/package.json"
JINJA_LICENSE = "@huggingface/jinja/LICENSE"


# --------------------------------------------------------------------------- inputs
def fake_npm(root: Path) -> Path:
    """A node_modules with tiny stand-ins for every file the export reads and copies, at the pinned
    versions: it passes every check (the page would not run, but no test here opens it)."""
    files: dict[str, Any] = {
        TRANSFORMERS_JSON: {
            "name": "@huggingface/transformers",
            "version": TRANSFORMERS,
            "dependencies": {"onnxruntime-web": ORT},
        },
        ORT_JSON: {"name": "onnxruntime-web", "version": ORT, "license": "MIT"},
        LIBRARY: "export const env = {};\n",
        MJS: "export default function () {}\n",
        WASM: b"\0asm\x01\0\0\0",
        # the other packages whose code the page ships: only their licences are read
        "@huggingface/transformers/LICENSE": "Apache License 2.0 (stand-in)\n",
        "@huggingface/tokenizers/package.json": {"name": "@huggingface/tokenizers", "license": "Apache-2.0"},
        "@huggingface/tokenizers/LICENSE": "Apache License 2.0 (stand-in)\n",
        JINJA_JSON: {"name": "@huggingface/jinja", "license": "MIT"},
        JINJA_LICENSE: "MIT License (stand-in)\n",
        "onnxruntime-web/node_modules/onnxruntime-common/package.json": {
            "name": "onnxruntime-common",
            "license": "MIT",
        },
    }
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


@pytest.fixture
def npm(tmp_path) -> Path:
    return fake_npm(tmp_path / "node_modules")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_config, tiny_corpus_and_tokenizer) -> dict[str, Path]:
    """A tiny fine-tuned classifier and pretraining checkpoint with the 200-piece tokenizer (read only:
    each test copies what it changes)."""
    from albert_lm.model.heads import AlbertForPreTraining, AlbertForSequenceClassification

    root = tmp_path_factory.mktemp("hostile-web")
    spiece = tiny_corpus_and_tokenizer[1] / "spiece.model"
    for name, cls in (("classifier", AlbertForSequenceClassification), ("pretrained", AlbertForPreTraining)):
        torch.manual_seed(0)
        cls(tiny_config(vocab_size=200)).save_pretrained(root / name)
        shutil.copy(spiece, root / name / "spiece.model")
    write_json(
        root / "classifier" / "finetune_config.json", {"task": "classification", "labels": ["no", "yes"]}
    )
    return {"classifier": root / "classifier", "pretrained": root / "pretrained", "spiece": spiece}


def copy_of(folders: dict[str, Path], name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folders[name], tmp_path / name))


def edit_weights(folder: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    change(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def export(model: Path, out: Path, npm: Path | None, *extra: str) -> int:
    args = ["export", "--format", "web", "--model", str(model), "--output", str(out), *extra]
    return main([*args, *(["--npm-modules", str(npm)] if npm is not None else [])])


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def listing(folder: Path) -> dict[str, str]:
    """Every file under `folder` and its sha256: what a refusal must leave as it was."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------- the model folder
def test_a_tokenizer_larger_than_the_embedding_is_refused(folders, tiny_config, npm, tmp_path, capsys):
    """As predict and fill-mask refuse it (check_tokenizer_fits): 200 pieces beside 150 rows."""
    from albert_lm.model.heads import AlbertForPreTraining

    model = tmp_path / "model"
    AlbertForPreTraining(tiny_config(vocab_size=150)).save_pretrained(model)
    shutil.copy(folders["spiece"], model / "spiece.model")
    out = tmp_path / "web"
    assert export(model, out, npm) == 1
    line = one_error(capsys)
    assert "spiece.model" in line and "200 pieces" in line and "150 embedding rows" in line
    assert not out.exists()


def test_a_tokenizer_other_than_the_fine_tuned_one_is_refused(folders, npm, tmp_path, capsys):
    """As predict refuses it: the fingerprint fine-tuning recorded is not the folder's tokenizer's."""
    model = copy_of(folders, "classifier", tmp_path)
    saved = json.loads((model / "finetune_config.json").read_text())
    write_json(model / "finetune_config.json", {**saved, "tokenizer_fingerprint": "0" * 16})
    out = tmp_path / "web"
    for task in ("text-classification", "feature-extraction"):
        assert export(model, out, npm, "--task", task) == 1
        line = one_error(capsys)
        assert "spiece.model" in line and "fingerprint" in line and "0" * 16 in line
        assert not out.exists()


def test_labels_that_are_not_the_classifier_outputs_are_refused(folders, npm, tmp_path, capsys):
    """As predict refuses it (check_head_fits): three label names for a classifier of two outputs."""
    model = copy_of(folders, "classifier", tmp_path)
    write_json(model / "finetune_config.json", {"task": "classification", "labels": ["a", "b", "c"]})
    out = tmp_path / "web"
    assert export(model, out, npm) == 1
    line = one_error(capsys)
    assert "2 outputs" in line and "a, b, c" in line and str(model) in line
    assert not out.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
@pytest.mark.parametrize(
    "tensor, where",
    [
        ("albert.embeddings.word_embeddings.weight", (1, 3)),  # a row the export's check never reads
        ("albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight", (0, 0)),
        ("classifier.weight", (1, 5)),
    ],
    ids=["embedding-row", "layer", "classifier"],
)
def test_non_finite_weights_are_refused(folders, npm, tmp_path, capsys, value, tensor, where):
    """Refused by load_model, naming the file and the tensor: an Inf embedding row the check's random
    ids never reach exported with exit 0, a NaN ended in ONNX Runtime's quantizer."""
    model = copy_of(folders, "classifier", tmp_path)
    edit_weights(model, lambda w: w[tensor].__setitem__(where, value))
    out = tmp_path / "web"
    assert export(model, out, npm) == 1
    line = one_error(capsys)
    assert "model.safetensors" in line and tensor in line
    assert not out.exists()


@pytest.mark.parametrize("task", ["fill-mask", "feature-extraction"])
def test_every_task_loads_its_weights_through_load_model(folders, npm, tmp_path, capsys, task):
    """The masked-LM head and the encoder (web_heads) are checked as the classifier is: an infinite
    embedding row the export's check never reads is refused for each."""
    model = copy_of(folders, "pretrained", tmp_path)
    edit_weights(
        model, lambda w: w["albert.embeddings.word_embeddings.weight"].__setitem__((1, 0), float("inf"))
    )
    out = tmp_path / "web"
    assert export(model, out, npm, "--task", task) == 1
    line = one_error(capsys)
    assert "model.safetensors" in line and "albert.embeddings.word_embeddings.weight" in line
    assert not out.exists()


def test_weights_that_are_not_floating_point_are_refused(folders, npm, tmp_path, capsys):
    model = copy_of(folders, "classifier", tmp_path)
    edit_weights(model, lambda w: w.update({"classifier.weight": w["classifier.weight"].to(torch.int32)}))
    out = tmp_path / "web"
    assert export(model, out, npm) == 1
    line = one_error(capsys)
    assert "model.safetensors" in line and "classifier.weight" in line and "int32" in line
    assert not out.exists()


# --------------------------------------------------------------------------- the npm packages
def _set(name: str, content: Any) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content))

    return change


def _package(file: str, **fields: Any) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        values = json.loads((root / file).read_text())
        values.update(fields)
        (root / file).write_text(json.dumps(values))

    return change


def _remove(name: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        (root / name).unlink()

    return change


NPM_DAMAGE = {  # what is changed -> (the file the refusal names, words it says)
    "empty library": (_set(LIBRARY, ""), LIBRARY, "empty"),
    "empty loader": (_set(MJS, ""), MJS, "empty"),
    "empty runtime": (_set(WASM, b""), WASM, "empty"),
    "runtime not WebAssembly": (_set(WASM, b"<html>Not Found</html>"), WASM, "WebAssembly"),
    "library of zeros": (_set(LIBRARY, b"\0" * 4096), LIBRARY, "NUL"),
    "library not text": (_set(LIBRARY, b"\xff\xfe\x00binary"), LIBRARY, "UTF-8"),
    "version an object": (_package(TRANSFORMERS_JSON, version={"major": 4}), TRANSFORMERS_JSON, "version"),
    "version a number": (_package(ORT_JSON, version=1.31), ORT_JSON, "version"),
    "version empty": (_package(TRANSFORMERS_JSON, version=""), TRANSFORMERS_JSON, "version"),
    "version not semver": (_package(ORT_JSON, version="latest"), ORT_JSON, "version"),
    "package.json a list": (_set(TRANSFORMERS_JSON, [1, 2]), TRANSFORMERS_JSON, "JSON object"),
    "package.json a string": (_set(ORT_JSON, '"1.31.0"'), ORT_JSON, "JSON object"),
    "another package's package.json": (_package(ORT_JSON, name="left-pad"), ORT_JSON, "left-pad"),
    "another major version": (_package(TRANSFORMERS_JSON, version="3.7.0"), TRANSFORMERS_JSON, "3.7.0"),
    "a runtime transformers.js does not run": (_package(ORT_JSON, version="1.18.0"), ORT_JSON, ORT),
    "a shipped package without a licence": (_remove(JINJA_LICENSE), JINJA_JSON, "no licence file"),
    "a shipped package not installed": (_remove(JINJA_JSON), JINJA_JSON, "installed"),
    "a licence not the one written": (_package(ORT_JSON, license="Apache-2.0"), ORT_JSON, "Apache-2.0"),
}


@pytest.mark.parametrize("damage", list(NPM_DAMAGE))
def test_npm_files_the_page_cannot_use_are_refused(folders, npm, tmp_path, capsys, damage):
    """Each file copied (or read into export.json or lib/'s licences) is checked before the export, the
    refusal naming it; an empty transformers.min.js was copied into a page that cannot load, a version
    that is an object written into export.json, a page shipped without a package's licence."""
    change, named, words = NPM_DAMAGE[damage]
    change(npm)
    out = tmp_path / "web"
    assert export(folders["pretrained"], out, npm) == 1
    line = one_error(capsys)
    assert str(npm / named) in line and words in line and "make web" in line
    assert not out.exists()


def test_the_installed_packages_pass_the_checks():
    """`make web`'s install is what the checks expect (skips where it has not run)."""
    from albert_lm.deploy.web_files import find_modules

    if not (MODULES / TRANSFORMERS_JSON).is_file():
        web_missing(f"no transformers.js under {MODULES}: run `make web`")
    modules = find_modules(MODULES)
    assert (modules.transformers_version, modules.ort_version) == (TRANSFORMERS, ORT)


# --------------------------------------------------------------------------- the output
@pytest.mark.parametrize("overwrite", [False, True], ids=["", "overwrite"])
@pytest.mark.parametrize("place", ["is", "inside", "holds"])
@pytest.mark.parametrize("given", ["option", "environment"])
def test_an_output_at_the_npm_folder_is_refused(
    folders, tmp_path, capsys, monkeypatch, overwrite, place, given
):
    """`--npm-modules npm --output npm --overwrite` replaced the user's node_modules with a web page: an
    output that is, lies inside or holds the npm folder is refused, whatever --overwrite says."""
    npm = fake_npm(tmp_path / "site" / "node_modules")
    (npm / "user-notes.txt").write_text("mine\n")
    before = listing(tmp_path / "site")
    out = {"is": npm, "inside": npm / "web", "holds": tmp_path / "site"}[place]
    if given == "environment":
        monkeypatch.setenv("ALBERT_WEB_MODULES", str(npm))
    extra = ["--overwrite"] if overwrite else []
    assert export(folders["pretrained"], out, npm if given == "option" else None, *extra) == 1
    line = one_error(capsys)
    assert ("--npm-modules" if given == "option" else "$ALBERT_WEB_MODULES") in line and str(npm) in line
    assert listing(tmp_path / "site") == before and not (npm / "web").exists()


@pytest.mark.parametrize("place", ["is", "inside", "holds"])
def test_an_output_at_the_page_source_is_refused(folders, npm, tmp_path, capsys, monkeypatch, place):
    """The page's own files (albert_lm/deploy/web/, here a copy) are an input of every web export."""
    import albert_lm.deploy.web as web
    import albert_lm.deploy.web_files as web_files

    source = Path(shutil.copytree(PAGE, tmp_path / "src" / "web"))
    for module in (web, web_files):
        monkeypatch.setattr(module, "PAGE_SOURCE", source, raising=False)
    before = listing(tmp_path / "src")
    out = {"is": source, "inside": source / "out", "holds": tmp_path / "src"}[place]
    assert export(folders["pretrained"], out, npm, "--overwrite") == 1
    line = one_error(capsys)
    assert "page source" in line and str(source) in line
    assert listing(tmp_path / "src") == before and not (source / "out").exists()
