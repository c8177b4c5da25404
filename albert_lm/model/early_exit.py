"""Early exit for ALBERT's sequence classifiers: a classifier after every layer application, and inference
that stops each row as soon as its answer is settled, in batches of any size.

ALBERT applies one shared layer L times, so any prefix of the applications is a complete model with the
same weights (its depth is elastic). PABEE (Zhou et al., 2020, "BERT Loses Patience") trains a classifier
after each layer and stops once `patience` consecutive classifiers agree; on ALBERT-base GLUE dev it was
1.57x faster with every task equal or better. Its published code, like DeeBERT's and FastBERT's, runs one
row at a time; here the rows that have exited leave the batch and the others go on.

- `ExitHeads`: the classifiers after applications 1 .. L-1, each reading the model's own pooler on that
  application's [CLS] (as PABEE shares it); application L is the model's own `classifier`, so the folder
  keeps loading in transformers' `AlbertForSequenceClassification` with its full-depth outputs unchanged.
  They live beside the weights, in `exit_heads.safetensors`.
- `exit_loss`: the training loss, each application's loss weighted by its depth (PABEE's weighting:
  deeper classifiers weigh more), so the last one still gets the largest share.
- `EarlyExit`: a model wrapper whose forward takes the usual inputs and returns the logits of the
  application each row stopped at, and that depth (`ExitRule`: patience, confidence or a fixed depth).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.kernels.attention import padding_mask
from albert_lm.kernels.linear import shared_weights
from albert_lm.model.config import AlbertConfig
from albert_lm.model.heads import AlbertForSequenceClassification, head_in_fp32
from albert_lm.model.outputs import ModelOutput
from albert_lm.model.weights import read_safetensors, write_weights

EXIT_FILE = "exit_heads.safetensors"


def exit_count(config: AlbertConfig) -> int:
    """The layer applications a row can stop after: L (one per layer; grouped inner layers are refused)."""
    if config.inner_group_num != 1:
        raise ValueError(
            f"early exit needs one layer per application; this model has inner_group_num {config.inner_group_num}"
        )
    return config.num_hidden_layers


class ExitHeads(nn.Module):
    """One linear classifier after each of the applications 1 .. L-1 (the last is the model's own)."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        n = exit_count(config)
        made = [nn.Linear(config.hidden_size, config.num_labels) for _ in range(n - 1)]
        for c in made:
            nn.init.normal_(c.weight, std=config.initializer_range)
            nn.init.zeros_(c.bias)
        self.classifiers = nn.ModuleList(made)

    def save(self, folder: Path) -> None:
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.state_dict().items()}
        write_weights(folder / EXIT_FILE, state)  # the early-exit classifiers after layers 1 .. L-1

    @classmethod
    def load(cls, folder: Path, config: AlbertConfig) -> ExitHeads | None:
        """The heads saved in `folder`, or None where it has none. The file is read like the model's
        weights (a damaged file, a non-finite value or an integer tensor is refused, naming the tensor)
        and must hold exactly the classifiers of this model's depth, width and labels."""
        path = folder / EXIT_FILE
        if not path.is_file():
            return None
        heads = cls(config)
        state = read_safetensors(path)
        expected = {n: tuple(t.shape) for n, t in heads.state_dict().items()}
        found = {n: tuple(t.shape) for n, t in state.items()}
        if found != expected:
            misfit = sorted(
                [f"missing {n}" for n in expected if n not in found]
                + [f"unexpected {n}" for n in found if n not in expected]
                + [f"{n} is {found[n]}, expected {e}" for n, e in expected.items() if found.get(n, e) != e]
            )
            raise ValueError(
                f"{path}: not the early-exit heads of this model ({config.num_hidden_layers - 1} classifiers "
                f"of {config.hidden_size} -> {config.num_labels}): {'; '.join(misfit[:4])}"
                + (f" (and {len(misfit) - 4} more)" if len(misfit) > 4 else "")
                + "; fine-tune again with --exit-heads, or remove the file to run at full depth"
            )
        heads.load_state_dict(state)
        return heads


