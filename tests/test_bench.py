"""`albert bench`: FLOP counting, the suite's plumbing on albert-tiny, and the command line."""

from __future__ import annotations

import json

import pytest

from albert_lm.bench.ablations import ABLATIONS, MLM_MASKED_ONLY, ablation_row
from albert_lm.bench.runner import compare, format_table, run_suite
from albert_lm.bench.workloads import Workload, encoder_flops
from albert_lm.cli import main
from albert_lm.kernels import hardware, precision
from albert_lm.model.config import AlbertConfig

pytest.importorskip("transformers")


def test_encoder_flops_by_hand():
    # albert-base, one token (batch 1, seq 1): per layer 2*(3*768*768 + 768*768 + 2*768*3072) multiply-adds
    # plus 4*768 for the attention scores and weighted sum; 12 layers; projection 2*128*768.
    cfg = AlbertConfig.from_preset("albert-base")
    per_layer = 2 * (3 * 768 * 768 + 768 * 768 + 2 * 768 * 3072) + 4 * 768
    assert encoder_flops(cfg, 1, 1) == 12 * per_layer + 2 * 128 * 768
    assert encoder_flops(cfg, 8, 128) > 8 * 128 * encoder_flops(cfg, 1, 1)  # attention grows with S^2


@pytest.mark.slow
def test_suite_on_tiny_model_prints_the_table(tmp_path):
    result = run_suite(
        "albert-tiny",
        None,
        repeats=2,
        only=("inference", "int8", "ablations"),
        log=lambda m: None,
        isolate=False,
    )
    assert result["precisions"] == (["fp32", "bf16"] if precision.native_bf16() else ["fp32"])
    facts = result["facts"]
    assert facts["isa"] == hardware.isa_level() and facts["cpu"] == hardware.cpu_info().model
    assert facts["gemm_bf16_vs_fp32"]["fp32_gflops"] > 0
    assert result["kernels"] and all(sum(paths.values()) > 0 for paths in result["kernels"].values())
    rows = result["rows"]
    assert [r["workload"] for r in rows[:3]] == [
        "inference 1 x 128",
        "inference 8 x 128",
        "inference 4 x 512",
    ]
    for r in rows:
        assert r["ours_rate"] > 0 and r["theirs_rate"] > 0 and r["ratio"] > 0
        if r["precision"] == "fp32":
            assert float(r["check"].split()[-1]) <= 1e-5  # same weights, same outputs
    int8 = [r for r in rows if r["precision"] == "int8"]  # quantize_int8 against transformers fp32
    assert [r["workload"] for r in int8] == ["inference 1 x 128", "inference 8 x 128", "inference 4 x 512"]
    assert all(0 < float(r["check"].split()[-1]) < 0.5 for r in int8)  # int8: close, not equal
    expected = [a for a in ABLATIONS if a[1] != "sst2" and a[2] in result["precisions"]]
    assert len(result["ablations"]) == len(expected)  # the SST-2 one needs the data
    table = format_table(result)
    assert "| inference 8 x 128 | fp32 |" in table and "kernels chosen by timing" in table
    assert "| inference 8 x 128 | int8 |" in table
    header = next(line for line in table.splitlines() if line.endswith("| check |"))
    rows_of = [line for line in table.splitlines() if line.startswith("| inference")]
    assert {line.count("|") for line in rows_of} == {header.count("|")}  # "max |diff|" adds no column
    from albert_lm.bench.runner import _noisy

    assert _noisy({"ours": [1.0, 1.1], "theirs": [1.0, 1.2]}) == ""
    assert _noisy({"ours": [1.0, 1.1], "theirs": [1.0, 10.7]}) == " (noisy)"  # a busy machine's repeat
    assert f"ISA {hardware.isa_level()}" in table and "kernels chosen: " in table


