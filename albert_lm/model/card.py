"""Model cards: the README.md albert-lm writes into every model folder it saves.

The layout is the Hugging Face hub's model card (huggingface.co/docs/hub/model-cards): a YAML front
matter the hub reads (`library_name`, `tags`, `pipeline_tag`, `base_model`), then what the model is,
how it was made, its scores and how to load it. The command that saves a model says how it was made and
what it scored; the rest is read from the folder's config.json, so every card describes its folder the
same way.

A card carries CARD_MARK. A README.md without it is the user's own and is never replaced: not in place,
and not when a new folder is swapped in over the one that holds it (`replaces`). A card holds no date or
time, so the same run writes the same bytes.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from albert_lm.data.normalization import read_rule
from albert_lm.data.tokenizer import CONFIG_FILE
from albert_lm.files import atomic_write
from albert_lm.model.config import AlbertConfig
from albert_lm.model.params import count_parameters

logger = logging.getLogger(__name__)

CARD_FILE = "README.md"
CARD_MARK = "<!-- albert-lm model card -->"

# The hub's pipeline for each head; multiple choice has no hub pipeline, so its card names none.
PIPELINE_TAGS = {
    "AlbertForPreTraining": "fill-mask",
    "AlbertForMaskedLM": "fill-mask",
    "AlbertModel": "feature-extraction",
    "AlbertForSequenceClassification": "text-classification",
    "AlbertForQuestionAnswering": "question-answering",
    "AlbertForTokenClassification": "token-classification",
    "AlbertForSentenceSimilarity": "sentence-similarity",
}
# What to do next with a model of each head, as an albert-lm command (LOCATION: the folder).
_NEXT_COMMAND = {
    "fill-mask": "albert finetune --task rte --model LOCATION --data glue/RTE --output runs/rte",
    "feature-extraction": "albert embed --model LOCATION --input texts.txt --output vectors.npy --normalize\n"
    "albert finetune --task rte --model LOCATION --data glue/RTE --output runs/rte",
}
_TEXTS = [
    "A man is playing a guitar.",
    "The weather is cold today.",
]  # an encoder card's snippets embed these
_PREDICT = "albert predict --model LOCATION --input rows.jsonl --output predictions.jsonl"
_SHARED = {"all": "whole layers", "attention": "attention blocks", "ffn": "feed-forward blocks"}


def is_model_card(path: str | os.PathLike) -> bool:
    """Whether `path` is a README.md albert-lm wrote (so it may be replaced)."""
    try:
        return CARD_MARK in Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def write_model_card(
    folder: str | os.PathLike,
    *,
    title: str,
    made_by: Mapping[str, Any],
    scores: Mapping[str, Any] | None = None,
    config: AlbertConfig | None = None,
    location: str | os.PathLike | None = None,
    replaces: str | os.PathLike | None = None,
    base_model: str | None = None,
) -> Path | None:
    """Write `folder`/README.md, atomically: the model `folder` holds (`config`, default its config.json),
    `made_by` (setting -> value, in order; None values left out) and `scores` (metric -> value).

    `location`: where the folder will be read (the load examples name it), when `folder` is a temporary
    one that is renamed later; default `folder`. `replaces`: the folder `folder` will be swapped in over;
    a README.md of the user's there is carried over instead of a card. `base_model`: the hub id the model
    was made from (front matter). Returns the card, or None where the user's README.md stays."""
    folder = Path(folder)
    card = folder / CARD_FILE
    theirs = Path(replaces) / CARD_FILE if replaces is not None else None
    if theirs is not None and theirs.is_file() and not is_model_card(theirs) and not card.exists():
        shutil.copy2(theirs, card)
    if card.exists() and not is_model_card(card):
        logger.info("%s is not an albert-lm model card: kept as it is, no card written", card)
        return None
    config = config if config is not None else AlbertConfig.from_pretrained(folder)
    # The tokenizer beside the weights: a WordPiece vocab.txt (a student of its teacher's vocabulary) or
    # a SentencePiece model (albert-lm's own and google-research's).
    wordpiece = (folder / "vocab.txt").is_file() and not (folder / "spiece.model").is_file()
    text = model_card(
        title, made_by, scores, config, str(location if location is not None else folder), base_model,
        pieces="WordPiece" if wordpiece else "SentencePiece", language=_language(folder),
    )  # fmt: skip
    return atomic_write(card, text)


def model_card(
    title: str,
    made_by: Mapping[str, Any],
    scores: Mapping[str, Any] | None,
    config: AlbertConfig,
    location: str,
    base_model: str | None = None,
    pieces: str = "SentencePiece",
    language: str | None = None,
) -> str:
    """The card's text (see `write_model_card`); `pieces`: the kind of its vocabulary; `language`: the
    code its tokenizer was trained for, where that was said."""
    architecture = _architecture(config)
    parts = [
        _front_matter(config, PIPELINE_TAGS.get(architecture), base_model, language),
        CARD_MARK,
        f"# {title}",
        _model_section(config, architecture, pieces, language),
        "## How it was made\n\n" + _table(("setting", "value"), made_by.items()),
        _scores_section(scores),
        _usage_section(config, architecture, location),
    ]
    return "\n\n".join(parts) + "\n"


def _architecture(config: AlbertConfig) -> str:
    names = config.extra.get("architectures") or ["AlbertModel"]
    return str(names[0])


def _language(folder: Path) -> str | None:
    """The language code the folder's tokenizer_config.json records (`albert tokenizer train --language`),
    or None: not said, no such file (a WordPiece student's), or one no tokenizer could load (the card is
    no place to refuse it)."""
    try:
        return read_rule(folder / CONFIG_FILE).get("language")
    except ValueError:  # an InputError too
        return None


