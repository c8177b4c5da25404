"""Hub ids wherever a model folder is accepted (`albert_lm.hub`), without a network: a hub cache laid out
as huggingface_hub lays it out ($HF_HOME/hub/models--org--name/refs/REF and snapshots/COMMIT/...), read
offline; and a stand-in for snapshot_download for what is fetched and how the hub's refusals read."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
import torch
from conftest import finetune_argv, labelled_rows, two_step_finetune_argv
from safetensors.torch import load_file

from albert_lm.cli import main
from albert_lm.hub import resolve_model
from albert_lm.model.heads import AlbertForPreTraining, AlbertForSequenceClassification
from albert_lm.training.pretrain_config import PretrainConfig


def _commit(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def put_in_cache(cache: Path, repo: str, folder: Path, refs: tuple[str, ...] = ("main",)) -> str:
    """`folder`'s files as the snapshot of `repo` at a commit, with `refs` pointing at it: the layout
    huggingface_hub reads offline (no blobs needed: it reads refs/ and snapshots/ only)."""
    commit = _commit(f"{repo}:{sorted(p.name for p in folder.iterdir())}")
    root = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(folder, root / "snapshots" / commit)
    for ref in refs:
        (root / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)  # no newline: the hub reads the file as the commit
    return commit


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """An empty hub cache under HF_HOME, offline. huggingface_hub reads its environment once, at import
    (a fresh process honours it: see the subprocess test), so its constants are set here too."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    (home / "hub").mkdir(parents=True)
    return home / "hub"


@pytest.fixture
def tiny_model(tmp_path, tiny_pretrained) -> Path:
    """A random tiny ALBERT with the session's 200-piece tokenizer, saved as a pretraining checkpoint (this
    test's own copy of `tiny_pretrained`)."""
    return Path(shutil.copytree(tiny_pretrained, tmp_path / "tiny"))


@pytest.fixture
def classifier(tmp_path, tiny_config, tiny_model) -> Path:
    """A random tiny two-label classifier with the same tokenizer, as a fine-tuning run's best/ folder."""
    torch.manual_seed(1)
    config = tiny_config(vocab_size=200)
    config.id2label = {0: "neg", 1: "pos"}
    folder = tmp_path / "classifier"
    AlbertForSequenceClassification(config).save_pretrained(folder)
    shutil.copy(tiny_model / "spiece.model", folder / "spiece.model")
    settings = {"task": "classification", "labels": ["neg", "pos"], "max_seq_length": 32}
    (folder / "finetune_config.json").write_text(json.dumps(settings))
    return folder


def _own_data(folder: Path) -> Path:
    words = {"pos": ["kala", "bime", "tora", "nesu"], "neg": ["dupa", "lemo", "savi", "rogu"]}
    return labelled_rows(folder, words, {"train": 16, "dev": 8})


