"""`albert reproduce CLAIM`: every claim end to end on a tiny budget (generated text, a tiny model, a few
steps per cell), what the cells change, resuming, the measures on known inputs, and bad input."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import signal_after_step

from albert_lm.cli import main
from albert_lm.paper.claims import CLAIMS
from albert_lm.paper.config import ReproduceConfig

SMALL = [
    "hidden_size=32",
    "num_attention_heads=2",
    "intermediate_size=128",
    "num_hidden_layers=2",
]  # FFN 4H as ALBERT


@pytest.fixture(scope="module")
def sop_nsp_data(tiny_corpus_and_tokenizer, tmp_path_factory) -> tuple[Path, Path]:
    """SOP and NSP examples of the same generated text and tokenizer."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data

    corpus, tok = tiny_corpus_and_tokenizer
    root = tmp_path_factory.mktemp("paper-data")
    for objective in ("sop", "nsp"):
        cfg = DataConfig(max_seq_length=32, objective=objective, block_bytes=2 << 10, eval_fraction=0.2)
        create_pretraining_data([str(corpus)], tok, root / objective, cfg, num_workers=1, progress=False)
    return root / "sop", root / "nsp"


def _run(claim: str, data: tuple[Path, Path], out: Path, *extra: str) -> dict:
    argv = ["reproduce", claim, "--data", str(data[0]), "--nsp-data", str(data[1]), "--output", str(out),
            "--time-budget", "12s", "--max-steps", "3", "--eval-batches", "2", "--device", "cpu"]  # fmt: skip
    for o in small(claim):
        argv += ["--model-override", o]
    assert main([*argv, *extra]) == 0
    return json.loads((out / claim / "results.json").read_text())


def small(claim: str) -> list[str]:
    """SMALL but the fields the claim's cells set themselves (an override of those is refused)."""
    own = {key for cell in CLAIMS[claim].cells for key in cell.model}
    return [o for o in SMALL if o.split("=")[0] not in own]


@pytest.mark.parametrize("claim", list(CLAIMS))
def test_every_claim_runs_end_to_end_on_a_tiny_budget(claim, sop_nsp_data, tmp_path, one_thread, capsys):
    result = _run(claim, sop_nsp_data, tmp_path)
    spec = CLAIMS[claim]
    assert result["cell_order"] == [c.name for c in spec.cells]
    for cell in spec.cells:
        c = result["cells"][cell.name]
        assert 1 <= c["steps"] <= 3 and c["parameters"] > 0
        assert 0 <= c["held_out"]["mlm_acc"] <= 1 and c["held_out"]["mlm_loss"] > 0
        config = json.loads((tmp_path / claim / "cells" / cell.name / "config.json").read_text())
        for key, value in cell.model.items():  # the cell's switch is what the saved model has
            assert config[key] == value or (key == "sharing" and value == "none")
    assert result["verdicts"] and all(  # 3 steps: no direction about learning is called a result
        v.startswith(("too short to tell", "reproduced", "NOT reproduced")) for v in result["verdicts"]
    )
    assert all(
        "parameters" in v.split("(")[0] for v in result["verdicts"] if v.startswith(("reproduced", "NOT"))
    )
    table = (tmp_path / claim / "table.md").read_text()
    assert table.startswith(f"### {spec.title}") and all(f"| {c.name} |" in table for c in spec.cells)
    # the run it is: --max-steps trains exactly that many steps (no time limit), with these overrides
    assert "; 3 steps per cell (equal steps" in table and "whichever ends first" not in table
    assert f"--model-override for every cell: {', '.join(small(claim))}; 2 held-out batches" in table
    assert f"unigram guess (always the most frequent masked piece): {result['unigram_mlm_acc']:.4f}" in table
    assert (tmp_path / claim / f"{claim}.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert (
        spec.title in printed
        and f"written: {tmp_path / claim}/results.json, table.md, {claim}.png" in printed
    )