@pytest.mark.parametrize("workload", [Workload("inference", 2, 16), Workload("pretraining", 2, 16)])
def test_compare_runs_each_side_in_its_own_worker(workload):
    cfg = AlbertConfig.from_preset("albert-tiny")
    row = compare(cfg, workload, "fp32", repeats=2, warmup=1)
    assert len(row.ours) == len(row.theirs) == 2 and min(row.ours + row.theirs) > 0
    assert float(row.check.split()[-1]) <= 1e-5  # both workers loaded the same weights
    assert set(row.rss_mib) == {"ours", "theirs"}
    assert all(50 < mib < 4000 for mib in row.rss_mib.values())  # each worker's own peak


@pytest.mark.slow
def test_onnx_rows_run_albert_exports_graph_in_onnx_runtime(albert_data):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    cfg = AlbertConfig.from_preset("albert-tiny")
    fp32 = compare(cfg, Workload("inference", 2, 16), "onnx", repeats=1, data=albert_data, warmup=0)
    assert float(fp32.check.split()[-1]) <= 1e-4  # the exported graph computes what transformers does
    int8 = compare(cfg, Workload("inference", 2, 16), "onnx-int8", repeats=1, data=albert_data, warmup=0)
    # ONNX Runtime int8 (activations quantized per tensor): not equal; the export itself refused a
    # cosine under 0.9 against PyTorch, this bounds the worst element of unit-scale hidden states
    assert 0 < float(int8.check.split()[-1]) < 2.5
    assert fp32.ours[0] > 0 and int8.ours[0] > 0 and set(int8.rss_mib) == {"ours", "theirs"}


def test_onnx_rows_without_a_tokenizer_are_skipped_with_the_reason():
    said: list[str] = []
    result = run_suite("albert-tiny", None, repeats=1, only=("onnx",), log=said.append, isolate=False)
    assert result["rows"] == [] and any("ONNX rows skipped" in m and "--data" in m for m in said)


def test_a_failing_worker_is_an_error_with_its_output():
    cfg = AlbertConfig.from_preset("albert-tiny")
    with pytest.raises(RuntimeError, match="bench worker"):
        compare(cfg, Workload("inference", 2, 99999), "fp32", repeats=1)  # longer than max positions


def test_ablations_that_change_the_computation_not_a_switch(albert_data):
    cfg = AlbertConfig.from_preset("albert-tiny")
    mlm = ablation_row(cfg, MLM_MASKED_ONLY, "pretraining", "fp32", repeats=1)
    sst2 = ablation_row(cfg, "length-sorted evaluation batches", "sst2", "fp32", repeats=1, data=albert_data)
    assert sst2.unit == "sentences/s" and sst2.work == 872
    for row in (mlm, sst2):
        assert len(row.ours) == len(row.theirs) == 1 and row.ratio > 0


def test_switched_off_replaces_and_restores():
    from albert_lm.bench.ablations import _file_order_batches, _switched_off
    from albert_lm.runtime import run

    original = run.length_bucketed_batches
    with _switched_off("length-sorted evaluation batches"):
        assert run.length_bucketed_batches is _file_order_batches
        assert run.length_bucketed_batches([5, 1, 9, 2, 7], 2) == [[0, 1], [2, 3], [4]]
    assert run.length_bucketed_batches is original


def test_cli_bench_parts_are_the_suites_parts():
    from albert_lm.bench.runner import PARTS
    from albert_lm.cli import build_parser

    only = build_parser().parse_args(["bench"]).only
    assert tuple(only) == PARTS


def test_cli_bench_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert (
        main(["bench", "--preset", "albert-tiny", "--only", "gemm", "--repeats", "2", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())
    assert result["gemm"]["limits"]["fp32"] > 0
    assert "| matrix multiply | GFLOP/s |" in capsys.readouterr().out
    # --precisions fp32: the matrix multiplies of that precision only (bf16's are no row's limit)
    argv = ["bench", "--preset", "albert-tiny", "--only", "gemm", "--repeats", "2", "--precisions", "fp32"]
    assert main([*argv, "--json", str(out)]) == 0
    gemm = json.loads(out.read_text())["gemm"]
    assert set(gemm["limits"]) == {"fp32"} and all(p["dtype"] == "fp32" for p in gemm["paths"].values())
    assert "bf16" not in capsys.readouterr().out.split("| matrix multiply |")[1]