# --------------------------------------------------------------------------- the commands, offline
def test_finetune_evaluate_and_predict_take_hub_ids(hub, tiny_model, tmp_path, capsys, caplog):
    commit = put_in_cache(hub, "org/tiny", tiny_model)
    data, out = _own_data(tmp_path / "data"), tmp_path / "ft"
    args = two_step_finetune_argv("org/tiny", data, out, "--max-seq-length", "32", "--precision", "fp32")
    with caplog.at_level(logging.INFO, logger="albert_lm.hub"):
        assert main(args) == 0
    assert f"--model: hub org/tiny@main (commit {commit}), cached at" in caplog.text
    capsys.readouterr()
    saved = json.loads((out / "best" / "finetune_config.json").read_text())
    assert saved["model_given"] == "org/tiny"  # what was typed, and the snapshot it was read from
    assert saved["model"] == str(hub / "models--org--tiny" / "snapshots" / commit)

    # the fine-tuned model, published: predict and evaluate read it by commit and by tag
    tuned = put_in_cache(hub, "org/tuned", out / "best", refs=("main", "v1"))
    rows = tmp_path / "in.txt"
    rows.write_text("kala bime tora\ndupa lemo\n")
    for model in (f"org/tuned@{tuned}", "org/tuned@v1"):
        assert main(["predict", "--model", model, "--input", str(rows)]) == 0
        predicted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [set(p["probabilities"]) for p in predicted] == [{"neg", "pos"}] * 2
    assert main(["evaluate", "--task", "classification", "--model", "org/tuned", "--data", str(data)]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_export_takes_a_hub_id(hub, classifier, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    put_in_cache(hub, "org/classifier", classifier)
    out = tmp_path / "onnx"
    assert main(["export", "--model", "org/classifier", "--output", str(out)]) == 0
    assert {"model.onnx", "spiece.model", "finetune_config.json"} <= {p.name for p in out.iterdir()}


def test_pretrain_init_from_a_hub_id(hub, tiny_model, tiny_corpus_and_tokenizer, tmp_path):
    commit = put_in_cache(hub, "org/tiny", tiny_model)
    snapshot = str(hub / "models--org--tiny" / "snapshots" / commit)
    assert PretrainConfig.load(init_from="org/tiny").init_from == snapshot
    out = tmp_path / "tapt"
    argv = ["pretrain", "--init-from", "org/tiny", "--text", str(tiny_corpus_and_tokenizer[0]), "--output",
            str(out), "--batch-size", "4", "--max-steps", "1", "--no-tensorboard", "--no-plot"]  # fmt: skip
    assert main(argv) == 0  # no --preset: the shape is the hub model's (read from its snapshot)
    assert json.loads((out / "pretrain_config.json").read_text())["init_from"] == snapshot
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 32


def test_a_missing_id_is_one_clear_error(hub, tiny_model, tmp_path, capsys):
    rows = tmp_path / "in.txt"
    rows.write_text("kala\n")
    for argv in (
        ["predict", "--model", "org/absent", "--input", str(rows)],
        finetune_argv("rte", "org/absent", rows, tmp_path / "o"),
        ["glue", "--model", "org/absent", "--data", str(tmp_path), "--output", str(tmp_path / "g")],
    ):
        assert main(argv) == 1  # bad input: albert_lm.cli.main's code for every refused input
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "org/absent" in err and "HF_HUB_OFFLINE" in err and "hf download org/absent --local-dir" in err
    put_in_cache(hub, "org/tiny", tiny_model)
    with pytest.raises(
        FileNotFoundError, match=r"org/tiny@v9 is not \(completely\) in the hub cache.*--revision v9"
    ):
        resolve_model("org/tiny@v9")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(tiny_model / "config.json", bare / "config.json")
    put_in_cache(hub, "org/bare", bare)
    with pytest.raises(FileNotFoundError, match=r"org/bare@[0-9a-f]{40} .* has no weights"):
        resolve_model("org/bare")
    # neither a local path nor a hub id: the command's own "no such folder" error
    assert main(["predict", "--model", "a/b/c", "--input", str(rows)]) == 1
    assert "no model at a/b/c" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "g").exists()


def test_a_typo_of_a_local_folder_names_the_folder_it_meant(hub, tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_model, tmp_path / "models" / "albert-small-en")
    rows = tmp_path / "in.txt"
    rows.write_text("kala\n")
    assert main(["embed", "--model", "models/albert-smal-en", "--input", str(rows)]) == 1
    err = capsys.readouterr().err
    assert "no such folder; did you mean models/albert-small-en?" in err and "hf download" not in err
    assert (
        main(["embed", "--model", "models/other", "--input", str(rows)]) == 1
    )  # nothing close: the hub's line, which says what the local folder lacks and how it is made
    err = capsys.readouterr().err
    assert "hf download models/other" in err
    assert (
        "no such local folder: models/ holds no other (`albert convert` writes a released model there" in err
    )


def test_a_local_folder_named_like_the_id_wins(hub, tiny_model, classifier, tmp_path, monkeypatch, caplog):
    put_in_cache(hub, "org/tiny", tiny_model)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(classifier, tmp_path / "org" / "tiny")
    with caplog.at_level(logging.INFO, logger="albert_lm.hub"):
        assert resolve_model("org/tiny") == Path("org/tiny")
    assert "--model: local folder org/tiny" in caplog.text
    # a released model's id of before the hub had owners: named as it is now, with no look-up
    with pytest.raises(FileNotFoundError, match="hub id is albert/albert-base-v2"):
        resolve_model("albert-base-v2")
    (tmp_path / "albert-base-v2").mkdir()  # a folder of that name wins, as above
    assert resolve_model("albert-base-v2") == Path("albert-base-v2")


def test_a_pickle_only_repo_loads(hub, tiny_model, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model, folder)
    state = load_file(folder / "model.safetensors")
    os.remove(folder / "model.safetensors")
    torch.save(state, folder / "pytorch_model.bin")
    put_in_cache(hub, "org/pickled", folder)
    model = AlbertForPreTraining.from_pretrained(resolve_model("org/pickled"))
    word = model.albert.embeddings.word_embeddings.weight
    torch.testing.assert_close(word, state["albert.embeddings.word_embeddings.weight"])


class _Exploit:
    """Unpickling this calls os.system: a hub checkpoint that would run code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_repo_with_a_malicious_pickle_is_refused(hub, classifier, tmp_path, capsys):
    folder, marker = tmp_path / "evil", tmp_path / "pwned"
    shutil.copytree(classifier, folder)
    os.remove(folder / "model.safetensors")
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"albert.embeddings.word_embeddings.weight": _Exploit(str(marker))}, f)
    put_in_cache(hub, "org/evil", folder)
    rows = tmp_path / "in.txt"
    rows.write_text("kala\n")
    assert main(["predict", "--model", "org/evil", "--input", str(rows)]) == 1
    assert "pytorch_model.bin: refused to load" in capsys.readouterr().err
    assert not marker.exists()


def test_a_fresh_process_honours_hf_home_and_stays_light(hub, tiny_model, tmp_path):
    commit = put_in_cache(hub, "org/tiny", tiny_model)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(hub.parent), HF_HUB_OFFLINE="1")
    code = (
        "import sys, albert_lm; light = 'huggingface_hub' not in sys.modules; "
        "from albert_lm.hub import resolve_model; print(light, resolve_model('org/tiny'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", str(hub / "models--org--tiny" / "snapshots" / commit)]


# --------------------------------------------------------------------------- what is fetched (a stand-in hub)
class FakeHub:
    """snapshot_download over folders on disk: repo -> folder; copies what the patterns allow into a
    snapshot folder, as the hub does, and records every call."""

    def __init__(self, cache: Path, repos: dict[str, Path]):
        self.cache, self.repos, self.calls = cache, repos, []

    def __call__(self, repo_id: str, *, revision: str | None = None, allow_patterns=None) -> str:
        self.calls.append((repo_id, revision, list(allow_patterns)))
        commit = _commit(repo_id)
        snapshot = self.cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for file in self.repos[repo_id].iterdir():
            if any(fnmatch.fnmatch(file.name, p) for p in allow_patterns):
                shutil.copy(file, snapshot / file.name)
        return str(snapshot)


def test_only_what_albert_reads_is_fetched(hub, tiny_model, tmp_path, monkeypatch):
    both = tmp_path / "both"
    shutil.copytree(tiny_model, both)
    torch.save(load_file(both / "model.safetensors"), both / "pytorch_model.bin")
    for extra in ("README.md", "tf_model.h5", "model.onnx", "tokenizer.json"):
        (both / extra).write_text("not read by albert-lm")
    pickled = tmp_path / "pickled"
    shutil.copytree(both, pickled)
    os.remove(pickled / "model.safetensors")
    fake = FakeHub(hub, {"org/both": both, "org/pickled": pickled})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)

    got = resolve_model("org/both@v2")
    assert sorted(p.name for p in got.iterdir()) == ["config.json", "model.safetensors", "spiece.model"]
    assert [(r, rev) for r, rev, _ in fake.calls] == [("org/both", "v2")]  # the pickle is never fetched
    got = resolve_model("org/pickled")
    assert sorted(p.name for p in got.iterdir()) == ["config.json", "pytorch_model.bin", "spiece.model"]
    assert fake.calls[-1] == ("org/pickled", got.name, ["pytorch_model.bin"])  # second look, by commit
    # a student of a BERT teacher has the teacher's WordPiece files instead of spiece.model: fetched then
    student = tmp_path / "student"
    shutil.copytree(both, student)
    for name in ("spiece.model", "pytorch_model.bin"):
        os.remove(student / name)
    (student / "vocab.txt").write_text("[PAD]\n")
    fake.repos["org/student"] = student
    got = resolve_model("org/student")
    assert sorted(p.name for p in got.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "vocab.txt",
    ]


def _refusal(cls: type[Exception]) -> Exception:
    """The hub's error without the HTTP response its constructor wants (another type in each version)."""
    error = cls.__new__(cls)
    Exception.__init__(error, "404 Client Error")
    return error


def test_the_hubs_refusals_read_as_one_line(hub, monkeypatch):
    from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError

    for cls, expected in (
        (RepositoryNotFoundError, "no such local folder, and no repository org/x on the Hugging Face hub"),
        (RevisionNotFoundError, "the hub repository org/x has no revision 'nope'"),
    ):

        def refuse(*args, cls=cls, **kwargs):
            raise _refusal(cls)

        monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
        with pytest.raises(FileNotFoundError, match=expected) as caught:
            resolve_model("org/x@nope")
        assert caught.value.__suppress_context__  # the hub's traceback stays out of the message


# --------------------------------------------------------------------------- a damaged or hostile cache
def _config_of_another_model(snap: Path, outside: Path) -> None:
    config = json.loads((snap / "config.json").read_text())
    (snap / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))


