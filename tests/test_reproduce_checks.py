"""`albert reproduce`: what it refuses before any training (overrides the cells set, one-label sentence
pairs, seeds given twice), what its table says of the run, and when its verdicts call a difference noise."""

from __future__ import annotations

import json
import shutil

import pytest
from test_reproduce import _refused, sop_nsp_data  # noqa: F401 (the module's fixture: SOP and NSP examples)

from albert_lm.paper.config import ReproduceConfig
from albert_lm.paper.verdicts import NOISE, verdicts

# Every refusal below would be a short run were its check gone (not 10 minutes a cell), failing the test.
SHORT = ["--max-steps", "1", "--eval-batches", "1", "--device", "cpu"]


def test_an_override_of_a_field_the_cells_set_is_refused(sop_nsp_data, tmp_path, capsys):  # noqa: F811
    """Each cell's own value wins over --model-override: the override would be recorded in results.json
    and applied to no cell (every sharing cell's config had embedding_size 128)."""
    out = tmp_path / "out"
    base = ["reproduce", "sharing", "--data", str(sop_nsp_data[0]), "--output", str(out), *SHORT]
    _refused(
        capsys,
        [*base, "--model-override", "embedding_size=64"],
        out,
        "--model-override embedding_size: the sharing claim sets it in its cells (128)",
        "leave it out",
    )
    _refused(
        capsys,
        [*base, "--model-override", "sharing=none"],
        out,
        "--model-override sharing: the sharing claim sets it in its cells (all, attention, ffn, none)",
    )
    layers = ["reproduce", "layers", "--data", str(sop_nsp_data[0]), "--output", str(out), *SHORT]
    _refused(capsys, [*layers, "--model-override", "embedding_size=64"], out, "cells (32)")
    settings = tmp_path / "settings.json"  # from a settings file too
    settings.write_text(json.dumps({"model_overrides": {"num_hidden_layers": 2}}))
    depth = ["reproduce", "depth", "--data", str(sop_nsp_data[0]), "--output", str(out), *SHORT]
    depth += ["--config", str(settings)]
    _refused(
        capsys,
        depth,
        out,
        "--model-override num_hidden_layers: the depth claim sets it in its cells (12, 6, 3, 1)",
    )


def test_the_table_says_what_each_cell_ran():
    from albert_lm.paper.report import _settings_line

    run = {"data": "D", "recipe": "cpu-1h", "time_budget": "10m", "max_steps": 60, "eval_batches": 2}
    line = _settings_line({"claim": "sharing", "settings": run})
    assert "; 60 steps per cell (equal steps); --model-override for every cell: none;" in line
    assert "10m" not in line and "whichever" not in line  # --max-steps runs with no time limit
    timed = _settings_line({"claim": "sharing", "settings": {**run, "max_steps": None}})
    assert "; 10m of pretraining per cell (equal time);" in timed
    depth = _settings_line({"claim": "depth", "settings": {**run, "model_overrides": {"hidden_size": 32}}})
    assert "60 steps per cell (equal steps; a cell with a share of the budget, that share of them)" in depth
    assert "--model-override for every cell: hidden_size=32;" in depth


def _sharing(accs: dict[str, float], steps: int = 2000) -> dict[str, dict]:
    params = {"all": 1, "attention": 3, "ffn": 2, "none": 4}
    return {n: {"steps": steps, "parameters": params[n], "held_out": {"mlm_acc": a}} for n, a in accs.items()}


def test_a_one_seed_difference_under_the_noise_margin_is_no_result():
    close = _sharing({"all": 0.20, "attention": 0.215, "ffn": 0.21, "none": 0.22})  # attention - ffn 0.005
    lines = verdicts("sharing", close)
    assert lines[0].startswith("within noise (one seed; a difference of 0.0050 in held-out MLM accuracy")
    assert "run with --seeds 1,2,3" in lines[0] and "sharing the FFN costs more" in lines[0]
    assert lines[1].startswith("reproduced: parameters")  # a count is exact: no margin
    below = _sharing({"all": 0.20, "attention": 0.21, "ffn": 0.215, "none": 0.22})  # the other way, as close
    assert verdicts("sharing", below)[0].startswith("within noise (one seed")
    apart = _sharing({"all": 0.20, "attention": 0.24, "ffn": 0.24 - 2 * NOISE, "none": 0.25})
    assert verdicts("sharing", apart)[0].startswith("reproduced: sharing the FFN")
    against = _sharing({"all": 0.20, "attention": 0.24 - 2 * NOISE, "ffn": 0.24, "none": 0.25})
    assert verdicts("sharing", against)[0].startswith("NOT reproduced: sharing the FFN")
    # with several seeds the seed-to-seed spread judges, not the margin
    two = verdicts("sharing", close, [close, close])
    assert two[0].startswith("reproduced: sharing the FFN") and two[0].endswith("[in 2 of 2 seeds]")
    grown = {"L1": 0.1, "L3": 0.12, "L6": 0.14, "L12": 0.16, "L3-half-time": 0.1, "L12-grown-from-L3": 0.165}
    cells = {n: {"steps": 2000, "held_out": {"mlm_acc": a}} for n, a in grown.items()}
    depth = verdicts("depth", cells)
    assert depth[0].startswith("reproduced: at equal steps") and depth[1].startswith("within noise (one seed")


