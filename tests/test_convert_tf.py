"""`albert convert --from-tf`: google-research's released checkpoints into transformers' layout.

The anchor is tests/fixtures/tf_checkpoint: a tiny ALBERT (2 groups x 2 inner groups) that TensorFlow
itself saved under google-research's variable names, in the tarball's, a sharded and a TF-Hub module's
layout, with the outputs TensorFlow computed from it following modeling.py (make.py there). Other
shapes, sizes and damaged files come from tests/tf_bundle_writer.py, checked once against TF's reader.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from tf_bundle_writer import google_shapes, write_bundle

from albert_lm.cli import main
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.model.tf_bundle import CheckpointError, TensorBundle
from albert_lm.model.unpad import use_unpadding

FIXTURES = Path(__file__).parent / "fixtures" / "tf_checkpoint"
CONFIG = json.loads((FIXTURES / "release" / "albert_config.json").read_text())


@pytest.fixture(autouse=True)
def padded_path():
    """TensorFlow's reference outputs and transformers' cover every position: the padded path, whose pad
    tokens have states as theirs do (the unpadded path leaves zeros there; test_unpad.py compares it at
    the kept tokens)."""
    with use_unpadding(False):
        yield


@pytest.fixture
def release(tmp_path, tiny_corpus_and_tokenizer) -> Path:
    """The released tarball's folder layout: checkpoint, albert_config.json, 30k-clean.model."""
    folder = tmp_path / "albert_tiny"
    shutil.copytree(FIXTURES / "release", folder)
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", folder / "30k-clean.model")
    return folder


def _convert(src: Path, out: Path, *extra: str) -> int:
    return main(["convert", "--from-tf", str(src), "--output", str(out), *extra])


def _reference_inputs() -> tuple[dict[str, torch.Tensor], np.lib.npyio.NpzFile]:
    ref = np.load(FIXTURES / "reference.npz")
    inputs = {k: torch.from_numpy(ref[k]).long() for k in ("input_ids", "attention_mask", "token_type_ids")}
    return inputs, ref


def test_reader_reads_what_tensorflow_wrote_in_every_layout():
    release = TensorBundle(FIXTURES / "release" / "model.ckpt-best")
    sharded = TensorBundle(FIXTURES / "sharded" / "model.ckpt")
    hub = TensorBundle(FIXTURES / "hub" / "variables" / "variables")
    assert sharded.num_shards == 2 and {e.shard for e in sharded.entries.values()} == {0, 1}
    weights = [n for n in release.entries if not n.endswith(("adam_m", "adam_v", "global_step"))]
    assert len(weights) == len(sharded.entries) == len(hub.entries) == 80
    for name in weights:
        w = release.read(name)
        assert w.dtype == np.float32 and w.shape == release.entries[name].shape
        np.testing.assert_array_equal(w, sharded.read(name))
        np.testing.assert_array_equal(w, hub.read("module/" + name))
    assert release.read("global_step").dtype == np.int64


