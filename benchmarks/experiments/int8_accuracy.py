"""Dev accuracy of a fine-tuned GLUE classifier in fp32, albert-lm int8 and ONNX Runtime int8.

For each `TASK=MODEL_DIR` pair (a finetune run's best/ on sst2, mrpc, ...): the task's full dev set
through `albert predict` (fp32 and --int8) and through the model exported by `albert export --int8`
(model.int8.onnx in ONNX Runtime, the same features), scored with the task's metrics.

    python benchmarks/experiments/int8_accuracy.py --glue ../shared/data/glue sst2=runs/sst2/best mrpc=runs/mrpc/best
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.deploy.export import export_onnx
from albert_lm.deploy.predict import PredictConfig, predict
from albert_lm.tasks import get_task
from albert_lm.tasks.batches import collate
from albert_lm.tasks.glue import label_names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--glue", required=True, help="the GLUE folder")
    p.add_argument("models", nargs="+", metavar="TASK=DIR")
    a = p.parse_args()
    import onnxruntime as ort

    print("| task | metric | fp32 | albert-lm int8 | ONNX Runtime int8 |\n|---|---|---|---|---|")
    for pair in a.models:
        name, model = pair.split("=", 1)
        task = get_task(name)
        dev = task.split_file(Path(a.glue), "dev")
        assert dev is not None, f"no dev file for {name} under {a.glue}"
        examples = task.read(dev, "dev")
        scores = {}
        with tempfile.TemporaryDirectory() as tmp:
            for kind in ("fp32", "int8"):
                out = Path(tmp) / f"{kind}.jsonl"
                spec = task.spec  # type: ignore[attr-defined]
                predict(
                    PredictConfig(
                        model=model,
                        input=str(dev),
                        output=str(out),
                        format="tsv",
                        text_column=spec.text_a,
                        text_pair_column=spec.text_b or "-",
                        int8=kind == "int8",
                    )
                )
                labels = [json.loads(line)["label"] for line in out.read_text().splitlines()]
                scores[kind] = task.score(examples, [label_names(name).index(x) for x in labels])
            export_onnx(model, Path(tmp) / "onnx", int8=True)
            session = ort.InferenceSession(
                str(Path(tmp) / "onnx" / "model.int8.onnx"), providers=["CPUExecutionProvider"]
            )
            tok = AlbertTokenizer.from_pretrained(model)
            features = task.featurize(examples, tok, 128)
            preds = []
            for i in range(0, len(features), 64):
                batch = collate(features[i : i + 64], tok.pad_token_id)
                logits = session.run(
                    None, {k: batch[k].numpy() for k in ("input_ids", "attention_mask", "token_type_ids")}
                )[0]
                preds += [int(x) for x in np.argmax(logits, -1)]
            scores["onnx int8"] = task.score(examples, preds)
        for metric in dict.fromkeys(("accuracy", task.main_metric)):
            cells = " | ".join(f"{100 * scores[k][metric]:.2f}" for k in ("fp32", "int8", "onnx int8"))
            print(f"| {name} ({len(examples)}) | {metric} | {cells} |")


if __name__ == "__main__":
    main()
