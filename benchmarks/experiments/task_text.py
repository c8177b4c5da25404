"""The unlabeled training text of GLUE tasks as one plain-text file, for task-adaptive pretraining.

Gururangan et al. (2020) continue pretraining on the task's own unlabeled text before fine-tuning
(TAPT); Krishna et al. (2023) pretrain on it alone. docs/quality.md's row (d) does the first with
`albert pretrain --init-from MODEL --text FILE`. Each training example becomes one paragraph (a blank
line between): a sentence pair is its two sentences on two lines, in their order, so sentence-order
prediction has a real order to learn. Labels are never read; repeated texts are written once; dev and
test files are never read.

    python benchmarks/experiments/task_text.py --glue ../shared/data/glue --output runs/tapt/tasks.txt
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from albert_lm.tasks.glue import GLUE_TASKS, read_glue_tsv

TASKS = ("cola", "sst2", "mrpc", "stsb", "rte")


def task_paragraphs(glue: Path, tasks: tuple[str, ...] = TASKS) -> list[str]:
    """Each training example's text as a paragraph, first occurrence kept, tasks in the given order."""
    seen: set[str] = set()
    out = []
    for name in tasks:
        spec = GLUE_TASKS[name]
        for ex in read_glue_tsv(glue / spec.folder / "train.tsv", spec, require_label=False):
            text = ex.text_a.strip() + (f"\n{ex.text_b.strip()}" if ex.text_b else "")
            if text and text not in seen:
                seen.add(text)
                out.append(text)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--glue", required=True, help="the GLUE folder (CoLA/, SST-2/, ... with train.tsv)")
    p.add_argument("--output", required=True)
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=sorted(GLUE_TASKS))
    a = p.parse_args()
    paragraphs = task_paragraphs(Path(a.glue), tuple(a.tasks))
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    print(f"wrote {out}: {len(paragraphs)} paragraphs, {out.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
