"""`albert export --format web`: a model folder as a web page that runs it in the browser, offline.

The output folder is what transformers.js reads for the model's task, plus the page and its JavaScript:

    index.html app.js style.css      the page: a text box (two for pairs), the prediction, timings
    albert-web.json                  what the page needs to know: task, labels, special ids, files
    config.json                      model_type albert; architectures AlbertForSequenceClassification
                                     (with id2label / label2id), AlbertForMaskedLM or AlbertModel
    tokenizer.json, tokenizer_config.json
    onnx/model.onnx                  fp32, the weights inside (one file)
    onnx/model_quantized.onnx        int8 (transformers.js's dtype "q8"), what the page loads by default
    lib/                             transformers.js and ONNX Runtime Web (albert_lm.deploy.web_files),
                                     LICENSE.<package>.txt for each npm package in them
    export.json                      the checks' figures and the versions

Tasks (`task`): "text-classification" (a fine-tuned classifier: the labels with their probabilities;
regression: the score; a second text box for a model of pairs, `rows.pair_column`), "fill-mask" (a
pretraining checkpoint's MLM head: the top 5 for each [MASK]), "feature-extraction" (the encoder: the
mean of the last layer over the text's tokens, as `albert embed`, its norm, and the cosine similarity of
two texts). By default a fine-tuned classifier is classified, a distilled student (`albert distill
general`) is embedded, and a pretraining checkpoint with an MLM head fills masks.

The graphs are `export_onnx`'s (captured, checked in ONNX Runtime against PyTorch, int8 by ONNX Runtime's
transformer optimizer and dynamic quantization); ONNX Runtime Web runs the int8 graph's fused ops
(com.microsoft SkipLayerNormalization and FastGelu) too. The folder is filled under a temporary name
and renamed. Serve it with any static server (`python3 -m http.server --bind 127.0.0.1 -d FOLDER 8000`,
then http://127.0.0.1:8000/) and open the page; opened as a file, the page says so.

Every input is checked before anything is written, as the commands the page mirrors check it: the
tokenizer against the model (`check_tokenizer_fits`, predict's, fill-mask's and embed's), a classifier's
labels against its outputs (`check_head_fits`), the weights (read only through `load_model`, which
refuses non-finite and non-floating-point tensors), the npm packages and their licences
(`web_files.find_modules`); and the output is kept apart from every folder the export reads (the model,
the npm packages, the page's source), with or without --overwrite.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.export import exclusive_output, export_onnx
from albert_lm.deploy.loading import DEFAULT_LENGTH, weight_names
from albert_lm.deploy.predict import NotFineTuned, model_task, output_labels
from albert_lm.deploy.rows import pair_column
from albert_lm.deploy.web_files import PAGE_SOURCE, Modules, copy_javascript, copy_page, find_modules
from albert_lm.deploy.web_tokenizer import write_web_tokenizer
from albert_lm.files import atomic_folder, check_output_apart, read_json_object, write_json
from albert_lm.hub import resolve_model
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import EXIT_FILE
from albert_lm.runtime.finetuned import read_saved_settings
from albert_lm.runtime.fits import check_head_fits

logger = logging.getLogger(__name__)

TASKS = ("text-classification", "fill-mask", "feature-extraction")
ARCHITECTURES = {
    "text-classification": "AlbertForSequenceClassification",
    "fill-mask": "AlbertForMaskedLM",
    "feature-extraction": "AlbertModel",
}
HEADS = {"text-classification": "auto", "fill-mask": "masked_lm", "feature-extraction": "encoder"}
DISTILLED = "distill_results.json"  # what `albert distill general` leaves in a student's folder
# The page's wording and example texts, by task (`_kind`: a classifier of pairs, a regression).
ABOUT = {
    "text-classification": "classifies the text",
    "text-classification pair": "classifies the pair of texts",
    "regression": "scores the text",
    "regression pair": "scores the pair of texts",
    "fill-mask": "guesses each [MASK]",
    "feature-extraction": "turns each text into a vector (the mean of its last layer)",
}
EXAMPLES = {
    "text-classification": ("A gripping, funny and moving film.", ""),
    "text-classification pair": ("A man is playing a guitar on stage.", "A man is performing music."),
    "regression": ("A gripping, funny and moving film.", ""),
    "regression pair": ("A man is playing a guitar.", "A man is playing an instrument."),
    "fill-mask": ("She opened the [MASK] and walked in.", ""),
    "feature-extraction": ("A man is playing a guitar.", "Someone plays an instrument."),
}


@dataclass
class WebExportResult:
    folder: Path
    task: str
    max_abs_diff: float  # fp32 graph against PyTorch (ONNX Runtime)
    int8_cosine: float | None  # int8 graph against PyTorch fp32
    sizes: dict[str, int]  # bytes: fp32 and int8 model files, the JavaScript, the whole folder
    exit_heads_left: bool = False  # the model has exit heads; the page runs the full depth without them


def choose_task(model_dir: Path, task: str | None) -> str:
    """The task the page runs: `task` if given (checked against the folder), else the folder's own."""
    if task is not None and task not in TASKS:
        raise ValueError(f"--task {task}: expected one of {', '.join(TASKS)}")
    try:
        head = model_task(model_dir)[0].head
    except NotFineTuned:
        head = None
    if task in (None, "text-classification") and head is not None and head != "sequence_classification":
        raise ValueError(
            f"--model {model_dir}: a {head.replace('_', ' ')} model; the web page classifies texts, fills "
            "masks and embeds: give --task feature-extraction to embed with its encoder"
        )
    names = weight_names(model_dir)
    has_mlm = names is None or any(n.startswith("predictions.") for n in names)
    if task == "text-classification" and head is None:
        raise ValueError(
            f"--task text-classification: {model_dir} is not a fine-tuned classifier (no "
            f"finetune_config.json): give --task {'fill-mask or ' if has_mlm else ''}feature-extraction"
        )
    if task == "fill-mask" and (head is not None or not has_mlm):
        raise ValueError(
            f"--task fill-mask: {model_dir} has no masked-LM head: fill-mask needs a pretraining "
            "checkpoint (albert pretrain, albert convert); give --task feature-extraction"
        )
    if task is not None:
        return task
    if head is not None:
        return "text-classification"
    return "feature-extraction" if (model_dir / DISTILLED).is_file() or not has_mlm else "fill-mask"