def test_claims_change_what_the_paper_changed(sop_nsp_data, tmp_path, one_thread):
    sharing = _run("sharing", sop_nsp_data, tmp_path)["cells"]
    p = {n: sharing[n]["parameters"] for n in ("all", "attention", "ffn", "none")}
    assert p["none"] > p["attention"] > p["ffn"] > p["all"]  # 2 layers: less sharing, more parameters
    from albert_lm.paper.reproduce import finished_cell

    for name in p:  # partial sharing is saved in albert-lm's own layout, and still counts as finished
        assert finished_cell(tmp_path / "sharing" / "cells" / name) is not None
    sentence = _run("sentence", sop_nsp_data, tmp_path)["cells"]
    assert {n: c["data"] for n, c in sentence.items()} == {"none": "sop", "nsp": "nsp", "sop": "sop"}
    assert all("held_out_nsp" in c for c in sentence.values())
    assert all(0.5 <= c["majority"][k] <= 1 for c in sentence.values() for k in ("sop", "nsp"))  # chance
    layers = _run("layers", sop_nsp_data, tmp_path)["cells"]
    assert all(len(c["layers"]["l2"]) == len(c["layers"]["cosine"]) == 2 for c in layers.values())
    depth = _run("depth", sop_nsp_data, tmp_path)["cells"]
    assert depth["L12-grown-from-L3"]["init_from"] == "L3-half-time"
    assert all(depth[n]["steps"] == depth["L12"]["steps"] for n in ("L6", "L3", "L1"))  # equal steps
    dropout = _run("dropout", sop_nsp_data, tmp_path)["cells"]
    assert dropout["dropout-off-halfway"]["dropout_off_step"] == max(
        1, round(dropout["dropout-0.1"]["steps"] / 2)
    )


def test_a_finished_cell_is_kept_and_the_claim_continues(sop_nsp_data, tmp_path, one_thread):
    first = _run("layers", sop_nsp_data, tmp_path)
    redo = tmp_path / "layers" / "cells" / "not-shared"
    stamp = (redo / "model.safetensors").stat().st_mtime_ns
    kept = tmp_path / "layers" / "cells" / "all-shared" / "model.safetensors"
    kept_stamp = kept.stat().st_mtime_ns
    (redo / "cell.json").unlink()  # as if the run had been killed before the cell was recorded ...
    for f in redo.glob("checkpoint-*"):  # ... and before its first checkpoint
        shutil.rmtree(f)
    second = _run("layers", sop_nsp_data, tmp_path)
    assert kept.stat().st_mtime_ns == kept_stamp  # not trained again
    assert second["cells"]["all-shared"]["held_out"] == first["cells"]["all-shared"]["held_out"]
    assert (redo / "model.safetensors").stat().st_mtime_ns >= stamp


def test_cells_split_between_processes(sop_nsp_data, tmp_path, one_thread, capsys):
    argv = ["reproduce", "layers", "--data", str(sop_nsp_data[0]), "--output", str(tmp_path),
            "--max-steps", "2", "--eval-batches", "2", "--device", "cpu"]  # fmt: skip
    for o in SMALL:
        argv += ["--model-override", o]
    assert main([*argv, "--cells", "not-shared"]) == 0  # one process's share: no table yet
    assert "waiting for all-shared" in capsys.readouterr().out
    assert not (tmp_path / "layers" / "results.json").exists()
    assert not (tmp_path / "layers" / "cells" / "all-shared").exists()
    assert main([*argv, "--cells", "all-shared"]) == 0  # the other's: finds every cell done, writes it
    result = json.loads((tmp_path / "layers" / "results.json").read_text())
    assert result["cell_order"] == ["all-shared", "not-shared"]
    assert all(c["held_out"]["mlm_acc"] >= 0 for c in result["cells"].values())
    assert main([*argv, "--cells", "all-shared,E64"]) == 1
    assert "E64 not in claim layers" in capsys.readouterr().err


