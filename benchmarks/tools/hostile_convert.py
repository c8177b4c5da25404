"""A case family of the hostile round (benchmarks/tools/hostile_round.py): `albert convert --from-tf` against
damaged and hostile TensorFlow checkpoints and archives, and hub ids read from a damaged hub cache.

The kinds of input, each refused with one line naming the user's file (for a tarball: the archive and
its member) and, where there is one, the tensor or field:
- weights that are not weights: NaN or an infinity, int32/int8/uint8/bool where a float belongs, a
  float64 beyond float32's range, a step counter that is not one integer (float16, bfloat16 and a
  finite float64 convert);
- a damaged release inside a tarball (truncated or flipped data, a bad config, no tokenizer);
- hostile archives: members with absolute paths or `..`, symbolic and hard links, devices and pipes,
  gzip bombs (a few MB that unpack to 4 GiB: refused at the member's header, run under a file-size
  limit so that a regression cannot fill the disk), truncated or foreign archives;
- hostile indexes: offsets past the data file, shapes of 10^12 values, a negative dimension, 10^8
  shards, a string tensor where a weight belongs;
- absurd albert_config.json values: negative, huge, strings, NaN and Infinity, 100,000 levels of
  nesting, hidden_size not a multiple of the heads, 10^9 groups;
- a damaged hub cache read offline (HF_HUB_OFFLINE=1, HF_HUB_CACHE inside the world): a config that is
  not ALBERT's or not JSON, weights missing or truncated, refs/main pointing nowhere or out of the
  cache, links leading out of the cache or nowhere, a revision climbing out with `..`.

Valid conversions (folder, tarball, prefix, float16, bfloat16) and a valid cached hub model are
expected to succeed. The checkpoints are written by tests/tf_bundle_writer.py (the test suite's writer
of TensorFlow's format, checked once against TensorFlow's own reader).
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from tf_bundle_writer import google_shapes, write_bundle  # noqa: E402

FAMILY = "convert archives and hub caches"
CKPT = "model.ckpt-best"
DATA = f"{CKPT}.data-00000-of-00001"
EMBEDDINGS = "bert/embeddings/word_embeddings"
FFN = "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel"
GAMMA = "bert/embeddings/LayerNorm/gamma"
CONFIG: dict[str, Any] = {
    "vocab_size": 120, "embedding_size": 8, "hidden_size": 16, "num_attention_heads": 2,
    "intermediate_size": 32, "num_hidden_layers": 2, "num_hidden_groups": 1, "inner_group_num": 1,
    "max_position_embeddings": 32, "type_vocab_size": 2, "hidden_act": "gelu",
    "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0, "initializer_range": 0.02,
}  # fmt: skip
GIB = 1 << 30
FSIZE = str(256 << 20)  # a file-size limit for the bomb cases: a regression is killed, not the disk filled
Result = dict[str, Path]


# --------------------------------------------------------------------------- checkpoints
def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """google-research's tensors for CONFIG, with Adam slots for two of them and the step counter."""
    rng = np.random.default_rng(seed)
    out = {n: (rng.standard_normal(s) * 0.1).astype(np.float32) for n, s in google_shapes(CONFIG).items()}
    for name in (EMBEDDINGS, GAMMA):
        out[f"{name}/adam_m"] = np.zeros_like(out[name])
        out[f"{name}/adam_v"] = np.full_like(out[name], 1e-4)
    out["global_step"] = np.array(125000, np.int64)
    return out


def release(
    folder: Path,
    tokenizer: Path,
    weights: dict[str, np.ndarray] | None = None,
    config: dict[str, Any] | None = None,
    **written: Any,
) -> Path:
    """A release's folder: the checkpoint, albert_config.json and 30k-clean.model."""
    write_bundle(folder / CKPT, tensors() if weights is None else weights, **written)
    (folder / "albert_config.json").write_text(json.dumps(CONFIG if config is None else config))
    shutil.copy(tokenizer, folder / "30k-clean.model")
    return folder


def changed(**change: Any) -> dict[str, np.ndarray]:
    """tensors() with some replaced (a value of None removes the tensor)."""
    out = tensors()
    for name, value in change.items():
        name = {"EMB": EMBEDDINGS, "FFN": FFN, "GAMMA": GAMMA}.get(name, name)
        if value is None:
            out.pop(name)
        else:
            out[name] = value
    return out


