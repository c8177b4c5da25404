"""Whether each claim's direction reproduced, in words, from the measured cells.

A direction counts as reproduced only when the measured difference points the paper's way; the words say
by how much. With several seeds the verdict is on each cell's mean over the seeds, and each line says in
how many of the seeds taken alone the direction held, so a difference smaller than the seed-to-seed
spread shows as such; with one seed, a difference of held-out MLM accuracy under NOISE (what another seed
moved a cell by) is called within noise. Lines about what the cells learnt are called too short to tell
when the cells trained under MIN_STEPS steps, or when every cell is still at the unigram guess. Held-out
MLM accuracy stands in for the paper's downstream averages (Tables 3-4) where no fine-tuning was run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from albert_lm.training.pretrain import UNIGRAM_MARGIN

Cells = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Direction:
    """One of the paper's directions as measured: whether it points the paper's way, and in what words."""

    ok: bool
    text: str
    gap: float | None = None  # the held-out MLM accuracy difference it rests on (noise under NOISE, one seed)
    learnt: bool = True  # about what the cells learnt (noise in a short run); False: exact (parameter counts)
    mlm: bool = True  # rests on what the cells learnt of the masked pieces (nothing, on the unigram plateau)

    @property
    def line(self) -> str:
        return f"{'reproduced' if self.ok else 'NOT reproduced'}: {self.text}"


def _acc(cells: Cells, name: str) -> float:
    return float(cells[name]["held_out"]["mlm_acc"])


def _embedding(cells: Cells) -> list[Direction]:
    out = []
    for kind in ("not-shared", "all-shared"):
        names = [n for n in cells if n.endswith(kind)]
        accs = [_acc(cells, n) for n in names]
        if kind == "not-shared":
            ok, gap = accs[-1] > accs[0], accs[-1] - accs[0]
            text = "not-shared, the largest E beats the smallest"
        else:
            ok = max(accs) > accs[0] and accs.index(max(accs)) < len(accs) - 1
            gap = max(accs[1:-1]) - max(accs[0], accs[-1])
            text = "all-shared, a middle E beats both the smallest and the largest"
        figures = ", ".join(f"{n.split('-')[0]} {a:.4f}" for n, a in zip(names, accs, strict=True))
        out.append(Direction(ok, f"{text} (held-out MLM accuracy {figures})", gap))
    params = [cells[n]["parameters"] for n in cells if n.endswith("not-shared")]
    out.append(Direction(params == sorted(params), "not-shared parameters grow with E", learnt=False))
    return out


def _sharing(cells: Cells) -> list[Direction]:
    a = {n: _acc(cells, n) for n in ("all", "attention", "ffn", "none")}
    p = {n: cells[n]["parameters"] for n in a}
    figures = ", ".join(f"{n} {v:.4f}" for n, v in a.items())
    return [
        Direction(
            a["none"] - a["ffn"] > a["none"] - a["attention"],
            f"sharing the FFN costs more than sharing attention (held-out MLM accuracy {figures})",
            a["attention"] - a["ffn"],
        ),
        Direction(
            p["none"] > p["attention"] > p["ffn"] > p["all"],
            "parameters: not-shared > shared-attention > shared-FFN > all-shared "
            f"({', '.join(f'{n} {v / 1e6:.2f}M' for n, v in p.items())})",
            learnt=False,
        ),
    ]


def _sentence(cells: Cells) -> list[Direction]:
    """The sentence head's accuracies, judged with a margin of 5 points of their own (no MLM gap)."""
    nsp_on = {n: float(cells[n]["held_out_nsp"]["sentence_acc"]) for n in cells}
    sop_on = {n: float(cells[n]["held_out"]["sentence_acc"]) for n in cells}
    # Chance is the majority label's share of each held-out set (NSP sets need not be 50/50).
    nsp_base, sop_base = (max(cells["none"]["majority"][k], 0.5) for k in ("nsp", "sop"))
    table = "; ".join(f"{n}-trained NSP {nsp_on[n]:.3f} / SOP {sop_on[n]:.3f}" for n in cells)
    base = f"always-the-same-answer NSP {nsp_base:.3f} / SOP {sop_base:.3f}"
    return [
        Direction(
            nsp_on["nsp"] > nsp_base + 0.05 and sop_on["nsp"] < sop_base + 0.05,
            f"NSP-trained beats chance on NSP by 5 points and stays within 5 of chance on SOP ({table}; {base})",
            mlm=False,
        ),
        Direction(
            sop_on["sop"] > max(sop_on["nsp"], sop_base) + 0.05 and nsp_on["sop"] > nsp_base,
            "SOP-trained beats the NSP-trained model and chance on SOP by 5 points, and chance on NSP "
            f"(SOP {sop_on['sop']:.3f} against {sop_on['nsp']:.3f} and {sop_base:.3f}; NSP {nsp_on['sop']:.3f} "
            f"against {nsp_base:.3f})",
            mlm=False,
        ),
    ]


def _layers(cells: Cells) -> list[Direction]:
    def swing(name: str, key: str) -> float:
        v = cells[name]["layers"][key][1:]  # after the first layer (both start from the embeddings)
        return max(v) - min(v) if v else 0.0

    out = []
    for key in ("l2", "cosine"):
        s, n = swing("all-shared", key), swing("not-shared", key)
        out.append(
            Direction(
                s < n, f"{key}: smaller swing across layers 2..L with sharing ({s:.3f} against {n:.3f})"
            )
        )
    return out


