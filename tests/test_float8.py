"""`albert pretrain --float8` (torchao's float8 linear layers) and `--torch-compile`, as far as a CPU
can check them: the conversion keeps the parameters and tracks bf16, a machine without float8 is told
so before anything is written, and a compiled encoder trains and saves under the plain names."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from conftest import TINY_MODEL
from test_pretrain import SyntheticData, tiny_run

from albert_lm.kernels.float8 import check_float8
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.pretrain import pretrain


def _tiny_model() -> AlbertForPreTraining:
    torch.manual_seed(0)
    return AlbertForPreTraining(AlbertConfig(**TINY_MODEL))  # its sizes are multiples of 16


def test_float8_layers_keep_the_parameters_and_follow_bf16():
    pytest.importorskip("torchao.float8")
    from albert_lm.kernels.float8 import convert_to_float8

    model = _tiny_model()
    plain = copy.deepcopy(model)
    before = {k: v.data_ptr() for k, v in model.state_dict().items()}
    assert convert_to_float8(model.albert.encoder) == 4  # qkv, out, up, down of the one shared layer
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == before
    ids = torch.randint(5, TINY_MODEL["vocab_size"], (4, 32), generator=torch.Generator().manual_seed(1))
    weights = torch.linspace(
        -1, 1, TINY_MODEL["hidden_size"]
    )  # a loss whose gradient a LayerNorm does not cancel
    results = []
    for m in (plain, model):
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = m.albert(ids).last_hidden_state
        except (RuntimeError, NotImplementedError) as e:  # a torch without CPU float8 products
            pytest.skip(f"float8 products do not run on this CPU build: {e}")
        (out.float() * weights).sum().backward()
        results.append((out.float(), m.albert.encoder.ffn[0].up.weight.grad.flatten()))
    (ref, ref_grad), (f8, f8_grad) = results
    assert float((ref - f8).abs().max()) < 0.2  # float8's 3 mantissa bits, through 2 layers
    assert float(torch.nn.functional.cosine_similarity(ref_grad, f8_grad, 0)) > 0.99
    assert type(model.albert.encoder.ffn[0].up).__name__ == "Float8EncoderLinear"


def test_float8_without_a_float8_gpu_is_a_clear_error_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="needs a CUDA GPU with float8"):
        check_float8(torch.device("cpu"))
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="--float8"):
        pretrain(tiny_run(out, float8=True, device="cpu"), train_dataset=SyntheticData())
    assert not out.exists()


def test_a_compiled_encoder_trains_like_the_plain_one_and_saves_plain_names(
    tmp_path, monkeypatch, one_thread
):
    # dynamo captures the real graphs; the eager backend runs them without a C++ compiler
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    plain = pretrain(tiny_run(tmp_path / "plain", max_steps=4), train_dataset=SyntheticData())
    compiled = pretrain(
        tiny_run(tmp_path / "compiled", max_steps=4, torch_compile=True), train_dataset=SyntheticData()
    )
    assert compiled.step == plain.step == 4
    from safetensors.torch import load_file

    a = load_file(plain.output / "model.safetensors")
    b = load_file(compiled.output / "model.safetensors")
    assert a.keys() == b.keys()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
