"""What a training run reports: metrics.jsonl, TensorBoard events, the console line, the curves PNG.

Pretraining (`MetricsLog`): a train record every `log_every` steps and a record per evaluation set, in
metrics.jsonl and as TensorBoard scalars (SPLIT/NAME); training_curves.png from metrics.jsonl at the end.
On resume, records past the checkpoint are dropped so the files tell one history.

Fine-tuning (`FinetuneLog`): metrics.jsonl keeps one line per dev evaluation, as it always has (eval
records are what `albert glue` and users read there); TensorBoard gets the train loss and learning rate at
each log line and every dev metric at each evaluation; training_curves.png (train loss, the task's dev
metric, learning rate) is drawn again at each evaluation, so a long run shows its curves as it goes.

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


class FinetuneLog:
    """A fine-tuning run's records (module docstring): `train` at each log line, `evaluation` at each
    dev evaluation, `close` at the end (also after an error: the curves so far are drawn)."""

    def __init__(self, output: Path, dev_metrics: Sequence[str], tensorboard: bool, plot: bool):
        self.output, self.dev_metrics, self.plot = output, list(dev_metrics), plot
        self.metrics = MetricsLog(output, 0, tensorboard)
        self.train_points: list[tuple[int, float, float]] = []  # (step, mean loss since the last, lr)
        self.evaluations: list[dict[str, Any]] = []
        self._drawn = 0  # records in the PNG on disk

    def train(self, step: int, loss: float, lr: float) -> None:
        self.train_points.append((step, loss, lr))
        self.metrics.events.add("train", {"loss": loss, "lr": lr}, step)

    def evaluation(self, record: dict[str, Any]) -> None:
        self.metrics.write(record, split="dev")
        self.evaluations.append(record)
        self.draw()

    def draw(self) -> Path | None:
        """training_curves.png, unless --no-plot or nothing is new since it was last drawn."""
        records = len(self.train_points) + len(self.evaluations)
        if not self.plot or records == self._drawn:
            return None
        self._drawn = records
        dev = {m: [(r["step"], r[m]) for r in self.evaluations if m in r] for m in self.dev_metrics}
        panels: dict[str, dict[str, Points]] = {
            "loss": {"train": [(s, loss) for s, loss, _ in self.train_points]},
            "dev " + " / ".join(self.dev_metrics): {f"dev {m}": pts for m, pts in dev.items()},
            "learning rate": {"train": [(s, lr) for s, _, lr in self.train_points]},
        }
        return draw_curves(self.output / CURVES_FILE, panels)

    def close(self) -> None:
        self.metrics.close()
        self.draw()


def format_line(step: int, m: dict[str, float], prefix: str = "step") -> str:
    parts = [f"{prefix} {step}", f"loss {m['loss']:.4f}", f"mlm_acc {m['mlm_acc']:.4f}"]
    if "sop_acc" in m:
        parts.append(f"sop_acc {m['sop_acc']:.4f}")
    if "lr" in m:
        parts += [f"lr {m['lr']:.3e}", f"tok/s {m['tok_per_s']:.0f}"]
    return " | ".join(parts)


def plot_metrics(output: str | os.PathLike) -> Path | None:
    """Pretraining's training_curves.png from metrics.jsonl: loss, MLM and SOP accuracy (train and
    eval), lr."""
    records = [json.loads(ln) for ln in (Path(output) / METRICS_FILE).read_text().splitlines() if ln.strip()]
    panels: dict[str, dict[str, Points]] = {key: {} for key in ("loss", "mlm_acc", "sop_acc")}
    for split in ("train", "eval", "eval_text"):
        rows = [r for r in records if r.get("split", "train") == split]
        for key, series in panels.items():
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts:
                series[split] = pts
    panels["learning rate"] = {"train": [(r["step"], r["lr"]) for r in records if "lr" in r]}
    return draw_curves(Path(output) / CURVES_FILE, panels)


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
