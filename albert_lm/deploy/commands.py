"""`albert predict`, `fill-mask`, `embed` and `export`: the deploy stage's commands (registered by
`albert_lm.cli`).

Like every command, each imports its module only when it runs: building the parser stays free of torch.
"""

from __future__ import annotations

import argparse
import sys

from albert_lm.deploy.export_config import ExportConfig
from albert_lm.deploy.predict_config import COLUMN_FIELDS, PredictConfig
from albert_lm.deploy.texts_config import EmbedConfig, FillMaskConfig, TextsConfig
from albert_lm.runtime.exits import ExitSettings
from albert_lm.settings import VOCABULARY, add_config_option, add_options, field_docs, load_settings


def predict_options(p: argparse.ArgumentParser) -> None:
    add_config_option(p, "prediction")
    add_options(
        p,
        PredictConfig,
        skip=("text",),
        required=("model",),
        suppress=True,
        metavars={
            "model": "DIR",
            "input": "FILE",
            "output": "FILE",
            "keep_columns": "COL,...",
            **{f"{name}_column": "NAME" for name in COLUMN_FIELDS},
        },
        helps=field_docs(ExitSettings),
        groups={
            "model, input and output": ("model", "input", "output", "format", "keep_columns", "skip_bad"),
            "input columns": tuple(f"{name}_column" for name in COLUMN_FIELDS),
            "early exit (a model fine-tuned with --exit-heads)": ("patience", "exit_confidence", "depth"),
            "machine": ("batch_size", "max_seq_length", "precision", "device", "int8"),
        },
    )
    _text_option(_group(p, "model, input and output"), field_docs(PredictConfig)["text"])


def run_predict(args: argparse.Namespace) -> int:
    """run a fine-tuned model on new text: one JSON line per input row, in input order

    Classification: label and probabilities (GLUE models by the labels' names, e.g. negative /
    positive; regression: score); token classification: tags per word; question answering: the answer
    and its character offsets in the context; multiple choice: the answer letter and probabilities.
    Input: plain lines (blank ones skipped), CSV/TSV with a header, or JSON Lines; - is stdin / stdout;
    or single texts given with --text, once or more.
    --keep-columns copies input columns (an id) into each line. A bad row stops the run naming its line
    and column, or with --skip-bad is reported and left out."""
    from albert_lm.deploy.predict import predict

    cfg = load_settings(PredictConfig, args, ("model",))
    summary = predict(cfg)
    print(
        f"{summary.task}: {summary.predicted} of {summary.rows} rows predicted{_skipped(summary.skipped)}"
        f"{_blank(summary.blank_lines)}{_depth(summary.mean_depth, summary.layers)}{_where(cfg.output)}",
        file=sys.stderr,
    )
    return 0


def _depth(mean: float | None, layers: int | None) -> str:
    """Early exit's saving in the summary line: the layers a row used on average, of the model's."""
    return "" if mean is None else f"; early exit: {mean:.2f} of {layers} layers per row on average"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'s' if n != 1 else ''}"


def _skipped(messages: list[str]) -> str:
    return f", {_count(len(messages), 'bad row')} left out" if messages else ""


def _blank(count: int) -> str:
    return f", {_count(count, 'blank line')} skipped" if count else ""


def _where(output: str) -> str:
    return "" if output == "-" else f" -> {output}"


def _texts_options(p: argparse.ArgumentParser, cls: type, own: dict[str, str] | None = None) -> None:
    # field_docs reads a class's own source: the shared fields' help comes from TextsConfig (or `own`),
    # except for the shared vocabulary's words (device, precision), which take theirs from settings.VOCABULARY.
    shared = {k: v for k, v in field_docs(TextsConfig).items() if k not in VOCABULARY} | (own or {})
    add_config_option(p, "this command's")
    add_options(
        p,
        cls,
        skip=("text",),
        required=("model",),
        helps=shared,
        suppress=True,
        metavars={
            "model": "DIR",
            "input": "FILE",
            "output": "FILE",
            "text_column": "NAME",
            "keep_columns": "COL,...",
        },
    )
    _text_option(p, field_docs(TextsConfig)["text"])


def _group(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The headed section `title` of p's --help."""
    return next(g for g in p._action_groups if g.title == title)


def _text_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, help: str) -> None:
    """--text TEXT, once or more: texts typed on the command line instead of an --input file."""
    p.add_argument("--text", action="append", metavar="TEXT", default=argparse.SUPPRESS, help=help)


def fill_mask_options(p: argparse.ArgumentParser) -> None:
    _texts_options(p, FillMaskConfig)


