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

from albert_lm.deploy.embed import Embedder
from albert_lm.distill.data import collate_ids, read_sts, sts_pairs, sts_scores
from albert_lm.model.encoder import mean_pool


def pooled(emb: Embedder, texts: list[str]) -> torch.Tensor:
    """(len(texts), H): the mean of the last layer over each text's tokens, with gradients."""
    tok, limit = emb.setup.tokenizer, emb.setup.max_len - 2
    rows = [np.asarray(x[:limit], dtype=np.int64) for x in tok.encode_batch(texts)]
    batch = collate_ids(rows, tok.cls_token_id, tok.sep_token_id, tok.pad_token_id)
    return mean_pool(emb.model(**batch).last_hidden_state, batch["attention_mask"])


def dev_scores(emb: Embedder, dev: dict) -> dict[str, float]:
    """Dev Pearson and Spearman x100 of the cosines (each distinct sentence embedded once)."""
    emb.model.eval()
    scores = sts_scores(emb.embed(dev["sentences"]), dev)
    emb.model.train()
    return {"pearson": 100 * scores["sts_pearson"], "spearman": 100 * scores["sts_spearman"]}


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
    first, second, gold = read_sts(args.data / "train.tsv")
    dev = sts_pairs(args.data / "dev.tsv")
    emb = Embedder(args.model, device="cpu", precision="fp32", max_seq_length=128)
    print(json.dumps({"epoch": 0, **dev_scores(emb, dev)}), flush=True)
    opt = torch.optim.AdamW(emb.model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    steps = args.epochs * math.ceil(len(gold) / args.batch_size)
    # sentence-transformers' schedule: 10% warm-up, then linear decay over the steps after it (the
    # project's build_scheduler decays from step 0, as google-research does)
    warmup = steps // 10
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / max(warmup, 1), max(0.0, (steps - s) / max(steps - warmup, 1)))
    )
    emb.model.train()
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = list(range(len(gold)))
        random.shuffle(order)
        for i in range(0, len(order), args.batch_size):
            batch = order[i : i + args.batch_size]
            u = pooled(emb, [first[j] for j in batch])
            v = pooled(emb, [second[j] for j in batch])
            target = torch.tensor(gold[batch] / 5.0, dtype=torch.float32)
            loss = torch.nn.functional.mse_loss(torch.cosine_similarity(u, v), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        scores = dev_scores(emb, dev)
        print(
            json.dumps({"epoch": epoch, **scores, "seconds": round(time.perf_counter() - start)}), flush=True
        )


if __name__ == "__main__":
    main()
