"""`albert reproduce speed`: Table 2's models timed on one device and over DDP processes (tiny shapes here)."""

from __future__ import annotations

import itertools
import json

import pytest

from albert_lm.cli import main
from albert_lm.paper.config import PHASES, ReproduceConfig
from albert_lm.paper.speed_report import by_batch, ring_seconds, simulated, where_saved

# Every model shrunk to two tiny layers (BERT keeps its E = 768 / 1024, ALBERT its E 128): seconds a row.
TINY = [
    "hidden_size=32",
    "num_attention_heads=2",
    "intermediate_size=64",
    "num_hidden_layers=2",
    "vocab_size=500",
]


def _argv(out, *extra: str) -> list[str]:
    argv = ["reproduce", "speed", "--output", str(out), "--seq-length", "16", "--timed-steps", "2",
            "--models", "albert-large,bert-large", "--device", "cpu", "--precision", "fp32"]  # fmt: skip
    for o in TINY:
        argv += ["--model-override", o]
    return [*argv, *extra]


@pytest.mark.slow
def test_speed_measures_each_model_alone_and_over_two_processes(tmp_path, capsys):
    assert main(_argv(tmp_path, "--workers", "2")) == 0
    result = json.loads((tmp_path / "speed" / "results.json").read_text())
    for table, processes in ((result["one_device"], 1), (result["processes_table"], 2)):
        assert set(table) == {"albert-large", "bert-large"}
        assert table["bert-large"]["speedup"] == 1.0
        for r in table.values():
            step = r["step"]
            assert all(step[k] >= 0 for k in PHASES)  # the hooks fired in the step's order
            assert sum(step[k] for k in PHASES) == pytest.approx(step["total"])
            assert r["tokens_per_s"] == pytest.approx(16 * processes / step["total"])
            assert r["peak_memory_mib"] > 0
        if processes == 2:  # the all-reduce alone and the same step without synchronisation
            assert all(r["allreduce_s"] > 0 and r["local_step"]["total"] > 0 for r in table.values())
    one = result["one_device"]
    # sharing and the small E: ALBERT-large has fewer parameters and gradients to move than BERT-large
    assert one["albert-large"]["parameters"] < one["bert-large"]["parameters"]
    assert one["albert-large"]["gradient_bytes"] < one["bert-large"]["gradient_bytes"]
    assert (one["albert-large"]["embedding_size"], one["bert-large"]["embedding_size"]) == (128, 1024)
    assert set(result["simulated"]["ratios"]) == {"100", "10", "1"}
    assert result["verdicts"][0].startswith(("reproduced on one device", "NOT reproduced on one device"))
    table = (tmp_path / "speed" / "table.md").read_text()
    assert table.startswith("### Table 2: training speed") and "| albert-large |" in table
    assert "2 processes, DDP" in table and table in capsys.readouterr().out + "\n"
    rows = sorted((tmp_path / "speed" / "rows").glob("*.json"))
    assert [p.name for p in rows] == ["albert-large-p1.json", "albert-large-p2.json", "bert-large-p1.json",
                                      "bert-large-p2.json"]  # fmt: skip
    # Given again, the command measures nothing: every row is kept (the files are not rewritten).
    stamps = [p.stat().st_mtime_ns for p in rows]
    assert main(_argv(tmp_path, "--workers", "2")) == 0
    assert [p.stat().st_mtime_ns for p in rows] == stamps
    # Other settings measure again (a row records what it measured); rows not asked for stay as they are.
    assert main(_argv(tmp_path, "--workers", "1", "--models", "albert-large", "--timed-steps", "1")) == 0
    again = json.loads((tmp_path / "speed" / "results.json").read_text())
    assert "processes_table" not in again and set(again["one_device"]) == {"albert-large"}
    assert json.loads(rows[0].read_text())["row"]["steps"] == 1
    assert (
        "speed is against BERT-large; give --models with bert-large"
        in (tmp_path / "speed" / "table.md").read_text()
    )


def _table(a_step: dict, b_step: dict, a_bytes: float, b_bytes: float) -> dict:
    return {
        "albert-large": {"step": a_step, "local_step": a_step, "gradient_bytes": a_bytes},
        "bert-large": {"step": b_step, "local_step": b_step, "gradient_bytes": b_bytes},
    }


def _step(forward: float, backward: float, wait: float, update: float) -> dict:
    parts = dict(zip(PHASES, (forward, backward, wait, update), strict=True))
    return {**parts, "total": sum(parts.values())}


