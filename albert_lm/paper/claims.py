"""The paper's ablations as grids of small pretraining runs ("cells"), and what the paper measured.

Each claim is a few cells that differ in one of the paper's switches (E, sharing, the sentence
objective, dropout, depth); everything else is the base recipe's (cpu-1h unless asked otherwise: a
shape scaled to a CPU budget, H 128, 4 layers). The paper's numbers are ALBERT-base after 125k steps on
BookCorpus + Wikipedia (Lan et al. 2020, Tables 3-5); ours
are minutes on a CPU, so what can carry over is the direction, which `verdicts.py` states in words.

Scaling of E: the paper's E 64 / 128 / 256 / 768 at H 768 are E/H = 1/12, 1/6, 1/3, 1; at the base
recipe's H 128 the cells use E 16 / 32 / 64 / 128 (1/8, 1/4, 1/2, 1: the nearest sizes the heads and
the kernels like). Table 4's E 128 (1/6) would become E 32, but at a CPU budget every E 32 cell stays
on the unigram plateau (held-out MLM 0.144-0.146 for all four sharing cells after 2500 steps at 40%
masking, 2026-11-24), so the table could not tell them apart: the sharing cells use E 128 (= H, the
base recipe's own E and the E the issue names), which leaves the plateau at step ~1200.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cell:
    """One pretraining run of a claim."""

    name: str
    model: dict[str, Any] = field(default_factory=dict)  # model config overrides on the recipe's
    pretrain: dict[str, Any] = field(default_factory=dict)  # PretrainConfig overrides
    data: str = "sop"  # which examples it trains on: "sop" or "nsp" (both from the same text)
    budget: float = 1.0  # share of the per-cell time budget
    init_from: str | None = None  # warm start from this earlier cell's model (depth growth)
    steps_of: str | None = None  # train exactly as many steps as this earlier cell took (equal steps)
    dropout_off_at: float | None = None  # dropout off at this fraction of `steps_of`'s steps


@dataclass(frozen=True)
class Claim:
    name: str
    title: str
    paper: str  # what the paper found, in words
    cells: tuple[Cell, ...]
    measures: tuple[str, ...] = ("mlm",)  # "mlm", "sentence" (the NSP x SOP cross table), "layers"
    paper_table: dict[str, str] = field(default_factory=dict)  # cell name -> the paper's figures


def _shared(sharing: str) -> str:
    return "all-shared" if sharing == "all" else "not-shared"


EMBEDDING = Claim(
    "embedding",
    "Table 3: vocabulary embedding size E",
    "Not-shared: larger E is better, a little (Avg 81.3 at E 64 to 82.3 at 768). All-shared: best at "
    "E 128 (80.1), worse at 64 (79.0) and no better at 256 / 768 (79.6 / 79.8).",
    tuple(
        Cell(f"E{e}-{_shared(s)}", model={"embedding_size": e, "sharing": s})
        for s in ("none", "all")
        for e in (16, 32, 64, 128)
    ),
    paper_table={
        "E16-not-shared": "E 64: 87M, Avg 81.3",
        "E32-not-shared": "E 128: 89M, Avg 81.7",
        "E64-not-shared": "E 256: 93M, Avg 81.8",
        "E128-not-shared": "E 768: 108M, Avg 82.3",
        "E16-all-shared": "E 64: 10M, Avg 79.0",
        "E32-all-shared": "E 128: 12M, Avg 80.1",
        "E64-all-shared": "E 256: 16M, Avg 79.6",
        "E128-all-shared": "E 768: 31M, Avg 79.8",
    },
)

SHARING = Claim(
    "sharing",
    "Table 4: what to share across layers (E 128 = H here: the scaled E 32 stays on the plateau)",
    "At E 128: not-shared 89M Avg 81.6, shared-attention 64M 81.7, shared-FFN 38M 80.2, all-shared 12M "
    "80.1: sharing the feed-forward costs most, sharing attention next to nothing.",
    tuple(Cell(s, model={"embedding_size": 128, "sharing": s}) for s in ("all", "attention", "ffn", "none")),
    paper_table={
        "all": "12M, Avg 80.1",
        "attention": "64M, Avg 81.7",
        "ffn": "38M, Avg 80.2",
        "none": "89M, Avg 81.6",
    },
)

SENTENCE = Claim(
    "sentence",
    "Table 5: sentence-level objective (none, NSP, SOP), scored on held-out NSP and SOP pairs",
    "Intrinsic accuracy on NSP / SOP pairs: none 52.4 / 53.3, NSP-trained 90.5 / 52.0, SOP-trained "
    "78.9 / 86.5. NSP does not learn order (it learns topic); SOP learns order and most of NSP.",
    (
        Cell("none", pretrain={"sop_weight": 0.0}),
        Cell("nsp", data="nsp"),
        Cell("sop"),
    ),
    measures=("mlm", "sentence"),
    paper_table={"none": "NSP 52.4, SOP 53.3", "nsp": "NSP 90.5, SOP 52.0", "sop": "NSP 78.9, SOP 86.5"},
)

LAYERS = Claim(
    "layers",
    "Smooth layers (the paper's L2 / cosine figure): how much each layer changes its input",
    "ALBERT's (all-shared) transitions are much smoother than BERT's (not-shared): the L2 distance and "
    "cosine similarity between a layer's input and output oscillate less and converge with depth.",
    (
        Cell("all-shared", model={"embedding_size": 32, "sharing": "all"}),
        Cell("not-shared", model={"embedding_size": 32, "sharing": "none"}),
    ),
    measures=("mlm", "layers"),
)

DROPOUT = Claim(
    "dropout",
    "Dropout off (Section 4.8)",
    "The paper's largest models do not overfit their data, and removing dropout raised MLM accuracy and "
    "downstream scores; it switches dropout off partway through training.",
    (
        Cell("no-dropout", model={"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
        Cell("dropout-0.1", model={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}),
        Cell(
            "dropout-off-halfway",
            model={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1},
            steps_of="dropout-0.1",
            dropout_off_at=0.5,
        ),
    ),
)

DEPTH = Claim(
    "depth",
    "Depth at the same width, all-shared (equal steps), and depth grown from a shallower model (equal time)",
    "All-shared models gain from depth up to about 12 layers, then level off; the paper warm-starts deeper "
    "models from shallower ones.",
    (
        Cell("L12", model={"num_hidden_layers": 12, "sharing": "all"}),
        Cell("L6", model={"num_hidden_layers": 6, "sharing": "all"}, steps_of="L12"),
        Cell("L3", model={"num_hidden_layers": 3, "sharing": "all"}, steps_of="L12"),
        Cell("L1", model={"num_hidden_layers": 1, "sharing": "all"}, steps_of="L12"),
        Cell("L3-half-time", model={"num_hidden_layers": 3, "sharing": "all"}, budget=0.5),
        Cell(
            "L12-grown-from-L3",
            model={"num_hidden_layers": 12, "sharing": "all"},
            budget=0.5,
            init_from="L3-half-time",
        ),
    ),
)

CLAIMS: dict[str, Claim] = {c.name: c for c in (EMBEDDING, SHARING, SENTENCE, LAYERS, DROPOUT, DEPTH)}


# Table 2 (`albert reproduce speed`, albert_lm/paper/speed_report.py): each model's parameters and its training
# speed against BERT-large's by data throughput (TPUs, data parallel).
SPEED_TABLE: dict[str, tuple[str, float]] = {
    "bert-base": ("108M", 4.7),
    "bert-large": ("334M", 1.0),
    "albert-base": ("12M", 5.6),
    "albert-large": ("18M", 1.7),
    "albert-xlarge": ("60M", 0.6),
    "albert-xxlarge": ("235M", 0.3),
}