def _dropout(cells: Cells) -> list[Direction]:
    a = {n: _acc(cells, n) for n in cells}
    off, kept, on = a["no-dropout"], a["dropout-off-halfway"], a["dropout-0.1"]
    return [
        Direction(off > on, f"no dropout beats dropout 0.1 ({off:.4f} against {on:.4f})", off - on),
        Direction(
            kept > on,
            f"dropout switched off halfway beats keeping it ({kept:.4f} against {on:.4f})",
            kept - on,
        ),
    ]


def _depth(cells: Cells) -> list[Direction]:
    a = {n: _acc(cells, n) for n in cells}
    steps = [a[f"L{n}"] for n in (1, 3, 6, 12)]
    grown, scratch = a["L12-grown-from-L3"], a["L12"]
    return [
        Direction(
            steps == sorted(steps),
            "at equal steps, deeper all-shared models are better up to 12 layers (L1 / L3 / L6 / L12 "
            + " / ".join(f"{x:.4f}" for x in steps)
            + ")",
            min(b - a for a, b in zip(steps, steps[1:], strict=False)),  # the smallest step up (or down)
        ),
        Direction(
            grown > scratch,
            f"at equal time, 12 layers grown from a 3-layer model beat 12 from scratch "
            f"({grown:.4f} against {scratch:.4f})",
            grown - scratch,
        ),
    ]


RULES: dict[str, Callable[[Cells], list[Direction]]] = {
    "embedding": _embedding, "sharing": _sharing, "sentence": _sentence, "layers": _layers,
    "dropout": _dropout, "depth": _depth,
}  # fmt: skip


# Fewer steps than this per cell and the differences between cells are of their initialisation: the base
# recipe's models are exactly at the unigram guess at steps 150 and 300 (docs/notes/pretraining_plateau.md).
# Past it a cell may still be on the unigram plateau (the base recipe leaves it at ~1200 steps, another
# recipe or data elsewhere): that is measured, not assumed from a step count (UNIGRAM_MARGIN below).
MIN_STEPS = 300
# Held-out MLM accuracy that moved by up to 0.0137 with another seed (docs/paper.md, "Reading the table"):
# with one seed, a difference under this is no difference.
NOISE = 0.015


def _undecided(d: Direction, why: str) -> str:
    """A verdict line that must not read as a result: the direction measured, and why it tells nothing."""
    way = "points the paper's way" if d.ok else "does not point the paper's way"
    return f"too short to tell ({why}): measured, {way}: {d.text}"


def _on_plateau(cells: Cells, unigram: float | None) -> str:
    """Why nothing learnt can be told when every cell's held-out MLM accuracy is the unigram guess's (within
    UNIGRAM_MARGIN); "" otherwise or without a baseline."""
    accs = [float(c["held_out"]["mlm_acc"]) for c in cells.values() if "held_out" in c]
    if unigram is None or not accs or max(accs) > unigram + UNIGRAM_MARGIN:
        return ""
    return (
        f"every cell is still at the unigram guess: held-out MLM accuracy {min(accs):.4f}-{max(accs):.4f} against "
        f"{unigram:.4f} for always the most frequent masked piece, so the cells have learnt word frequencies "
        "only; train longer (--time-budget or --max-steps)"
    )


def _seeds_line(d: Direction, held: list[bool]) -> str:
    """A direction on the means of several seeds (in how many seeds alone it held is added after)."""
    k, n = sum(held), len(held)
    if 0 < k < n and d.ok:  # the mean's way, but not every seed's
        return f"within the seed-to-seed noise (held in {k} of {n} seeds, not all): {d.text}"
    return d.line


def _one_seed_line(d: Direction) -> str:
    """A direction of one seed: a difference of held-out MLM accuracy under NOISE is no difference."""
    if d.gap is None or abs(d.gap) >= NOISE:
        return d.line
    way = "points the paper's way" if d.ok else "does not point the paper's way"
    return (
        f"within noise (one seed; a difference of {abs(d.gap):.4f} in held-out MLM accuracy, under {NOISE}): "
        f"run with --seeds 1,2,3 to tell; measured, {way}: {d.text}"
    )


def verdicts(
    claim: str, cells: Cells, per_seed: list[Cells] | None = None, unigram: float | None = None
) -> list[str]:
    """One line per direction, on `cells`; with `per_seed` (the cells of each seed alone), each line ends
    with in how many seeds the direction held, and a direction the means show but some seeds do not is
    called within the seed-to-seed noise. With one seed, a difference of held-out MLM accuracy under NOISE
    is called within noise. A run whose cells trained fewer than MIN_STEPS steps, or whose cells are all at
    the `unigram` guess's held-out MLM accuracy, gets no "reproduced" about what they learnt: its lines say
    it was too short to tell."""
    found = RULES[claim](cells)
    if per_seed:
        held = [[d.ok for d in RULES[claim](seed)] for seed in per_seed]
        counts = [[h[i] for h in held] for i in range(len(found))]
        lines = [_seeds_line(d, c) for d, c in zip(found, counts, strict=True)]
        tails = [f" [in {sum(c)} of {len(c)} seeds]" for c in counts]
    else:
        lines, tails = [_one_seed_line(d) for d in found], [""] * len(found)
    steps = [int(c["steps"]) for c in cells.values() if isinstance(c.get("steps"), int | float)]
    short = (
        f"{min(steps)} steps in the shortest cell, under {MIN_STEPS}: at this length the differences between "
        "cells are noise; train longer (--time-budget or --max-steps)"
        if steps and min(steps) < MIN_STEPS
        else ""
    )
    plateau = _on_plateau(cells, unigram)
    for i, d in enumerate(found):
        if d.learnt and (why := short or (plateau if d.mlm else "")):
            lines[i] = _undecided(d, why)
    return [line + tail for line, tail in zip(lines, tails, strict=True)]
