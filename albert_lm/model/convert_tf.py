"""`albert convert --from-tf`: google-research's released ALBERT checkpoints into transformers' layout.

The source is any of what google-research ships or a user has after unpacking it:
- the tarball as downloaded (`albert_base_v2.tar.gz`: `model.ckpt-best.*`, `albert_config.json`,
  `30k-clean.model`), or its extracted folder;
- a checkpoint prefix (`.../model.ckpt-best`, the config and the SentencePiece model beside it);
- a TF-Hub module folder (`variables/variables.*` with names under `module/`, the config and the
  SentencePiece model in `assets/`).

The model computes what google-research's modeling.py computes; every field of `albert_config.json`
maps to one of ours (`tf_names.google_config`), and the fields that describe something albert-lm does not
implement are refused by name rather than converted wrongly. Variable names follow modeling.py
(`bert/encoder/transformer/group_G/inner_group_J/...`) and run_pretraining.py (`cls/predictions/...`,
`cls/seq_relationship/...`); TF stores dense kernels as (in, out), PyTorch as (out, in). Optimizer slots
(`/adam_m`, `/adam_v`) and `global_step` are skipped; any other tensor is an error naming it.

Tensors stream one at a time from the checkpoint into model.safetensors (written by `weights.
stream_safetensors`): converting albert-xxlarge (235M parameters) holds one tensor in memory at a
time, not the model. Nothing here imports TensorFlow.

What is converted is checked, not only its layout: weights must be floating point (float16 and bfloat16
widen to float32; an int32 or bool tensor where a weight belongs is refused, never cast) and finite
(a NaN or an infinity is refused, naming the tensor, as it streams past). A tarball is unpacked with
bounds (`tf_archive.extract`): links, devices and paths leaving the archive are refused, and so is an archive that
would unpack to far more than a checkpoint of its size holds (a gzip bomb), at the member that crosses
the bound, before its bytes are written. Every message names the user's input: for a tarball the
archive and its member (`albert_base_v2.tar.gz:albert_base/model.ckpt-best.index`), never the
temporary folder it was unpacked into.
"""

from __future__ import annotations

import logging
import math
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import atomic_folder, check_output_apart, describe_folder, folder_lock
from albert_lm.model.card import write_model_card
from albert_lm.model.config import AlbertConfig
from albert_lm.model.tf_archive import TAR_SUFFIXES, extract, named_as_given
from albert_lm.model.tf_bundle import CheckpointError, TensorBundle
from albert_lm.model.tf_names import CONFIG_NAME, google_config, tensor_map
from albert_lm.model.weights import SAFETENSORS, stream_safetensors

logger = logging.getLogger(__name__)

TOKENIZER_NAMES = ("30k-clean.model", "spiece.model")
_SLOT = re.compile(r"(^|/)(global_step|beta1_power|beta2_power)$|/(adam_m|adam_v|Adam|Adam_1|Momentum)$")
# What a weight may be stored as: float16 and bfloat16 widen to float32 exactly; float64 narrows (its
# values checked to stay finite). Anything else where a weight belongs is not ALBERT's weight.
_WEIGHT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# Tensors of one inner group (attention, its LayerNorm, the FFN, the second LayerNorm).
_BLOCK_TENSORS = 16
# google-research's models have 12 to 24 layers; a config claiming more than this is not one of them
# (and a model of 10^12 shared layers would only hang the commands that run it).


@dataclass(frozen=True)
class Source:
    """Where the pieces of one released model are."""

    kind: str  # "tarball", "folder", "prefix" or "tf-hub module"
    prefix: Path
    config: Path
    tokenizer: Path


@dataclass
class ConvertResult:
    folder: Path
    kind: str
    architecture: str
    parameters: int
    tensors: int
    skipped: list[str] = field(default_factory=list)


_HEADS = {"albert.pooler.": "pooler", "predictions.": "MLM head", "sop_classifier.": "SOP head"}
_PROJECTION = "albert.encoder.embedding_hidden_mapping_in."


@dataclass(frozen=True)
class Planned:
    """One tensor of the converted model: where it comes from and how it is turned."""

    source: str  # the checkpoint's name; "" for the identity projection made here
    transpose: bool
    shape: tuple[int, ...]  # transformers' shape