def _half(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _relink(file: Path, target: Path) -> None:
    file.unlink()
    file.symlink_to(target)


def _snapshot_elsewhere(snap: Path, outside: Path) -> None:
    shutil.rmtree(snap)
    snap.symlink_to(outside, target_is_directory=True)


def _ref_out_of_the_cache(snap: Path, outside: Path) -> None:
    (snap.parents[1] / "refs" / "main").write_text(os.path.relpath(outside, snap.parent))


def _index_not_json(snap: Path, outside: Path) -> None:
    (snap / "model.safetensors").unlink()
    (snap / "model.safetensors.index.json").write_text("{weight_map")


DAMAGED_CACHE = {
    "a config.json of another model": (_config_of_another_model, "config.json", "model_type"),
    "a config.json that is not JSON": (lambda s, o: (s / "config.json").write_text("{nope"), "config.json", "JSON"),
    "truncated weights": (lambda s, o: _half(s / "model.safetensors"), "model.safetensors", "truncated"),
    "weights that are not safetensors": (
        lambda s, o: (s / "model.safetensors").write_bytes(b"garbage!" * 64), "model.safetensors", "damaged"
    ),
    "a config.json linking out of the cache": (
        lambda s, o: _relink(s / "config.json", o / "config.json"), "config.json", "leads outside"
    ),
    "weights linking out of the cache": (
        lambda s, o: _relink(s / "model.safetensors", o / "model.safetensors"), "model.safetensors", "leads outside"
    ),
    "a link to nothing": (lambda s, o: _relink(s / "config.json", o / "gone.json"), "config.json", "does not exist"),
    "the snapshot a link out of the cache": (_snapshot_elsewhere, "snapshots", "lies outside"),
    "refs/main climbing out of the cache": (_ref_out_of_the_cache, "refs/main", "lies outside"),
    "refs/main naming a commit not there": (
        lambda s, o: (s.parents[1] / "refs" / "main").write_text("f" * 40), "refs/main", "no snapshot folder"
    ),
    "an index that is not JSON": (_index_not_json, "model.safetensors.index.json", "JSON"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(DAMAGED_CACHE))
def test_a_damaged_cache_is_one_line_naming_the_id_and_the_file(case, hub, classifier, tmp_path, capsys):
    damage, file, says = DAMAGED_CACHE[case]
    outside = tmp_path / "outside"  # a valid model out of the cache, where hostile links and refs lead
    shutil.copytree(classifier, outside)
    commit = put_in_cache(hub, "org/x", classifier)
    damage(hub / "models--org--x" / "snapshots" / commit, outside)
    rows = tmp_path / "in.txt"
    rows.write_text("kala\n")
    assert (
        main(["predict", "--model", "org/x", "--input", str(rows), "--output", str(tmp_path / "p.jsonl")])
        == 1
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "--model org/x" in err and file in err and says in err, err
    assert not (tmp_path / "p.jsonl").exists()


def test_a_revision_climbing_out_of_the_cache_is_refused(hub, classifier, tmp_path):
    put_in_cache(hub, "org/x", classifier)
    shutil.copytree(classifier, hub / "elsewhere")
    with pytest.raises(ValueError, match=r"'\.\./\.\./elsewhere' is not a branch, tag or commit name"):
        resolve_model("org/x@../../elsewhere")


def test_a_teacher_need_not_be_albert(hub, classifier, tmp_path):
    folder = tmp_path / "bert"
    shutil.copytree(classifier, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    commit = put_in_cache(hub, "org/bert", folder)
    assert resolve_model("org/bert", "--teacher").name == commit
    with pytest.raises(ValueError, match="model_type is 'bert'"):
        resolve_model("org/bert")
