"""The one place where transformers' ALBERT parameter names meet ours, and model save/load.

Our names are short and say what a tensor is (`encoder.attention.0.qkv`); transformers' follow the
TF1 release (`encoder.albert_layer_groups.0.albert_layers.0.attention.query`). The map below is
the whole difference, plus two structural facts:
- Q, K and V are one (3H x H) matrix here (one matmul) and three (H x H) matrices there;
- block b of ours is inner layer b % inner_group_num of group b // inner_group_num there.

Folder layouts written by `save_model`:
- "transformers": config.json + model.safetensors with transformers' names. Loads in
  `transformers.AlbertModel.from_pretrained` and friends. Possible for sharing "all" and "none".
- "native": config.json (model_type "albert-lm") + albert_lm.safetensors with our own names.
  For sharing "attention" / "ffn", which transformers' ALBERT cannot express; transformers refuses the
  folder (unknown model type, no model.safetensors) instead of silently loading random weights.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any, cast

import torch

from albert_lm.hub import resolve_model
from albert_lm.model.config import AlbertConfig
from albert_lm.model.weights import (
    NATIVE,
    PYTORCH_BIN,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    read_weights,
    write_weights,
)

logger = logging.getLogger(__name__)

# ours -> transformers, for everything outside the layer blocks (prefix renames).
_RENAMES = {
    "albert.embeddings.norm.": "albert.embeddings.LayerNorm.",
    "albert.encoder.embedding_projection.": "albert.encoder.embedding_hidden_mapping_in.",
    "predictions.norm.": "predictions.LayerNorm.",
}
# ours (inside block b) -> transformers (inside albert_layer_groups.g.albert_layers.j).
_BLOCK_RENAMES = {
    "attention.out.": "attention.dense.",
    "attention.norm.": "attention.LayerNorm.",
    "ffn.up.": "ffn.",
    "ffn.down.": "ffn_output.",
    "ffn.norm.": "full_layer_layer_norm.",
}
# transformers -> ours, longest prefix first: a shorter prefix never takes a longer one's names.
_RENAMES_BACK = {theirs: ours for ours, theirs in _RENAMES.items()}
_BLOCK_RENAMES_BACK = {
    theirs: ours for ours, theirs in sorted(_BLOCK_RENAMES.items(), key=lambda kv: -len(kv[1]))
}
_QKV = ("query", "key", "value")
# transformers keeps these beside the weights; they carry no information for us.
_HF_IGNORED = re.compile(
    r"^albert\.embeddings\.(position_ids|token_type_ids)$|^predictions\.decoder\.(weight|bias)$"
)
_TIED = "predictions.decoder.weight"  # our tied decoder: the embedding table under a second name
_HEAD_PREFIXES = (
    "predictions.",
    "sop_classifier.",
    "classifier.",
    "qa_outputs.",
    "similarity.",
    "albert.pooler.",
)

_OUR_BLOCK = re.compile(r"^albert\.encoder\.(attention|ffn)\.(\d+)\.(.+)$")
_HF_BLOCK = re.compile(r"^albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.(.+)$")


_PROJECTION = "albert.encoder.embedding_hidden_mapping_in."


def _renamed(name: str, renames: dict[str, str]) -> str | None:
    """`name` with the first of `renames`' prefixes it starts with replaced; None if it starts with none."""
    for old, new in renames.items():
        if name.startswith(old):
            return new + name[len(old) :]
    return None


