"""CPU facts and emulation caps, the kernel tuner and its disk cache, and the AVX2 emulation re-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from albert_lm.kernels import autotune, hardware
from albert_lm.kernels import linear as kernels


# --------------------------------------------------------------------------- hardware
@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ({"sse4_2"}, "other"),
        ({"avx2", "fma"}, "avx2"),  # Zen 3
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}, "avx512"),  # Skylake-SP
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}, "avx512_bf16"),
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "amx_bf16", "amx_tile"}, "amx"),
    ],
)
def test_isa_level_from_cpu_flags(flags, level):
    assert hardware._flag_level(frozenset(flags)) == level


def test_emulation_variables_cap_the_level():
    assert hardware._capped("amx", hardware.AVX2_EMULATION) == "avx2"
    assert hardware._capped("amx", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}) == "avx512"
    assert hardware._capped("avx512_bf16", {"ATEN_CPU_CAPABILITY": "default"}) == "other"
    assert hardware._capped("avx2", {"ONEDNN_MAX_CPU_ISA": "ALL"}) == "avx2"  # caps never raise
    assert hardware._capped("avx2", {}) == "avx2"


def test_cpu_info_describes_this_machine():
    info = hardware.cpu_info()
    assert info.cores >= 1 and info.model and info.isa in hardware.ISA_LEVELS
    assert hardware.ISA_LEVELS.index(info.isa) <= hardware.ISA_LEVELS.index(info.hardware_isa)
    assert info.model in info.describe() and f"ISA {info.hardware_isa}" in info.describe()


# --------------------------------------------------------------------------- the tuner
@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ALBERT_LM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_ENABLED", True)
    autotune.reset()
    yield tmp_path
    autotune.reset()


def _sleepers(calls: list[str]):
    def make():
        def fast():
            calls.append("fast")

        def slow():
            calls.append("slow")
            time.sleep(0.005)

        return {"slow": slow, "fast": fast}

    return make


def test_choose_times_once_keeps_the_fastest_and_caches_it_on_disk(cache):
    calls: list[str] = []
    assert autotune.choose("k1", ["slow", "fast"], "slow", _sleepers(calls)) == "fast"
    n = len(calls)
    assert n >= 6  # a warm-up and at least two rounds of each
    assert autotune.choose("k1", ["slow", "fast"], "slow", _sleepers(calls)) == "fast"
    assert len(calls) == n  # answered from the table
    saved = json.loads(autotune.cache_file().read_text())
    assert saved["machine"] == autotune.machine_key() and saved["choices"]["k1"]["choice"] == "fast"
    autotune.reset()  # a new process: reads the file, times nothing
    assert autotune.choose("k1", ["slow", "fast"], "slow", _sleepers(calls)) == "fast"
    assert len(calls) == n


def test_a_candidate_that_fails_is_never_chosen(cache):
    def broken():
        raise RuntimeError("could not create a primitive descriptor")

    make = lambda: {"broken": broken, "slow": lambda: time.sleep(0.002)}  # noqa: E731
    assert autotune.choose("k", ["broken", "slow"], "broken", make) == "slow"
    assert autotune.choices()["k"]["ms"]["broken"] is None
    with pytest.raises(RuntimeError, match="primitive"):
        autotune.choose("k2", ["broken", "also"], "broken", lambda: {"broken": broken, "also": broken})


def test_a_new_candidate_set_is_timed_again(cache):
    calls: list[str] = []
    autotune.choose("k", ["slow", "fast"], "slow", _sleepers(calls))
    n = len(calls)

    def make():
        return {**_sleepers(calls)(), "third": lambda: time.sleep(0.01)}

    assert autotune.choose("k", ["slow", "fast", "third"], "slow", make) == "fast"
    assert len(calls) > n


@pytest.mark.parametrize("content", ["{not json", "[]", '{"machine": {"cpu": "other"}, "choices": {}}'])
def test_corrupt_or_stale_cache_is_ignored_and_rewritten(cache, content):
    path = autotune.cache_file()
    path.write_text(content)
    calls: list[str] = []
    assert autotune.choose("k", ["slow", "fast"], "slow", _sleepers(calls)) == "fast"
    assert calls  # measured, not read
    saved = json.loads(path.read_text())
    assert saved["machine"] == autotune.machine_key() and "k" in saved["choices"]


def test_unwritable_cache_folder_is_not_an_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ALBERT_LM_CACHE_DIR", str(blocker / "sub"))  # a folder under a file
    monkeypatch.setattr(autotune, "_ENABLED", True)
    autotune.reset()
    try:
        assert autotune.choose("k", ["slow", "fast"], "slow", _sleepers([])) == "fast"
        assert autotune.measured("v", lambda: {"x": 1.0}) == {"x": 1.0}
    finally:
        autotune.reset()


def test_switched_off_returns_the_default_without_timing(cache, monkeypatch):
    monkeypatch.setattr(autotune, "_ENABLED", False)
    calls: list[str] = []
    assert autotune.choose("k", ["slow", "fast"], "slow", _sleepers(calls)) == "slow"
    assert calls == [] and not autotune.cache_file().exists()


def test_the_environment_switch(tmp_path):
    code = "from albert_lm.kernels import autotune; print(autotune.enabled())"
    env = {**os.environ, "ALBERT_LM_AUTOTUNE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_measured_values_are_cached(cache):
    calls = []
    assert autotune.measured("rate", lambda: calls.append(1) or {"gflops": 12.5}) == {"gflops": 12.5}
    assert autotune.measured("rate", lambda: calls.append(1) or {"gflops": 99.0}) == {"gflops": 12.5}
    assert len(calls) == 1


def test_the_kernel_choices_are_valid_paths_and_fastest_as_timed(cache):
    # A small model's forward and backward tune every product it runs; each stored choice is one of
    # the paths that work here, and the fastest of its own timings.
    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForPreTraining

    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny")).train()
    ids = torch.randint(5, model.config.vocab_size, (2, 16))
    model(input_ids=ids, labels=ids, sentence_order_label=torch.tensor([0, 1])).loss.backward()
    with torch.no_grad():
        model.eval()(input_ids=ids)
    table = autotune.choices()
    ops = {key.split()[0] for key in table}
    uses = model.albert.encoder.uses_per_weight  # backward runs after the block, and still knows it
    assert all(
        k.endswith(f"packable/{uses}") for k in table if k.startswith("grad_input") and "packable" in k
    )
    assert {"infer", "forward", "grad_input", "grad_weight"} <= ops
    for key, entry in table.items():
        op, dtype = key.split()[:2]
        packable = "packable" in key
        names = kernels._paths(op, {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype], packable)
        assert set(entry["ms"]) == set(names), key
        timed = [ms for ms in entry["ms"].values() if ms is not None]
        assert entry["ms"][entry["choice"]] == min(timed), key  # (ties: rounded to 1 ns)


def test_bucket_rounds_rows_up_to_a_power_of_two():
    assert [kernels._bucket(m) for m in (1, 16, 17, 1000, 1024, 1025, 100_000)] == [
        16,
        16,
        32,
        1024,
        1024,
        2048,
        2048,
    ]


# --------------------------------------------------------------------------- AVX2 emulation
EMULATED_TESTS = [
    "tests/test_kernels.py",
    "tests/test_autotune.py",
    "tests/test_bench.py::test_suite_on_tiny_model_prints_the_table",
    "tests/test_bench.py::test_cli_bench_writes_json",
    "tests/test_pretrain.py::test_bf16_gradient_checkpointing_and_dropout_off",
    "tests/test_pretrain.py::test_precision_auto_is_resolved_logged_and_saved",
]


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("ALBERT_LM_EMULATED")), reason="already the emulated run")
def test_kernel_bf16_and_bench_tests_pass_under_avx2_emulation(tmp_path):
    """The tests that a CPU without bf16 once broke, again in a process that acts as an AVX2-only CPU."""
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        **hardware.AVX2_EMULATION,
        "ALBERT_LM_EMULATED": "1",
        "ALBERT_LM_CACHE_DIR": str(tmp_path / "cache"),
    }
    probe = (
        "from albert_lm.kernels import hardware, onednn; import torch; "
        "print(hardware.isa_level(), onednn.primitive_works(torch.bfloat16))"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=root, capture_output=True, text=True)
    assert out.stdout.split() == ["avx2", "False"], out.stderr  # the emulation took hold
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *EMULATED_TESTS],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
