"""What pretraining minimizes: masked LM at the masked positions, plus SOP or NSP, and the sums it reports.

Follows the paper's Section 4.1 and google-research/albert `run_pretraining.py`:
- MLM logits only at the masked positions (google-research gathers `masked_lm_positions`; computing
  V x B x S logits as transformers does costs ~9% of an albert-base step for nothing). The MLM loss is
  the mean over the micro-batch's masked tokens, the SOP/NSP loss the mean over its sequences; the
  objective is their sum.
- Plain-text evaluation sets carry no sentence labels: MLM only there.
- `STATS`: per micro-batch sums, reduced over micro-batches and ranks before anything is divided
  (`summarize`), so every metric is token- or sequence-weighted whatever the batching.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.model.heads import AlbertForPreTraining

SENTENCE_OBJECTIVES = ("sop", "nsp", "none")
STATS = ("mlm_loss_sum", "mlm_count", "mlm_correct", "sop_loss_sum", "sop_count", "sop_correct", "tokens")


class PretrainingObjective(nn.Module):
    """MLM at the masked positions + SOP/NSP; DDP wraps this, so every parameter is used in forward."""

    def __init__(
        self, model: AlbertForPreTraining, sentence_objective: str = "sop", sentence_weight: float = 1.0
    ):
        super().__init__()
        if sentence_objective not in SENTENCE_OBJECTIVES:
            raise ValueError(
                f"sentence objective must be one of {SENTENCE_OBJECTIVES}, got {sentence_objective!r}"
            )
        self.model = model
        self.sentence_objective = sentence_objective
        # Weight of the SOP/NSP loss in the objective; 0 trains MLM only, the head still scored (and its
        # parameters still in the graph, with zero gradients, so DDP sees every parameter used).
        self.sentence_weight = sentence_weight

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (loss, stats): the scalar objective and the `STATS` sums of this micro-batch."""
        out = self.model.albert(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        )
        labels = batch["labels"]  # (B, S), IGNORE_INDEX except at masked positions
        masked = labels != IGNORE_INDEX
        logits = self.model.predictions(out.last_hidden_state[masked]).float()  # (N, V), N masked tokens
        target = labels[masked]  # (N,)
        mlm_sum = F.cross_entropy(logits, target, reduction="sum")
        n_mlm = target.numel()
        loss = mlm_sum / max(n_mlm, 1)
        mlm_correct = (logits.argmax(-1) == target).sum()
        zero = torch.zeros((), device=logits.device)
        sop_sum, sop_correct, n_sop = zero, zero, 0
        # Plain-text evaluation sets carry no sentence labels: MLM only there.
        if self.sentence_objective != "none" and "sentence_order_label" in batch:
            sop_logits = self.model.sop_classifier(out.pooler_output).float()  # (B, 2)
            sop_target = batch["sentence_order_label"].view(-1)
            sop_sum = F.cross_entropy(sop_logits, sop_target, reduction="sum")
            n_sop = sop_target.numel()
            loss = loss + self.sentence_weight * (sop_sum / n_sop)
            sop_correct = (sop_logits.argmax(-1) == sop_target).sum()
        tokens = batch["attention_mask"].sum()
        stats = torch.stack(
            [
                mlm_sum.detach(),
                torch.tensor(float(n_mlm), device=logits.device),
                mlm_correct.float(),
                sop_sum.detach(),
                torch.tensor(float(n_sop), device=logits.device),
                sop_correct.float(),
                tokens.float(),
            ]
        )
        return loss, stats


def summarize(stats: torch.Tensor, sentence_weight: float = 1.0) -> dict[str, float]:
    """STATS sums -> losses and accuracies (token-weighted MLM, sequence-weighted SOP); "loss" is the
    objective, the SOP loss counted with `sentence_weight`."""
    s = dict(zip(STATS, stats.double().tolist(), strict=True))
    mlm_loss = s["mlm_loss_sum"] / max(s["mlm_count"], 1)
    out = {"mlm_loss": mlm_loss, "mlm_acc": s["mlm_correct"] / max(s["mlm_count"], 1), "loss": mlm_loss}
    if s["sop_count"] > 0:
        out["sop_loss"] = s["sop_loss_sum"] / s["sop_count"]
        out["sop_acc"] = s["sop_correct"] / s["sop_count"]
        out["loss"] += sentence_weight * out["sop_loss"]
    out["tokens"] = s["tokens"]
    return out
