"""Evaluating a model on a task: its evaluation sets read and featurized, the model run on them
(`albert_lm.runtime.run`), the task's metrics and prediction files. The fine-tuning loop
(`albert_lm.training.finetune`) evaluates through here, and so does `albert evaluate --model`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.files import atomic_write, write_json
from albert_lm.hints import missing
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import pick_device, resolved_precision
from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import ExitRule, with_exit_rule
from albert_lm.model.heads import AlbertForSequenceClassification
from albert_lm.runtime.finetuned import null_threshold, read_saved_settings
from albert_lm.runtime.fits import check_head_fits, check_tokenizer_fits, sequence_length
from albert_lm.runtime.run import run_model
from albert_lm.runtime.run_folders import no_model
from albert_lm.runtime.task_model import load_for_task
from albert_lm.tasks import Task, get_task
from albert_lm.tasks.task import Feature
from albert_lm.training.finetune_config import FinetuneConfig, check_saved_config

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


# --------------------------------------------------------------------------- running the model
def model_fingerprint(model_dir: str | Path) -> str:
    """A content hash of a model folder: config.json and every weights file (shards included)."""
    from albert_lm.files import file_sha256
    from albert_lm.model.weights import SAFETENSORS_INDEX, find_weights, read_weight_map

    folder = Path(model_dir)
    weights = find_weights(folder)
    files = [folder / "config.json", weights]
    if weights.name == SAFETENSORS_INDEX:
        files += [folder / name for name in sorted(set(read_weight_map(weights).values()))]
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()[:16]


def required(value: _T | None, name: str) -> _T:
    """A setting `FinetuneConfig.resolved()` fills in; None means the config was not resolved."""
    if value is None:
        raise ValueError(f"{name} is None: pass a resolved config (FinetuneConfig.resolved())")
    return value


DEPTHS = "depth_"  # under an exit rule, the predictions' key (and file name) of a split's depths


@dataclass
class EvalSet:
    suffix: str  # metric-name suffix ("" or "_mm")
    split: str
    examples: list[Any]
    features: list[Feature]
    in_file: int | None = None  # examples its file holds (more than `examples` where a cap kept fewer)


# The fields of an evaluation record that say what was evaluated (not metrics: a model card leaves them out).
COUNT_FIELDS = ("eval_examples", "eval_examples_in_file", "max_eval_examples")


def eval_counts(sets: Sequence[EvalSet], cap: int | None) -> dict[str, Any]:
    """What an evaluation of `sets` says of their sizes: "eval_examples" (split -> examples evaluated) and,
    where the cap (--max-eval-examples) kept fewer than a file holds, "max_eval_examples" and
    "eval_examples_in_file" (split -> examples in its file); an uncapped evaluation names no cap."""
    if not sets:
        return {}
    counts: dict[str, Any] = {"eval_examples": {s.split: len(s.examples) for s in sets}}
    if any(s.in_file is not None and s.in_file > len(s.examples) for s in sets):
        counts["max_eval_examples"] = cap
        counts["eval_examples_in_file"] = {s.split: s.in_file or len(s.examples) for s in sets}
    return counts


def evaluate_sets(
    task: Task,
    model: torch.nn.Module,
    sets: Sequence[EvalSet],
    batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str,
    *,
    finite: bool = False,
    timed: bool = False,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics of every evaluation set (suffixed names) and the predictions per split; `finite` as
    `run_model`'s. `timed` (and always under an exit rule): the model's rows per second, `rows_per_s`."""
    results: dict[str, float] = {}
    predictions: dict[str, Any] = {}
    for s in sets:
        start = time.perf_counter()
        outputs = run_model(model, s.features, batch_size, pad_id, device, precision, s.split, finite=finite)
        seconds = time.perf_counter() - start
        preds = task.predict(s.examples, s.features, outputs)
        predictions[s.split] = preds
        if s.split.startswith("test"):
            continue
        for k, v in task.score(s.examples, preds).items():
            results[k + s.suffix] = v
        exits = bool(outputs) and "depth" in outputs[0]
        if exits:  # early exit: the layers a row used, on average, and each row's (evaluate --output)
            depths = [int(o["depth"]) for o in outputs]
            results["mean_depth" + s.suffix] = float(np.mean(depths))
            predictions[DEPTHS + s.split] = depths
        if exits or timed:  # the model's own speed (features made before: tokenizing is not counted)
            results["rows_per_s" + s.suffix] = len(outputs) / max(seconds, 1e-9)
    return results, predictions


