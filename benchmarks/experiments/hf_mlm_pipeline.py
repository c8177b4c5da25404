"""transformers' own MLM pipeline, set up as its docs show, for the comparison in docs/quality.md.

The same books, the same tokenizer (the spiece.model of an albert-lm data folder, read by transformers'
AutoTokenizer), the same model shape (AlbertForMaskedLM from the albert-lm config of a preset) and the same
wall-clock budget as an albert-lm run; what transformers brings is its own: the lines tokenized and
concatenated into blocks (run_mlm.py's `group_texts`), DataCollatorForLanguageModeling (15% of tokens,
80/10/10), torch AdamW with linear warmup and decay, no SOP. The schedule follows the time budget (as
albert-lm's `--time-budget` does), so it completes whatever the machine's speed (`rate_at`).

Both systems are scored on the same held-out examples: the eval split of the albert-lm data folder (its
masked positions, MLM only). Writes OUTPUT/metrics.jsonl (minutes, step, held-out MLM loss and accuracy)
and the final model in OUTPUT/ (transformers' folder, readable by albert-lm and `pipeline("fill-mask")`).

    python benchmarks/experiments/hf_mlm_pipeline.py --data runs/demo/data --text albert_lm/demo_corpus/*.txt \\
        --output runs/hf-mlm --minutes 10 --preset albert-tiny --seq 64 --batch-size 32 --lr 1e-3
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

from albert_lm.data.dataset import PretrainingDataset, evaluation_loader
from albert_lm.model.config import AlbertConfig
from albert_lm.training.pretrain_config import PretrainConfig


def blocks(tokenizer, files: list[str], seq: int) -> torch.Tensor:
    """run_mlm.py's recipe: tokenize each non-empty line (with [CLS]/[SEP]), concatenate, cut into blocks."""
    ids: list[int] = []
    for f in files:
        lines = [ln for ln in Path(f).read_text(encoding="utf-8").splitlines() if ln.strip()]
        for row in tokenizer(lines)["input_ids"]:
            ids.extend(row)
    n = len(ids) // seq
    return torch.tensor(ids[: n * seq]).view(n, seq)


@torch.no_grad()
def held_out(model, dataset, batches: int = 100) -> dict[str, float]:
    """MLM loss and accuracy on the albert-lm eval split's masked positions (the same examples as ours)."""
    model.eval()
    loss = correct = n = 0.0
    for batch in evaluation_loader(dataset, 32, batches, 0, 1):
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        ).logits
        mask = batch["labels"] != -100
        picked, target = logits[mask], batch["labels"][mask]
        loss += float(F.cross_entropy(picked, target, reduction="sum"))
        correct += float((picked.argmax(-1) == target).sum())
        n += target.numel()
    model.train()
    return {"eval_mlm_loss": loss / n, "eval_mlm_acc": correct / n, "eval_masked_tokens": int(n)}


def rate_at(progress: float, warmup: float) -> float:
    """The learning-rate multiplier at this fraction of the time budget: linear warmup over the first
    `warmup` of it, then linear decay to 0 when the budget is spent. Tied to time, not to a step count
    guessed in advance: a guess from timed probe steps scheduled 1369 steps for 15 minutes (1285 were
    run) and 3639 for 60 (4928 were run, the last 1289 at rate 0), so albert-lm's `--time-budget` way is
    used for both systems."""
    if progress < warmup:
        return progress / warmup
    return max(0.0, (1.0 - progress) / (1.0 - warmup))


def train_for(model, collator, train, evaluation, optimizer, a, budget_s: float, log) -> dict:
    """The plain loop a transformers user writes, until `budget_s` seconds of steps (evaluations not
    counted), held-out scores every `a.eval_every_min` minutes into `log`; returns the final record."""
    elapsed, step, next_eval, cursor = 0.0, 0, 0.0, 0
    order = torch.randperm(len(train))
    while elapsed < budget_s:
        if elapsed >= next_eval:
            rec = {"minutes": elapsed / 60, "step": step, **held_out(model, evaluation)}
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)
            next_eval += a.eval_every_min * 60
        t0 = time.perf_counter()
        if cursor + a.batch_size > len(order):
            order, cursor = torch.randperm(len(train)), 0
        batch = collator([{"input_ids": row} for row in train[order[cursor : cursor + a.batch_size]]])
        cursor += a.batch_size
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for group in optimizer.param_groups:
            group["lr"] = a.lr * rate_at(elapsed / budget_s, a.warmup)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        elapsed += time.perf_counter() - t0
    rec = {"minutes": elapsed / 60, "step": step, **held_out(model, evaluation), "final": True}
    log.write(json.dumps(rec) + "\n")
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="albert-lm data folder: its tokenizer and its eval split")
    p.add_argument("--text", nargs="+", required=True, help="the training text files")
    p.add_argument("--output", required=True)
    p.add_argument("--minutes", type=float, required=True, help="training wall-clock budget")
    p.add_argument("--preset", default="albert-tiny")
    p.add_argument(
        "--model-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a model config field of the albert-lm run compared, e.g. sharing=none (repeatable)",
    )
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=float, default=0.06, help="warmup fraction of the time budget")
    p.add_argument("--eval-every-min", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = transformers.AutoTokenizer.from_pretrained(a.data)
    train = blocks(tokenizer, a.text, a.seq)
    evaluation = PretrainingDataset(a.data, "eval")
    shape = PretrainConfig.parse_overrides(a.model_override)
    ours = AlbertConfig.from_preset(a.preset, vocab_size=len(tokenizer), **shape)
    config = transformers.AlbertConfig(**{k: v for k, v in ours.to_dict().items() if k not in ("sharing",)})
    model = transformers.AlbertForMaskedLM(config).train()
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    decay = [p_ for n, p_ in model.named_parameters() if p_.ndim > 1]
    rest = [p_ for n, p_ in model.named_parameters() if p_.ndim <= 1]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
        lr=a.lr,
        betas=(0.9, 0.999),
        eps=1e-6,
    )
    budget = a.minutes * 60
    print(f"{len(train)} blocks of {a.seq}; schedule over {a.minutes} minutes of steps", flush=True)
    with open(out / "metrics.jsonl", "w") as log:
        rec = train_for(model, collator, train, evaluation, optimizer, a, budget, log)
    print(json.dumps(rec), flush=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # The same pieces as spiece.model too, for albert-lm's commands (`albert glue` on this model).
    shutil.copy(Path(a.data) / "spiece.model", out / "spiece.model")


if __name__ == "__main__":
    main()