def to_transformers(state: dict[str, torch.Tensor], config: AlbertConfig) -> dict[str, torch.Tensor]:
    """Our full state dict (keys under "albert.") -> transformers' names."""
    if not config.transformers_compatible:
        raise ValueError(
            f"sharing={config.sharing!r} cannot be expressed in transformers' ALBERT, which shares whole "
            "layers only; save it in albert-lm's native layout (save_pretrained(path, layout='native'))"
        )
    k = config.inner_group_num
    out: dict[str, torch.Tensor] = {}
    if not config.has_projection:
        # We have no projection when E == H; transformers always has one: an identity is exact.
        ref = state["albert.embeddings.word_embeddings.weight"]
        out[_PROJECTION + "weight"] = torch.eye(config.hidden_size, dtype=ref.dtype)
        out[_PROJECTION + "bias"] = torch.zeros(config.hidden_size, dtype=ref.dtype)
    for name, t in state.items():
        if name == _TIED:
            continue
        m = _OUR_BLOCK.match(name)
        if m is None:
            out[_renamed(name, _RENAMES) or name] = t
            continue
        part, b, rest = m.group(1), int(m.group(2)), m.group(3)
        prefix = f"albert.encoder.albert_layer_groups.{b // k}.albert_layers.{b % k}."
        if part == "attention" and rest.startswith("qkv."):
            for piece, tensor in zip(_QKV, t.chunk(3, dim=0), strict=True):
                out[f"{prefix}attention.{piece}.{rest[4:]}"] = tensor
            continue
        local = f"{part}.{rest}"
        out[prefix + (_renamed(local, _BLOCK_RENAMES) or local)] = t
    return out


def from_transformers(state: dict[str, torch.Tensor], config: AlbertConfig) -> dict[str, torch.Tensor]:
    """transformers' names -> ours. Unknown names pass through unchanged (the caller reports them)."""
    k = config.inner_group_num
    if not any(n.startswith("albert.") for n in state):  # a bare AlbertModel saves without the prefix
        state = {f"albert.{n}": t for n, t in state.items()}
    if (
        not config.has_projection
        and _PROJECTION + "weight" in state
        and _is_identity(state, config.hidden_size)
    ):
        # The identity to_transformers writes when we have none (E == H): dropped. A trained one is kept
        # (as embedding_projection) and load_model builds the model with it.
        state = {n: t for n, t in state.items() if not n.startswith(_PROJECTION)}
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[int, str], dict[str, tuple[str, torch.Tensor]]] = {}
    for name, t in state.items():
        if _HF_IGNORED.match(name):
            continue
        m = _HF_BLOCK.match(name)
        if m is None:
            out[_renamed(name, _RENAMES_BACK) or name] = t
            continue
        b = int(m.group(1)) * k + int(m.group(2))
        rest = m.group(3)
        qm = re.match(r"^attention\.(query|key|value)\.(weight|bias)$", rest)
        if qm:
            qkv.setdefault((b, qm.group(2)), {})[qm.group(1)] = (name, t)
            continue
        ours = _renamed(rest, _BLOCK_RENAMES_BACK)
        if ours is None:
            out[name] = t  # unknown: reported as unexpected
            continue
        part, _, local = ours.partition(".")
        out[f"albert.encoder.{part}.{b}.{local}"] = t
    for (b, kind), pieces in qkv.items():
        if set(pieces) == set(_QKV):
            out[f"albert.encoder.attention.{b}.qkv.{kind}"] = torch.cat([pieces[p][1] for p in _QKV], dim=0)
        else:  # one of the three absent: the others pass through, and the load names what is missing
            out.update(pieces.values())
    return out


def _is_identity(state: dict[str, torch.Tensor], hidden: int) -> bool:
    """Whether transformers' E -> H projection in `state` (names under "albert.") is the identity that
    to_transformers writes when E == H (google-research, and albert-lm by default, have none then)."""
    weight, bias = state[_PROJECTION + "weight"], state.get(_PROJECTION + "bias")
    eye = torch.eye(hidden, dtype=weight.dtype)
    return weight.shape == eye.shape and torch.equal(weight, eye) and (bias is None or not bool(bias.any()))