def test_converted_model_computes_what_tensorflow_computed(release, tmp_path):
    transformers = pytest.importorskip("transformers")
    assert _convert(release, tmp_path / "out") == 0
    inputs, ref = _reference_inputs()
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "out").eval()
    theirs = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        o = ours(**inputs, output_hidden_states=True)
        t = theirs(**inputs, output_hidden_states=True)
        pooled = theirs.albert(**inputs).pooler_output
    for got in (o, t):
        np.testing.assert_allclose(got.prediction_logits.numpy(), ref["mlm_logits"], atol=1e-4, rtol=0)
        np.testing.assert_allclose(got.sop_logits.numpy(), ref["sop_logits"], atol=1e-4, rtol=0)
        np.testing.assert_allclose(got.hidden_states[-1].numpy(), ref["sequence_output"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(pooled.numpy(), ref["pooled_output"], atol=1e-4, rtol=0)
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        saved["hidden_act"] == "gelu_new"
        and saved["inner_group_num"] == 2
        and saved["num_hidden_groups"] == 2
    )
    assert saved["architectures"] == ["AlbertForPreTraining"] and saved["layer_norm_eps"] == 1e-12


def test_same_weights_from_tarball_folder_prefix_shards_and_hub_module(
    release, tmp_path, tiny_corpus_and_tokenizer
):
    tarball = tmp_path / "albert_tiny_v2.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(release, arcname="albert_tiny")
    sharded = tmp_path / "sharded"
    shutil.copytree(FIXTURES / "sharded", sharded)
    shutil.copy(release / "albert_config.json", sharded)
    shutil.copy(release / "30k-clean.model", sharded)
    hub = tmp_path / "hub_module"
    shutil.copytree(FIXTURES / "hub", hub)
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", hub / "assets" / "30k-clean.model")
    sources = {"tarball": tarball, "folder": release, "prefix": release / "model.ckpt-best",
               "sharded": sharded / "model.ckpt", "hub": hub}  # fmt: skip
    files = {}
    for kind, src in sources.items():
        out = tmp_path / "converted" / kind
        assert _convert(src, out) == 0, kind
        files[kind] = (out / "model.safetensors").read_bytes()
        assert (out / "spiece.model").read_bytes() == (release / "30k-clean.model").read_bytes()
    assert len(set(files.values())) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no unpacked tarball left


def _google_tensors(config: dict, heads: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {n: (rng.standard_normal(s) * 0.2).astype(np.float32) for n, s in google_shapes(config).items()}
    if config["embedding_size"] == config["hidden_size"]:
        tensors = {n: t for n, t in tensors.items() if "embedding_hidden_mapping_in" not in n}
    if not heads:
        tensors = {n: t for n, t in tensors.items() if not n.startswith(("cls/", "bert/pooler"))}
    return tensors


def _written(folder: Path, config: dict, tokenizer: Path, **kw) -> Path:
    write_bundle(folder / "model.ckpt-best", _google_tensors(config, **kw))
    (folder / "albert_config.json").write_text(json.dumps(config))
    shutil.copy(tokenizer, folder / "30k-clean.model")
    return folder


def test_equal_embedding_and_hidden_sizes_get_the_identity_projection(tmp_path, tiny_corpus_and_tokenizer):
    transformers = pytest.importorskip("transformers")
    config = {**CONFIG, "embedding_size": 16, "num_hidden_groups": 1, "inner_group_num": 1}
    src = _written(tmp_path / "src", config, tiny_corpus_and_tokenizer[1] / "spiece.model")
    assert _convert(src, tmp_path / "out") == 0
    w = load_file(tmp_path / "out" / "model.safetensors")
    np.testing.assert_array_equal(w["albert.encoder.embedding_hidden_mapping_in.weight"], np.eye(16))
    inputs, _ = _reference_inputs()
    with torch.no_grad():
        ours = AlbertForPreTraining.from_pretrained(tmp_path / "out").eval()(**inputs).prediction_logits
        theirs = (
            transformers.AlbertForPreTraining.from_pretrained(tmp_path / "out")
            .eval()(**inputs)
            .prediction_logits
        )
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


def test_encoder_only_checkpoint_converts_without_heads(tmp_path, tiny_corpus_and_tokenizer):
    src = _written(tmp_path / "src", CONFIG, tiny_corpus_and_tokenizer[1] / "spiece.model", heads=False)
    assert _convert(src, tmp_path / "out") == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["AlbertModel"]
    assert not [n for n in load_file(tmp_path / "out" / "model.safetensors") if n.startswith("predictions")]


def test_tokenizer_gives_the_released_models_ids(tmp_path, albert_data):
    transformers = pytest.importorskip("transformers")
    import sentencepiece as spm

    released = albert_data / "tokenizer" / "albert-30k" / "spiece.model"
    config = {**CONFIG, "vocab_size": 30000, "embedding_size": 2}
    assert _convert(_written(tmp_path / "src", config, released), tmp_path / "out") == 0
    sp = spm.SentencePieceProcessor(model_file=str(released))
    text = "The quick brown fox jumped over the lazy dog's back, twice; albert-lm converts it."
    assert AlbertTokenizer.from_pretrained(tmp_path / "out").encode(text) == [2, *sp.encode(text.lower()), 3]
    # transformers 5 splits pieces after a hyphen its own way (docs/data.md), so its check avoids one.
    plain = "The quick brown fox jumped over the lazy dog's back, twice; it converts."
    ids = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")(plain)["input_ids"]
    assert ids == [2, *sp.encode(plain.lower()), 3]


# --------------------------------------------------------------------------- damaged input
def _damage_data(folder: Path) -> None:
    data = folder / "model.ckpt-best.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    data.write_bytes(bytes(raw))


def _truncate_data(folder: Path) -> None:
    data = folder / "model.ckpt-best.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-100])


def _bad_magic(folder: Path) -> None:
    index = folder / "model.ckpt-best.index"
    raw = bytearray(index.read_bytes())
    raw[-1] ^= 0xFF
    index.write_bytes(bytes(raw))


def _flip_index(folder: Path) -> None:
    index = folder / "model.ckpt-best.index"
    raw = bytearray(index.read_bytes())
    raw[200] ^= 0x01
    index.write_bytes(bytes(raw))


def _config(**changes):
    def change(folder: Path) -> None:
        (folder / "albert_config.json").write_text(json.dumps({**CONFIG, **changes}))

    return change


def _extra_tensor(folder: Path) -> None:
    tensors = _google_tensors(CONFIG)
    tensors["bert/encoder/transformer/group_0/inner_group_0/adapter/kernel"] = np.zeros((2, 2), np.float32)
    write_bundle(folder / "model.ckpt-best", tensors)


DAMAGE = {
    "flipped byte in a data file": (_damage_data, "model.ckpt-best.data-00000-of-00001", "checksum mismatch"),
    "truncated data file": (_truncate_data, "model.ckpt-best.data-00000-of-00001", "truncated"),
    "missing data shard": (
        lambda f: (f / "model.ckpt-best.data-00000-of-00001").unlink(),
        "data-00000",
        "missing",
    ),
    "missing index": (
        lambda f: (f / "model.ckpt-best.index").unlink(),
        "albert_tiny",
        "no TensorFlow checkpoint",
    ),
    "wrong magic number": (_bad_magic, "model.ckpt-best.index", "wrong magic number"),
    "flipped byte in the index": (_flip_index, "model.ckpt-best.index", "checksum mismatch"),
    "unknown config field": (_config(use_position_bias=True), "albert_config.json", "use_position_bias"),
    "unimplemented structure": (_config(net_structure_type=1), "albert_config.json", "net_structure_type"),
    "unimplemented activation": (_config(hidden_act="tanh"), "albert_config.json", "hidden_act"),
    "config of another model": (
        _config(hidden_size=32, intermediate_size=64),
        "model.ckpt-best.index",
        "shape",
    ),
    "unknown tensor": (_extra_tensor, "model.ckpt-best.index", "adapter/kernel"),
    "no tokenizer": (lambda f: (f / "30k-clean.model").unlink(), "--tokenizer", "SentencePiece model"),
    "tokenizer of another vocabulary": (_config(vocab_size=300), "30k-clean.model", "vocab_size 300"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_input_is_one_clear_error_and_leaves_nothing(case, release, tmp_path, capsys):
    damage, names, says = DAMAGE[case]
    damage(release)
    out = tmp_path / "out"
    assert _convert(release, out) == 1
    err = capsys.readouterr().err
    assert names in err and says in err, err
    assert "Traceback" not in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["albert_tiny"]


def test_damaged_tarball_and_refused_outputs(release, tmp_path, capsys):
    tarball = tmp_path / "albert.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(release, arcname="albert_tiny")
    tarball.write_bytes(tarball.read_bytes()[:-2000])
    assert _convert(tarball, tmp_path / "out") == 1
    assert "albert.tar.gz" in capsys.readouterr().err and not (tmp_path / "out").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert _convert(release, tmp_path / "full") == 1
    assert "--overwrite" in capsys.readouterr().err and (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert _convert(release, release / "out") == 1  # inside the source: refused before anything is written
    assert not (release / "out").exists()
    assert _convert(release, tmp_path / "full", "--overwrite") == 0
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer_config.json",
    ]
    assert _convert(tmp_path / "full", tmp_path / "again") == 1  # what convert made: a model folder
    assert "no conversion needed" in capsys.readouterr().err and not (tmp_path / "again").exists()


def test_reader_refuses_what_it_cannot_read(tmp_path):
    write_bundle(tmp_path / "ck", {"a": np.zeros(3, np.float32)})
    (tmp_path / "ck.index").write_bytes(b"short")
    with pytest.raises(CheckpointError, match="too short"):
        TensorBundle(tmp_path / "ck")


@pytest.mark.slow
def test_xxlarge_sized_checkpoint_streams_in_bounded_memory(tmp_path, tiny_corpus_and_tokenizer):
    """235M parameters (albert-xxlarge's shape, 0.94 GB) convert with peak RSS under 1.5x the checkpoint."""
    config = {**CONFIG, "vocab_size": 200, "embedding_size": 128, "hidden_size": 4096, "num_attention_heads": 64,
              "intermediate_size": 16384, "num_hidden_groups": 1, "inner_group_num": 1, "num_hidden_layers": 12,
              "max_position_embeddings": 512}  # fmt: skip
    src = tmp_path / "src"
    src.mkdir()
    tensors = {n: np.full(s, 0.01, np.float32) for n, s in google_shapes(config).items()}
    write_bundle(src / "model.ckpt-best", tensors)
    del tensors
    (src / "albert_config.json").write_text(json.dumps(config))
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", src / "30k-clean.model")
    size = (src / "model.ckpt-best.data-00000-of-00001").stat().st_size
    code = (
        "import re, sys\nfrom albert_lm.cli import main\n"
        f"rc = main(['convert', '--from-tf', {str(src)!r}, '--output', {str(tmp_path / 'out')!r}])\n"
        # VmHWM, the peak of this process's own memory (ru_maxrss would count the forking parent's)
        "status = open('/proc/self/status').read()\n"
        "print(int(re.search(r'VmHWM:\\s*(\\d+) kB', status).group(1)) * 1024)\nsys.exit(rc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    peak = int(done.stdout.split()[-1])
    assert (tmp_path / "out" / "model.safetensors").stat().st_size > size
    assert peak < 1.5 * size, f"peak RSS {peak / 1e9:.2f} GB for a {size / 1e9:.2f} GB checkpoint"


def test_no_tensorflow_in_the_package():
    package = Path(__file__).resolve().parents[1] / "albert_lm"
    imports = [p for p in package.rglob("*.py") if "import tensorflow" in p.read_text()]
    assert not imports


# --------------------------------------------------------------------------- hostile input
def _refused(capsys, src: Path, out: Path, *words: str) -> str:
    """Converting `src` fails with one line holding every one of `words`, and leaves no output."""
    assert _convert(src, out) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), err
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
    return err


def _poisoned(name: str, value: float) -> dict[str, np.ndarray]:
    tensors = _google_tensors(CONFIG)
    tensors[name].reshape(-1)[tensors[name].size // 2] = value
    return tensors


EMBEDDINGS = "bert/embeddings/word_embeddings"
DATA_FILE = "model.ckpt-best.data-00000-of-00001"
FFN = "bert/encoder/transformer/group_1/inner_group_0/ffn_1/intermediate/dense/kernel"
GAMMA = "bert/embeddings/LayerNorm/gamma"
NOT_WEIGHTS = {
    "NaN": (lambda: _poisoned(EMBEDDINGS, np.nan), EMBEDDINGS, DATA_FILE, "holds NaN"),
    "infinity": (lambda: _poisoned(FFN, -np.inf), FFN, DATA_FILE, "holds an infinity"),
    "int32": (lambda: {**_google_tensors(CONFIG), EMBEDDINGS: np.ones((200, 8), np.int32)}, EMBEDDINGS,
              "model.ckpt-best.index", "is int32"),
    "bool": (lambda: {**_google_tensors(CONFIG), GAMMA: np.ones(8, bool)}, GAMMA, "model.ckpt-best.index", "is bool"),
    "uint8": (lambda: {**_google_tensors(CONFIG), GAMMA: np.ones(8, np.uint8)}, GAMMA, "model.ckpt-best.index",
              "is uint8"),
    "step counter of three": (lambda: {**_google_tensors(CONFIG), "global_step": np.arange(3)}, "global_step",
                              "model.ckpt-best.index", "one integer"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(NOT_WEIGHTS))
def test_weights_that_are_not_weights_are_refused_naming_the_tensor(
    case, tmp_path, capsys, tiny_corpus_and_tokenizer
):
    make, tensor, file, says = NOT_WEIGHTS[case]
    src = tmp_path / "src"
    write_bundle(src / "model.ckpt-best", make())
    (src / "albert_config.json").write_text(json.dumps(CONFIG))
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", src / "30k-clean.model")
    _refused(capsys, src, tmp_path / "out", str(src / file), repr(tensor), says)


def test_float16_bfloat16_and_float64_widen_or_narrow_exactly_and_non_finite_ones_are_refused(
    release, tmp_path, capsys
):
    tensors = _google_tensors(CONFIG)
    weights = [n for n, a in tensors.items() if a.dtype == np.float32]
    half = {n: a.astype(np.float16) if n in weights else a for n, a in tensors.items()}
    double = {n: a.astype(np.float64) if n in weights else a for n, a in tensors.items()}
    sources = {  # kind: (tensors, writer options, what the embeddings become, a value float32 cannot be)
        "float16": (half, {}, half[EMBEDDINGS].astype(np.float32), np.inf),
        "bfloat16": (tensors, {"bfloat16": weights}, tensors[EMBEDDINGS].view(np.uint32) & 0xFFFF0000, np.nan),
        "float64": (double, {}, tensors[EMBEDDINGS], 1e300),
    }  # fmt: skip
    for kind, (written, options, expected, bad) in sources.items():
        src = tmp_path / kind
        shutil.copytree(release, src, ignore=shutil.ignore_patterns("model.ckpt-best*"))
        write_bundle(src / "model.ckpt-best", written, **options)
        assert _convert(src, tmp_path / f"out-{kind}") == 0, kind
        got = load_file(tmp_path / f"out-{kind}" / "model.safetensors")[
            "albert.embeddings.word_embeddings.weight"
        ]
        np.testing.assert_array_equal(got, expected.view(np.float32))
        written[FFN] = written[FFN].copy()
        written[FFN].reshape(-1)[7] = bad
        write_bundle(src / "model.ckpt-best", written, **options)
        _refused(capsys, src, tmp_path / "out", str(src / DATA_FILE), repr(FFN), "value #")


def _tarball(path: Path, folder: Path, *extra: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname="albert_tiny")
        for info in extra:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return path


def test_messages_name_the_archive_and_its_member_not_the_unpacked_copy(release, tmp_path, capsys):
    data, config = "albert_tiny/model.ckpt-best.data-00000-of-00001", "albert_tiny/albert_config.json"
    write_bundle(release / "model.ckpt-best", _poisoned(EMBEDDINGS, np.nan))
    tarball = _tarball(tmp_path / "nan.tar.gz", release)
    err = _refused(capsys, tarball, tmp_path / "out", f"{tarball}:{data}: tensor {EMBEDDINGS!r} holds NaN")
    assert ".out.src-" not in err
    (release / "albert_config.json").write_text(json.dumps({**CONFIG, "adapters": 1}))
    tarball = _tarball(tmp_path / "config.tar.gz", release)
    _refused(capsys, tarball, tmp_path / "out", f"{tarball}:{config}: unknown field(s) adapters")
    (release / "30k-clean.model").unlink()
    tarball = _tarball(tmp_path / "no-tokenizer.tar.gz", release)
    err = _refused(capsys, tarball, tmp_path / "out", f"{tarball}:albert_tiny", "--tokenizer")
    assert ".out.src-" not in err


def _member(name: str, kind: bytes, link: str = "", size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size
    return info


def test_hostile_archive_members_are_refused_and_nothing_is_written_outside(release, tmp_path, capsys):
    escaped = tmp_path / "escaped"
    members = {
        "climbs out": (_member("albert_tiny/../../escaped/x.txt", tarfile.REGTYPE, size=1), "climbing out"),
        "absolute": (_member(str(escaped / "y.txt"), tarfile.REGTYPE, size=1), "absolute path"),
        "symbolic link": (_member("albert_tiny/albert_config.json", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
        "hard link": (_member("albert_tiny/passwd", tarfile.LNKTYPE, "/etc/passwd"), "hard link"),
        "fifo": (_member("albert_tiny/pipe", tarfile.FIFOTYPE), "a pipe"),
        "device": (_member("albert_tiny/zero", tarfile.CHRTYPE), "a device"),
    }  # fmt: skip
    for case, (info, says) in members.items():
        tarball = _tarball(tmp_path / f"{case}.tar.gz", release, info)
        _refused(capsys, tarball, tmp_path / "out", str(tarball), repr(info.name), says)
        assert not escaped.exists(), case


def _gzip_bomb(path: Path, members: list[tuple[str, bytes | int]]) -> Path:
    """A .tar.gz of real members (bytes) and runs of zeros (a size): gzip members of 16 MiB of zeros,
    compressed once and repeated, so gigabytes take a few megabytes."""
    run = gzip.compress(b"\0" * (16 << 20))
    with open(path, "wb") as out:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = content if isinstance(content, int) else len(content)
            out.write(gzip.compress(info.tobuf(tarfile.GNU_FORMAT)))
            out.write(run * (content >> 24) if isinstance(content, int) else gzip.compress(content))
            out.write(gzip.compress(b"\0" * (-info.size % 512)))
        out.write(gzip.compress(b"\0" * 1024))
    return path


def test_gzip_bombs_are_refused_before_they_are_unpacked(release, tmp_path, capsys, monkeypatch):
    from albert_lm.model import tf_archive

    files = [(f"albert_tiny/{p.name}", p.read_bytes()) for p in sorted(release.iterdir()) if p.is_file()]
    index = [(n, b) for n, b in files if n.endswith(".index")]
    data = [(n, b) for n, b in files if ".data-" in n]
    rest = [(n, b) for n, b in files if (n, b) not in index + data]
    # the data file bigger than its index says, the index first: refused by what the index needs
    bomb = _gzip_bomb(tmp_path / "after-index.tar.gz", [*rest, *index, (data[0][0], 1 << 30)])
    _refused(capsys, bomb, tmp_path / "out", str(bomb), "1,073,741,824 bytes", "index puts only")
    # before its index, or a stray member: refused by the archive's size (the floor lowered, so that
    # a regression unpacks 64 MiB here, not gigabytes)
    monkeypatch.setattr(tf_archive, "_FLOOR", 1 << 20)
    for name, members in (
        ("first", [(data[0][0], 64 << 20), *rest, *index]),
        ("stray", [*files, ("albert_tiny/notes.bin", 64 << 20)]),
    ):
        bomb = _gzip_bomb(tmp_path / f"{name}.tar.gz", members)
        _refused(capsys, bomb, tmp_path / "out", str(bomb), "gzip bomb", "67,108,864 bytes")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".tar.gz")) == ["albert_tiny"]


def _declared(**declare) -> Callable[[Path], None]:
    def change(folder: Path) -> None:
        write_bundle(folder / "model.ckpt-best", _google_tensors(CONFIG), declare=declare)

    return change


HOSTILE_INDEX = {
    "offset past the data file": (_declared(**{FFN: {"offset": 10**9}}), "data-00000", FFN),
    "10^12 values, bytes to match": (
        _declared(**{EMBEDDINGS: {"shape": (10**6, 10**6), "size": 4 * 10**12}}), "data-00000", EMBEDDINGS
    ),
    "10^12 values, a few bytes": (_declared(**{EMBEDDINGS: {"shape": (10**6, 10**6)}}), "index", "declares shape"),
    "a shape whose product wraps int64": (
        _declared(**{GAMMA: {"shape": (1 << 32, 1 << 32, 4), "size": 0}}), "index", "declares shape"
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOSTILE_INDEX))
def test_hostile_index_entries_are_refused_before_any_array_is_made(
    case, release, tmp_path, capsys, monkeypatch
):
    damage, file, says = HOSTILE_INDEX[case]
    damage(release)
    with pytest.raises(CheckpointError, match=file) as caught:
        TensorBundle(release / "model.ckpt-best")  # the index is checked whole when it is opened
    assert says in str(caught.value)

    def no_arrays(*args, **kwargs):
        raise AssertionError("an array was made for a checkpoint that was refused")

    monkeypatch.setattr(np, "empty", no_arrays)
    _refused(capsys, release, tmp_path / "out", file, says)


def test_absurd_config_values_are_refused_naming_the_field(release, tmp_path, capsys):
    for field, value in (("hidden_dropout_prob", 5), ("num_hidden_layers", 10**12), ("embedding_size", None)):
        (release / "albert_config.json").write_text(json.dumps({**CONFIG, field: value}))
        _refused(capsys, release, tmp_path / "out", str(release / "albert_config.json"), field)
