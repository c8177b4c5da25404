"""`albert`: the command line. Each subcommand parses its arguments and calls one library function.

Subcommands import their module only when run, so `albert --help` stays fast and a missing optional
dependency of one command never breaks another.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- albert params
def _add_params(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "params",
        help="print parameter counts for the presets and the paper's ablation grid",
        description="Parameter counts of the presets (paper Table 1) and of the base-size ablation grid "
        "(embedding size E x cross-layer sharing, paper Tables 3 and 4), counted on the meta device.",
    )
    p.add_argument("--preset", action="append", help="count only these presets (repeatable)")
    p.set_defaults(func=_run_params)


def _run_params(args: argparse.Namespace) -> int:
    from albert_lm.model.params import format_parameter_tables

    print(format_parameter_tables(args.preset))
    return 0


def _add_precision(p: argparse.ArgumentParser, more: tuple[str, ...], default: str, note: str) -> None:
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", *more), default=default,
        help="auto (default): bf16 where this machine computes it fast (a CUDA GPU with bf16, a CPU with "
        f"AVX512-BF16 or AMX), else fp32{note}",
    )  # fmt: skip


# --------------------------------------------------------------------------- albert finetune
def _add_finetune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune",
        help="fine-tune a checkpoint on GLUE, SQuAD 1.1/2.0, RACE or your own CSV/JSONL data",
        description="Fine-tune an ALBERT checkpoint (a transformers-layout folder with spiece.model) on a "
        "downstream task, evaluating on dev as it goes and keeping the best checkpoint in OUTPUT/best. "
        "Unset options take google-research's per-task defaults (docs/finetune.md). Writes "
        "OUTPUT/eval_results.json, OUTPUT/metrics.jsonl and OUTPUT/predictions/.",
    )
    from albert_lm.tasks import TASK_NAMES  # numpy only: --help stays fast

    p.add_argument("--task", required=True, choices=TASK_NAMES)
    p.add_argument(
        "--model", required=True, help="pretrained model folder (config.json, weights, spiece.model)"
    )
    p.add_argument("--data", required=True, help="the task's folder (train/dev files) or one file")
    p.add_argument("--output", required=True, help="output folder")
    p.add_argument("--tokenizer", help="spiece.model (or its folder) when --model has none")
    p.add_argument("--max-steps", type=int, help="optimizer steps (default: the task's)")
    p.add_argument("--epochs", type=float, help="train for this many epochs instead of --max-steps")
    p.add_argument("--batch-size", type=int, help="training batch size (default: the task's)")
    p.add_argument("--eval-batch-size", type=int, help="default: twice the training batch")
    p.add_argument("--learning-rate", type=float, help="peak learning rate (default: the task's)")
    p.add_argument("--warmup-steps", type=int, help="default: the task's warmup fraction of the steps")
    p.add_argument("--max-seq-length", type=int, help="default: the task's (512; 384 for SQuAD 1.1)")
    p.add_argument("--gradient-accumulation", type=int, default=1, help="batches per optimizer step")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--dropout", type=float, help="encoder dropout (default: the task's, 0 or 0.1)")
    p.add_argument("--seed", type=int, default=12345)
    _add_precision(p, ("fp16",), "auto", "; fp16 on CUDA only")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument(
        "--eval-every", type=int, help="evaluate every N steps (default: once per epoch and at the end)"
    )
    p.add_argument("--log-every", type=int, default=50, help="log a line every N steps")
    p.add_argument("--max-train-examples", type=int, help="use only the first N training examples")
    p.add_argument("--max-eval-examples", type=int, help="use only the first N dev examples")
    p.add_argument("--doc-stride", type=int, default=128, help="SQuAD: window stride in tokens")
    p.add_argument("--max-query-length", type=int, default=64, help="SQuAD: question tokens kept")
    p.add_argument("--max-answer-length", type=int, default=30, help="SQuAD: longest answer in tokens")
    p.add_argument("--n-best", type=int, default=20, help="SQuAD: start/end candidates per window")
    p.add_argument(
        "--null-score-diff-threshold",
        type=float,
        help="SQuAD 2.0: answer '' when null score - best span score exceeds this (default: best F1 on dev)",
    )
    p.add_argument("--text-column", default="text", help="classification: text column")
    p.add_argument("--text-pair-column", default="text_pair", help="classification: optional second text")
    p.add_argument("--label-column", default="label", help="classification: label column")
    p.add_argument("--tokens-column", default="tokens", help="token classification: tokens column")
    p.add_argument("--tags-column", default="tags", help="token classification: tags column")
    p.set_defaults(func=_run_finetune)


def _run_finetune(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from albert_lm.training.finetune import FinetuneConfig, finetune

    names = {f.name for f in dataclasses.fields(FinetuneConfig)}
    cfg = FinetuneConfig(**{k: v for k, v in vars(args).items() if k in names})
    print(json.dumps(finetune(cfg), sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert evaluate
def _add_evaluate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a SQuAD predictions file, or a fine-tuned model on a task's dev set",
        description="With --predictions: score a SQuAD predictions JSON (question id -> answer text) against "
        "the official dev JSON as evaluate-v1.1.py / evaluate-v2.0.py do. With --model: run a fine-tuned "
        "model on the task's dev set. Either way the metrics are printed as one JSON object on the last line.",
    )
    p.add_argument("--task", required=True, help="task name (squad1, squad2, rte, ...)")
    p.add_argument("--data", required=True, help="the dev file (SQuAD JSON) or the task's data folder")
    p.add_argument("--predictions", help="SQuAD predictions JSON to score")
    p.add_argument(
        "--na-probs", help="SQuAD 2.0: JSON of question id -> no-answer probability (or null-score diff)"
    )
    p.add_argument(
        "--na-prob-thresh",
        type=float,
        default=1.0,
        help="SQuAD 2.0: predict no answer above this (default 1.0)",
    )
    p.add_argument("--model", help="fine-tuned model folder (config.json, model.safetensors, spiece.model)")
    p.add_argument("--output", help="with --model: also write eval_results.json and predictions here")
    p.add_argument("--batch-size", type=int, default=None, help="with --model: evaluation batch size")
    p.add_argument("--max-seq-length", type=int, default=None, help="with --model: default: the task's")
    _add_precision(p, (), "auto", " (with --model)")
    p.set_defaults(func=_run_evaluate)


def _run_evaluate(args: argparse.Namespace) -> int:
    import json

    if args.predictions:
        if args.task not in ("squad1", "squad2"):
            raise ValueError(f"--predictions scores SQuAD files only; got --task {args.task}")
        from albert_lm.tasks.squad import score_prediction_file

        result = score_prediction_file(
            args.data, args.predictions, args.task == "squad2", args.na_probs, args.na_prob_thresh
        )
    elif args.model:
        from albert_lm.training.finetune import evaluate_model

        result = evaluate_model(
            args.task,
            args.model,
            args.data,
            args.output,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            precision=args.precision,
        )
    else:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model)")
    print(json.dumps(result, sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert tokenizer train
def _add_tokenizer(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tokenizer",
        help="train an ALBERT SentencePiece tokenizer",
        description="Tokenizer commands. `albert tokenizer train` trains a unigram SentencePiece model with "
        "ALBERT's special pieces at ids 0-4 (<pad> <unk> [CLS] [SEP] [MASK]) on text normalized as "
        "google-research's preprocess_text does (whitespace collapsed, accents removed, lower-cased).",
    )
    tsub = p.add_subparsers(dest="tokenizer_command", metavar="ACTION")
    t = tsub.add_parser("train", help="train spiece.model from text files", description=p.description)
    t.add_argument("--input", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    t.add_argument("--output", required=True, help="new or empty folder for spiece.model")
    t.add_argument("--vocab-size", type=int, default=30000, help="pieces in the model (default 30000)")
    t.add_argument("--cased", action="store_true", help="keep upper case (default: lower-case the text)")
    t.add_argument(
        "--strip-gutenberg", action="store_true", help="use only the text between Project Gutenberg markers"
    )
    t.add_argument("--seed", type=int, default=12345, help="SentencePiece sampling seed (default 12345)")
    t.set_defaults(func=_run_tokenizer_train)


def _run_tokenizer_train(args: argparse.Namespace) -> int:
    from albert_lm.data.tokenizer_training import train_tokenizer

    tok = train_tokenizer(
        args.input,
        args.output,
        vocab_size=args.vocab_size,
        do_lower_case=not args.cased,
        strip_gutenberg=args.strip_gutenberg,
        seed=args.seed,
    )
    print(f"wrote {tok.model_file} ({tok.vocab_size} pieces)")
    return 0


# --------------------------------------------------------------------------- albert pretrain
_LR_HELP = (
    "peak learning rate for your global batch (batch-size x accumulation x processes). The paper's "
    "0.00176 is for 4096; for a smaller global batch B scale it by sqrt(B / 4096) (LAMB's square-root "
    "rule): 2.2e-4 at 64, 6.2e-4 at 512, 1.1e-3 at 1024. Default 0.00176"
)


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pretrain",
        help="pretrain ALBERT (masked LM + SOP, LAMB) on a folder from `albert data create`",
        description="Pretrain ALBERT as the paper did (Section 4.1: MLM + SOP, LAMB, lr 0.00176 at batch 4096, "
        "warmup then linear decay). Settings come from --config (a JSON of PretrainConfig fields, e.g. a "
        "run's pretrain_config.json), then these options. Writes OUTPUT/checkpoint-STEP/ every --save-every "
        "steps (transformers' layout + training state; the last --keep-last kept), the final model in "
        "OUTPUT/, OUTPUT/metrics.jsonl, TensorBoard events and training_curves.png. SIGTERM/SIGINT save and "
        "exit; --resume continues exactly. Several processes: `torchrun --nproc-per-node N -m albert_lm.cli "
        "pretrain ...` (batch size is per process). Without --data and --config, runs `albert demo`.",
    )
    s = argparse.SUPPRESS  # unset options keep the config file's (or the paper's) value
    p.add_argument("--data", default=s, help="folder from `albert data create` (with its spiece.model)")
    p.add_argument("--config", default=None, metavar="FILE", help="JSON file of pretraining settings")
    p.add_argument("--output", default=s, help="output folder (default runs/pretrain)")
    p.add_argument("--preset", default=s, help="model preset (default albert-base; see `albert params`)")
    p.add_argument("--model-config", default=s, metavar="FILE", help="model config.json instead of a preset")
    p.add_argument(
        "--model-override", action="append", default=s, metavar="KEY=VALUE", dest="model_overrides",
        help="change one model config field, e.g. num_hidden_layers=24 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--init-from", default=s, metavar="DIR", help="warm start from a model folder (depth growth)"
    )
    p.add_argument(
        "--init-from-group0", action="store_true", default=s, help="start every hidden group from group 0"
    )
    p.add_argument("--max-steps", type=int, default=s, help="optimizer steps (default 125000)")
    p.add_argument(
        "--batch-size", type=int, default=s, help="sequences per process and micro-step (default 8)"
    )
    p.add_argument(
        "--gradient-accumulation-steps",
        type=int,
        default=s,
        help="micro-steps per optimizer step (default 1)",
    )
    p.add_argument("--learning-rate", type=float, default=s, help=_LR_HELP)
    p.add_argument("--warmup-steps", type=int, default=s, help="linear warmup steps (default 3125)")
    p.add_argument("--optimizer", choices=("lamb", "adamw"), default=s, help="default lamb")
    p.add_argument("--weight-decay", type=float, default=s, help="default 0.01")
    _add_precision(p, (), s, "; bf16 = autocast")
    p.add_argument(
        "--gradient-checkpointing", action="store_true", default=s, help="recompute layers in backward"
    )
    p.add_argument("--dropout-off-step", type=int, default=s, help="switch dropout off from this step")
    p.add_argument("--save-every", type=int, default=s, help="checkpoint every N steps (default 5000)")
    p.add_argument("--keep-last", type=int, default=s, help="checkpoints kept (default 5)")
    p.add_argument("--eval-every", type=int, default=s, help="evaluate every N steps (default: at the end)")
    p.add_argument(
        "--eval-batches", type=int, default=s, help="held-out batches per evaluation (default 100)"
    )
    p.add_argument(
        "--eval-text", default=s, metavar="FILE", help="plain text for out-of-domain MLM evaluation"
    )
    p.add_argument("--log-every", type=int, default=s, help="log a line every N steps (default 10)")
    p.add_argument("--seed", type=int, default=s, help="default 12345")
    p.add_argument("--resume", action="store_true", default=s, help="continue from the newest checkpoint")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=s)
    p.set_defaults(func=_run_pretrain)


def _run_pretrain(args: argparse.Namespace) -> int:
    import json

    given = {k: v for k, v in vars(args).items() if k not in ("command", "func", "verbose", "config")}
    if "data" not in given and args.config is None:
        from albert_lm.demo import run_demo

        run_demo(given.get("output", "runs/demo"), max_steps=given.get("max_steps"))
        return 0
    from albert_lm.training.pretrain import PretrainConfig, pretrain

    if "model_overrides" in given:
        pairs = [kv.split("=", 1) for kv in given["model_overrides"]]
        if any(len(kv) != 2 for kv in pairs):
            raise ValueError(f"--model-override takes KEY=VALUE, got {given['model_overrides']}")
        given["model_overrides"] = {k: _json_or_str(v) for k, v in pairs}
    result = pretrain(PretrainConfig.load(args.config, **given))
    print(json.dumps({"output": str(result.output), "step": result.step, "interrupted": result.interrupted}))
    return 0


def _json_or_str(value: str):
    import json

    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


# --------------------------------------------------------------------------- albert data create
def _add_data(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "data",
        help="turn raw text into ALBERT pretraining examples (SOP/NSP pairs, n-gram masking)",
        description="Data commands. `albert data create` streams text files into sharded, memory-mapped "
        "pretraining examples (google-research create_pretraining_data.py, quirks fixed; see docs/data.md).",
    )
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION")
    d = dsub.add_parser("create", help="create sharded pretraining examples", description=p.description)
    d.add_argument("--input", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    d.add_argument("--tokenizer", required=True, help="spiece.model file or a folder holding one")
    d.add_argument("--output", required=True, help="new or empty folder (or an unfinished run to resume)")
    d.add_argument("--max-seq-length", type=int, required=True, help="tokens per example, specials included")
    d.add_argument("--seed", type=int, default=12345, help="seed of every random draw (default 12345)")
    d.add_argument(
        "--format",
        choices=["lines", "paragraphs"],
        default="lines",
        help="lines: one sentence per line, blank line between documents (google-research); "
        "paragraphs: raw text split into sentences by Bling Fire (default lines)",
    )
    d.add_argument("--strip-gutenberg", action="store_true", help="keep only text between Gutenberg markers")
    d.add_argument(
        "--objective", choices=["sop", "nsp"], default="sop", help="sentence objective (default sop)"
    )
    d.add_argument(
        "--masking",
        choices=["dynamic", "static"],
        default="dynamic",
        help="dynamic: masks drawn when read, new each epoch (default); static: fixed at creation",
    )
    d.add_argument("--dupe-factor", type=int, default=1, help="passes over the data (default 1)")
    d.add_argument("--short-seq-prob", type=float, default=0.1, help="share of shorter targets (default 0.1)")
    d.add_argument("--masked-lm-prob", type=float, default=0.15, help="share of masked tokens (default 0.15)")
    d.add_argument(
        "--max-predictions-per-seq", type=int, default=20, help="mask cap per example (default 20)"
    )
    d.add_argument("--max-ngram", type=int, default=3, help="longest masked n-gram in words (default 3)")
    d.add_argument(
        "--eval-fraction", type=float, default=0.01, help="held-out share of blocks (default 0.01)"
    )
    d.add_argument("--shard-mb", type=float, default=4.0, help="input MB per shard (default 4)")
    d.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    d.add_argument("--skip-invalid-utf8", action="store_true", help="skip and count undecodable lines")
    d.add_argument(
        "--max-line-bytes", type=int, default=1 << 20, help="longest accepted line (default 1 MiB)"
    )
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_run_data_create)


def _run_data_create(args: argparse.Namespace) -> int:
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data, format_summary

    shard_bytes = int(args.shard_mb * (1 << 20))
    cfg = DataConfig(
        max_seq_length=args.max_seq_length,
        objective=args.objective,
        masking=args.masking,
        dupe_factor=args.dupe_factor,
        short_seq_prob=args.short_seq_prob,
        masked_lm_prob=args.masked_lm_prob,
        max_predictions_per_seq=args.max_predictions_per_seq,
        max_ngram=args.max_ngram,
        seed=args.seed,
        input_format=args.format,
        strip_gutenberg=args.strip_gutenberg,
        eval_fraction=args.eval_fraction,
        block_bytes=min(1 << 20, shard_bytes),
        shard_bytes=shard_bytes,
        skip_invalid_utf8=args.skip_invalid_utf8,
        max_line_bytes=args.max_line_bytes,
    )
    manifest = create_pretraining_data(
        args.input, args.tokenizer, args.output, cfg, num_workers=args.workers, progress=not args.no_progress
    )
    print(format_summary(manifest))
    return 0


# --------------------------------------------------------------------------- albert demo
def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train a tokenizer and albert-tiny on the bundled public-domain books (~5 min on 2 CPU cores)",
        description="The end-to-end demo: trains a SentencePiece model and a 4-layer albert-tiny on a few MB of "
        "public-domain books shipped in the package (albert_lm/demo_corpus, sources in its README), "
        "reports MLM accuracy against a unigram guess and SOP accuracy against chance, and fills a mask.",
    )
    p.add_argument("--output", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--max-steps", type=int, default=None, help="training steps (default: the demo's)")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from albert_lm.demo import run_demo

    run_demo(args.output, max_steps=args.max_steps)
    return 0


# --------------------------------------------------------------------------- albert bench
def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="time albert-lm against transformers on this machine and print the table",
        description="Speed of albert-lm against transformers with the same weights, timings interleaved: "
        "this machine's matrix-multiply limits, inference (1x128, 8x128, 4x512), a pretraining step "
        "(8x128), both in fp32 and bf16, SST-2 dev end to end, peak memory, and the gain of each of our "
        "speed choices. Each library runs in its own worker process, the two alternated repeat by "
        "repeat. Needs transformers (pip install transformers). About 17 minutes for albert-base "
        "on 2 cores.",
    )
    p.add_argument("--preset", default="albert-base", help="model size (default albert-base)")
    p.add_argument("--data", help="the shared data folder, for SST-2 (default: $ALBERT_DATA)")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats per inference row")
    parts = (
        "gemm",
        "inference",
        "pretraining",
        "sst2",
        "ablations",
    )  # = bench.PARTS (not imported: --help stays fast)
    p.add_argument("--only", nargs="+", choices=parts, default=parts)
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", "all"), default="auto",
        help="rows to run: auto (default) is fp32, plus bf16 where this CPU computes it natively; all = both",
    )  # fmt: skip
    p.add_argument(
        "--same-process",
        action="store_true",
        help="run ours and transformers in this one process instead of a worker process each",
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    p.set_defaults(func=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from albert_lm.bench.runner import format_table, run_suite, write_json

    data = args.data or os.environ.get("ALBERT_DATA")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    result = run_suite(
        args.preset,
        Path(data) if data else None,
        args.repeats,
        tuple(args.only),
        log,
        isolate=not args.same_process,
        precision=args.precision,
    )
    print(format_table(result))
    if args.json:
        write_json(result, Path(args.json))
    return 0


# --------------------------------------------------------------------------- entry point
_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_params,
    _add_finetune,
    _add_evaluate,
    _add_tokenizer,
    _add_pretrain,
    _add_data,
    _add_demo,
    _add_bench,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="albert",
        description="albert-lm: ALBERT end to end in PyTorch (tokenizer, data, pretraining, fine-tuning).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


_TRAINING_COMMANDS = ("pretrain", "finetune", "evaluate", "demo", "bench")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if args.command in _TRAINING_COMMANDS:
        from albert_lm.kernels.linear import tune_cpu_allocator

        tune_cpu_allocator()  # fewer page faults per step; process-wide, so the command decides
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError) as e:
        # Bad input: one clear line, non-zero exit, no traceback.
        print(f"albert {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
