"""`albert demo`: the whole pipeline in minutes on two CPU cores (the cpu-10min recipe), on text shipped in the package.

1. trains a SentencePiece model (ALBERT's special pieces, `albert tokenizer train`) on the bundled books
   (`albert_lm/demo_corpus/`, five public-domain Project Gutenberg books, headers stripped; sources in
   its README.md);
2. makes SOP pretraining data with whole-word n-gram masking (`albert data create`);
3. pretrains `albert-tiny` with LAMB (`albert pretrain`), evaluating on the held-out blocks;
4. reports held-out MLM accuracy beside a unigram guess (always the most frequent masked piece of the
   training data), SOP accuracy beside chance, and fills a mask in a sentence of its own.

Everything lands in OUTPUT (default runs/demo): tokenizer/, data/, model/ (a transformers-layout folder
with checkpoints, metrics.jsonl, TensorBoard events, training_curves.png) and demo_results.json.
Running it again resumes what is unfinished. The scale is a laptop's, not the paper's: the point is to
see every stage work and the model learn, in minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.files import write_json

logger = logging.getLogger(__name__)

CORPUS_DIR = Path(__file__).resolve().parent / "demo_corpus"


RECIPE = "cpu-10min"
# Five probes fixed before any tuning (issue 12): a sentence with one [MASK] and the words that count as
# right when one of them is in the model's top 5.
PROBES: list[tuple[str, tuple[str, ...]]] = [
    ("He put his hand into his [MASK] and took out a letter.", ("pocket",)),
    ("She opened the [MASK] and walked into the room.", ("door",)),
    ("The sun rose in the [MASK] and set in the west.", ("east",)),
    ("He drank a cup of [MASK] before breakfast.", ("tea", "coffee", "water", "milk")),
    ("They lived in a small [MASK] near the river.", ("house", "cottage", "village", "town")),
]
# Twenty more, a second opinion (written 2026-11-25 before any of that day's demo variants had finished):
# with five probes one lucky or unlucky answer moves the count by 20 points, and a recipe or corpus chosen
# on the five could fit them alone. Same rule: an expected word in the top 5.
MORE_PROBES: list[tuple[str, tuple[str, ...]]] = [
    ("She wrote a [MASK] to her mother.", ("letter", "note")),
    ("He sat down at the [MASK] and ate his dinner.", ("table",)),
    ("She looked out of the [MASK] at the garden.", ("window",)),
    ("He took off his [MASK] and bowed.", ("hat", "cap")),
    ("They went to [MASK] on Sunday morning.", ("church",)),
    ("The ship sailed across the [MASK].", ("sea", "ocean")),
    ("He climbed up the [MASK] to his room.", ("stairs", "ladder")),
    ("The birds were singing in the [MASK].", ("trees", "garden", "wood", "woods", "forest")),
    ("She put the baby to [MASK].", ("bed", "sleep")),
    ("He rode his [MASK] into the town.", ("horse", "pony", "bicycle")),
    ("Her eyes filled with [MASK].", ("tears",)),
    ("He lit his [MASK] and smoked in silence.", ("pipe", "cigar", "cigarette")),
    ("The old man shook his [MASK] sadly.", ("head", "fist")),
    ("I have not seen him for many [MASK].", ("years", "days", "months", "weeks")),
    ("She knocked at the [MASK].", ("door", "gate", "window")),
    ("The king and the [MASK] sat on their thrones.", ("queen", "prince", "princess")),
    ("He paid ten [MASK] for the horse.", ("pounds", "dollars", "shillings", "guineas")),
    ("The dog [MASK] at the stranger.", ("barked", "growled", "snarled")),
    ("It was a cold [MASK] in December.", ("day", "night", "morning", "evening", "winter")),
    ("He opened the book and began to [MASK].", ("read", "write")),
]


def demo_recipe(**overrides: Any) -> dict[str, dict[str, Any]]:
    """The demo's settings: the cpu-10min recipe's sections, with `overrides` (field names of any
    section: vocab_size, max_seq_length, batch_size, max_steps, ...) put where they belong."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.settings import recipe
    from albert_lm.training.pretrain_config import PretrainConfig

    r = recipe(RECIPE)
    sections = {"tokenizer": {"vocab_size", "seed"}, "data": {f.name for f in fields(DataConfig)},
                "pretrain": {f.name for f in fields(PretrainConfig)}}  # fmt: skip
    for key, value in overrides.items():
        owners = [name for name, names in sections.items() if key in names]
        if not owners:
            raise ValueError(f"demo: unknown setting {key!r}")
        for name in owners:
            r[name][key] = value
    return {name: r[name] for name in sections}