def test_the_simulated_interconnect_finds_the_bandwidth_of_the_claim():
    # Equal compute (1 s a step each); BERT-large moves 18x the bytes: only the network can give 1.7x.
    table = _table(_step(0.3, 0.6, 0.0, 0.1), _step(0.3, 0.6, 0.0, 0.1), 72e6, 18 * 72e6)
    sim = simulated(table, processes=8, bandwidths=[100.0, 1.0])
    assert sim["local_ratio"] == pytest.approx(1.0)
    at = sim["claim_below_gbit_s"]
    b, a = (1 + ring_seconds(n, 8, at) for n in (18 * 72e6, 72e6))
    assert b / a == pytest.approx(1.7)  # at that bandwidth the ratio is the paper's
    assert 1.0 < sim["ratios"]["100"] < 1.7 < sim["ratios"]["1"]  # faster networks: less of the claim
    # Already 1.7x apart before any communication: every bandwidth gives it.
    fast = _table(_step(0.1, 0.2, 0.0, 0.1), _step(0.3, 0.6, 0.0, 0.1), 72e6, 18 * 72e6)
    assert simulated(fast, 8, [1.0])["claim_below_gbit_s"] == "any"


def test_larger_batches_shrink_what_the_update_saves():
    # BERT-large's update costs 1 s more; forward and backward are the same: the more sequences per step,
    # the nearer the two come.
    table = _table(_step(1, 2, 0, 0.1), _step(1, 2, 0, 1.1), 1, 1)
    ratios = by_batch(table, batch=1, batches=(1, 8, 128))
    assert ratios["1"] == pytest.approx(4.1 / 3.1)
    assert ratios["1"] > ratios["8"] > ratios["128"] > 1.0
    assert where_saved(table) == pytest.approx({"forward": 0, "backward": 0, "wait_clip": 0, "update": 1})


def test_bad_speed_settings_are_clear_errors(tmp_path, capsys):
    assert main(["reproduce", "speed", "--models", "bert-huge", "--output", str(tmp_path)]) == 1
    assert "bert-huge" in capsys.readouterr().err
    for bad in ("0", "fast", "10,-1"):
        with pytest.raises(ValueError, match="bandwidths"):
            ReproduceConfig(claim="speed", bandwidths=bad)
    with pytest.raises(ValueError, match="workers must be"):
        ReproduceConfig(claim="speed", workers=0)
    assert main(["reproduce", "sharing", "--output", str(tmp_path)]) == 1  # the cell claims need examples
    assert "missing --data" in capsys.readouterr().err
    assert not (tmp_path / "speed").exists()


def test_a_busy_machine_is_recorded_and_its_timings_called_untrustworthy(tmp_path, monkeypatch, caplog):
    """On a busy machine the same command measured ALBERT-large at 0.66x and then 2.25x BERT-large: the load
    average around the measurement is recorded, and over the cores the table and stderr say so."""
    import os
    from dataclasses import asdict

    from albert_lm.paper import speed_report

    def measured(row, folder):  # a row as albert_lm.paper.speed writes it, without running it
        step = _step(0.1, 0.2, 0.0, 0.1 if row.config == "albert-large" else 0.3)
        return {"row": asdict(row), "parameters": 10, "gradient_bytes": 40, "peak_memory_mib": 1.0,
                "dropout": 0.1, "embedding_size": 128, "steps": [step], "local_steps": []}  # fmt: skip

    monkeypatch.setattr(speed_report, "run_row", measured)
    loads = itertools.chain([1e6], itertools.repeat(2.0))  # before, then after the measurement
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    with caplog.at_level("WARNING"):
        assert main(_argv(tmp_path, "--workers", "1")) == 0
    result = json.loads((tmp_path / "speed" / "results.json").read_text())
    cores = result["load_average"]["cores"]
    assert result["load_average"] == {"before": 1e6, "after": 2.0, "cores": cores} and cores >= 1
    table = (tmp_path / "speed" / "table.md").read_text()
    assert f"Load average (1 minute): 1000000.00 before, 2.00 after, on {cores} cores." in table
    said = (
        "the timings are not trustworthy: the machine was busy "
        f"(load average 1000000.0 before the measurement, on {cores} cores)"
    )
    assert said in table and said in caplog.text
    # an idle machine: recorded, no warning (after the measurement its own processes count, up to the cores)
    loads = iter([0.0, float(cores)])
    caplog.clear()
    assert main(_argv(tmp_path / "idle", "--workers", "1")) == 0
    idle = json.loads((tmp_path / "idle" / "speed" / "results.json").read_text())
    assert idle["load_average"]["before"] == 0.0 and "busy" not in idle
    assert "not trustworthy" not in (tmp_path / "idle" / "speed" / "table.md").read_text() + caplog.text
    assert speed_report.busy_machine({"before": 0.5, "after": 2.5 * cores, "cores": cores}).startswith(
        "the timings are not trustworthy: the machine was busy (load average"
    )
