"""Early exit at inference, for a model fine-tuned with --exit-heads: the options `albert predict` and
`albert evaluate` share (`albert_lm.model.early_exit` runs the rule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EXIT_COUNTS = ("patience", "depth")  # ExitSettings' counts of layers, bounded as counts


@dataclass(kw_only=True)
class ExitSettings:
    """Early exit at inference, for a model fine-tuned with --exit-heads (one rule at most; none: every
    layer). The options of `albert predict` and `albert evaluate` (`albert_lm.model.early_exit`)."""

    patience: int | None = None
    """stop a row once this many layers in a row agree with the layer before (PABEE; at most the layers
    minus 2); rows that stop leave the batch; 0: no early exit"""
    exit_confidence: float | None = None
    """stop a row at the first layer whose top class probability is at least this (a classifier's; above 1
    / its classes)"""
    depth: int | None = None
    """every row stops after this many layers"""

    def exit_rule_values(self) -> dict[str, Any]:
        """The rule as `ExitRule`'s arguments."""
        return {"patience": self.patience, "confidence": self.exit_confidence, "depth": self.depth}