def corpus_files() -> list[Path]:
    files = sorted(CORPUS_DIR.glob("*.txt"))
    if not files:
        raise FileNotFoundError(
            f"no demo corpus in {CORPUS_DIR} (the package was installed without its data)"
        )
    return files


def unigram_baseline(train: Any, evaluation: Any, sample: int = 4000) -> dict[str, float]:
    """Accuracy of always guessing the most frequent masked piece of (a sample of) the training data."""
    counts: Counter[int] = Counter()
    step = max(1, len(train) // sample)
    for i in range(0, len(train), step):
        labels = train[i]["labels"]
        counts.update(labels[labels != IGNORE_INDEX].tolist())
    guess, _ = counts.most_common(1)[0]
    hits = total = sop_ones = 0
    for i in range(len(evaluation)):
        item = evaluation[i]
        labels = item["labels"][item["labels"] != IGNORE_INDEX]
        hits += int((labels == guess).sum())
        total += labels.numel()
        sop_ones += int(item["sentence_order_label"])
    ones = sop_ones / max(len(evaluation), 1)
    return {
        "unigram_guess_id": guess,
        "unigram_mlm_acc": hits / max(total, 1),
        "sop_majority_acc": max(ones, 1 - ones),
    }


def fill_mask(model_dir: str | os.PathLike, sentence: str, top_k: int = 5) -> list[str]:
    """The model's top-k pieces for the one [MASK] in `sentence`."""
    return _FillMask(model_dir)(sentence, top_k)


class _FillMask:
    """A model folder's tokenizer and MLM head, loaded once for many sentences."""

    def __init__(self, model_dir: str | os.PathLike) -> None:
        from albert_lm.data.tokenizer import AlbertTokenizer
        from albert_lm.model.heads import AlbertForPreTraining

        self.tok = AlbertTokenizer.from_pretrained(model_dir)
        self.model = AlbertForPreTraining.from_pretrained(model_dir).eval()

    @torch.no_grad()
    def __call__(self, sentence: str, top_k: int = 5) -> list[str]:
        tok = self.tok
        left, right = sentence.split("[MASK]")
        # The tokenizer does not parse "[MASK]" inside text (as google-research): put the id in by hand.
        a, b = tok.encode(left, add_special_tokens=False), tok.encode(right, add_special_tokens=False)
        ids = [tok.cls_token_id, *a, tok.mask_token_id, *b, tok.sep_token_id]
        logits = self.model(input_ids=torch.tensor([ids])).prediction_logits[0, len(a) + 1]  # (V,)
        return [str(t) for t in tok.convert_ids_to_tokens(logits.topk(top_k).indices.tolist())]


def run_demo(
    output: str | os.PathLike = "runs/demo",
    max_steps: int | None = None,
    files: list[Path] | None = None,
    **overrides: Any,
) -> dict:
    """Tokenizer -> data -> pretraining -> report, in OUTPUT; returns (and writes) the results.

    `files` replaces the bundled books (tests use one); `overrides` change the recipe's settings
    (`demo_recipe`).
    """
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    r = demo_recipe(**overrides)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    files = files or corpus_files()
    logger.info(
        "demo: %d books, %.1f MB, from %s", len(files), sum(f.stat().st_size for f in files) / 1e6, CORPUS_DIR
    )
    times: dict[str, float] = {}
    with _timed(times, "tokenizer_s"):
        make_tokenizer(files, out / "tokenizer", r["tokenizer"])
    with _timed(times, "data_s"):
        make_data(files, out / "tokenizer", out / "data", r["data"])
    with _timed(times, "pretrain_s"):
        metrics = pretrain_model(out / "data", out / "model", r["pretrain"])
    report = build_report(out, r, metrics, times)
    write_json(out / "demo_results.json", report)
    print(format_report(report))
    return report


@contextlib.contextmanager
def _timed(times: dict[str, float], key: str) -> Iterator[None]:
    """Add the seconds the block takes to `times[key]`."""
    start = time.perf_counter()
    yield
    times[key] = time.perf_counter() - start


def make_tokenizer(files: list[Path], tok_dir: Path, settings: dict[str, Any]) -> None:
    """Stage 1: a SentencePiece model in `tok_dir` (kept if already there)."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    if not (tok_dir / "spiece.model").is_file():
        train_tokenizer([str(f) for f in files], tok_dir, vocab_size=settings["vocab_size"],
                        seed=settings.get("seed", 12345))  # fmt: skip


def make_data(files: list[Path], tok_dir: Path, data_dir: Path, settings: dict[str, Any]) -> None:
    """Stage 2: SOP pretraining data, paragraphs as documents, part of the blocks held out (resumes)."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data

    create_pretraining_data(
        [str(f) for f in files], tok_dir, data_dir, DataConfig(**settings), progress=False
    )


def pretrain_model(data_dir: Path, model_dir: Path, settings: dict[str, Any]) -> dict[str, float]:
    """Stage 3: the recipe's model pretrained (resuming a checkpoint); returns its final metrics."""
    from albert_lm.training.checkpoint import latest_checkpoint
    from albert_lm.training.pretrain import PretrainConfig, pretrain

    resume = latest_checkpoint(model_dir) is not None  # a rerun continues (or re-reports) the run
    cfg = PretrainConfig(**{**settings, "data": str(data_dir), "output": str(model_dir), "resume": resume})
    return pretrain(cfg).final_metrics


def probe(
    model_dir: str | os.PathLike, probes: list[tuple[str, tuple[str, ...]]] = PROBES
) -> list[dict[str, Any]]:
    """Each probe: the model's top 5 and whether an expected word is among them."""
    fill = _FillMask(model_dir)
    results = []
    for sentence, expected in probes:
        top5 = fill(sentence)
        hit = any(t.removeprefix("\u2581") in expected for t in top5 if t.startswith("\u2581"))
        results.append({"sentence": sentence, "expected": list(expected), "top5": top5, "hit": hit})
    return results


def build_report(
    out: Path, r: dict[str, dict[str, Any]], m: dict[str, float], times: dict[str, float]
) -> dict[str, Any]:
    """Stage 4: held-out metrics `m` beside the baselines, the probes, settings and timings."""
    from albert_lm.data.dataset import PretrainingDataset

    baseline = unigram_baseline(
        PretrainingDataset(out / "data", "train"), PretrainingDataset(out / "data", "eval")
    )
    seconds = {k: round(v, 1) for k, v in times.items()}
    seconds["total"] = round(sum(times.values()), 1)
    both = probe(out / "model", PROBES + MORE_PROBES)  # one model load for all 25
    probes, more = both[: len(PROBES)], both[len(PROBES) :]
    return {
        "recipe": RECIPE,
        "settings": r,
        "eval_mlm_acc": m.get("eval_mlm_acc"),
        "eval_mlm_loss": m.get("eval_mlm_loss"),
        "eval_sop_acc": m.get("eval_sop_acc"),
        **baseline,
        "probes": probes,
        "probe_hits": sum(p["hit"] for p in probes),
        "more_probes": more,
        "more_probe_hits": sum(p["hit"] for p in more),
        "seconds": seconds,
        "threads": torch.get_num_threads(),
    }


def format_report(r: dict) -> str:
    lines = [
        "",
        "albert demo: results",
        f"  held-out MLM accuracy  {r['eval_mlm_acc']:.3f}   (unigram guess {r['unigram_mlm_acc']:.3f})",
        f"  held-out SOP accuracy  {r['eval_sop_acc']:.3f}   (chance {r['sop_majority_acc']:.3f}"
        + (")" if r["settings"]["pretrain"].get("sop_weight", 1.0) else "; the recipe trains no SOP head)"),
        f"  fill-mask (expected word in the top 5 for {r['probe_hits']} of {len(r['probes'])} probes):",
        *(_probe_line(p) for p in r["probes"]),
        f"  {len(r['more_probes'])} more probes (a second opinion), expected word in the top 5 for "
        f"{r['more_probe_hits']}" + ("; the hits:" if r["more_probe_hits"] else ""),
        *(_probe_line(p) for p in r["more_probes"] if p["hit"]),
        "  time  " + ", ".join(f"{k.removesuffix('_s')} {v:.0f}s" for k, v in r["seconds"].items()),
        "",
    ]
    return "\n".join(lines)


def _probe_line(p: dict) -> str:
    top5 = ", ".join(t.replace(chr(0x2581), "") for t in p["top5"])
    return f"    {p['sentence']:<58} -> {top5}{'   (hit)' if p['hit'] else ''}"