def _sort_names(
    bundle: TensorBundle, expected: dict[str, tuple[str, bool, tuple[int, ...]]], config_file: Path
) -> tuple[dict[str, str], list[str]]:
    """The checkpoint's names sorted: ALBERT's weights {bare name: name in the checkpoint} (a TF-Hub
    module's `module/` scope taken off) and what is skipped (optimizer slots, counters); any other name
    is refused."""
    names = list(bundle.entries)
    scope = "module/" if names and all(n.startswith("module/") or _SLOT.search(n) for n in names) else ""
    found: dict[str, str] = {}
    skipped: list[str] = []
    unknown: list[str] = []
    for name in names:
        bare = name.removeprefix(scope)
        if bare in expected:
            found[bare] = name
        elif _SLOT.search(bare):
            skipped.append(name)
        else:
            unknown.append(name)
    if unknown:
        raise CheckpointError(
            bundle.index,
            "tensors that are neither ALBERT weights for "
            f"{config_file} nor optimizer slots: {', '.join(unknown[:10])}"
            + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""),
        )
    return found, skipped


def _plan(
    bundle: TensorBundle, config: AlbertConfig, config_file: Path
) -> tuple[dict[str, Planned], list[str], str]:
    """The converted model's tensors {transformers name: Planned}; the checkpoint names skipped
    (optimizer slots, counters); and the architecture the heads present make. Where the checkpoint
    and the config (`config_file`, named in the messages) disagree, both are named."""
    blocks = config.num_hidden_groups * config.inner_group_num
    if blocks * _BLOCK_TENSORS > len(bundle.entries):  # before the names of that many are made
        raise CheckpointError(
            bundle.index,
            f"{len(bundle.entries)} tensors, too few for {config_file}'s "
            f"num_hidden_groups={config.num_hidden_groups} x inner_group_num="
            f"{config.inner_group_num} ({_BLOCK_TENSORS} tensors each)",
        )
    expected = tensor_map(config)
    found, skipped = _sort_names(bundle, expected, config_file)
    missing = [n for n in expected if n not in found and not expected[n][0].startswith(tuple(_HEADS))]
    if missing:
        raise CheckpointError(
            bundle.index,
            f"the encoder is incomplete for {config_file} "
            f"(num_hidden_groups={config.num_hidden_groups}, inner_group_num="
            f"{config.inner_group_num}); missing: {', '.join(missing[:10])}",
        )
    plan: dict[str, Planned] = {}
    for bare, name in found.items():
        hf, transpose, shape = expected[bare]
        if bundle.entries[name].dtype not in _WEIGHT_DTYPES:
            raise CheckpointError(
                bundle.index,
                f"tensor {name!r} is {bundle.entries[name].dtype}: ALBERT's "
                "weights are floating point (float32, float16 or bfloat16), and casting "
                "it would change what it holds",
            )
        if bundle.entries[name].shape != shape:
            raise CheckpointError(
                bundle.index,
                f"tensor {name!r} has shape {bundle.entries[name].shape}, "
                f"expected {shape} from {config_file}",
            )
        plan[hf] = Planned(name, transpose, shape[::-1] if transpose else shape)
    if config.embedding_size == config.hidden_size:
        # modeling.py has no E -> H projection when E == H; transformers always has one: the identity.
        h = config.hidden_size
        plan[_PROJECTION + "weight"] = Planned("", False, (h, h))
        plan[_PROJECTION + "bias"] = Planned("", False, (h,))
    return plan, skipped, _architecture(bundle, expected, plan)


def _architecture(
    bundle: TensorBundle, expected: dict[str, tuple[str, bool, tuple[int, ...]]], plan: dict[str, Planned]
) -> str:
    has = {
        head: all(hf in plan for hf, _, _ in expected.values() if hf.startswith(p))
        for p, head in _HEADS.items()
    }
    partial = [h for p, h in _HEADS.items() if not has[h] and any(n.startswith(p) for n in plan)]
    if partial:
        raise CheckpointError(
            bundle.index, f"incomplete {', '.join(partial)}: some of its tensors are missing"
        )
    if has["MLM head"] and has["SOP head"]:
        return "AlbertForPreTraining"
    return "AlbertForMaskedLM" if has["MLM head"] else "AlbertModel"


