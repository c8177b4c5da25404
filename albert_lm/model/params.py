"""Parameter counts: the presets (paper Table 1) and the base-size ablation grid (Tables 3 and 4).

Models are built on the meta device, so even xxlarge is counted instantly without memory. Counts are
of `AlbertModel` (embeddings, projection, encoder, pooler; no pretraining heads), the quantity the
paper and transformers report.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from albert_lm.model.config import PRESETS, AlbertConfig
from albert_lm.model.encoder import AlbertModel

# The paper's figures, in millions: Table 1 (presets), Table 3 (E x all/none), Table 4 (sharing).
PAPER_PRESETS = {
    "albert-base": 12,
    "albert-large": 18,
    "albert-xlarge": 60,
    "albert-xxlarge": 235,
    "bert-base": 108,
    "bert-large": 334,
}
PAPER_GRID = {
    (64, "none"): 87, (128, "none"): 89, (256, "none"): 93, (768, "none"): 108,
    (64, "all"): 10, (128, "all"): 12, (256, "all"): 16, (768, "all"): 31,
    (768, "attention"): 83, (768, "ffn"): 57, (128, "attention"): 64, (128, "ffn"): 38,
}  # fmt: skip
GRID_E = (64, 128, 256, 768)
GRID_SHARING = ("all", "attention", "ffn", "none")


def count_parameters(config: AlbertConfig) -> int:
    with torch.device("meta"):
        return AlbertModel(config).num_parameters()


@dataclass
class Row:
    name: str
    config: AlbertConfig
    params: int
    paper_m: int | None


def preset_rows(names: list[str] | None = None) -> list[Row]:
    rows = []
    for name in names or list(PRESETS):
        cfg = AlbertConfig.from_preset(name)
        rows.append(Row(name, cfg, count_parameters(cfg), PAPER_PRESETS.get(name)))
    return rows


def grid_rows() -> list[Row]:
    rows = []
    for e in GRID_E:
        for sharing in GRID_SHARING:
            cfg = AlbertConfig.from_preset("albert-base", embedding_size=e, sharing=sharing)
            rows.append(
                Row(f"base E={e} {sharing}", cfg, count_parameters(cfg), PAPER_GRID.get((e, sharing)))
            )
    return rows


def _table(rows: list[Row]) -> str:
    head = (
        f"| {'model':<22} | {'H':>5} | {'L':>3} | {'E':>4} | {'sharing':<9} | {'params':>9} | {'paper':>6} |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        c = r.config
        paper = f"{r.paper_m}M" if r.paper_m is not None else "-"
        lines.append(
            f"| {r.name:<22} | {c.hidden_size:>5} | {c.num_hidden_layers:>3} | {c.embedding_size:>4} | "
            f"{c.sharing:<9} | {r.params / 1e6:>8.1f}M | {paper:>6} |"
        )
    return "\n".join(lines)


# What a preset's row leaves unsaid, printed under the table where the row is shown.
_PRESET_NOTES = {
    "albert-xxlarge": "albert-xxlarge: Table 1's shapes (H 4096, FFN 16384, L 12, E 128, V 30000) give {params}, "
                      "as transformers counts them too; the paper does not say what else its 235M includes.",
    "albert-tiny": "albert-tiny: albert-lm's own size for tests and quick tries, not the paper's; the cpu-10min and "
                   "cpu-1h recipes change it (E 128, no sharing).",
}  # fmt: skip


def format_parameter_tables(presets: list[str] | None = None) -> str:
    rows = preset_rows(presets)
    out = ["Presets (paper Table 1):", _table(rows)]
    out += [
        _PRESET_NOTES[r.name].format(params=f"{r.params / 1e6:.1f}M") for r in rows if r.name in _PRESET_NOTES
    ]
    if not presets:
        out += ["", "Ablation grid at base size, H=768 L=12 (paper Tables 3 and 4):", _table(grid_rows())]
    return "\n".join(out)
