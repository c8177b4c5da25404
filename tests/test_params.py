"""Parameter counts against the paper's Tables 1, 3 and 4 (within 1.5M), and `albert params`."""

from __future__ import annotations

import pytest

from albert_lm.cli import main
from albert_lm.model.params import PAPER_GRID, PAPER_PRESETS, grid_rows, preset_rows


def test_presets_agree_with_table_1_within_1_5m():
    rows = {r.name: r for r in preset_rows()}
    for name, paper in PAPER_PRESETS.items():
        if name == "albert-xxlarge":
            continue  # the paper's 235M is not reachable from Table 1's shapes (README); transformers: 222.6M
        assert abs(rows[name].params / 1e6 - paper) <= 1.5, (name, rows[name].params)
    assert round(rows["albert-xxlarge"].params / 1e6, 1) == 222.6
    assert 1e5 < rows["albert-tiny"].params < 1e6


def test_ablation_grid_agrees_with_tables_3_and_4_within_1_5m():
    rows = {(r.config.embedding_size, r.config.sharing): r.params for r in grid_rows()}
    assert len(rows) == 16
    for key, paper in PAPER_GRID.items():
        assert abs(rows[key] / 1e6 - paper) <= 1.5, (key, rows[key])


def test_albert_params_prints_the_tables(capsys):
    assert main(["params"]) == 0
    out = capsys.readouterr().out
    assert "albert-base" in out and "11.7M" in out and "base E=768 attention" in out


def test_albert_params_for_one_preset(capsys):
    assert main(["params", "--preset", "bert-large"]) == 0
    out = capsys.readouterr().out
    assert "bert-large" in out and "albert-base" not in out
    assert "albert-xxlarge" not in out and "albert-tiny" not in out  # no note for a row not shown
    assert main(["params", "--preset", "albert-xxlarge"]) == 0  # the row off the paper's figure says why
    out = capsys.readouterr().out
    assert "give 222.6M, as transformers counts them too; the paper does not say" in out


def test_unknown_preset_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:  # argparse's usage error, with the nearest preset
        main(["params", "--preset", "albert-huge"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'albert-huge'" in err and "did you mean albert-large?" in err


@pytest.mark.parametrize("argv", [["--help"], ["params", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "usage: albert" in capsys.readouterr().out