def _tensors(bundle: TensorBundle, plan: dict[str, Planned]) -> Iterator[np.ndarray]:
    """Each planned tensor in turn, in transformers' orientation and float32, one in memory at a time,
    each checked to hold finite values only."""
    for name, p in plan.items():
        if not p.source:
            yield (
                np.eye(p.shape[0], dtype=np.float32)
                if name.endswith("weight")
                else np.zeros(p.shape, np.float32)
            )
            continue
        array = bundle.read(p.source)
        if array.dtype != np.float32:
            with np.errstate(over="ignore"):  # a float64 beyond float32's range: refused just below
                array = array.astype(np.float32)
        _check_finite(array, p.source, bundle)
        yield array.T if p.transpose else array  # a view: written row by row
        del array


def _check_finite(array: np.ndarray, name: str, bundle: TensorBundle, chunk: int = 1 << 20) -> None:
    """Refuse a tensor holding NaN or an infinity (a diverged run, a damaged file): a model converted
    from it would compute NaN everywhere. Checked `chunk` values at a time, so the check holds a
    megabyte beside the tensor, not a second copy of it."""
    flat = array.reshape(-1)  # the array is contiguous: a view
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]
        finite = np.isfinite(part)
        if not finite.all():
            at = start + int(np.argmin(finite))
            what = "NaN" if np.isnan(flat[at]) else "an infinity"
            if bundle.entries[name].dtype == "float64":
                what += " as float32"
            raise CheckpointError(
                bundle.data_file(name),
                f"tensor {name!r} holds {what} (value #{at:,} "
                f"of {flat.size:,}): a diverged or damaged checkpoint; only finite "
                "weights are converted",
            )


def _global_step(bundle: TensorBundle) -> int | None:
    """The checkpoint's step counter (for the model card), if it has one; one integer, or refused."""
    name = next((n for n in bundle.entries if n.rsplit("/", 1)[-1] == "global_step"), None)
    if name is None:
        return None
    entry = bundle.entries[name]
    if entry.dtype not in ("int64", "int32") or math.prod(entry.shape) != 1:
        raise CheckpointError(
            bundle.index,
            f"tensor {name!r} is {entry.dtype} of shape {entry.shape}: a step counter is one integer",
        )
    return int(bundle.read(name).reshape(-1)[0])


# --------------------------------------------------------------------------- the source
def _beside(folder: Path) -> list[Path]:
    """Where the config and the SentencePiece model may lie for a checkpoint in `folder`."""
    places = [folder, folder / "assets", folder.parent, folder.parent / "assets"]
    return [p for p in dict.fromkeys(places) if p.is_dir()]


def _find_prefix(folder: Path) -> Path:
    indexes = sorted(p for depth in ("*", "*/*", "*/*/*") for p in folder.glob(depth + ".index"))
    if not indexes:
        ready = (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
        hint = "; it is a model folder already: give it as --model to any command, no conversion needed"
        raise CheckpointError(
            folder,
            f"no TensorFlow checkpoint (*.index) in it; it holds {describe_folder(folder)}{hint if ready else ''}",
        )
    prefixes = [p.with_suffix("") for p in indexes]
    best = [p for p in prefixes if p.name in ("model.ckpt-best", "variables")]
    if len(prefixes) == 1 or len(best) == 1:
        return (best or prefixes)[0]
    raise CheckpointError(
        folder,
        "several checkpoints: "
        + ", ".join(str(p) for p in prefixes)
        + "; give the one to convert as --from-tf PREFIX (the path without .index)",
    )


def _find_one(places: list[Path], names: tuple[str, ...], what: str, option: str) -> Path:
    for place in places:
        for name in names:
            if (place / name).is_file():
                return place / name
    looked = ", ".join(str(p) for p in places)
    hint = (
        (
            " (google-research's Chinese models ship a WordPiece vocab_chinese.txt, which albert-lm's "
            "SentencePiece tokenizer does not read)"
        )
        if option == "--tokenizer"
        else ""
    )
    raise FileNotFoundError(f"no {what} ({' or '.join(names)}) in {looked}{hint}; give one with {option}")


# Unpacking a tarball (`_extract`). A checkpoint archive is float32 weights (and optimizer slots), which
# gzip shrinks by a few percent; one that unpacks to many times its own size is a gzip bomb. Bounds are
def locate(source: Path, scratch: Path, config: Path | None, tokenizer: Path | None) -> Source:
    """The checkpoint prefix, config and tokenizer of `source` (a tarball is unpacked into `scratch`)."""
    if source.with_name(source.name + ".index").is_file():
        kind, prefix = "prefix", source
    elif source.is_dir():
        kind, prefix = "folder", _find_prefix(source)
    elif source.is_file() and (source.name.endswith(TAR_SUFFIXES) or tarfile.is_tarfile(source)):
        kind, prefix = "tarball", _find_prefix(extract(source, scratch))
    elif not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder")
    else:
        raise FileNotFoundError(
            f"{source}: not a tarball, a folder or a checkpoint prefix (PREFIX.index missing)"
        )
    if prefix.name == "variables" and prefix.parent.name == "variables":
        kind = "tf-hub module" if kind == "folder" else kind
    places = _beside(prefix.parent)
    return Source(
        kind,
        prefix,
        config or _find_one(places, (CONFIG_NAME,), "model config", "--model-config"),
        tokenizer or _find_one(places, TOKENIZER_NAMES, "SentencePiece model", "--tokenizer"),
    )


# --------------------------------------------------------------------------- the command
def convert_tf(
    source: str | os.PathLike,
    output: str | os.PathLike,
    *,
    config: str | os.PathLike | None = None,
    tokenizer: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> ConvertResult:
    """Convert a released google-research ALBERT (see the module docstring) into the folder `output`:
    config.json, model.safetensors, spiece.model, tokenizer_config.json. The folder appears whole or
    not at all."""
    src, out = Path(source), Path(output)
    check_output_apart(out, {"--from-tf": src, "--model-config": config, "--tokenizer": tokenizer})
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not overwrite)):
        what = "a file" if not out.is_dir() else f"a folder holding {describe_folder(out)}"
        raise FileExistsError(f"--output {out} is {what}; choose a new folder, or add --overwrite")
    # a failed conversion leaves no folder made only to hold the lock (folder_lock)
    with (
        folder_lock(out),
        tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.src-") as tmp,
    ):
        scratch = Path(tmp).absolute()
        with named_as_given(scratch, src):
            found = locate(src, scratch, _opt(config), _opt(tokenizer))
            return _convert(found, out, src)