def _full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with the encoder under "albert." (a bare AlbertModel has no prefix)."""
    state = model.state_dict()
    if not hasattr(model, "albert"):
        state = {f"albert.{n}": t for n, t in state.items()}
    return state


def save_model(model: torch.nn.Module, path: str | os.PathLike, layout: str = "auto") -> Path:
    """Write config.json and the weights into `path`, each file atomically. Returns the weights file."""
    config = cast(AlbertConfig, model.config)
    if layout not in ("auto", "transformers", "native"):
        raise ValueError(f"layout must be 'auto', 'transformers' or 'native', got {layout!r}")
    if layout == "auto":
        layout = "transformers" if config.transformers_compatible else "native"
    refused = next((m.save_refused for m in model.modules() if getattr(m, "save_refused", None)), None)
    if refused:  # a module whose weights a state dict does not hold (albert_lm.deploy.int8)
        raise ValueError(f"save_pretrained({os.fspath(path)!r}): {refused}")
    folder = Path(path)
    state = {n: t for n, t in _full_state(model).items() if n != _TIED}
    extra = dict(config.extra)
    config.extra = {**extra, "architectures": [type(model).__name__]}
    try:
        if layout == "transformers":
            hf = to_transformers(state, config)
            if not hasattr(model, "albert"):  # transformers saves a bare AlbertModel without the prefix
                hf = {n.removeprefix("albert."): t for n, t in hf.items()}
            file = folder / SAFETENSORS
            write_weights(file, hf)
            config.save_pretrained(folder)
        else:
            file = folder / NATIVE
            write_weights(file, state)
            config.save_pretrained(folder, model_type="albert-lm")
    finally:
        config.extra = extra
    for stale in (SAFETENSORS, SAFETENSORS_INDEX, NATIVE, PYTORCH_BIN):
        if stale != file.name and (folder / stale).exists():
            logger.warning("removing %s: it would shadow the weights just written", folder / stale)
            (folder / stale).unlink()
    return file


def load_model(
    cls: type,
    path: str | os.PathLike,
    config: AlbertConfig | None = None,
    *,
    require_head: bool = False,
    new_head: bool = False,
    **overrides: Any,
):
    """`cls` with the weights of the folder at `path` (or of a hub id's snapshot, `albert_lm.hub`).
    Heads the checkpoint lacks are initialised fresh with a warning, unless `require_head` (a model to
    evaluate or predict with, not to train): then a checkpoint without trained weights of `cls`'s head
    is refused, naming the folder."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"from_pretrained: expected a model folder or hub id (a str or a path), got {path!r}")
    if not os.fspath(path):  # Path("") is the current folder: never what an empty value meant
        raise ValueError("from_pretrained: empty path; expected a model folder or hub id")
    folder = Path(path)
    if not folder.is_dir():  # a hub id (commands resolve theirs first; this serves the Python API)
        folder = resolve_model(path, f"{cls.__name__}.from_pretrained")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder}: not a folder (expected config.json and model weights) nor a Hugging Face hub id "
            "org/name[@revision]"
        )
    if config is None:
        config = AlbertConfig.from_pretrained(folder, **overrides)
    elif overrides:
        config = dataclasses.replace(config, **overrides)
    raw, file = read_weights(folder)
    if file.name == NATIVE:
        state = raw
    else:
        state = from_transformers(raw, config)
        if not config.has_projection and "albert.encoder.embedding_projection.weight" in state:
            logger.info(
                "%s: E == H with a trained embedding_hidden_mapping_in: kept (embedding_projection)", file
            )
            config = dataclasses.replace(config, embedding_projection=True)
    model = cls(config)
    expected = {n: t for n, t in _full_state(model).items() if n != _TIED}
    if file.name == NATIVE or not config.transformers_compatible:
        _check_fit(cls, config, folder, file, state, expected, require_head, new_head)
    else:  # checked under the file's own names, so that a misfit is named as the file names it
        found, wanted, bare = _in_file(raw, expected, config)
        _check_fit(cls, config, folder, file, found, wanted, require_head, new_head, bare=bare)
    with torch.no_grad():  # state_dict tensors share storage with the parameters
        for name, tensor in expected.items():
            if name in state and state[name].shape == tensor.shape:  # else a new head (`_check_fit`)
                tensor.copy_(state[name])
    return model