def test_cells_all_at_the_unigram_guess_tell_nothing():
    plateau = _sharing({"all": 0.140, "attention": 0.149, "ffn": 0.141, "none": 0.142}, steps=1000)
    lines = verdicts("sharing", plateau, unigram=0.140)
    assert lines[0].startswith(
        "too short to tell (every cell is still at the unigram guess: held-out MLM accuracy 0.1400-0.1490"
    ), lines[0]
    assert "train longer" in lines[0] and lines[1].startswith("reproduced: parameters")
    assert verdicts("sharing", plateau)[0].startswith("within noise")  # no baseline: no such check
    left = {
        **plateau,
        "attention": {**plateau["attention"], "held_out": {"mlm_acc": 0.2}},
    }  # one cell left it
    assert verdicts("sharing", left, unigram=0.140)[0].startswith("reproduced")
    # the sentence claim's directions are about the sentence head, which learns on the plateau too
    pairs = {"held_out": {"mlm_acc": 0.14, "sentence_acc": 0.5}, "held_out_nsp": {"sentence_acc": 0.5}}
    cells = {
        n: {"steps": 1000, "majority": {"sop": 0.5, "nsp": 0.5}, **pairs} for n in ("none", "nsp", "sop")
    }
    assert all(line.startswith("NOT reproduced") for line in verdicts("sentence", cells, unigram=0.14))


def test_sentence_pairs_of_one_label_are_refused(sop_nsp_data, tmp_path, capsys):  # noqa: F811
    """Held-out NSP pairs all "is next" scored every cell's head 0.000 on NSP pairs: refused at the start."""
    sop, nsp = sop_nsp_data
    one_label = tmp_path / "nsp-one-label"
    shutil.copytree(nsp, one_label)
    manifest = json.loads((one_label / "manifest.json").read_text())
    examples = manifest["splits"]["eval"]["examples"]
    manifest["splits"]["eval"]["label_ones"] = 0  # as data create counts a split of one document per shard
    (one_label / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    argv = ["reproduce", "sentence", "--data", str(sop), "--nsp-data", str(one_label), "--output", str(out)]
    argv += SHORT
    _refused(
        capsys,
        argv,
        out,
        f"--nsp-data {one_label}: its {examples} held-out pairs all have one label (0 with a random next "
        f"segment, {examples} with the true next segment",
        "larger --eval-fraction",
    )
    manifest["splits"]["eval"]["label_ones"] = examples  # all random: as useless
    (one_label / "manifest.json").write_text(json.dumps(manifest))
    _refused(capsys, argv, out, f"({examples} with a random next segment, 0 with the true next segment")
    del manifest["splits"]["eval"]["label_ones"]  # an older manifest: not checked
    (one_label / "manifest.json").write_text(json.dumps(manifest))
    ReproduceConfig(claim="sentence", data=str(sop), nsp_data=str(one_label))


def test_a_seed_given_twice_is_refused(sop_nsp_data, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "out"
    argv = ["reproduce", "sharing", "--data", str(sop_nsp_data[0]), "--output", str(out), *SHORT]
    _refused(
        capsys, [*argv, "--seeds", "1,1"], out, "--seeds '1,1': 1 given more than once", "give each seed once"
    )
    _refused(capsys, [*argv, "--seeds", "3,1,2,3,1"], out, "1, 3 given more than once")
    assert ReproduceConfig(claim="sharing", data=str(sop_nsp_data[0]), seeds="2, 1").seed_list() == [2, 1]
    with pytest.raises(ValueError, match="given more than once"):
        ReproduceConfig(claim="sharing", data=str(sop_nsp_data[0]), seeds="1,2,2")