def _opt(path: str | os.PathLike | None) -> Path | None:
    return None if path is None else Path(path)


def _convert(found: Source, out: Path, given: Path) -> ConvertResult:
    logger.info(
        "converting %s %s (config %s, tokenizer %s)", found.kind, found.prefix, found.config, found.tokenizer
    )
    model_config = google_config(found.config)
    tok = AlbertTokenizer(found.tokenizer, do_lower_case=True, remove_space=True, keep_accents=False)
    if tok.vocab_size != model_config.vocab_size:
        raise CheckpointError(
            found.tokenizer,
            f"{tok.vocab_size} pieces, but {found.config} says vocab_size "
            f"{model_config.vocab_size}: not this model's tokenizer",
        )
    bundle = TensorBundle(found.prefix)
    plan, skipped, arch = _plan(bundle, model_config, found.config)
    for name in skipped:  # not converted, but a damaged byte there is a damaged download: say so
        bundle.verify(name)
    step = _global_step(bundle)
    with atomic_folder(out) as tmp:
        stream_safetensors(tmp / SAFETENSORS, {n: p.shape for n, p in plan.items()}, _tensors(bundle, plan))
        model_config.extra = {"architectures": [arch]}
        model_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _write_card(tmp, out, given, found, step, model_config)
    if skipped:
        logger.info("skipped %d optimizer slots and counters (%s, ...)", len(skipped), skipped[0])
    params = sum(int(np.prod(p.shape)) for p in plan.values())
    return ConvertResult(out, found.kind, arch, params, len(plan), skipped)


def _write_card(
    tmp: Path, out: Path, given: Path, found: Source, step: int | None, config: AlbertConfig
) -> None:
    """The converted model's card (albert_lm.model.card), written into the folder before it is swapped in."""
    made_by = {
        "command": "albert convert --from-tf",
        "source": f"{given.name} ({found.kind}), google-research ALBERT's TensorFlow checkpoint layout",
        "checkpoint": found.prefix.name,
        "config": found.config.name,
        "tokenizer": found.tokenizer.name,
        "pretraining steps": f"{step:,} (the checkpoint's global_step)" if step is not None else None,
        "conversion": "weights copied as they are (TF kernels transposed), no TensorFlow involved",
    }
    write_model_card(
        tmp,
        title=f"ALBERT converted from {given.name}",
        made_by=made_by,
        config=config,
        location=out,
        replaces=out,
    )
