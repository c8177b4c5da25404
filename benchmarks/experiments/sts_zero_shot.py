"""STS-B dev without fine-tuning: what a sentence pair's similarity is worth before any training on it.

Scores, each as Pearson against the gold scores of GLUE's STS-B dev set (1500 pairs):
- word overlap: Jaccard similarity of the two sentences' lower-cased word sets (no model);
- for each MODEL folder (and, with --random, the same architecture untrained, seed 1): the cosine of the
  two sentences' mean-pooled hidden states ([CLS] and [SEP] left out), at the embeddings and after every
  layer.
docs/quality.md sets these beside fine-tuned STS-B: a fine-tuned model that scores below word overlap has
not learnt to compare the two sentences at all, whatever its pretraining.

    python benchmarks/experiments/sts_zero_shot.py --glue ../shared/data/glue MODEL [MODEL ...] [--random]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import torch
from scipy.stats import pearsonr

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.tasks.glue import GLUE_TASKS, read_glue_tsv


def overlap(a: str, b: str) -> float:
    wa, wb = set(re.findall(r"\w+", a.lower())), set(re.findall(r"\w+", b.lower()))
    return len(wa & wb) / max(len(wa | wb), 1)


@torch.no_grad()
def layer_cosines(model: AlbertForPreTraining, tok: AlbertTokenizer, pairs: list[tuple[str, str]]):
    """Per layer (embeddings first), the cosine of each pair's mean-pooled states."""

    def pooled(text: str) -> list[torch.Tensor]:
        ids = [tok.cls_token_id, *tok.encode(text, add_special_tokens=False), tok.sep_token_id]
        states = model.albert(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        return [h[0, 1:-1].mean(0) for h in states]

    sims: list[list[float]] = []
    for a, b in pairs:
        for i, (x, y) in enumerate(zip(pooled(a), pooled(b), strict=True)):
            if i == len(sims):
                sims.append([])
            sims[i].append(torch.cosine_similarity(x, y, dim=0).item())
    return sims


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", type=Path, metavar="MODEL")
    p.add_argument("--glue", type=Path, default=Path("../shared/data/glue"))
    p.add_argument("--random", action="store_true", help="also each MODEL's architecture untrained (seed 1)")
    args = p.parse_args()
    torch.set_num_threads(1)
    examples = read_glue_tsv(args.glue / "STS-B" / "dev.tsv", GLUE_TASKS["stsb"])
    pairs = [(e.text_a, e.text_b or "") for e in examples]
    gold = [float(e.label) for e in examples]
    report: dict[str, object] = {
        "pairs": len(pairs),
        "word_overlap": pearsonr([overlap(*q) for q in pairs], gold)[0],
    }
    for folder in args.models:
        tok = AlbertTokenizer.from_pretrained(folder)
        model = AlbertForPreTraining.from_pretrained(folder).eval()
        arms = {str(folder): model}
        if args.random:
            torch.manual_seed(1)
            arms[f"{folder} (random init)"] = AlbertForPreTraining(model.config).eval()
        for name, m in arms.items():
            report[name] = [round(pearsonr(s, gold)[0], 4) for s in layer_cosines(m, tok, pairs)]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