def scores_by_depth(
    task: Task, folder: Path, sets: Sequence[EvalSet], batch_size: int, pad_id: int, device: torch.device,
    precision: str, full: dict[str, Any],
) -> dict[str, list[float]]:  # fmt: skip
    """Each dev metric of the model fine-tuned with exit heads in `folder` at every fixed depth 1 .. L:
    what an exit rule trades, and the depth to compare a rule with. Depth L is the model itself, whose
    metrics `full` (its evaluation) holds already; the others take about (L - 1) / 2 passes over the dev
    sets."""
    from albert_lm.model.early_exit import EarlyExit, ExitHeads, exit_count

    model = load_for_task(task, folder, None).to(device)
    heads = ExitHeads.load(folder, model.config)
    assert isinstance(model, AlbertForSequenceClassification) and heads is not None
    layers = exit_count(model.config)
    out: dict[str, list[float]] = {}
    for depth in range(1, layers):
        at = EarlyExit(model, heads.to(device), ExitRule(depth=depth))
        results, _ = evaluate_sets(task, at, sets, batch_size, pad_id, device, precision)
        for name, value in results.items():
            if not name.startswith(("mean_depth", "rows_per_s")):
                out.setdefault(name, []).append(value)
    for name, values in out.items():
        values.append(full[name])
    return out


# --------------------------------------------------------------------------- reading
def build_task(cfg: FinetuneConfig) -> Task:
    return get_task(cfg.task, **cfg.task_options())


def read_split(task: Task, data: Path, split: str, cap: int | None) -> list[Any] | None:
    """The split's first `cap` examples (all without one); None where it has no file."""
    return _read_capped(task, data, split, cap)[0]


def _read_capped(task: Task, data: Path, split: str, cap: int | None) -> tuple[list[Any] | None, int]:
    """(`read_split`, the examples its file holds), logged as "dev: 300 of 872 examples from PATH (capped
    by --max-eval-examples)" where the cap keeps fewer."""
    path = task.split_file(data, split)
    if path is None:
        return None, 0
    examples = task.read(path, split)
    kept = examples[:cap] if cap else examples
    if len(kept) < len(examples):
        option = "--max-train-examples" if split == "train" else "--max-eval-examples"
        logger.info(
            "%s: %d of %d examples from %s (capped by %s)", split, len(kept), len(examples), path, option
        )
    else:
        logger.info("%s: %d examples from %s", split, len(examples), path)
    return kept, len(examples)


def eval_sets_of(
    task: Task, data: Path, tokenizer: AlbertTokenizer, max_seq_length: int, cap: int | None, test: bool
) -> list[EvalSet]:
    sets = []
    # One file given for every split: it is train and dev, never a test set to predict.
    tests = [("", s) for s in task.test_splits()] if test and not data.is_file() else []
    splits = list(task.eval_splits) + tests
    for suffix, split in splits:
        examples, in_file = _read_capped(task, data, split, cap)
        if examples is not None:
            features = task.featurize(examples, tokenizer, max_seq_length)
            sets.append(EvalSet(suffix, split, examples, features, in_file))
    return sets


# --------------------------------------------------------------------------- evaluation of a saved model
EVAL_FILES = ("eval_results.json", "predictions")


def _check_counts(**values: Any) -> None:
    """evaluate_model's counts: None or integers, refused naming the argument; max_eval_examples at least 1
    (the others' ranges are checked with the model, as `albert evaluate` says them)."""
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"evaluate_model: {name} must be an integer or None, got {value!r}")
    cap = values.get("max_eval_examples")
    if cap is not None and cap < 1:
        raise ValueError(f"evaluate_model: max_eval_examples must be at least 1, got {cap}")