def poisoned(name: str, value: float, dtype: str = "float32") -> dict[str, np.ndarray]:
    """tensors() with one value of tensor `name` set to `value` (NaN, an infinity, a huge float64)."""
    out = tensors()
    array = out[name].astype(dtype)
    array.reshape(-1)[array.size // 2] = value
    out[name] = array
    return out


Member = tuple[tarfile.TarInfo, bytes | None]


def tar_of(path: Path, folder: Path, extra: list[Member] | None = None, mode: str = "w:gz") -> Path:
    """`folder` as `path` (members under albert_tiny/), then the `extra` members (hostile ones)."""
    with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
        for file in sorted(folder.iterdir()):
            tar.add(file, arcname=f"albert_tiny/{file.name}")
        for info, data in extra or []:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> Member:
    """A member of the given type: a file holds one byte; a link points at `link`."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    data = b"x" if kind == tarfile.REGTYPE else None
    info.size = len(data or b"")
    return info, data


# --------------------------------------------------------------------------- gzip bombs
def _zeros(size: int, block: bytes) -> bytes:
    """`size` zero bytes, gzipped as members of len(`block`)-byte runs (gzip.compress(block) reused)."""
    run = 64 << 20
    whole, rest = divmod(size, run)
    return block * whole + gzip.compress(b"\0" * rest)


def bomb(path: Path, members: list[tuple[str, bytes | int]]) -> Path:
    """A .tar.gz whose members are real bytes or (an int) that many zeros: a multi-member gzip stream,
    each run of 64 MiB of zeros compressed once and repeated, so 4 GiB takes a few MB and a second."""
    block = gzip.compress(b"\0" * (64 << 20), compresslevel=9)
    with open(path, "wb") as out:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = content if isinstance(content, int) else len(content)
            out.write(gzip.compress(info.tobuf(tarfile.GNU_FORMAT)))
            if isinstance(content, int):
                out.write(_zeros(content, block))
            else:
                out.write(gzip.compress(content))
            out.write(gzip.compress(b"\0" * (-info.size % 512)))
        out.write(gzip.compress(b"\0" * 1024))
    return path


def _files(folder: Path, *names: str) -> list[tuple[str, bytes | int]]:
    return [(f"albert_tiny/{n}", (folder / n).read_bytes()) for n in names]


# --------------------------------------------------------------------------- the world
def build(world: Path, p: dict[str, Path]) -> dict[str, Path]:
    """This family's inputs under world / "convert" (made once; a finished one is reused)."""
    root = world / "convert"
    if not (root / "READY").is_file():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        made: Result = {}
        tok = p["tok_a"] / "spiece.model"
        for part in (_build_content, _build_archives, _build_bombs, _build_indexes, _build_configs):
            made.update(part(root, tok))
        made.update(_build_hub(root, p))
        (root / "made.json").write_text(json.dumps({k: str(v) for k, v in made.items()}))
        (root / "READY").write_text("")
    return {k: Path(v) for k, v in json.loads((root / "made.json").read_text()).items()}


def _build_content(root: Path, tok: Path) -> Result:
    """Releases whose weights are not weights, and valid ones in every floating dtype."""
    f = root / "content"
    kinds: dict[str, tuple[dict[str, np.ndarray], dict[str, Any]]] = {
        "good": (tensors(), {}),
        "nan": (poisoned(EMBEDDINGS, np.nan), {}),
        "inf": (poisoned(FFN, np.inf), {}),
        "neg_inf": (poisoned(GAMMA, -np.inf), {}),
        "nan_float16": (poisoned(FFN, np.nan, "float16"), {}),
        "huge_float64": (poisoned(FFN, 1e300, "float64"), {}),
        "int32": (changed(EMB=np.ones((120, 8), np.int32)), {}),
        "int8": (changed(FFN=np.ones((16, 32), np.int8)), {}),
        "uint8": (changed(GAMMA=np.ones(8, np.uint8)), {}),
        "bool": (changed(GAMMA=np.ones(8, bool)), {}),
        "step_float": (changed(global_step=np.array(1.5, np.float32)), {}),
        "step_vector": (changed(global_step=np.arange(3, dtype=np.int64)), {}),
        "float16": ({n: a.astype(np.float16) if a.dtype == np.float32 else a for n, a in tensors().items()}, {}),
        "bfloat16": (tensors(), {"bfloat16": [n for n, a in tensors().items() if a.dtype == np.float32]}),
        "float64": ({n: a.astype(np.float64) if a.dtype == np.float32 else a for n, a in tensors().items()}, {}),
    }  # fmt: skip
    out = {f"content_{k}": release(f / k, tok, w, **kw) for k, (w, kw) in kinds.items()}
    out["content_good_tar"] = tar_of(root / "good.tar.gz", f / "good")
    out["content_nan_tar"] = tar_of(root / "nan.tar.gz", f / "nan")
    return out


def _build_archives(root: Path, tok: Path) -> Result:
    """Tarballs: a damaged release inside one, and members a checkpoint archive never holds."""
    f, good = root / "archive", root / "content" / "good"
    f.mkdir()
    damaged: dict[str, Callable[[Path], None]] = {
        "truncated_data": lambda d: (d / DATA).write_bytes((d / DATA).read_bytes()[:-100]),
        "flipped_data": lambda d: (d / DATA).write_bytes(_flip((d / DATA).read_bytes(), 1000)),
        "flipped_index": lambda d: (d / f"{CKPT}.index").write_bytes(_flip((d / f"{CKPT}.index").read_bytes(), 60)),
        "unknown_field": lambda d: (d / "albert_config.json").write_text(json.dumps({**CONFIG, "adapters": 2})),
        "config_not_json": lambda d: (d / "albert_config.json").write_text("{vocab_size: 120"),
        "no_tokenizer": lambda d: (d / "30k-clean.model").unlink(),
        "garbage_tokenizer": lambda d: (d / "30k-clean.model").write_bytes(b"not a sentencepiece model" * 40),
        "no_checkpoint": lambda d: [(d / n).unlink() for n in (DATA, f"{CKPT}.index")],
    }  # fmt: skip
    out: Result = {}
    for name, damage in damaged.items():
        shutil.copytree(good, f / name)
        damage(f / name)
        out[f"archive_{name}"] = tar_of(f / f"{name}.tar.gz", f / name)
    outside = root / "escaped"  # where a hostile member points: inside the world, so a write shows
    hostile: dict[str, list[Member]] = {
        "dotdot": [member("albert_tiny/../../escaped/dotdot.txt")],
        "absolute": [member(str(outside / "absolute.txt"))],
        "symlink_config": [member("albert_tiny/albert_config.json", tarfile.SYMTYPE, link="/etc/passwd")],
        "symlink_dir": [member("albert_tiny/up", tarfile.SYMTYPE, link="../.."),
                        member("albert_tiny/up/escaped/through_link.txt")],
        "hardlink": [member("albert_tiny/passwd", tarfile.LNKTYPE, link="/etc/passwd")],
        "hardlink_inside": [member("albert_tiny/copy.model", tarfile.LNKTYPE, link="albert_tiny/30k-clean.model")],
        "fifo": [member("albert_tiny/pipe", tarfile.FIFOTYPE)],
        "chardev": [member("albert_tiny/zero", tarfile.CHRTYPE)],
        "blockdev": [member("albert_tiny/disk", tarfile.BLKTYPE)],
        "clash": [member("albert_tiny/30k-clean.model/inner.txt")],
    }  # fmt: skip
    for name, extra in hostile.items():
        out[f"archive_{name}"] = tar_of(f / f"{name}.tar.gz", good, extra)
    raw = (root / "good.tar.gz").read_bytes()
    (f / "truncated.tar.gz").write_bytes(raw[: len(raw) // 2])
    tar_of(f / "plain.tar", good, mode="w")
    (f / "truncated.tar").write_bytes((f / "plain.tar").read_bytes()[:3000])
    (f / "garbage.tar.gz").write_bytes(b"\x1f\x8b" + bytes(range(256)) * 8)
    (f / "empty.tar.gz").write_bytes(b"")
    for name in ("truncated.tar.gz", "plain.tar", "truncated.tar", "garbage.tar.gz", "empty.tar.gz"):
        out[f"archive_{name.replace('.', '_')}"] = f / name
    return out


def _flip(raw: bytes, at: int) -> bytes:
    return raw[:at] + bytes([raw[at] ^ 0x40]) + raw[at + 1 :]


def _build_bombs(root: Path, tok: Path) -> Result:
    """gzip bombs: 4 GiB of zeros in a few MB, as the data file after and before its index, as one
    stray member, and as 2,048 members of 2 MiB."""
    f, good = root / "bombs", root / "content" / "good"
    f.mkdir()
    small = _files(good, "albert_config.json", "30k-clean.model")
    index = _files(good, f"{CKPT}.index")
    data = f"albert_tiny/{DATA}"
    many = [(f"albert_tiny/notes/{k:04d}.bin", 2 << 20) for k in range(2048)]
    return {
        "bomb_data_after_index": bomb(f / "data_after_index.tar.gz", [*small, *index, (data, 4 * GIB)]),
        "bomb_data_first": bomb(f / "data_first.tar.gz", [(data, 4 * GIB), *small, *index]),
        "bomb_stray": bomb(
            f / "stray.tar.gz", [*small, *index, *_files(good, DATA), ("albert_tiny/x.bin", 4 * GIB)]
        ),
        "bomb_many": bomb(f / "many.tar.gz", [*small, *index, *_files(good, DATA), *many]),
    }


def _build_indexes(root: Path, tok: Path) -> Result:
    """Checkpoints whose index says what cannot be true."""
    f = root / "index"
    slot = f"{EMBEDDINGS}/adam_m"
    declared: dict[str, dict[str, dict[str, Any]]] = {
        "offset_past_end": {FFN: {"offset": 10**9}},
        "enormous_slot": {slot: {"shape": (10**6, 10**6), "size": 4 * 10**12}},
        "enormous_weight": {EMBEDDINGS: {"shape": (10**6, 10**6)}},
        "enormous_consistent": {EMBEDDINGS: {"shape": (10**6, 10**6), "size": 4 * 10**12}},
        "negative_dim": {GAMMA: {"shape": (-1,)}},
        "wrapping_shape": {slot: {"shape": (1 << 32, 1 << 32, 4), "size": 0}},
        "many_shards": {"": {"num_shards": 10**8}},
        "shard_out_of_range": {GAMMA: {"shard": 5}},
        "string_weight": {GAMMA: {"dtype": 7}},
    }
    out = {f"index_{k}": release(f / k, tok, declare=d) for k, d in declared.items()}
    out["index_truncated"] = release(f / "truncated", tok)
    index = f / "truncated" / f"{CKPT}.index"
    index.write_bytes(index.read_bytes()[:-20])
    out["index_empty_data"] = release(f / "empty_data", tok)
    (f / "empty_data" / DATA).write_bytes(b"")
    return out


def _build_configs(root: Path, tok: Path) -> Result:
    """albert_config.json with absurd values (the checkpoint itself is valid)."""
    f = root / "config"
    texts = {
        "negative": json.dumps({**CONFIG, "hidden_size": -16}),
        "huge": json.dumps({**CONFIG, "hidden_size": 10**12}),
        "string": json.dumps({**CONFIG, "hidden_size": "16"}),
        "float_size": json.dumps({**CONFIG, "hidden_size": 16.0}),
        "string_vocab": json.dumps({**CONFIG, "vocab_size": "120"}),
        "not_divisible": json.dumps({**CONFIG, "num_attention_heads": 3}),
        "infinity": json.dumps({**CONFIG}).replace('"initializer_range": 0.02', '"initializer_range": Infinity'),
        "nan_dropout": json.dumps({**CONFIG}).replace('"hidden_dropout_prob": 0', '"hidden_dropout_prob": NaN'),
        "dropout_5": json.dumps({**CONFIG, "hidden_dropout_prob": 5}),
        "groups_1e9": json.dumps({**CONFIG, "num_hidden_groups": 10**9, "num_hidden_layers": 10**9}),
        "inner_1e9": json.dumps({**CONFIG, "inner_group_num": 10**9}),
        "layers_1e12": json.dumps({**CONFIG, "num_hidden_layers": 10**12}),
        "null": json.dumps({**CONFIG, "embedding_size": None}),
        "nested": '{"vocab_size": 120, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "array": json.dumps([CONFIG]),
        "empty": "",
        "not_utf8": '{"vocab_size": 120, "note": "\xff"}',
    }  # fmt: skip
    out: Result = {}
    for name, text in texts.items():
        folder = release(f / name, tok)
        raw = text.encode("latin-1") if name == "not_utf8" else text.encode()
        (folder / "albert_config.json").write_bytes(raw)
        out[f"config_{name}"] = folder
    return out


# --------------------------------------------------------------------------- the hub cache
def _snapshot(cache: Path, repo: str, model: Path | None, commit: str) -> Path:
    """`model`'s files (or none) as the snapshot `commit` of `repo`, refs/main pointing at it."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snap = folder / "snapshots" / commit
    if model is not None:
        shutil.copytree(model, snap)
    else:
        snap.mkdir(parents=True)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    return snap


def _build_hub(root: Path, p: dict[str, Path]) -> Result:
    """A hub cache (HF_HUB_CACHE) with one good model and damaged ones; `outside` is a valid model out
    of the cache, where hostile refs and links lead."""
    home, model = root / "hf-home", p["ft"] / "best"
    cache = home / "hub"
    outside = root / "outside-model"
    shutil.copytree(model, outside)
    commit = "0123456789abcdef0123456789abcdef01234567"
    _snapshot(cache, "org/good", model, commit)
    snap = {
        r: _snapshot(cache, f"org/{r}", model, commit)
        for r in (
            "notalbert",
            "notjson",
            "emptyconfig",
            "noweights",
            "truncated",
            "garbage",
            "linkconfig",
            "linkweights",
            "brokenlink",
            "badindex",
            "missingshard",
            "truncatedpickle",
        )
    }
    config = json.loads((model / "config.json").read_text())
    (snap["notalbert"] / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    (snap["notjson"] / "config.json").write_text("{not json")
    (snap["emptyconfig"] / "config.json").write_text("")
    (snap["noweights"] / "model.safetensors").unlink()
    weights = (model / "model.safetensors").read_bytes()
    (snap["truncated"] / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (snap["garbage"] / "model.safetensors").write_bytes(b"garbage!" * 64)
    for name, target in (("linkconfig", "config.json"), ("linkweights", "model.safetensors")):
        (snap[name] / target).unlink()
        (snap[name] / target).symlink_to(outside / target)
    (snap["brokenlink"] / "config.json").unlink()
    (snap["brokenlink"] / "config.json").symlink_to(root / "no-such-file.json")
    (snap["badindex"] / "model.safetensors").rename(snap["badindex"] / "model-00001-of-00001.safetensors")
    (snap["badindex"] / "model.safetensors.index.json").write_text("{weight_map")
    (snap["missingshard"] / "model.safetensors").unlink()
    shard_map = {
        "weight_map": {"albert.embeddings.word_embeddings.weight": "model-00001-of-00002.safetensors"}
    }
    (snap["missingshard"] / "model.safetensors.index.json").write_text(json.dumps(shard_map))
    (snap["truncatedpickle"] / "model.safetensors").unlink()
    (snap["truncatedpickle"] / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 4000)
    _snapshot(cache, "org/dangling", None, commit).rmdir()  # refs/main names a commit that is not there
    _snapshot(cache, "org/refescape", None, "x").rmdir()
    (cache / "models--org--refescape" / "refs" / "main").write_text("../../../../outside-model")
    linked = cache / "models--org--linksnapshot" / "snapshots" / commit
    _snapshot(cache, "org/linksnapshot", None, commit).rmdir()
    linked.symlink_to(outside, target_is_directory=True)
    return {"hub_home": home, "hub_cache": cache, "hub_outside": outside}


# --------------------------------------------------------------------------- the cases
Case = tuple[str, list[str], str, list[str]]


def cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    """(class, argv, expect, mention) of every case; see the module docstring."""
    return [
        *_content_cases(p, out),
        *_archive_cases(p, out),
        *_index_cases(p, out),
        *_config_cases(p, out),
        *_hub_cases(p, out),
    ]


def _convert(src: Path, out: Callable[[str], str]) -> list[str]:
    return ["convert", "--from-tf", str(src), "--output", out("converted")]


def _content_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    k = "convert: weights"
    data = lambda name: str(p[f"content_{name}"] / DATA)  # noqa: E731
    index = lambda name: str(p[f"content_{name}"] / f"{CKPT}.index")  # noqa: E731
    nan_tar = f"{p['content_nan_tar']}:albert_tiny/{DATA}"
    return [
        (k, _convert(p["content_nan"], out), "refuse", [data("nan"), EMBEDDINGS, "NaN"]),
        (k, _convert(p["content_inf"], out), "refuse", [data("inf"), FFN, "infinity"]),
        (k, _convert(p["content_neg_inf"], out), "refuse", [data("neg_inf"), GAMMA, "infinity"]),
        (k, _convert(p["content_nan_float16"], out), "refuse", [data("nan_float16"), FFN, "NaN"]),
        (k, _convert(p["content_huge_float64"], out), "refuse", [data("huge_float64"), FFN, "float32"]),
        (k, _convert(p["content_int32"], out), "refuse", [index("int32"), EMBEDDINGS, "int32"]),
        (k, _convert(p["content_int8"], out), "refuse", [index("int8"), FFN, "int8"]),
        (k, _convert(p["content_uint8"], out), "refuse", [index("uint8"), GAMMA, "uint8"]),
        (k, _convert(p["content_bool"], out), "refuse", [index("bool"), GAMMA, "bool"]),
        (k, _convert(p["content_step_float"], out), "refuse", [index("step_float"), "global_step"]),
        (k, _convert(p["content_step_vector"], out), "refuse", [index("step_vector"), "global_step"]),
        (k, _convert(p["content_nan_tar"], out), "refuse", [nan_tar, EMBEDDINGS, "NaN"]),
        ("convert: valid", _convert(p["content_good"], out), "ok", []),
        ("convert: valid", _convert(p["content_good_tar"], out), "ok", []),
        ("convert: valid", _convert(p["content_good"] / CKPT, out), "ok", []),
        ("convert: valid", _convert(p["content_float16"], out), "ok", []),
        ("convert: valid", _convert(p["content_bfloat16"], out), "ok", []),
        ("convert: valid", _convert(p["content_float64"], out), "ok", []),
    ]


def _archive_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    named, hostile = "convert: names in archives", "convert: hostile archives"
    at = lambda name, file: f"{p[f'archive_{name}']}:albert_tiny/{file}"  # noqa: E731
    cs: list[Case] = [
        (named, _convert(p["archive_truncated_data"], out), "refuse", [at("truncated_data", DATA), "truncated"]),
        (named, _convert(p["archive_flipped_data"], out), "refuse", [at("flipped_data", DATA), "checksum"]),
        (named, _convert(p["archive_flipped_index"], out), "refuse", [at("flipped_index", f"{CKPT}.index")]),
        (named, _convert(p["archive_unknown_field"], out), "refuse",
         [at("unknown_field", "albert_config.json"), "adapters"]),
        (named, _convert(p["archive_config_not_json"], out), "refuse", [at("config_not_json", "albert_config.json")]),
        (named, _convert(p["archive_no_tokenizer"], out), "refuse", [str(p["archive_no_tokenizer"]), "--tokenizer"]),
        (named, _convert(p["archive_garbage_tokenizer"], out), "refuse", [at("garbage_tokenizer", "30k-clean.model")]),
        (named, _convert(p["archive_no_checkpoint"], out), "refuse", [str(p["archive_no_checkpoint"]), ".index"]),
    ]  # fmt: skip
    for name, says in (
        ("dotdot", ".."),
        ("absolute", "absolute"),
        ("symlink_config", "link"),
        ("symlink_dir", "link"),
        ("hardlink", "link"),
        ("hardlink_inside", "link"),
        ("fifo", "pipe"),
        ("chardev", "device"),
        ("blockdev", "device"),
        ("clash", "inner.txt"),
    ):
        cs.append((hostile, _convert(p[f"archive_{name}"], out), "refuse", [str(p[f"archive_{name}"]), says]))
    for name in ("truncated_tar_gz", "truncated_tar", "garbage_tar_gz", "empty_tar_gz"):
        cs.append((hostile, _convert(p[f"archive_{name}"], out), "refuse", [str(p[f"archive_{name}"])]))
    cs.append(("convert: valid", _convert(p["archive_plain_tar"], out), "ok", []))
    for name in ("bomb_data_after_index", "bomb_data_first", "bomb_stray", "bomb_many"):
        cs.append((hostile, ["@fsize", FSIZE, *_convert(p[name], out)], "refuse", [str(p[name])]))
    return cs


def _index_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    k = "convert: hostile indexes"
    idx = lambda name: str(p[f"index_{name}"] / f"{CKPT}.index")  # noqa: E731
    slot = f"{EMBEDDINGS}/adam_m"
    cs: list[Case] = [
        (k, _convert(p["index_offset_past_end"], out), "refuse", [str(p["index_offset_past_end"] / DATA), FFN]),
        (k, _convert(p["index_enormous_slot"], out), "refuse", [str(p["index_enormous_slot"] / DATA), slot]),
        (k, _convert(p["index_enormous_weight"], out), "refuse", [idx("enormous_weight"), EMBEDDINGS]),
        (k, _convert(p["index_enormous_consistent"], out), "refuse", [str(p["index_enormous_consistent"]), EMBEDDINGS]),
        (k, _convert(p["index_negative_dim"], out), "refuse", [idx("negative_dim"), GAMMA]),
        (k, _convert(p["index_wrapping_shape"], out), "refuse", [idx("wrapping_shape"), slot]),
        (k, _convert(p["index_many_shards"], out), "refuse", [str(p["index_many_shards"])]),
        (k, _convert(p["index_shard_out_of_range"], out), "refuse", [idx("shard_out_of_range"), GAMMA]),
        (k, _convert(p["index_string_weight"], out), "refuse", [idx("string_weight"), GAMMA]),
        (k, _convert(p["index_truncated"], out), "refuse", [idx("truncated")]),
        (k, _convert(p["index_empty_data"], out), "refuse", [str(p["index_empty_data"] / DATA), "truncated"]),
    ]  # fmt: skip
    api = "from albert_lm.model.tf_bundle import TensorBundle\nTensorBundle({!r}).read({!r})"
    for name, tensor in (
        ("enormous_slot", slot),
        ("wrapping_shape", slot),
        ("enormous_consistent", EMBEDDINGS),
    ):
        code = api.format(str(p[f"index_{name}"] / CKPT), tensor)
        cs.append((k + " (API)", ["@python", code], "refuse", [str(p[f"index_{name}"]), tensor]))
    return cs


def _config_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    k = "convert: absurd albert_config.json"
    field = {"negative": "hidden_size", "huge": "shape", "string": "hidden_size",
             "float_size": "hidden_size", "string_vocab": "vocab_size", "not_divisible": "num_attention_heads",
             "infinity": "initializer_range", "nan_dropout": "hidden_dropout_prob",
             "dropout_5": "hidden_dropout_prob", "groups_1e9": "num_hidden_layers", "inner_1e9": "inner_group_num",
             "layers_1e12": "num_hidden_layers", "null": "embedding_size", "nested": "nested",
             "array": "object", "empty": "empty", "not_utf8": "UTF-8"}  # fmt: skip
    return [
        (
            k,
            _convert(p[f"config_{name}"], out),
            "refuse",
            [str(p[f"config_{name}"] / "albert_config.json"), word],
        )
        for name, word in field.items()
    ]


def _hub_cases(p: dict[str, Path], out: Callable[[str], str]) -> list[Case]:
    """Each reads the world's hub cache, offline (no network is ever needed)."""
    k = "hub: damaged cache"
    env = [
        "@env",
        f"HF_HOME={p['hub_home']}",
        "@env",
        f"HF_HUB_CACHE={p['hub_cache']}",
        "@env",
        "HF_HUB_OFFLINE=1",
    ]

    def predict(model: str) -> list[str]:
        return [
            *env,
            "predict",
            "--model",
            model,
            "--input",
            str(p["rows.jsonl"]),
            "--output",
            out("predicted"),
        ]

    def resolve(model: str) -> list[str]:
        return [*env, "@python", f"from albert_lm.hub import resolve_model\nprint(resolve_model({model!r}))"]

    files = {"notalbert": "config.json", "notjson": "config.json", "emptyconfig": "config.json",
             "noweights": "weights", "truncated": "model.safetensors", "garbage": "model.safetensors",
             "linkconfig": "config.json", "linkweights": "model.safetensors", "brokenlink": "config.json",
             "badindex": "model.safetensors.index.json", "missingshard": "model-00001-of-00002.safetensors",
             "truncatedpickle": "pytorch_model.bin", "dangling": "refs/main", "refescape": "refs/main",
             "linksnapshot": "snapshots"}  # fmt: skip
    cs: list[Case] = [(k, predict(f"org/{r}"), "refuse", [f"org/{r}", file]) for r, file in files.items()]
    cs += [
        (k + " (API)", resolve(f"org/{r}"), "refuse", [f"org/{r}", files[r]])
        for r in ("notalbert", "truncated", "linkconfig", "dangling", "refescape")
    ]
    cs.append((k, predict("org/good@../../../outside-model"), "refuse", ["org/good@../../../outside-model"]))
    cs.append(("hub: valid", predict("org/good"), "ok", []))
    cs.append(("hub: valid", resolve("org/good"), "ok", []))
    return cs
