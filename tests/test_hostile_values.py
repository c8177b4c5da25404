"""Hostile values for export, reproduce, bench, params and the shared settings: a value that would
silently mean something else is refused, reused work that does not match is refused, an output never
is, holds or lies inside an input, a worker's error reaches the command as one line, and what is
printed follows what was measured."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import TINY_MODEL, pretrain_argv
from test_bad_input import folder_hash, refused

from albert_lm.cli import main
from albert_lm.files import folder_lock
from albert_lm.settings import parse_duration

TINY = ["hidden_size=32", "num_attention_heads=2", "intermediate_size=64", "num_hidden_layers=2"]


@pytest.fixture(scope="module")
def two_data(two_tokenizers, tmp_path_factory) -> dict[str, Path]:
    """Data made with two different tokenizers (A and B) from two generated texts (`two_tokenizers`), and a
    tiny model folder (config, weights, tokenizer A) to export."""
    import shutil

    import torch

    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.encoder import AlbertModel

    d = tmp_path_factory.mktemp("hostile")
    w: dict[str, Path] = {**two_tokenizers, "root": d, "model": d / "model"}
    torch.manual_seed(0)
    AlbertModel(AlbertConfig(**{**TINY_MODEL, "vocab_size": 120})).save_pretrained(w["model"])
    shutil.copy(w["tok_a"] / "spiece.model", w["model"] / "spiece.model")
    return w


def _reproduce(data: Path, out: Path, *more: str) -> list[str]:
    argv = ["reproduce", "layers", "--data", str(data), "--output", str(out), "--max-steps", "1",
            "--eval-batches", "1", "--device", "cpu", *more]  # fmt: skip
    for o in TINY:
        argv += ["--model-override", o]
    return argv


# --------------------------------------------------------------------------- 1. values meaning something else
def test_a_time_budget_without_a_unit_is_refused_asking_for_one(two_data, capsys, tmp_path):
    assert [parse_duration(t) for t in ("90s", "45m", "1.5h", "1h30m")] == [90, 2700, 5400, 5400]
    for bare in ("10", "1.5", "0"):
        with pytest.raises(ValueError, match=r"give a unit, e\.g\. .*s, .*m or .*h"):
            parse_duration(bare)
    for bad in ("0s", "1" + "0" * 400 + "h", "", "-5m"):
        with pytest.raises(ValueError, match="time budget"):
            parse_duration(bad)
    refused(
        capsys,
        pretrain_argv(two_data["data_a"], tmp_path / "run", "--preset", "albert-tiny", "--time-budget", "10"),
        "10s, 10m or 10h",
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "more, expected",
    [
        (["--max-steps", "0"], "--max-steps"),
        (["--max-steps", "-3"], "--max-steps"),
        (["--time-budget", "nan"], "time budget"),
        (["--time-budget", "inf"], "time budget"),
        (["--time-budget=-1m"], "time budget"),
        (["--time-budget", "10"], "give a unit"),
        (["--time-budget", "0.01s"], "less than a second"),
        (["--eval-batches", "0"], "--eval-batches"),
        (["--seeds", "1,-2"], "seeds"),
    ],
)
def test_reproduce_numbers_that_would_mean_something_else_are_refused(
    two_data, capsys, tmp_path, more, expected
):
    argv = _reproduce(two_data["data_a"], tmp_path / "out")
    refused(capsys, [*argv, *more], expected, untouched=(two_data["data_a"],))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "more, expected",
    [
        (["--tolerance", "nan"], "--tolerance: expected a finite number, got nan"),
        (["--tolerance", "-1"], "--tolerance -1"),
        (["--tolerance", "inf"], "--tolerance: expected a finite number, got inf"),
        (["--opset", "5"], "--opset 5"),
        (["--opset", "0"], "--opset 0"),
        (["--opset", "999"], "--opset 999"),
    ],
)
def test_export_numbers_that_would_mean_something_else_are_refused(
    two_data, capsys, tmp_path, more, expected
):
    refused(
        capsys,
        ["export", "--model", str(two_data["model"]), "--output", str(tmp_path / "onnx"), *more],
        expected,
        untouched=(two_data["model"],),
    )
    assert not (tmp_path / "onnx").exists()


def test_an_opset_the_exporter_cannot_write_is_refused_not_recorded(two_data, capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "onnx"
    # torch's exporter writes opset 18 and converts down; where it cannot, it used to keep 18 and the
    # export recorded the opset asked for
    line = refused(
        capsys,
        ["export", "--model", str(two_data["model"]), "--output", str(out), "--opset", "16"],
        "--opset 16",
        "cannot write",
    )
    assert "wrote opset" in line and not out.exists()
    assert main(["export", "--model", str(two_data["model"]), "--output", str(out), "--opset", "17"]) == 0
    import onnx

    written = [
        o.version for o in onnx.load(str(out / "model.onnx")).opset_import if o.domain in ("", "ai.onnx")
    ]
    assert written == [17] and json.loads((out / "export.json").read_text())["opset"] == 17


# --------------------------------------------------------------------------- 2. reused work that does not match
def test_reproduce_reuses_a_cell_only_when_its_fingerprint_matches(two_data, capsys, tmp_path):
    out = tmp_path / "paper"
    assert main(_reproduce(two_data["data_a"], out)) == 0
    cells = out / "layers" / "cells"
    record = json.loads((cells / "all-shared" / "cell.json").read_text())
    assert set(record["fingerprint"]) == {"tokenizer", "data", "model", "settings"}
    before = folder_hash(cells / "all-shared")
    # another tokenizer's data: the cells trained on A's would be scored on B's ids
    refused(
        capsys,
        _reproduce(two_data["data_b"], out),
        "cell all-shared",
        "tokenizer fingerprint",
        "--overwrite",
        untouched=(cells, two_data["data_a"], two_data["data_b"]),
    )
    refused(
        capsys,
        [*_reproduce(two_data["data_a"], out), "--model-override", "hidden_act=relu"],
        "model hidden_act",
        untouched=(cells,),
    )
    refused(
        capsys,
        [*_reproduce(two_data["data_a"], out), "--recipe", "gpu-10min"],
        "settings",
        untouched=(cells,),
    )
    # the same run again: kept, nothing trained
    assert main(_reproduce(two_data["data_a"], out)) == 0
    assert folder_hash(cells / "all-shared") == before
    assert json.loads((cells / "all-shared" / "cell.json").read_text()) == record
    # --overwrite trains the cells again on B's data, and records B's fingerprint
    assert main([*_reproduce(two_data["data_b"], out), "--overwrite"]) == 0
    redone = json.loads((cells / "all-shared" / "cell.json").read_text())["fingerprint"]
    assert redone["tokenizer"] != record["fingerprint"]["tokenizer"]
    result = json.loads((out / "layers" / "results.json").read_text())
    assert result["settings"]["data"] == str(two_data["data_b"])


def test_a_cell_finished_by_another_process_is_checked_too(two_data, capsys, tmp_path):
    out = tmp_path / "paper"
    assert main([*_reproduce(two_data["data_a"], out), "--cells", "not-shared"]) == 0
    refused(
        capsys,
        [*_reproduce(two_data["data_b"], out), "--cells", "all-shared"],
        "cell not-shared",
        "--overwrite --cells not-shared",
    )
    assert not (out / "layers" / "cells" / "all-shared").exists()  # refused before training its own cell


# --------------------------------------------------------------------------- 3. outputs apart from inputs
def test_export_output_that_is_holds_or_lies_in_the_model_is_refused(two_data, capsys, tmp_path):
    model = two_data["model"]
    for out, text in (
        (model, "model folder"),
        (model / "onnx", "inside the --model"),
        (model.parent, "holds the --model"),
    ):
        for more in ([], ["--overwrite"]):
            refused(
                capsys,
                ["export", "--model", str(model), "--output", str(out), *more],
                text,
                untouched=(model,),
            )
    (tmp_path / "file").write_text("mine\n")
    os.mkfifo(tmp_path / "fifo")
    for out in (tmp_path / "file", tmp_path / "fifo"):
        refused(capsys, ["export", "--model", str(model), "--output", str(out)], "not a folder")
    assert (tmp_path / "file").read_text() == "mine\n"
    refused(
        capsys,
        ["export", "--model", str(tmp_path / "none"), "--output", str(tmp_path / "x")],
        "no such folder",
    )
    (tmp_path / "empty").mkdir()
    refused(
        capsys, ["export", "--model", str(tmp_path / "empty"), "--output", str(tmp_path / "x")], "config.json"
    )
    assert not (tmp_path / "x").exists()


def test_a_second_export_or_reproduce_into_a_folder_in_use_is_refused(two_data, capsys, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "onnx"
    with folder_lock(out):  # another albert command writing there now
        refused(capsys, ["export", "--model", str(two_data["model"]), "--output", str(out)], "another albert")
    paper = tmp_path / "paper"
    with folder_lock(paper / "layers"):
        refused(capsys, _reproduce(two_data["data_a"], paper), "another albert")
    assert not (paper / "layers" / "cells").exists()


def test_reproduce_output_inside_its_data_or_not_a_folder_is_refused(two_data, capsys, tmp_path):
    data = two_data["data_a"]
    refused(capsys, _reproduce(data, data), "lies inside the --data", untouched=(data,))
    os.mkfifo(tmp_path / "fifo")
    refused(capsys, _reproduce(data, tmp_path / "fifo"), "not a folder")
    (tmp_path / "f").write_text("mine\n")
    refused(capsys, _reproduce(data, tmp_path / "f"), "not a folder")
    assert (tmp_path / "f").read_text() == "mine\n"


def test_bench_settings_and_json_are_checked_before_any_timing(two_data, capsys, tmp_path):
    data = two_data["data_a"]
    bench = ["bench", "--preset", "albert-tiny", "--only", "gemm"]
    refused(capsys, [*bench, "--repeats", "0"], "--repeats 0")
    refused(capsys, [*bench, "--repeats", "-2"], "--repeats -2")
    refused(capsys, [*bench, "--data", str(tmp_path / "none")], "--data")
    refused(capsys, [*bench, "--data", str(data), "--json", str(data)], "--json", untouched=(data,))
    refused(
        capsys, [*bench, "--data", str(data), "--json", str(data / "b.json")], "inside", untouched=(data,)
    )
    refused(capsys, [*bench, "--json", str(tmp_path)], "is a folder")


def test_params_counts_each_preset_once(capsys):
    assert main(["params", "--preset", "albert-tiny", "--preset", "albert-tiny"]) == 0
    assert capsys.readouterr().out.count("| albert-tiny ") == 1


# --------------------------------------------------------------------------- 4. errors in worker processes
def test_a_bench_worker_error_is_one_line_and_exit_1_within_seconds(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import subprocess

    data = tmp_path / "data"
    (data / "tokenizer" / "albert-30k").mkdir(parents=True)
    (data / "tokenizer" / "albert-30k" / "spiece.model").write_text(
        "not a tokenizer\n"
    )  # the worker's export fails
    start = time.monotonic()
    line = refused(
        capsys,
        ["bench", "--preset", "albert-tiny", "--only", "onnx", "--repeats", "1", "--data", str(data)],
        "bench worker (ours",
        "not a SentencePiece model",
    )
    assert time.monotonic() - start < 120
    assert "failed on 'ready'" in line
    left = subprocess.run(["pgrep", "-f", "albert_lm.bench.runner worker"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a worker was left running"


def test_compare_stops_both_workers_on_a_failing_one():
    from albert_lm.bench.sides import BenchWorkerError, compare
    from albert_lm.bench.workloads import Workload
    from albert_lm.model.config import AlbertConfig

    start = time.monotonic()
    with pytest.raises(
        BenchWorkerError, match=r"bench worker \(ours, inference 2 x 99999, fp32\) failed"
    ) as e:
        compare(AlbertConfig.from_preset("albert-tiny"), Workload("inference", 2, 99999), "fp32", repeats=1)
    assert "\n" not in str(e.value) and time.monotonic() - start < 120


# --------------------------------------------------------------------------- 5. honest output
def _facts(native: bool, bf16: float, fp32: float) -> dict:
    return {
        "isa": "avx512_bf16",
        "native_bf16": native,
        "autotune": True,
        "gemm_bf16_vs_fp32": {"bf16_gflops": bf16, "fp32_gflops": fp32},
    }


def test_the_bf16_verdict_follows_the_measured_rates():
    from albert_lm.bench.runner import bf16_fast, bf16_line, format_table, precisions

    # oneDNN's bf16 primitive does not run, but F.linear's bf16 measured 5x fp32
    fast = _facts(False, 500.0, 100.0)
    assert bf16_fast(fast) and precisions("auto", fast) == ("fp32", "bf16")
    table = format_table(
        {"preset": "albert-tiny", "machine": "m", "facts": fast, "rows": [], "ablations": []}
    )
    assert "not native" not in table and "no native" not in table and "not faster" not in table
    assert "bf16 fast here by measurement (bf16 500 against fp32 100 GFLOP/s)" in table
    slow = _facts(False, 40.0, 100.0)
    assert not bf16_fast(slow) and precisions("auto", slow) == ("fp32",)
    assert bf16_line(slow) == "bf16 not faster than fp32 here (bf16 40 against fp32 100 GFLOP/s)"
    assert bf16_line(_facts(True, 300.0, 100.0)).startswith("bf16 fast here (")
    with pytest.raises(ValueError, match="precision"):
        precisions("fp16")


def _cells(steps: int, a: float, b: float) -> dict:
    cell = lambda acc: {"steps": steps, "parameters": 1, "held_out": {"mlm_acc": acc}}  # noqa: E731
    return {"no-dropout": cell(a), "dropout-0.1": cell(b), "dropout-off-halfway": cell(b)}


def test_a_run_too_short_to_tell_says_so_instead_of_reproduced():
    from albert_lm.paper.verdicts import MIN_STEPS, verdicts

    short = verdicts("dropout", _cells(2, 0.12, 0.11))
    assert all(v.startswith("too short to tell (2 steps") for v in short)
    assert not any(v.startswith(("reproduced", "NOT reproduced")) for v in short)
    assert "points the paper's way" in short[0] and "does not point the paper's way" in short[1]
    assert short[1].endswith("(0.1100 against 0.1100)")  # both numbers, as every line gives them
    long = verdicts("dropout", _cells(MIN_STEPS, 0.14, 0.11))  # one seed: a gap of 0.03 tells, 0 does not
    assert long[0].startswith("reproduced") and long[1].startswith("within noise (one seed")
    assert verdicts("dropout", _cells(MIN_STEPS, 0.09, 0.11))[0].startswith("NOT reproduced")
    assert verdicts("dropout", _cells(MIN_STEPS, 0.12, 0.11))[0].startswith("within noise (one seed")
    # several seeds: a direction the means show but one seed does not is noise, not reproduced
    seeds = [_cells(1000, 0.12, 0.11), _cells(1000, 0.10, 0.11)]
    mean = _cells(1000, 0.11, 0.10)
    lines = verdicts("dropout", mean, seeds)
    assert lines[0].startswith("within the seed-to-seed noise (held in 1 of 2 seeds")
    assert lines[0].endswith("[in 1 of 2 seeds]")


def test_parameter_counts_are_verdicts_at_any_length():
    from albert_lm.paper.verdicts import verdicts

    cells = {
        n: {"steps": 2, "parameters": p, "held_out": {"mlm_acc": a}}
        for n, p, a in (("all", 1, 0.1), ("attention", 3, 0.1), ("ffn", 2, 0.1), ("none", 4, 0.1))
    }
    lines = verdicts("sharing", cells)
    assert lines[0].startswith("too short to tell") and lines[1].startswith("reproduced: parameters")