def export_web(
    model_dir: str | Path,
    output: str | Path,
    *,
    task: str | None = None,
    npm_modules: str | os.PathLike | None = None,
    opset: int = 18,
    tolerance: float = 1e-4,
    overwrite: bool = False,
) -> WebExportResult:
    """Export, check, and write the web folder (see the module docstring)."""
    modules = find_modules(npm_modules)  # before the minutes of the export: a missing install fails now
    model_dir, out = resolve_model(model_dir), Path(output)
    # every folder the export reads, kept apart from the output (with --overwrite too): before the lock
    # below makes the output folder, and before the new folder replaces the old one
    inputs = {"--model": model_dir, modules.given_as: modules.folder, "page source": PAGE_SOURCE}
    check_output_apart(out, inputs)
    with exclusive_output(model_dir, out, overwrite):
        chosen = choose_task(model_dir, task)
        tokenizer = checked_tokenizer(model_dir, chosen)
        with atomic_folder(out) as tmp:
            result = _fill(model_dir, tmp, chosen, tokenizer, modules, opset, tolerance)
    logger.info("web export %s -> %s (%s)", model_dir, out, chosen)
    left = (model_dir / EXIT_FILE).is_file()
    return WebExportResult(out, chosen, result.max_abs_diff, result.int8_cosine, folder_sizes(out), left)


def checked_tokenizer(model_dir: Path, task: str) -> AlbertTokenizer:
    """The folder's tokenizer, and a classifier's labels checked against its outputs as `albert predict`
    checks them. The tokenizer against the model (`check_tokenizer_fits`) is `export_onnx`'s first check,
    before any graph is made."""
    config = AlbertConfig.from_pretrained(model_dir)
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    if task == "text-classification":
        check_head_fits(model_task(model_dir)[0], config, model_dir)
    return tokenizer


def _fill(
    model_dir: Path,
    tmp: Path,
    task: str,
    tokenizer: AlbertTokenizer,
    modules: Modules,
    opset: int,
    tolerance: float,
) -> Any:
    """Everything into the temporary folder `tmp`; `export_onnx`'s result."""
    work = tmp / ".onnx"
    # the page runs the whole graph: no early-exit graphs (ONNX Runtime's loop, `albert export`'s)
    result = export_onnx(
        model_dir,
        work,
        opset=opset,
        int8=True,
        tolerance=tolerance,
        overwrite=False,
        head=HEADS[task],
        exits=False,
    )
    (tmp / "onnx").mkdir()
    _inline_weights(work / "model.onnx", tmp / "onnx" / "model.onnx")
    os.replace(work / "model.int8.onnx", tmp / "onnx" / "model_quantized.onnx")
    figures = json.loads((work / "export.json").read_text(encoding="utf-8"))
    figures.pop("bytes")  # of the files in `work`, named otherwise in the page's folder
    shutil.rmtree(work)
    config = AlbertConfig.from_pretrained(model_dir)
    manifest = _manifest(model_dir, task, config, tokenizer)
    write_json(tmp / "config.json", _web_config(model_dir, task, manifest))
    write_web_tokenizer(tokenizer, tmp)
    paths = copy_javascript(modules, tmp)
    manifest.update(
        library=paths["library"],
        wasm={"mjs": paths["mjs"], "wasm": paths["wasm"]},
        files={"q8": "onnx/model_quantized.onnx", "fp32": "onnx/model.onnx"},
        default_dtype="q8",
    )
    write_json(tmp / "albert-web.json", manifest)
    copy_page(tmp)
    figures.update(
        format="web",
        task=task,
        transformers_js=modules.transformers_version,
        onnxruntime_web=modules.ort_version,
    )
    write_json(tmp / "export.json", figures)
    return result


