"""STS-B fine-tuned as a bi-encoder: each sentence encoded alone, the pair scored by the cosine of the two
mean-pooled vectors, the encoder trained so that cosine matches the gold score / 5 (squared error, the
objective of Reimers and Gurevych's sentence-BERT on STS-B).

`albert glue` fine-tunes STS-B as a cross-encoder (the pair read as one sequence, a regressor learnt from
nothing on the pooler). A student made by general distillation already ranks the pairs by its vectors'
cosine (zero-shot) before any fine-tuning; this probe measures what fine-tuning that cosine gives instead.
Dev Pearson (and Spearman) x100 is printed before training and after each epoch, as one JSON line each.

    python benchmarks/experiments/stsb_biencoder.py --model models/albert-minilm-small-en \
        --data ../shared/data/glue/STS-B --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

from albert_lm.deploy.embed import Embedder
from albert_lm.tasks.glue import GLUE_TASKS, read_glue_tsv


def pooled(emb: Embedder, texts: list[str]) -> torch.Tensor:
    """(len(texts), H): the mean of the last layer over each text's tokens, with gradients."""
    tok, limit = emb.setup.tokenizer, emb.setup.max_len - 2
    ids = [[tok.cls_token_id, *x[:limit], tok.sep_token_id] for x in tok.encode_batch(texts)]
    width = max(len(x) for x in ids)
    input_ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in ids])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids])
    hidden = emb.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # (B, S, H)
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1)


def dev_scores(emb: Embedder, pairs: list[tuple[str, str]], gold: np.ndarray) -> dict[str, float]:
    emb.model.eval()
    a = emb.embed([x for x, _ in pairs], normalize=True)
    b = emb.embed([y for _, y in pairs], normalize=True)
    emb.model.train()
    cos = (a * b).sum(1)
    return {"pearson": 100 * float(pearsonr(cos, gold)[0]), "spearman": 100 * float(spearmanr(cos, gold)[0])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, type=Path, help="the STS-B folder (train.tsv, dev.tsv)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    spec = GLUE_TASKS["stsb"]
    train = read_glue_tsv(args.data / "train.tsv", spec)
    dev = read_glue_tsv(args.data / "dev.tsv", spec)
    dev_pairs = [(e.text_a, e.text_b or "") for e in dev]
    gold = np.array([float(e.label) for e in dev])  # type: ignore[arg-type]
    emb = Embedder(args.model, device="cpu", precision="fp32", max_seq_length=128)
    print(json.dumps({"epoch": 0, **dev_scores(emb, dev_pairs, gold)}), flush=True)
    opt = torch.optim.AdamW(emb.model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    steps = args.epochs * math.ceil(len(train) / args.batch_size)
    warmup = steps // 10  # sentence-transformers' default: 10% warmup, then linear decay
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / max(warmup, 1), max(0.0, (steps - s) / max(steps - warmup, 1)))
    )
    emb.model.train()
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = list(range(len(train)))
        random.shuffle(order)
        for i in range(0, len(order), args.batch_size):
            batch = [train[j] for j in order[i : i + args.batch_size]]
            u = pooled(emb, [e.text_a for e in batch])
            v = pooled(emb, [e.text_b or "" for e in batch])
            target = torch.tensor([float(e.label) / 5.0 for e in batch])  # type: ignore[arg-type]
            loss = torch.nn.functional.mse_loss(torch.cosine_similarity(u, v), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        scores = dev_scores(emb, dev_pairs, gold)
        print(
            json.dumps({"epoch": epoch, **scores, "seconds": round(time.perf_counter() - start)}), flush=True
        )


if __name__ == "__main__":
    main()