def run_fill_mask(args: argparse.Namespace) -> int:
    """the top candidates for each [MASK] of a text, from a model with an MLM head: one JSON line per text

    The model is a pretraining checkpoint (albert pretrain, albert convert) or another folder with a
    masked-LM head. Texts with one or more [MASK] come from --input (plain lines, CSV/TSV, JSON Lines'
    text field; - is stdin) or from --text, given once or more. Each line holds, for each [MASK], the
    --top-k most probable tokens with their probabilities (never a special token such as [SEP]), and
    the text filled with each mask's first candidate that starts a word."""
    from albert_lm.deploy.fill_mask import fill_mask

    cfg = load_settings(FillMaskConfig, args, ("model",))
    summary = fill_mask(cfg)
    print(
        f"fill-mask: {_count(summary.masks, 'mask')} in {_count(summary.texts, 'text')} filled"
        f"{_skipped(summary.skipped)}{_blank(summary.blank_lines)}"
        f"{_where(cfg.output)}",
        file=sys.stderr,
    )
    return 0


def embed_options(p: argparse.ArgumentParser) -> None:
    output = "output JSON Lines file (.jsonl), .npy file for a matrix, or - for stdout (default -)"
    _texts_options(p, EmbedConfig, {"output": output})


def run_embed(args: argparse.Namespace) -> int:
    """sentence embeddings from any ALBERT folder: one JSON line per text, or a .npy matrix

    Mean of the last layer over the text's tokens (default), the last layer at [CLS], or the pooler's
    output; --normalize scales each to unit length. Texts come from --input (plain lines, CSV/TSV, JSON
    Lines; - is stdin) or --text, run in batches of similar length, and are written in input order:
    {"line": N, "embedding": [...]} per text, or, with an --output ending in .npy, a float32 matrix."""
    from albert_lm.deploy.embed import embed

    cfg = load_settings(EmbedConfig, args, ("model",))
    summary = embed(cfg)
    print(
        f"embed: {_count(summary.texts, 'text')}, {summary.dimensions} dimensions"
        f"{_skipped(summary.skipped)}{_blank(summary.blank_lines)}"
        f"{_where(cfg.output)}",
        file=sys.stderr,
    )
    return 0


def export_options(p: argparse.ArgumentParser) -> None:
    add_config_option(p, "export")
    add_options(
        p,
        ExportConfig,
        required=("model", "output"),
        suppress=True,
        metavars={"model": "DIR", "output": "DIR", "npm_modules": "DIR"},
    )


def run_export(args: argparse.Namespace) -> int:
    """export a model to ONNX (dynamic batch and sequence axes), checked in ONNX Runtime, or as a web page

    Writes model.onnx (and model.int8.onnx with --int8), the tokenizer and the config beside it, and
    export.json with the check's figures. ONNX Runtime runs the graph on two input shapes before
    anything is kept: fp32 outputs must be within --tolerance of PyTorch's, int8 at cosine >= 0.9.
    Needs the optional extra: pip install -e '.[export]' in the albert-lm clone.

    --format web writes a folder to serve as it is (python3 -m http.server --bind 127.0.0.1 -d DIR 8000): a page that
    classifies, fills masks or embeds in the browser, offline, with transformers.js and ONNX Runtime
    Web copied from --npm-modules (make web installs them); fp32 and int8 models, int8 loaded first."""
    cfg = load_settings(ExportConfig, args, ("model", "output"))
    if cfg.format == "web":
        return _export_web(cfg)
    from albert_lm.deploy.export import export_onnx

    r = export_onnx(
        cfg.model,
        cfg.output,
        opset=cfg.opset,
        int8=cfg.int8,
        tolerance=cfg.tolerance,
        overwrite=cfg.overwrite,
    )
    int8 = f"; int8 cosine {r.int8_cosine:.5f}" if r.int8_cosine is not None else ""
    exits = "; early-exit graphs in exit/ (export.json says how to run them)" if r.early_exit else ""
    sizes = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in r.sizes.items())
    print(
        f"{r.folder}: outputs {', '.join(r.outputs)}; max |ORT - PyTorch| {r.max_abs_diff:.2e}{int8}{exits}; "
        + sizes
    )
    return 0


def _export_web(cfg: ExportConfig) -> int:
    from albert_lm.deploy.web import export_web

    r = export_web(
        cfg.model,
        cfg.output,
        task=cfg.task,
        npm_modules=cfg.npm_modules,
        opset=cfg.opset,
        tolerance=cfg.tolerance,
        overwrite=cfg.overwrite,
    )
    mib = {k: f"{v / 2**20:.1f} MiB" for k, v in r.sizes.items()}
    print(
        f"{r.folder}: {r.task} page; max |ORT - PyTorch| {r.max_abs_diff:.2e}, int8 cosine "
        f"{r.int8_cosine:.5f}; int8 model {mib['int8']}, fp32 {mib['fp32']}, all files {mib['all']}; "
        f"serve it: python3 -m http.server --bind 127.0.0.1 -d {r.folder} 8000, then open http://127.0.0.1:8000/"
        + ("; the model's exit heads are not in the page: it runs every layer" if r.exit_heads_left else "")
    )
    return 0
