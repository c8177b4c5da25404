"""The report `albert demo` prints at its end: held-out scores beside their baselines, the fill-mask probes,
the time each stage took, and where to go next."""

from __future__ import annotations

from pathlib import Path


def format_report(r: dict) -> str:
    lines = [
        "",
        "albert demo: results",
        f"  held-out MLM accuracy  {r['eval_mlm_acc']:.3f}   (unigram guess {r['unigram_mlm_acc']:.3f})",
        f"  held-out SOP accuracy  {r['eval_sop_acc']:.3f}   (chance {r['sop_majority_acc']:.3f}"
        + (")" if r["settings"]["pretrain"].get("sop_weight", 1.0) else "; the recipe trains no SOP head)"),
        f"  fill-mask (expected word in the top 5 for {r['probe_hits']} of {len(r['probes'])} probes):",
        *(_probe_line(p) for p in r["probes"]),
        *_more_probe_lines(r["more_probes"]),
        "  time  "
        + ", ".join(f"{k.removesuffix('_s')} {v:.0f}s" for k, v in r["seconds"].items())
        + f" ({r.get('threads')} threads, {r.get('precision')})",
        *_shortened(r),
        "",
    ]
    return "\n".join(lines)


def _shortened(r: dict) -> list[str]:
    """A line where --max-steps cut the run short of the recipe's steps: its scores are not the ones
    docs/quality.md gives for the whole demo."""
    steps, full = r["settings"]["pretrain"].get("max_steps"), r.get("recipe_steps")
    if full is None or steps is None or steps >= full:
        return []
    return [
        f"  a shortened run: {steps} of the recipe's {full} steps (docs/quality.md's figures are for {full})"
    ]


def _more_probe_lines(more: list[dict]) -> list[str]:
    if not more:
        return []
    hits = sum(p["hit"] for p in more)
    head = f"  {len(more)} more probes (a second opinion), expected word in the top 5 for {hits}"
    return [head + ("; the hits:" if hits else ""), *(_probe_line(p) for p in more if p["hit"])]


def _probe_line(p: dict) -> str:
    top5 = ", ".join(_shown(t) for t in p["top5"])
    return f"    {p['sentence']:<58} -> {top5}{'   (hit)' if p['hit'] else ''}"


def _shown(piece: str) -> str:
    """A predicted piece as the report lists it, between commas: the word without SentencePiece's
    word-start mark; a piece with no letter or digit (",", ".", the bare mark) quoted, so the comma piece
    reads `","` rather than a stray comma (`the, ,, a`)."""
    text = piece.replace("\u2581", "")
    return text if any(c.isalnum() for c in text) else f'"{text or chr(0x2581)}"'


def next_steps(out: Path, example: str = "The cat sat on the [MASK].") -> str:
    """Where the results are, and the commands to try next (fill-mask on `example`, in the demo's language)."""
    return (
        f"  all of it in {out / 'demo_results.json'}; the model is {out / 'model'}: try\n"
        f'    albert fill-mask --model {out / "model"} --text "{example}"\n'
        "  then pretrain on your own text: docs/pretraining.md\n"
    )