def _pooled(
    model: AlbertForSequenceClassification, hidden: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor:
    """The model's own pooler on an application's output ([CLS], or the mean where the config says)."""
    return model.albert.pool(hidden, attention_mask)


def exit_logits(
    model: AlbertForSequenceClassification, heads: ExitHeads, inputs: dict[str, torch.Tensor]
) -> list[torch.Tensor]:
    """The logits after every application 1 .. L, in training (dropout before each classifier, as the
    model's own head has); the last are the model's own."""
    out = model(**inputs, output_hidden_states=True)
    states = out.hidden_states[1:]  # after each application ([0] is the projected embedding)
    logits = [
        head_in_fp32(head, model.dropout(_pooled(model, h, inputs.get("attention_mask"))))
        for head, h in zip(heads.classifiers, states[:-1], strict=True)
    ]
    return [*logits, out.logits]


def depth_weighted(losses: list[torch.Tensor]) -> torch.Tensor:
    """PABEE's weighting: sum_i i * loss_i / sum_i i over the applications i = 1 .. L."""
    total = torch.stack([i * loss for i, loss in enumerate(losses, 1)]).sum()
    return total / (len(losses) * (len(losses) + 1) / 2)


def exit_loss(
    model: AlbertForSequenceClassification,
    heads: ExitHeads,
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
) -> torch.Tensor:
    """Fine-tuning's loss with exit heads: each application's task loss, depth-weighted."""
    return depth_weighted([model._loss(x, labels) for x in exit_logits(model, heads, inputs)])


@dataclass(frozen=True)
class ExitRule:
    """When a row stops: after `patience` consecutive applications agree with the one before (PABEE;
    regression: predictions within `tolerance`), at a probability of at least `confidence` (max-probability,
    DeeBERT-like), or at a fixed `depth`. Rows still running at L stop there; patience 0 is no early exit."""

    patience: int | None = None
    confidence: float | None = None
    depth: int | None = None
    tolerance: float = 0.1

    def __post_init__(self) -> None:
        named = (
            ("--patience", self.patience),
            ("--exit-confidence", self.confidence),
            ("--depth", self.depth),
        )
        given = [n for n, v in named if v is not None]
        if len(given) > 1:
            raise ValueError(f"give one exit rule, not {' and '.join(given)}")
        if self.patience is not None and self.patience < 0:
            raise ValueError(f"--patience {self.patience}: expected 0 (no early exit) or more")
        if self.depth is not None and self.depth < 1:
            raise ValueError(f"--depth {self.depth}: expected at least 1")
        if self.confidence is not None and not 0.0 < self.confidence <= 1.0:
            raise ValueError(f"--exit-confidence {self.confidence}: expected a probability in (0, 1]")

    @property
    def given(self) -> bool:
        """Whether a row may stop early (patience 0: never, as without a rule)."""
        return bool(self.patience) or self.confidence is not None or self.depth is not None


def check_rule(rule: ExitRule, layers: int, num_labels: int) -> None:
    """A rule that can stop a row of this model before its last layer and means what it says: a depth
    within its `layers`, a patience that leaves a layer to skip, a confidence above chance (1 / the
    classes, which every row reaches at its first layer) and none for a regressor (no probability)."""
    if rule.depth is not None and rule.depth > layers:
        raise ValueError(f"--depth {rule.depth}: this model has {layers} layer applications")
    if rule.patience and rule.patience > layers - 2:
        raise ValueError(
            f"--patience {rule.patience}: a row stops after layer {rule.patience + 1} at the earliest, and this "
            f"model has {layers} layer applications, so no row would stop early; expected at most "
            f"{max(layers - 2, 0)} (0: no early exit)"
        )
    if rule.confidence is not None and num_labels == 1:
        raise ValueError(
            "--exit-confidence: this model is a regressor, with no class probability to read; use --patience "
            "or --depth"
        )
    if rule.confidence is not None and rule.confidence <= 1 / num_labels:
        raise ValueError(
            f"--exit-confidence {rule.confidence}: with {num_labels} classes every top probability is at least "
            f"{1 / num_labels:.3g}, so every row would stop at the first layer; expected more than that"
        )


@dataclass
class ExitOutput(ModelOutput):
    logits: torch.Tensor | None = None
    depth: torch.Tensor | None = None  # (B,) the application each row stopped after (1 .. L)


def with_exit_rule(model: nn.Module, folder: Path, rule: ExitRule | None) -> nn.Module:
    """`model` as it is without a rule; with one, wrapped with the heads saved in `folder` (refused where a
    model has none, or is not a sequence classifier)."""
    if rule is None or not rule.given:
        return model
    if not isinstance(model, AlbertForSequenceClassification):
        raise ValueError(f"early exit: for classification and regression models, not {type(model).__name__}")
    heads = ExitHeads.load(folder, model.config)
    if heads is None:
        raise ValueError(no_heads(folder))
    return EarlyExit(model, heads, rule)


def no_heads(folder: Path) -> str:
    """The refusal of an exit rule for a folder without exit heads."""
    return (
        f"{folder}: no {EXIT_FILE}, so no classifier to stop at before the last layer; fine-tune with "
        "--exit-heads for early exit"
    )


class EarlyExit(nn.Module):
    """`model` with `heads`, stopping each row by `rule`; rows that stop leave the batch."""

    def __init__(self, model: AlbertForSequenceClassification, heads: ExitHeads, rule: ExitRule) -> None:
        super().__init__()
        self.model, self.heads, self.rule = model, heads, rule
        self.layers = exit_count(model.config)
        check_rule(rule, self.layers, model.config.num_labels)

    def _logits(self, i: int, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        head = self.heads.classifiers[i - 1] if i < self.layers else self.model.classifier
        return head_in_fp32(head, _pooled(self.model, hidden, attention_mask))

    def _stop(self, i: int, logits: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """Which rows stop after application i (updates the patience counts in `state`)."""
        rule, rows = self.rule, logits.shape[0]
        if i == self.layers:
            return torch.ones(rows, dtype=torch.bool, device=logits.device)
        if rule.depth is not None:
            return torch.full((rows,), i >= rule.depth, dtype=torch.bool, device=logits.device)
        regression = logits.shape[-1] == 1
        if rule.confidence is not None:
            if regression:  # no probability to read: the row runs on
                return torch.zeros(rows, dtype=torch.bool, device=logits.device)
            return F.softmax(logits, -1).amax(-1) >= rule.confidence
        if rule.patience is None:
            return torch.zeros(rows, dtype=torch.bool, device=logits.device)
        now = logits[:, 0] if regression else logits.argmax(-1).to(logits.dtype)
        if "last" in state:
            same = (now - state["last"]).abs() <= rule.tolerance if regression else now == state["last"]
            state["streak"] = torch.where(same, state["streak"] + 1, torch.zeros_like(state["streak"]))
        state["last"] = now
        return state["streak"] >= rule.patience

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **_: Any,
    ) -> ExitOutput:
        albert, encoder = self.model.albert, self.model.albert.encoder
        x = encoder.embedding_projection(albert.embeddings(input_ids, token_type_ids, None, None))
        mask = padding_mask(attention_mask)
        rows = x.shape[0]
        active = torch.arange(rows, device=x.device)
        out = torch.zeros(rows, self.model.config.num_labels, device=x.device)
        depth = torch.zeros(rows, dtype=torch.long, device=x.device)
        state = {"streak": torch.zeros(rows, dtype=torch.long, device=x.device)}
        with shared_weights(encoder.uses_per_weight, x.device):
            for i, (a, f) in enumerate(encoder.schedule, 1):
                x = encoder._layer(x, mask, a, f)
                logits = self._logits(i, x, attention_mask)
                stop = self._stop(i, logits, state)
                if bool(stop.any()):
                    out[active[stop]], depth[active[stop]] = logits[stop], i
                    keep = ~stop
                    if not bool(keep.any()):
                        break
                    # the batch shrinks to the rows still running (sequences stay padded as they were)
                    x, active = x[keep], active[keep]
                    mask = mask[keep] if mask is not None else None
                    attention_mask = attention_mask[keep] if attention_mask is not None else None
                    state = {k: v[keep] for k, v in state.items()}
        return ExitOutput(logits=out, depth=depth)
