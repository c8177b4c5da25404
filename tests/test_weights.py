"""Bad checkpoints are refused with an error that names the file and each offending tensor."""

from __future__ import annotations

import functools
import os
import pickle

import pytest
import torch
from safetensors.torch import load_file, save_file

from albert_lm import AlbertForPreTraining, AlbertModel


@pytest.fixture
def tiny(tiny_config):
    """The shared tiny model (conftest.py) with the shapes the messages below name."""
    return functools.partial(tiny_config, embedding_size=8, max_position_embeddings=16)


@pytest.fixture
def saved(tmp_path, tiny):
    AlbertForPreTraining(tiny()).save_pretrained(tmp_path)
    return tmp_path


def test_missing_and_misshaped_tensors_are_all_named(saved):
    file = saved / "model.safetensors"
    state = load_file(file)
    del state["albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight"]
    state["albert.embeddings.position_embeddings.weight"] = torch.zeros(8, 8)
    state["albert.encoder.something_new.weight"] = torch.zeros(2)
    save_file(state, file)
    with pytest.raises(ValueError) as e:
        AlbertForPreTraining.from_pretrained(saved)
    msg = str(e.value)
    assert str(file) in msg
    # named as the file names them (transformers' names), not as albert-lm holds them inside
    assert "missing: albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight" in msg
    assert (
        "wrong shape: albert.embeddings.position_embeddings.weight (checkpoint (8, 8), model (16, 8))" in msg
    )
    assert "unexpected: albert.encoder.something_new.weight" in msg


def test_a_bare_models_file_missing_one_of_query_key_value_names_it_and_every_other_misfit(tmp_path, tiny):
    AlbertModel(tiny()).save_pretrained(tmp_path)  # transformers saves a bare model without "albert."
    file = tmp_path / "model.safetensors"
    state = load_file(file)
    del state["encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight"]
    state["encoder.bogus.weight"] = torch.zeros(2)
    save_file(state, file)
    with pytest.raises(ValueError) as e:
        AlbertModel.from_pretrained(tmp_path)
    lines = str(e.value).splitlines()[1:]
    assert lines == [
        "  missing: encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight",
        "  unexpected: encoder.bogus.weight",
    ]


def test_a_loaded_model_answers_the_same_twice(saved, tiny):
    """from_pretrained gave a model in training mode: dropout on, so two calls on one input differed
    (transformers' comes back in eval mode). Training calls .train() itself."""
    AlbertForPreTraining(tiny(hidden_dropout_prob=0.5)).save_pretrained(saved)
    model = AlbertForPreTraining.from_pretrained(saved)
    assert not model.training
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).prediction_logits, model(input_ids=ids).prediction_logits)


def test_position_ids_buffer_of_old_files_is_ignored(saved):
    file = saved / "model.safetensors"
    state = load_file(file)
    state["albert.embeddings.position_ids"] = torch.arange(16)[None]
    save_file(state, file)
    AlbertForPreTraining.from_pretrained(saved)  # no error


def test_truncated_file_is_refused(saved):
    file = saved / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors: not a readable safetensors file"):
        AlbertForPreTraining.from_pretrained(saved)


def test_empty_folder_says_what_it_looked_for(tiny, tmp_path):
    tiny().save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no weights found.*model.safetensors"):
        AlbertModel.from_pretrained(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"")  # `albert export`'s folder, given to predict
    with pytest.raises(FileNotFoundError, match="it is an ONNX export .* ONNX Runtime"):
        AlbertModel.from_pretrained(tmp_path)


def test_a_failed_weight_write_keeps_the_old_file_and_leaves_no_temporary(saved, monkeypatch):
    from albert_lm.model import weights

    before = (saved / "model.safetensors").read_bytes()

    def crash(tensors, path, metadata=None):
        save_file(tensors, path, metadata)
        raise KeyboardInterrupt  # killed after the temporary is written, before the rename

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", crash)  # weights imports it when it writes
    with pytest.raises(KeyboardInterrupt):
        weights.write_weights(saved / "model.safetensors", {"x": torch.zeros(3)})
    assert (saved / "model.safetensors").read_bytes() == before
    assert sorted(f.name for f in saved.iterdir()) == ["config.json", "model.safetensors"]


def test_pytorch_bin_with_plain_tensors_loads(tiny, tmp_path):
    model = AlbertForPreTraining(tiny())
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    os.remove(tmp_path / "model.safetensors")
    torch.save(state, tmp_path / "pytorch_model.bin")
    back = AlbertForPreTraining.from_pretrained(tmp_path)
    torch.testing.assert_close(
        back.albert.encoder.attention[0].qkv.weight, model.albert.encoder.attention[0].qkv.weight
    )


class _Exploit:
    """Unpickling this calls os.system: a checkpoint from a stranger that would run code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # our hostile file uses protocol 4 on purpose
def test_pickle_that_would_run_code_is_refused_and_never_runs(tiny, tmp_path):
    tiny().save_pretrained(tmp_path)
    marker = tmp_path / "pwned"
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"albert.embeddings.word_embeddings.weight": _Exploit(str(marker))}, f)
    with pytest.raises(ValueError, match="pytorch_model.bin: refused to load"):
        AlbertModel.from_pretrained(tmp_path)
    assert not marker.exists()


def test_weights_file_gets_the_same_permissions_as_the_config(saved):
    import stat

    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in saved.iterdir()}
    assert mode["model.safetensors"] == mode["config.json"]  # not private: others may read what we share


def test_identical_saves_in_separate_processes_write_identical_bytes(tmp_path):
    """safetensors writes its header's metadata from a hash map seeded anew in each process: with more than
    one key, two identical runs wrote files whose bytes differed. The native layout and the early-exit
    heads (which once carried a second key) come out byte for byte the same from four processes."""
    import hashlib
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from pathlib import Path\n"
        "from albert_lm import AlbertConfig, AlbertModel\n"
        "from albert_lm.model.early_exit import ExitHeads\n"
        "torch.manual_seed(0)\n"
        "c = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_attention_heads=2,\n"
        "                 intermediate_size=32, num_hidden_layers=3, max_position_embeddings=16, num_labels=2)\n"
        "out = Path(sys.argv[1])\n"
        "AlbertModel(c).save_pretrained(out, layout='native')\n"
        "ExitHeads(c).save(out)\n"
    )
    digests = set()
    for i in range(4):
        out = tmp_path / str(i)
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, cwd=tmp_path)
        files = sorted(p for p in out.iterdir() if p.suffix == ".safetensors")
        assert len(files) == 2, files
        digests.add(tuple(hashlib.sha256(p.read_bytes()).hexdigest() for p in files))
    assert len(digests) == 1
