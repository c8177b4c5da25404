"""The package surface: every export resolves, and importing the package stays light."""

from __future__ import annotations

import subprocess
import sys

import albert_lm


def test_every_export_resolves():
    assert sorted(albert_lm.__all__) == sorted([*albert_lm._EXPORTS, "__version__"])
    for name in albert_lm.__all__:
        assert getattr(albert_lm, name) is not None, name


def test_import_and_tokenizer_do_not_load_torch():
    # Data-creation workers import only this much; torch would cost each one ~200 MB.
    code = "import sys, albert_lm; from albert_lm import AlbertTokenizer, DataConfig; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