def test_layer_transitions_on_a_model_whose_layers_do_nothing(tiny_config):
    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.paper.measures import layer_transitions

    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny_config()).eval()

    class Identity(torch.nn.Module):
        def forward(self, x, mask=None):
            return x

    model.albert.encoder.attention = torch.nn.ModuleList(Identity() for _ in model.albert.encoder.attention)
    model.albert.encoder.ffn = torch.nn.ModuleList(Identity() for _ in model.albert.encoder.ffn)
    ids = torch.randint(5, 99, (3, 10))
    item = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    item["labels"] = torch.full_like(ids, -100)
    data = [{k: v[i] for k, v in item.items()} for i in range(3)]
    out = layer_transitions(model, data, 2, 2, torch.device("cpu"))
    assert out["l2"] == pytest.approx([0.0, 0.0]) and out["cosine"] == pytest.approx([1.0, 1.0])


def _refused(capsys, argv: list[str], out: Path, *said: str) -> str:
    """`albert ARGV` exits 1 with one line naming what is wrong, and writes nothing under `out`."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("albert reproduce: error: ") and err.count("\n") == 1, err
    assert all(s in err for s in said), err
    assert not out.exists()
    return err


def test_data_of_the_other_objective_is_refused_before_anything_is_written(sop_nsp_data, tmp_path, capsys):
    """--data holds SOP examples, --nsp-data NSP ones: swapped, the same folder twice, or NSP data for a
    claim that trains on SOP would train and score the cells on the wrong pairs (it used to exit 0)."""
    sop, nsp = (str(f) for f in sop_nsp_data)
    out = tmp_path / "out"
    base = ["--output", str(out), "--max-steps", "1", "--eval-batches", "1", "--device", "cpu"]
    swapped = ["reproduce", "sentence", "--data", nsp, "--nsp-data", sop, *base]
    _refused(capsys, swapped, out, f"--data {nsp}: holds NSP examples", "swapped")
    twice = ["reproduce", "sentence", "--data", sop, "--nsp-data", sop, *base]
    _refused(capsys, twice, out, f"--nsp-data {sop}: the same folder as --data")
    _refused(
        capsys, ["reproduce", "sentence", "--data", sop, "--nsp-data", sop + "/", *base], out, "same folder"
    )
    _refused(capsys, ["reproduce", "layers", "--data", nsp, *base], out, f"--data {nsp}: holds NSP examples")
    sop_copy = tmp_path / "sop-copy"  # SOP examples, another folder, given as the NSP ones
    shutil.copytree(sop, sop_copy)
    wrong = ["reproduce", "sentence", "--data", sop, "--nsp-data", str(sop_copy), *base]
    _refused(capsys, wrong, out, f"--nsp-data {sop_copy}: holds SOP examples", "--objective nsp")


def test_a_stopped_cell_says_to_run_reproduce_again(
    sop_nsp_data, tmp_path, one_thread, monkeypatch, caplog, capsys
):
    """A signal during a cell's pretraining saves its checkpoint; the way on is `albert reproduce` again
    (which resumes the cell), not pretraining's --resume, which reproduce does not have."""
    argv = ["reproduce", "layers", "--data", str(sop_nsp_data[0]), "--output", str(tmp_path), "--max-steps",
            "3", "--eval-batches", "1", "--device", "cpu"]  # fmt: skip
    for o in SMALL:
        argv += ["--model-override", o]
    from albert_lm.training import loop

    take = signal_after_step(monkeypatch, 1)
    with caplog.at_level("INFO"):
        assert main(argv) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert "all-shared (seed 1): stopped at step 1; run the same `albert reproduce` command again" in err
    assert "albert reproduce` command again" in caplog.text and "--resume" not in caplog.text + err
    cell = tmp_path / "layers" / "cells" / "all-shared"
    assert (cell / "checkpoint-1").is_dir() and not (tmp_path / "layers" / "results.json").exists()
    monkeypatch.setattr(loop, "_take_step", take)
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(argv) == 0  # the same command: the cell resumes from its step 1
    assert "resum" in caplog.text.lower() and json.loads((cell / "cell.json").read_text())["steps"] == 3


