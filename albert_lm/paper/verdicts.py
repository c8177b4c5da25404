"""Whether each claim's direction reproduced, in words, from the measured cells.

A direction counts as reproduced only when the measured difference points the paper's way; the words say
by how much. With several seeds the verdict is on each cell's mean over the seeds, and each line says in
how many of the seeds taken alone the direction held, so a difference smaller than the seed-to-seed
spread shows as such. Held-out MLM accuracy stands in for the paper's downstream averages (Tables 3-4)
where no fine-tuning was run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Cells = dict[str, dict[str, Any]]


def _acc(cells: Cells, name: str) -> float:
    return float(cells[name]["held_out"]["mlm_acc"])


def _line(ok: bool, text: str) -> str:
    return f"{'reproduced' if ok else 'NOT reproduced'}: {text}"


def _embedding(cells: Cells) -> list[str]:
    out = []
    for kind in ("not-shared", "all-shared"):
        names = [n for n in cells if n.endswith(kind)]
        accs = [_acc(cells, n) for n in names]
        if kind == "not-shared":
            ok = accs[-1] > accs[0]
            text = "not-shared, the largest E beats the smallest"
        else:
            ok = max(accs) > accs[0] and accs.index(max(accs)) < len(accs) - 1
            text = "all-shared, a middle E beats both the smallest and the largest"
        figures = ", ".join(f"{n.split('-')[0]} {a:.4f}" for n, a in zip(names, accs, strict=True))
        out.append(_line(ok, f"{text} (held-out MLM accuracy {figures})"))
    params = [cells[n]["parameters"] for n in cells if n.endswith("not-shared")]
    out.append(_line(params == sorted(params), "not-shared parameters grow with E"))
    return out


def _sharing(cells: Cells) -> list[str]:
    a = {n: _acc(cells, n) for n in ("all", "attention", "ffn", "none")}
    p = {n: cells[n]["parameters"] for n in a}
    figures = ", ".join(f"{n} {v:.4f}" for n, v in a.items())
    return [
        _line(
            a["none"] - a["ffn"] > a["none"] - a["attention"],
            f"sharing the FFN costs more than sharing attention (held-out MLM accuracy {figures})",
        ),
        _line(
            p["none"] > p["attention"] > p["ffn"] > p["all"],
            "parameters: not-shared > shared-attention > shared-FFN > all-shared "
            f"({', '.join(f'{n} {v / 1e6:.2f}M' for n, v in p.items())})",
        ),
    ]


def _sentence(cells: Cells) -> list[str]:
    nsp_on = {n: float(cells[n]["held_out_nsp"]["sentence_acc"]) for n in cells}
    sop_on = {n: float(cells[n]["held_out"]["sentence_acc"]) for n in cells}
    # Chance is the majority label's share of each held-out set (NSP sets need not be 50/50).
    nsp_base, sop_base = (max(cells["none"]["majority"][k], 0.5) for k in ("nsp", "sop"))
    table = "; ".join(f"{n}-trained NSP {nsp_on[n]:.3f} / SOP {sop_on[n]:.3f}" for n in cells)
    base = f"always-the-same-answer NSP {nsp_base:.3f} / SOP {sop_base:.3f}"
    return [
        _line(
            nsp_on["nsp"] > nsp_base + 0.05 and sop_on["nsp"] < sop_base + 0.05,
            f"NSP-trained beats chance on NSP by 5 points and stays within 5 of chance on SOP ({table}; {base})",
        ),
        _line(
            sop_on["sop"] > max(sop_on["nsp"], sop_base) + 0.05 and nsp_on["sop"] > nsp_base,
            "SOP-trained beats the NSP-trained model and chance on SOP by 5 points, and chance on NSP "
            f"(SOP {sop_on['sop']:.3f} against {sop_on['nsp']:.3f} and {sop_base:.3f}; NSP {nsp_on['sop']:.3f} "
            f"against {nsp_base:.3f})",
        ),
    ]


def _layers(cells: Cells) -> list[str]:
    def swing(name: str, key: str) -> float:
        v = cells[name]["layers"][key][1:]  # after the first layer (both start from the embeddings)
        return max(v) - min(v) if v else 0.0

    out = []
    for key in ("l2", "cosine"):
        s, n = swing("all-shared", key), swing("not-shared", key)
        out.append(
            _line(s < n, f"{key}: smaller swing across layers 2..L with sharing ({s:.3f} against {n:.3f})")
        )
    return out


def _dropout(cells: Cells) -> list[str]:
    a = {n: _acc(cells, n) for n in cells}
    return [
        _line(
            a["no-dropout"] > a["dropout-0.1"],
            f"no dropout beats dropout 0.1 ({a['no-dropout']:.4f} against {a['dropout-0.1']:.4f})",
        ),
        _line(
            a["dropout-off-halfway"] > a["dropout-0.1"],
            f"dropout switched off halfway beats keeping it ({a['dropout-off-halfway']:.4f} against "
            f"{a['dropout-0.1']:.4f})",
        ),
    ]


def _depth(cells: Cells) -> list[str]:
    a = {n: _acc(cells, n) for n in cells}
    steps = [a[f"L{n}"] for n in (1, 3, 6, 12)]
    return [
        _line(
            steps == sorted(steps),
            "at equal steps, deeper all-shared models are better up to 12 layers (L1 / L3 / L6 / L12 "
            + " / ".join(f"{x:.4f}" for x in steps)
            + ")",
        ),
        _line(
            a["L12-grown-from-L3"] > a["L12"],
            f"at equal time, 12 layers grown from a 3-layer model beat 12 from scratch "
            f"({a['L12-grown-from-L3']:.4f} against {a['L12']:.4f})",
        ),
    ]


RULES: dict[str, Callable[[Cells], list[str]]] = {
    "embedding": _embedding, "sharing": _sharing, "sentence": _sentence, "layers": _layers,
    "dropout": _dropout, "depth": _depth,
}  # fmt: skip


# Fewer steps than this per cell and the differences between cells are noise: every model is still on
# the unigram plateau, which the base recipe leaves after ~1200 steps (docs/notes/pretraining_plateau.md).
MIN_STEPS = 300


def _undecided(line: str, why: str) -> str:
    """A verdict line that must not read as a result: the direction measured, and why it tells nothing."""
    ok = line.startswith("reproduced")
    text = line.split(": ", 1)[1]
    way = "points the paper's way" if ok else "does not point the paper's way"
    return f"too short to tell ({why}): measured, {way}: {text}"


def _learnt(line: str) -> bool:
    """Whether a verdict line is about what the cells learnt (noise in a short run), not about their
    parameter counts (exact at any length)."""
    if not line.startswith(("reproduced", "NOT reproduced")):
        return False
    return "parameters" not in line.split(": ", 1)[1].split("(")[0]


def verdicts(claim: str, cells: Cells, per_seed: list[Cells] | None = None) -> list[str]:
    """One line per direction, on `cells`; with `per_seed` (the cells of each seed alone), each line ends
    with in how many seeds the direction held, and a direction the means show but some seeds do not is
    called within the seed-to-seed noise. A run whose cells trained fewer than MIN_STEPS steps gets no
    "reproduced" at all: its lines say it was too short to tell."""
    lines = RULES[claim](cells)
    if per_seed:
        held = [[line.startswith("reproduced") for line in RULES[claim](seed)] for seed in per_seed]
        counted = []
        for i, line in enumerate(lines):
            k, n = sum(h[i] for h in held), len(held)
            if 0 < k < n and line.startswith("reproduced"):  # the mean's way, but not every seed's
                text = line.split(": ", 1)[1]
                line = f"within the seed-to-seed noise (held in {k} of {n} seeds, not all): {text}"
            counted.append(f"{line} [in {k} of {n} seeds]")
        lines = counted
    steps = [int(c["steps"]) for c in cells.values() if isinstance(c.get("steps"), int | float)]
    if steps and min(steps) < MIN_STEPS:
        why = (
            f"{min(steps)} steps in the shortest cell, under {MIN_STEPS}: at this length the differences "
            "between cells are noise; train longer (--time-budget or --max-steps)"
        )
        lines = [_undecided(line, why) if _learnt(line) else line for line in lines]
    return lines
