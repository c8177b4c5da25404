"""`albert bench`: FLOP counting, the suite's plumbing on albert-tiny, and the command line."""

from __future__ import annotations

import json

import pytest

from albert_lm.bench import _child_peak_rss, format_table, run_suite
from albert_lm.bench_workloads import encoder_flops
from albert_lm.cli import main
from albert_lm.config import AlbertConfig

pytest.importorskip("transformers")


def test_encoder_flops_by_hand():
    # albert-base, one token (batch 1, seq 1): per layer 2*(3*768*768 + 768*768 + 2*768*3072) multiply-adds
    # plus 4*768 for the attention scores and weighted sum; 12 layers; projection 2*128*768.
    cfg = AlbertConfig.from_preset("albert-base")
    per_layer = 2 * (3 * 768 * 768 + 768 * 768 + 2 * 768 * 3072) + 4 * 768
    assert encoder_flops(cfg, 1, 1) == 12 * per_layer + 2 * 128 * 768
    assert encoder_flops(cfg, 8, 128) > 8 * 128 * encoder_flops(cfg, 1, 1)  # attention grows with S^2


def test_suite_on_tiny_model_prints_the_table(tmp_path):
    result = run_suite("albert-tiny", None, repeats=2, only=("inference", "ablations"), log=lambda m: None)
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
    assert len(result["ablations"]) == 6
    table = format_table(result)
    assert "| inference 8 x 128 | fp32 |" in table and "bf16 eager attention" in table


def test_peak_rss_child_reports_memory():
    mib = _child_peak_rss(["inference-8x128", "ours", "fp32", "albert-tiny"])
    assert mib is not None and 50 < mib < 4000


def test_cli_bench_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert (
        main(["bench", "--preset", "albert-tiny", "--only", "gemm", "--repeats", "2", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())
    assert result["gemm"]["limits"]["fp32"] > 0
    assert "| matrix multiply | GFLOP/s |" in capsys.readouterr().out