def test_bad_input_is_a_clear_error(sop_nsp_data, tmp_path, capsys):
    sop, _ = sop_nsp_data
    out = tmp_path / "out"
    # the claim is a positional word: the error names the missing option, not a `--claim` there is not
    err = _refused(capsys, ["reproduce", "sentence", "--data", str(sop), "--output", str(out)], out)
    assert err.startswith("albert reproduce: error: --nsp-data: missing") and "--claim" not in err
    # a bad recipe is refused before OUTPUT/CLAIM (and its lock) is made
    _refused(capsys, ["reproduce", "sharing", "--data", str(sop), "--output", str(out), "--recipe", "nope"],
             out, "no recipe 'nope'")  # fmt: skip
    bad = tmp_path / "recipe.json"
    bad.write_text(json.dumps({"pretrain": {"no_such_setting": 1}}))
    _refused(capsys, ["reproduce", "sharing", "--data", str(sop), "--output", str(out), "--recipe", str(bad)],
             out, f"--recipe {bad}", "no_such_setting")  # fmt: skip
    assert main(["reproduce", "sharing", "--data", str(tmp_path / "none"), "--output", str(tmp_path)]) == 1
    err = (
        capsys.readouterr().err
    )  # a path that does not exist is said to be missing, with the way to make one
    assert f"--data {tmp_path / 'none'}: no such file or folder" in err and "albert data create" in err
    near = tmp_path / "sop-data"
    shutil.copytree(sop, near)
    assert main(["reproduce", "sharing", "--data", str(tmp_path / "sop-dta"), "--output", str(tmp_path)]) == 1
    assert f"did you mean {near}?" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["reproduce", "sharing", "--data", str(tmp_path / "empty"), "--output", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not a folder made by `albert data create` (no manifest.json); make one with `albert data" in err
    with pytest.raises(ValueError, match="time budget"):
        ReproduceConfig(claim="sharing", data=str(sop), time_budget="0m")


def test_cell_settings_time_or_steps(sop_nsp_data, tmp_path):
    from albert_lm.paper.claims import DEPTH
    from albert_lm.paper.reproduce import cell_config

    sop, _ = sop_nsp_data
    cells = {c.name: c for c in DEPTH.cells}
    timed = ReproduceConfig(claim="depth", data=str(sop), output=str(tmp_path), time_budget="10m")
    half = cell_config(timed, cells["L3-half-time"], {})
    assert half.time_budget == "300s" and half.model_overrides["num_hidden_layers"] == 3
    assert half.model_overrides["sharing"] == "all" and half.seed == 1
    grown = cell_config(timed, cells["L12-grown-from-L3"], {})
    assert grown.init_from == str(tmp_path / "depth" / "cells" / "L3-half-time")
    equal = cell_config(timed, cells["L6"], {"L12": {"steps": 777}})
    assert equal.time_budget is None and equal.max_steps == 777  # as many steps as L12 took
    stepped = ReproduceConfig(claim="depth", data=str(sop), output=str(tmp_path), max_steps=1000)
    assert cell_config(stepped, cells["L12"], {}).time_budget is None
    assert cell_config(stepped, cells["L12"], {}).max_steps == 1000
    assert cell_config(stepped, cells["L3-half-time"], {}).max_steps == 500
    # with --max-steps the equal-steps cells know their steps without L12: they can run apart from it
    assert cell_config(stepped, cells["L6"], {}).max_steps == 1000
    seed2 = ReproduceConfig(claim="depth", data=str(sop), output=str(tmp_path), max_steps=1000, seeds="2,3")
    assert cell_config(seed2, cells["L12-grown-from-L3"], {}).init_from == str(
        tmp_path / "depth" / "cells-seed-2" / "L3-half-time"
    )  # a seed's cells warm-start from the same seed's
    assert cell_config(seed2, cells["L6"], {}, 3).seed == 3
    with pytest.raises(ValueError, match="--seeds .1,two.: expected comma-separated whole numbers"):
        ReproduceConfig(claim="depth", data=str(sop), seeds="1,two")


def test_several_seeds_give_each_cell_a_mean_and_a_spread(sop_nsp_data, tmp_path, one_thread):
    one = _run("layers", sop_nsp_data, tmp_path, "--seeds", "1")
    kept = tmp_path / "layers" / "cells" / "all-shared" / "model.safetensors"
    stamp = kept.stat().st_mtime_ns
    both = _run("layers", sop_nsp_data, tmp_path, "--seeds", "1,2")
    assert kept.stat().st_mtime_ns == stamp  # seed 1's cells from the first run are kept
    assert both["seeds"] == [1, 2]
    for name, cell in both["cells"].items():
        config = json.loads(
            (tmp_path / "layers" / "cells-seed-2" / name / "pretrain_config.json").read_text()
        )
        assert config["seed"] == 2
        runs = cell["runs"]
        assert [r["seed"] for r in runs] == [1, 2]
        assert runs[0]["held_out"] == one["cells"][name]["held_out"]  # seed 1 scored as before
        assert runs[0]["held_out"]["mlm_loss"] != runs[1]["held_out"]["mlm_loss"]  # another initialisation
        mean = (runs[0]["held_out"]["mlm_acc"] + runs[1]["held_out"]["mlm_acc"]) / 2
        assert cell["held_out"]["mlm_acc"] == pytest.approx(mean)
        assert len(cell["layers"]["l2"]) == 2
    assert all(v.endswith("of 2 seeds]") for v in both["verdicts"])
    table = (tmp_path / "layers" / "table.md").read_text()
    assert "Seeds 1, 2: each figure is the mean" in table
    low, high = sorted(r["held_out"]["mlm_loss"] for r in both["cells"]["not-shared"]["runs"])
    assert f"({low:.3f}-{high:.3f})" in table


def test_sentence_table_and_plot_with_several_seeds(tmp_path, monkeypatch):
    from albert_lm.paper.claims import SENTENCE
    from albert_lm.paper.report import format_table, plot_claim
    from albert_lm.paper.reproduce import combine
    from albert_lm.paper.verdicts import verdicts

    def run(seed: int, nsp: float, sop: float) -> dict:
        return {
            "seed": seed,
            "steps": 300,
            "seconds": 60.0,
            "parameters": 1000,
            "majority": {"sop": 0.52, "nsp": 0.57},
            "held_out": {"mlm_acc": 0.2, "mlm_loss": 5.0, "sentence_acc": sop},
            "held_out_nsp": {"mlm_acc": 0.2, "mlm_loss": 5.0, "sentence_acc": nsp},
        }

    runs = {
        1: {"none": run(1, 0.55, 0.48), "nsp": run(1, 0.66, 0.54), "sop": run(1, 0.58, 0.60)},
        2: {"none": run(2, 0.56, 0.50), "nsp": run(2, 0.70, 0.52), "sop": run(2, 0.62, 0.56)},
    }
    cells = combine(runs)
    assert cells["sop"]["held_out"]["sentence_acc"] == pytest.approx(0.58)
    assert cells["nsp"]["held_out_nsp"]["sentence_acc"] == pytest.approx(0.68)
    lines = verdicts("sentence", cells, [runs[1], runs[2]])
    assert lines[0].startswith("reproduced") and lines[0].endswith("[in 2 of 2 seeds]")
    assert lines[1].startswith("NOT reproduced") and lines[1].endswith("[in 1 of 2 seeds]")  # seed 1 only
    assert "(SOP 0.580 against 0.530 and 0.520; NSP 0.600 against 0.570)" in lines[1]  # what it was judged on
    result = {"claim": "sentence", "title": SENTENCE.title, "paper": SENTENCE.paper, "seeds": [1, 2],
              "paper_table": SENTENCE.paper_table, "cells": cells, "verdicts": lines}  # fmt: skip
    table = format_table(result)
    assert (
        "| sop | 0.00M | 300 | 1.0 | 0.2000 (0.2000-0.2000) | 5.000 (5.000-5.000) | 0.600 (0.580-0.620) |"
        in table
    )
    matplotlib = pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    lines_drawn: list[float] = []  # the reference lines: the unigram guess, each held-out set's chance
    draw = Axes.axhline
    monkeypatch.setattr(
        Axes, "axhline", lambda ax, y=0, *a, **k: lines_drawn.append(y) or draw(ax, y, *a, **k)
    )
    png = plot_claim({**result, "unigram_mlm_acc": 0.11}, tmp_path / "sentence.png")
    assert png is not None and png.stat().st_size > 1000
    assert lines_drawn == [0.11, 0.57, 0.52] and matplotlib  # not a coin's 0.5: the majority of each set