def _inline_weights(source: Path, target: Path) -> None:
    """The ONNX file with its weights inside (the exporter writes them beside it, as model.onnx.data;
    transformers.js reads one file)."""
    import onnx

    model = onnx.load(str(source), load_external_data=True)
    onnx.save_model(model, str(target), save_as_external_data=False)


def _manifest(model_dir: Path, task: str, config: AlbertConfig, tokenizer: AlbertTokenizer) -> dict[str, Any]:
    """albert-web.json without the file names: what the page shows and how it builds the inputs."""
    saved = read_saved_settings(model_dir)
    length = min(int(saved.get("max_seq_length") or DEFAULT_LENGTH), config.max_position_embeddings)
    head = _classifier(model_dir, config) if task == "text-classification" else {}
    kind = _kind(task, head)
    manifest: dict[str, Any] = {
        "task": task,
        "title": f"{model_name(model_dir)}: {kind.split()[0].replace('-', ' ')}",  # a regression's own
        "about": _about(kind, config),
        "max_length": length,
        "special_ids": {
            "cls": tokenizer.cls_token_id,
            "sep": tokenizer.sep_token_id,
            "mask": tokenizer.mask_token_id,
            "pad": tokenizer.pad_token_id,
        },
        "example": EXAMPLES[kind][0],
        "example2": EXAMPLES[kind][1],
        **head,
    }
    if task == "fill-mask":
        manifest["top_k"] = 5
    if task == "feature-extraction":
        manifest["pooling"] = "mean"
    return manifest


def _classifier(model_dir: Path, config: AlbertConfig) -> dict[str, Any]:
    """A classifier's fields of albert-web.json: its labels, problem type, and whether it reads pairs of
    texts (a second text box): a GLUE pair task, or a model fine-tuned on your own pairs (the second
    text column its finetune_config.json records, `pair_column`)."""
    found, _ = model_task(model_dir)
    return {
        "labels": list(output_labels(found, config)),
        "problem_type": found.problem_type or "single_label_classification",
        "pair": pair_column(found) is not None,
    }


def _kind(task: str, head: dict[str, Any]) -> str:
    """The key of the page's wording and examples: the task, a classifier of pairs, or a regression."""
    if task != "text-classification":
        return task
    regression = head["problem_type"] == "regression" or not head["labels"]
    return ("regression" if regression else task) + (" pair" if head["pair"] else "")


def model_name(model_dir: Path) -> str:
    """What the page calls the model: the folder's name, its run's for a run's best/ folder, or a hub
    model's id (its snapshot folder is named by the commit)."""
    if model_dir.parent.name == "snapshots" and model_dir.parent.parent.name.startswith("models--"):
        return model_dir.parent.parent.name.removeprefix("models--").replace("--", "/")
    return model_dir.resolve().parent.name if model_dir.name == "best" else model_dir.name


def _about(kind: str, config: AlbertConfig) -> str:
    size = f"ALBERT, {config.num_hidden_layers} layers of width {config.hidden_size}"
    return f"{size}, {ABOUT[kind]}, in this browser tab."


def _web_config(model_dir: Path, task: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """config.json as transformers.js reads it: the model's own, with the task's architecture (and a
    classifier's label names both ways)."""
    config = read_json_object(model_dir / "config.json", "a model configuration")
    config.update(model_type="albert", architectures=[ARCHITECTURES[task]])
    if task == "text-classification" and manifest["labels"]:
        config["id2label"] = {str(i): name for i, name in enumerate(manifest["labels"])}
        config["label2id"] = {name: i for i, name in enumerate(manifest["labels"])}
    return config


def folder_sizes(folder: Path) -> dict[str, int]:
    """Bytes of a web export: the fp32 and int8 models, the JavaScript (lib/) and every file."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    lib = folder / "lib"
    return {
        "fp32": (folder / "onnx" / "model.onnx").stat().st_size,
        "int8": (folder / "onnx" / "model_quantized.onnx").stat().st_size,
        "javascript": sum(p.stat().st_size for p in files if lib in p.parents),
        "all": sum(p.stat().st_size for p in files),
    }


__all__ = [
    "TASKS",
    "WebExportResult",
    "checked_tokenizer",
    "choose_task",
    "export_web",
    "folder_sizes",
    "model_name",
]