def evaluate_model(
    task_name: str,
    model_dir: str | Path,
    data: str | Path,
    output: str | Path | None = None,
    batch_size: int | None = None,
    max_seq_length: int | None = None,
    device: str = "auto",
    precision: str = "auto",
    overwrite: bool = False,
    exit_rule: dict[str, Any] | None = None,
    max_eval_examples: int | None = None,
    columns: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the fine-tuned model `model_dir` (a folder or hub id) on the dev set(s) of `task_name` (a GLUE
    name, squad1, race, classification, ...) in `data`; writes eval_results.json and predictions to `output`
    (a folder apart from the model and the data; earlier results replaced only with `overwrite`). Returns
    the metrics, `rows_per_s`, and per dev file `eval_examples` and `eval_examples_in_file`
    (`max_eval_examples` caps each file). `exit_rule`: `ExitRule`'s arguments, for a model with exit heads:
    the results then add the mean layers used, `mean_depth`, and the full depth's `full_depth_*`, `speedup`.
    `columns`: your own data's columns (text_column=...) where not the ones the model was fine-tuned on."""
    _check_counts(batch_size=batch_size, max_seq_length=max_seq_length, max_eval_examples=max_eval_examples)
    rule = ExitRule(**(exit_rule or {}))
    model_dir, data = _eval_inputs(model_dir, Path(data), batch_size, max_seq_length)
    if output:
        _check_eval_output(Path(output), model_dir, data, overwrite)
    saved, cfg = _eval_config(task_name, model_dir, data, output, batch_size, max_seq_length, device, columns)
    model_config = AlbertConfig.from_pretrained(model_dir)
    max_seq_length = sequence_length(
        max_seq_length, required(cfg.max_seq_length, "max_seq_length"), model_config, model_dir
    )
    cfg.max_seq_length = max_seq_length
    task = build_task(cfg)
    if task.name in ("classification", "token-classification") and not task.labels:  # GLUE's are fixed
        id2label = model_config.id2label or {i: f"LABEL_{i}" for i in range(model_config.num_labels)}
        task.labels = tuple(saved.get("labels") or (id2label[i] for i in sorted(id2label)))
    tokenizer = AlbertTokenizer.from_pretrained(model_dir)
    check_tokenizer_fits(tokenizer, model_dir, model_config, saved.get("tokenizer_fingerprint"))
    dev = pick_device(device)
    loaded = load_for_task(task, model_dir, None)  # refuses a folder without a trained head, before reading
    check_head_fits(task, loaded.config, model_dir)
    model = with_exit_rule(loaded, model_dir, rule)
    sets = eval_sets_of(task, data, tokenizer, max_seq_length, max_eval_examples, test=False)
    if not sets:
        raise FileNotFoundError(f"no dev file for {task_name} under {data}")
    precision = resolved_precision(precision, dev)
    model = model.to(dev)
    batch_size = required(cfg.eval_batch_size, "eval_batch_size")
    pad = tokenizer.pad_token_id
    run = functools.partial(evaluate_sets, task, sets=sets, batch_size=batch_size, pad_id=pad, device=dev,
                            precision=precision, finite=True)  # fmt: skip
    if model is loaded:
        results, preds = run(model=model, timed=True)
    else:  # under an exit rule: the full depth beside it, so the saving is measured
        results, preds = _against_full_depth(run, model, loaded, [s.suffix for s in sets])
    results.update({f"exit_{k}": v for k, v in (exit_rule or {}).items() if v is not None})
    results.update(eval_counts(sets, max_eval_examples))  # how many were evaluated, and the cap if it cut
    if output:
        _write_evaluation(Path(output), task, sets, preds, results)
    return results


def _against_full_depth(
    run: Callable[..., tuple[dict[str, float], dict[str, Any]]],
    model: torch.nn.Module,
    full: torch.nn.Module,
    suffixes: list[str],
) -> tuple[dict[str, float], dict[str, Any]]:
    """`run` (evaluate_sets on the dev sets) of `model` under an exit rule, with the `full` depth's metrics
    (`full_depth_*`) and the ratio of the two rates (`speedup`). Each model runs once untimed first (a
    process pays once for each batch shape it meets, and the rule's shrinking batches are many), then the
    two alternate three times and each rate is the median of its three."""
    for warm in (model, full):
        run(model=warm)
    rates: dict[str, list[float]] = {}
    for _ in range(TIMED_ROUNDS):
        results, preds = run(model=model, timed=True)
        theirs, _ = run(model=full, timed=True)
        for suffix in suffixes:
            rates.setdefault(suffix, []).append(results["rows_per_s" + suffix])
            rates.setdefault("full" + suffix, []).append(theirs["rows_per_s" + suffix])
    results.update({f"full_depth_{k}": v for k, v in theirs.items()})
    for suffix in suffixes:
        results["rows_per_s" + suffix] = float(np.median(rates[suffix]))
        results["full_depth_rows_per_s" + suffix] = float(np.median(rates["full" + suffix]))
        results["speedup" + suffix] = (
            results["rows_per_s" + suffix] / results["full_depth_rows_per_s" + suffix]
        )
    return results, preds


TIMED_ROUNDS = 3  # of the rule and the full depth, alternated


def _eval_inputs(
    model_dir: str | Path, data: Path, batch_size: int | None, max_seq_length: int | None
) -> tuple[Path, Path]:
    """The model folder (a hub id: its cached snapshot) and the data, checked before anything is read."""
    for option, value in (("--batch-size", batch_size), ("--max-seq-length", max_seq_length)):
        if value is not None and value < 1:
            raise ValueError(f"{option} {value}: expected at least 1")
    folder = resolve_model(model_dir)
    if not (folder / "config.json").is_file():
        raise no_model(folder)
    if not data.exists():
        raise missing("--data", data)
    return folder, data


def _write_evaluation(
    out: Path, task: Task, sets: Sequence[EvalSet], preds: dict[str, Any], results: dict[str, float]
) -> None:
    """OUTPUT/predictions and OUTPUT/eval_results.json, under the folder's lock."""
    from albert_lm.files import folder_lock

    with folder_lock(out):
        for s in sets:
            task.write_predictions(s.examples, preds[s.split], out / "predictions", s.split)
            if DEPTHS + s.split in preds:  # under an exit rule: the layers each row used, in the file's order
                lines = "".join(f"{d}\n" for d in preds[DEPTHS + s.split])
                atomic_write(out / "predictions" / f"{DEPTHS}{s.split}.txt", lines)
        write_json(out / "eval_results.json", results)


def _eval_config(
    task_name: str,
    model_dir: Path,
    data: Path,
    output: str | Path | None,
    batch_size: int | None,
    max_seq_length: int | None,
    device: str,
    columns: dict[str, str] | None = None,
) -> tuple[dict[str, Any], FinetuneConfig]:
    """(the model's saved fine-tuning settings, the settings to evaluate with): the saved ones, with this
    task, folders, device, the sizes and the columns given here."""
    saved = read_saved_settings(model_dir)
    check_saved_config(model_dir, saved)
    if saved.get("task") not in (None, task_name):
        logger.warning("%s was fine-tuned on %s, evaluated on %s", model_dir, saved["task"], task_name)
    known = {f.name for f in dataclasses.fields(FinetuneConfig)}
    settings = {k: v for k, v in saved.items() if k in known}
    settings.update(task=task_name, model=str(model_dir), data=str(data), output=str(output or "-"))
    settings.update(device=device, overwrite=False, **(columns or {}))
    # SQuAD 2.0: the threshold the model answers with (predict's), not one chosen on the data it is scored
    # on; best_f1 and best_exact still say what the best threshold on this data would give
    settings["null_score_diff_threshold"] = null_threshold(model_dir, saved)
    cfg = FinetuneConfig(**settings)
    if max_seq_length is not None:
        cfg.max_seq_length = max_seq_length
    if batch_size is not None:
        cfg.eval_batch_size = batch_size
    return saved, cfg.resolved()


def _check_eval_output(out: Path, model_dir: Path, data: Path, overwrite: bool) -> None:
    """`evaluate --output`: apart from the model and the data, a folder, and holding no earlier results
    unless `overwrite` (which replaces those files only, never anything else there)."""
    from albert_lm.files import check_output_apart

    check_output_apart(out, {"--model": model_dir, "--data": data})
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--output {out}: exists and is not a folder")
    there = [name for name in EVAL_FILES if (out / name).exists()]
    if there and not overwrite:
        raise FileExistsError(
            f"--output {out} already holds {' and '.join(there)} (another evaluation or a fine-tuning run): "
            "pass --overwrite to replace them, or choose another --output"
        )
