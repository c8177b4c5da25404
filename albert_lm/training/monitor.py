"""What a training run reports: metrics.jsonl, TensorBoard events, the console line, the curves PNG.

Every loop (`albert_lm.training.loop`) writes one `MetricsLog`: a train record every `log_every` steps and
a record per evaluation set (split "eval", "eval_text", "dev", ...), in metrics.jsonl and as TensorBoard
scalars (SPLIT/NAME); the log line of each (`format_line`); training_curves.png from metrics.jsonl at the
end (`plot_metrics`). On resume, records past the checkpoint are dropped so the files tell one history.

Only rank 0 writes. TensorBoard and matplotlib are optional at run time: without them a warning, and no
events or PNG. (The plain-text evaluation set is data: `albert_lm.data.dataset.text_eval_dataset`.)
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from albert_lm.files import atomic_write

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
CURVES_FILE = "training_curves.png"

Points = Sequence[tuple[float, float]]


class EventLog:
    """TensorBoard scalars under OUTPUT/tensorboard, tagged SPLIT/NAME; nothing when `enabled` is False
    or tensorboard is not installed."""

    def __init__(self, output: Path, enabled: bool, purge_step: int | None = None):
        self.writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(output / TENSORBOARD_DIR), purge_step=purge_step)
            except ImportError:
                logger.warning("tensorboard is not installed: no event files (pip install tensorboard)")

    def add(self, split: str, values: Mapping[str, Any], step: int) -> None:
        if self.writer is None:
            return
        for k, v in values.items():
            if k not in ("step", "split") and isinstance(v, (int, float)):
                self.writer.add_scalar(f"{split}/{k}", v, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class MetricsLog:
    """metrics.jsonl (+ TensorBoard) on rank 0; on resume, records past the checkpoint are dropped."""

    def __init__(self, output: Path, resume_step: int, tensorboard: bool):
        self.path = output / METRICS_FILE
        self.latest: dict[str, dict[str, Any]] = {}  # split -> its newest record (a model card's scores)
        if self.path.exists():
            keep = []
            for ln in self.path.read_text().splitlines():
                try:
                    record = json.loads(ln)
                except (ValueError, RecursionError):
                    continue  # a line cut short by the kill that ended the previous run
                if not isinstance(record, dict):
                    continue
                if record.get("step", 0) <= resume_step:
                    keep.append(ln)
                    self.latest[record.get("split", "train")] = record
            atomic_write(self.path, "".join(ln + "\n" for ln in keep))
        self.file = open(self.path, "a")  # noqa: SIM115 - lives as long as the run
        self.events = EventLog(output, tensorboard, purge_step=resume_step + 1)

    def write(self, record: dict[str, Any], split: str | None = None) -> None:
        """One line of metrics.jsonl; its numbers as TensorBoard scalars under `split` (default the
        record's own "split", else train)."""
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        split = split or record.get("split", "train")
        self.latest[split] = record
        self.events.add(split, record, record["step"])

    def evaluations_at(self, step: int) -> dict[str, dict[str, Any]]:
        """{split: record} of the evaluations recorded at `step` (none: {})."""
        return {s: r for s, r in self.latest.items() if s != "train" and r.get("step") == step}

    def close(self) -> None:
        self.file.close()
        self.events.close()


def format_line(prefix: str, m: Mapping[str, Any], keys: Sequence[str]) -> str:
    """One log line of a record: `prefix | KEY value | ... | lr ... | tok/s ...` (`keys` in their order,
    then the learning rate and the rates, where the record has them)."""
    parts = [prefix, *(f"{k} {m[k]:.4f}" for k in keys if k in m)]
    if "lr" in m:
        parts.append(f"lr {m['lr']:.3e}")
    parts += [f"{k.removesuffix('_per_s')}/s {v:.0f}" for k, v in m.items() if k.endswith("_per_s")]
    return " | ".join(parts)


def plot_metrics(output: str | os.PathLike, scores: Sequence[str] | None = None) -> Path | None:
    """training_curves.png from metrics.jsonl: the loss of every split, a panel per score in `scores` (by
    default up to three of the evaluations' scores) with every split that has it, the learning rate."""
    lines = (Path(output) / METRICS_FILE).read_text().splitlines()
    records = [r for r in map(json.loads, filter(str.strip, lines)) if isinstance(r, dict)]
    splits = list(dict.fromkeys(r.get("split", "train") for r in records if r.get("split") != "teacher"))
    if scores is None:
        evals = [r for r in records if r.get("split") not in ("train", "teacher")]
        scores = sorted({k for r in evals for k, v in r.items() if _is_score(k, v)})[:3]
    panels: dict[str, dict[str, Points]] = {}
    for key in ("loss", *scores):
        series = {
            s: [(r["step"], r[key]) for r in records if r.get("split", "train") == s and key in r]
            for s in splits
        }
        panels[key] = {s: pts for s, pts in series.items() if pts}
    panels["learning rate"] = {"train": [(r["step"], r["lr"]) for r in records if "lr" in r]}
    return draw_curves(Path(output) / CURVES_FILE, panels)


def _is_score(key: str, value: Any) -> bool:
    """A number of an evaluation worth a curve: not a loss (the loss panel has it), time, epoch or count."""
    skip = key.endswith(("loss", "_per_s", "_examples")) or key in ("elapsed_s", "epoch", "step")
    return isinstance(value, float) and not skip and not key.startswith("teacher_")


_STYLES = {"train": "-", "eval_text": "s--"}  # any other series (evaluations): points joined by lines


def draw_curves(path: Path, panels: Mapping[str, Mapping[str, Points]]) -> Path | None:
    """A PNG with one panel per title, one line per series of (step, value) points, written atomically.
    None (and a warning) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no %s", path.name)
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels.items(), strict=True):
        for name, pts in series.items():
            if pts:
                ax.plot(*zip(*pts, strict=True), _STYLES.get(name, "o-"), label=name, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        if title != "learning rate" and ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return atomic_write(path, png.getvalue())