def _in_file(
    raw: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], config: AlbertConfig
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], bool]:
    """(the file's tensors, the model's, whether the file is a bare AlbertModel's) under transformers'
    names, both with the "albert." prefix that a bare model's file lacks (`_check_fit` shows names as the
    file has them)."""
    bare = not any(n.startswith("albert.") for n in raw)
    found = {(f"albert.{n}" if bare else n): t for n, t in raw.items()}
    found = {n: t for n, t in found.items() if not _HF_IGNORED.match(n)}
    wanted = to_transformers(expected, config)
    if not config.has_projection:  # the identity a file may hold for E == H, which from_transformers drops
        found = {n: t for n, t in found.items() if not n.startswith(_PROJECTION)}
        wanted = {n: t for n, t in wanted.items() if not n.startswith(_PROJECTION)}
    return found, wanted, bare


def _say_new_heads(cls: type, folder: Path, heads: list[str], trained: bool) -> None:
    """The heads the checkpoint lacks, initialised fresh: a line for a run that trains them (fine-tuning,
    task distillation: as it should be), else a warning (train before use)."""
    if not heads:
        return
    if trained:
        logger.info("%s: a new %s, trained by this run", cls.__name__, ", ".join(heads))
    else:
        logger.warning(
            "%s: no weights in the checkpoint for %s; initialised fresh (train before use)",
            cls.__name__,
            ", ".join(heads),
        )


def _check_fit(
    cls: type,
    config: AlbertConfig,
    folder: Path,
    file: Path,
    state: dict[str, torch.Tensor],
    expected: dict[str, torch.Tensor],
    require_head: bool,
    new_head: bool = False,
    bare: bool = False,
) -> None:
    """The checkpoint's tensors fit `cls`'s body exactly (else an error listing every misfit); a head it
    lacks is refused under `require_head`, else initialised fresh (`_say_new_heads`), as is one of another
    size under `new_head`. `bare`: the file names its tensors without "albert.", as the messages do."""

    def named(names: list[str]) -> list[str]:
        return [n.removeprefix("albert.") if bare else n for n in names]

    missing = [n for n in expected if n not in state]
    unexpected = [n for n in state if n not in expected]
    misfits = [n for n in expected if n in state and state[n].shape != expected[n].shape]
    # a head made for another number of outputs (a model fine-tuned on other labels): the run trains a new one
    resized = [n for n in misfits if new_head and n.startswith(_HEAD_PREFIXES)]
    wrong = [
        f"{named([n])[0]} (checkpoint {tuple(state[n].shape)}, model {tuple(expected[n].shape)})"
        for n in misfits
        if n not in resized
    ]
    missing_body = named([n for n in missing if not n.startswith(_HEAD_PREFIXES)])
    unexpected_body = named([n for n in unexpected if not n.startswith(_HEAD_PREFIXES)])
    if missing_body or unexpected_body or wrong:
        lines = [
            f"{file}: checkpoint does not fit {cls.__name__} ({config.sharing=}, "
            f"num_hidden_groups={config.num_hidden_groups}, inner_group_num={config.inner_group_num}):"
        ]
        lines += [f"  missing: {n}" for n in missing_body]
        lines += [f"  unexpected: {n}" for n in unexpected_body]
        lines += [f"  wrong shape: {w}" for w in wrong]
        raise ValueError("\n".join(lines))
    heads = sorted({n.rsplit(".", 1)[0] for n in named(missing)})
    if missing and require_head:
        arch = (config.extra.get("architectures") or ["no architectures"])[0]
        raise ValueError(
            f"{folder}: no trained {cls.__name__} head in {file.name} (missing {', '.join(heads)}; its "
            f"config.json says {arch}): a pretraining checkpoint, or a model of another head; fine-tune it "
            "for this task first (albert finetune) and give the fine-tuned folder (OUTPUT/best)"
        )
    _say_new_heads(cls, folder, heads if missing else [], new_head)
    if resized:
        logger.warning(
            "%s: its %s was trained for %d outputs, this run's task has %d: a new one, trained by this run",
            folder,
            ", ".join(sorted({n.rsplit(".", 1)[0] for n in named(resized)})),
            state[resized[0]].shape[0],
            expected[resized[0]].shape[0],
        )
    if unexpected:
        logger.info(
            "%s: ignored checkpoint tensors of other heads: %s", cls.__name__, ", ".join(named(unexpected))
        )
