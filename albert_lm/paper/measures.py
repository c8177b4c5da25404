"""What the claims measure on a pretrained cell: parameters, held-out MLM, the sentence head on
held-out SOP and NSP pairs, and how much each layer changes its input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from albert_lm.data.dataset import evaluation_loader
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.training.objective import PretrainingObjective
from albert_lm.training.pretrain import evaluate
from albert_lm.training.pretrain_config import PretrainConfig


def load_cell(folder: Path) -> AlbertForPreTraining:
    model = AlbertForPreTraining.from_pretrained(folder)
    assert isinstance(model, AlbertForPreTraining)  # from_pretrained builds the class it is called on
    return model.eval()


def encoder_parameters(model: AlbertForPreTraining) -> int:
    """Parameters of embeddings + encoder (the paper's counts: no MLM or sentence head)."""
    return sum(p.numel() for p in model.albert.parameters())


def majority_rate(dataset: Any, batch_size: int, batches: int) -> float:
    """The share of the commoner sentence label among the pairs `held_out` scores: the accuracy of a
    head that always answers the same (NSP data need not be 50/50: the random-next rate is reported by
    `albert data create`)."""
    labels = torch.cat([b["sentence_order_label"] for b in evaluation_loader(dataset, batch_size, batches)])
    ones = float(labels.float().mean())
    return max(ones, 1.0 - ones)


def held_out(
    model: AlbertForPreTraining, dataset: Any, batch_size: int, batches: int, device: torch.device
) -> dict[str, float]:
    """Masked-LM loss and accuracy and the sentence head's accuracy on the first `batches` batches of a
    held-out split. The head is scored whatever the cell trained it on (an untrained head: chance)."""
    objective = PretrainingObjective(model, "sop")  # the same head answers NSP pairs: label 1 = not in order
    cfg = PretrainConfig(batch_size=batch_size, eval_batches=batches, precision="fp32")
    m = evaluate(objective, dataset, cfg, device)
    return {"mlm_acc": m["mlm_acc"], "mlm_loss": m["mlm_loss"], "sentence_acc": m["sop_acc"]}


@torch.no_grad()
def layer_transitions(
    model: AlbertForPreTraining, dataset: Any, batch_size: int, batches: int, device: torch.device
) -> dict[str, list[float]]:
    """Per layer, the mean L2 distance and cosine similarity between the layer's input and its output,
    over the real (not padding) tokens of held-out sequences: the paper's smooth-transition figure."""
    n_layers = model.config.num_hidden_layers
    l2, cos = torch.zeros(n_layers, dtype=torch.float64), torch.zeros(n_layers, dtype=torch.float64)
    tokens = 0
    for batch in evaluation_loader(dataset, batch_size, batches):
        mask = batch["attention_mask"].to(device)
        out = model.albert(
            input_ids=batch["input_ids"].to(device),
            attention_mask=mask,
            token_type_ids=batch["token_type_ids"].to(device),
            output_hidden_states=True,
        )
        states = out.hidden_states[-(n_layers + 1) :]  # each layer's input, then the last output
        real = mask.bool()
        for i in range(n_layers):
            a, b = states[i][real].double(), states[i + 1][real].double()
            l2[i] += (b - a).norm(dim=-1).sum().cpu()
            cos[i] += F.cosine_similarity(a, b, dim=-1).sum().cpu()
        tokens += int(real.sum())
    return {"l2": (l2 / tokens).tolist(), "cosine": (cos / tokens).tolist()}
