"""What a pretraining run reports: metrics.jsonl, TensorBoard events, the console line, the curves PNG.

Only rank 0 writes. On resume, records past the checkpoint are dropped so the files tell one history.
(The plain-text evaluation set is data: `albert_lm.data.dataset.text_eval_dataset`.)
"""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path
from typing import Any

from albert_lm.files import atomic_write

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """metrics.jsonl (+ TensorBoard) on rank 0; on resume, records past the checkpoint are dropped."""

    def __init__(self, output: Path, resume_step: int, tensorboard: bool):
        self.path = output / METRICS_FILE
        if self.path.exists():
            keep = []
            for ln in self.path.read_text().splitlines():
                try:
                    if json.loads(ln).get("step", 0) <= resume_step:
                        keep.append(ln)
                except json.JSONDecodeError:
                    pass  # a line cut short by the kill that ended the previous run
            atomic_write(self.path, "".join(ln + "\n" for ln in keep))
        self.file = open(self.path, "a")  # noqa: SIM115 - lives as long as the run
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(output / "tensorboard"), purge_step=resume_step + 1)
            except ImportError:
                logger.warning("tensorboard is not installed: no event files (pip install tensorboard)")

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            split = record.get("split", "train")
            for k, v in record.items():
                if k not in ("step", "split") and isinstance(v, (int, float)):
                    self.writer.add_scalar(f"{split}/{k}", v, record["step"])

    def close(self) -> None:
        self.file.close()
        if self.writer is not None:
            self.writer.close()


def format_line(step: int, m: dict[str, float], prefix: str = "step") -> str:
    parts = [f"{prefix} {step}", f"loss {m['loss']:.4f}", f"mlm_acc {m['mlm_acc']:.4f}"]
    if "sop_acc" in m:
        parts.append(f"sop_acc {m['sop_acc']:.4f}")
    if "lr" in m:
        parts += [f"lr {m['lr']:.3e}", f"tok/s {m['tok_per_s']:.0f}"]
    return " | ".join(parts)


def plot_metrics(output: str | os.PathLike) -> Path | None:
    """training_curves.png from metrics.jsonl: loss, MLM and SOP accuracy (train and eval), lr."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no training_curves.png")
        return None
    records = [json.loads(ln) for ln in (Path(output) / METRICS_FILE).read_text().splitlines() if ln.strip()]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for split, style in (("train", "-"), ("eval", "o-"), ("eval_text", "s--")):
        rows = [r for r in records if r.get("split", "train") == split]
        for ax, key in zip(axes[:3], ("loss", "mlm_acc", "sop_acc"), strict=True):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=split, markersize=3)
                ax.set_title(key)
    lr = [(r["step"], r["lr"]) for r in records if "lr" in r]
    if lr:
        axes[3].plot(*zip(*lr, strict=True))
        axes[3].set_title("learning rate")
    for ax in axes:
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(Path(output) / "training_curves.png", png.getvalue())