def _front_matter(
    config: AlbertConfig, pipeline_tag: str | None, base_model: str | None, language: str | None
) -> str:
    # transformers reads only its own layout: a native-layout model (sharing attention or ffn) names no
    # library the hub would offer to load it with.
    lines = ["---"]
    if config.transformers_compatible:
        lines.append("library_name: transformers")
    if language is not None:
        lines += ["language:", f"- {language}"]
    lines += ["tags:", "- albert", "- albert-lm"]
    if pipeline_tag is not None:
        lines.append(f"pipeline_tag: {pipeline_tag}")
    if base_model is not None:
        lines.append(f"base_model: {base_model}")
    return "\n".join(lines + ["---"])


def _sharing(config: AlbertConfig) -> str:
    """The paper's cross-layer sharing, said in words (Section 3.1, Table 4)."""
    groups, layers = config.num_hidden_groups, config.num_hidden_layers
    if config.sharing == "none":
        return "none: every layer has its own weights (BERT)"
    if groups == 1:
        share = "one set shared by all"
    else:
        each = layers // groups if layers % groups == 0 else f"about {layers // groups}"
        share = f"{groups} groups, each shared by {each}"
    inner = f"; {config.inner_group_num} inner layers per group" if config.inner_group_num > 1 else ""
    return f"{config.sharing}: {_SHARED[config.sharing]}, {share} of the {layers} layers{inner}"


def _model_section(config: AlbertConfig, architecture: str, pieces: str, language: str | None) -> str:
    params = count_parameters(config)
    rows = [
        ("architecture", f"ALBERT, `{architecture}`"),
        ("parameters", f"{params:,} ({params / 1e6:.3g}M; the encoder with its pooler, as the paper counts, "
                       "without the task or pretraining heads)"),
        ("layers", config.num_hidden_layers),
        ("hidden size", config.hidden_size),
        ("embedding size", config.embedding_size),
        ("attention heads", config.num_attention_heads),
        ("feed-forward size", config.intermediate_size),
        ("cross-layer sharing", _sharing(config)),
        ("language", language and f"{language} (the tokenizer's `--language`)"),
        ("vocabulary", f"{config.vocab_size:,} {pieces} pieces"),
        ("positions", config.max_position_embeddings),
        ("activation", config.hidden_act),
    ]  # fmt: skip
    if config.id2label:
        rows.append(("labels", ", ".join(config.id2label[i] for i in sorted(config.id2label))))
    return "## Model\n\n" + _table(("", ""), rows)


def _scores_section(scores: Mapping[str, Any] | None) -> str:
    if not scores:
        return "## Scores\n\nNone recorded for this model."
    return "## Scores\n\n" + _table(("metric", "value"), scores.items())


def _usage_section(config: AlbertConfig, architecture: str, location: str) -> str:
    pipeline = PIPELINE_TAGS.get(architecture)
    command = _NEXT_COMMAND.get(pipeline or "", _PREDICT).replace("LOCATION", shlex.quote(location))
    quoted = json.dumps(location)  # a Python string literal, in the double quotes the snippets use
    python = [f"from albert_lm import AlbertTokenizer, {architecture}", "",
              f"model = {architecture}.from_pretrained({quoted})",
              f"tokenizer = AlbertTokenizer.from_pretrained({quoted})"]  # fmt: skip
    if pipeline == "feature-extraction":  # sentence vectors as `albert embed` gives them
        python[0] += ", Predictor"
        python += ["", f"texts = {json.dumps(_TEXTS)}",
                   f"vectors = Predictor({quoted}).embed(texts, normalize=True)  # ({len(_TEXTS)}, "
                   f"{config.hidden_size}): the mean of the last layer over each text's tokens"]  # fmt: skip
    lines = ["## How to use", "", "With albert-lm:", "", "```bash", command, "```", "", "```python", *python,
             "```", ""]  # fmt: skip
    if not config.transformers_compatible:
        lines.append(
            f"transformers cannot load it: its cross-layer sharing ({config.sharing}) is not "
            "transformers' ALBERT, so it is saved in albert-lm's own layout."
        )
        return "\n".join(lines)
    lines += [
        "With transformers (albert-lm's tokenizer follows google-research's tokenization, which "
        "transformers' fast ALBERT tokenizer does not on some text):",
        "",
        "```python",
        f"from transformers import {architecture}",
        "",
        f"model = {architecture}.from_pretrained({quoted})",
        "```",
    ]
    if pipeline == "feature-extraction":  # albert embed's vectors: last_hidden_state averaged over the mask
        lines[-4:-1] = [
            "import torch",
            "from transformers import AlbertModel, AutoTokenizer",
            "",
            f"model = AlbertModel.from_pretrained({quoted})",
            f"tokenizer = AutoTokenizer.from_pretrained({quoted})",
            f'batch = tokenizer({json.dumps(_TEXTS)}, padding=True, return_tensors="pt")',
            "with torch.no_grad():",
            "    states = model(**batch).last_hidden_state",
            'mask = batch["attention_mask"].unsqueeze(-1)',
            "vectors = (states * mask).sum(1) / mask.sum(1)  # albert embed's sentence vectors (before --normalize)",
        ]
    if architecture == "AlbertForSentenceSimilarity":  # albert-lm's own head: transformers reads the encoder
        lines[-4:-1] = [
            "from transformers import AlbertModel",
            "",
            f"model = AlbertModel.from_pretrained({quoted})",
            "# a pair's score: the cosine of the two texts' mean-pooled last_hidden_state, encoded one by one,",
            "# times the `similarity.weight` in model.safetensors, plus its `similarity.bias`",
        ]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(head: tuple[str, str], rows: Any) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in rows if v is not None]
    return "\n".join(lines)
