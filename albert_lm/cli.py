"""`albert`: the command line. Each subcommand parses its arguments and calls one library function.

Subcommands import their module only when run, so `albert --help` stays fast and a missing optional
dependency of one command never breaks another. The deploy stage's commands (predict, export) are
written in `albert_lm.deploy.commands`, the paper stage's (reproduce) in `albert_lm.paper.commands`,
and registered here.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.deploy import commands as deploy_commands
from albert_lm.paper import commands as paper_commands
from albert_lm.settings import add_options, option_values, recipe, recipe_names

Options = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One `albert ...` command: its words, its help, how it adds its options and how it runs."""

    words: tuple[str, ...]  # ("data", "create") for `albert data create`
    help: str
    description: str
    options: Options
    run: Run


_COMMANDS: list[Command] = []
# Commands with an action word under them (`albert tokenizer train`): their own help and description.
_GROUPS = {
    "tokenizer": (
        "train an ALBERT SentencePiece tokenizer",
        "Tokenizer commands. `albert tokenizer train` trains a unigram SentencePiece model with "
        "ALBERT's special pieces at ids 0-4 (<pad> <unk> [CLS] [SEP] [MASK]) on text normalized as "
        "google-research's preprocess_text does (whitespace collapsed, accents removed, lower-cased).",
    ),
    "data": (
        "turn raw text into ALBERT pretraining examples (SOP/NSP pairs, n-gram masking)",
        "Data commands. `albert data create` streams text files into sharded, memory-mapped "
        "pretraining examples (google-research create_pretraining_data.py, quirks fixed; see docs/data.md).",
    ),
}


def command(words: str, options: Options) -> Callable[[Run], Run]:
    """Register the decorated function as the run of `albert WORDS`, with `options` adding its options.

    Its docstring is the command's help: the first paragraph in the command list, the rest under
    `--help` (or the first paragraph again; an action of a group takes its group's description).
    """

    def register(run: Run) -> Run:
        doc = inspect.cleandoc(run.__doc__ or "")
        first, _, rest = doc.partition("\n\n")
        help_, description = " ".join(first.split()), " ".join(rest.split())
        group = words.split()[0]
        if not description:
            description = _GROUPS[group][1] if " " in words else help_
        _COMMANDS.append(Command(tuple(words.split()), help_, description, options, run))
        return run

    return register


def _add_recipe(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--recipe", metavar="NAME", help="take this stage's settings from a recipe (albert_lm/recipes/NAME.json, "
        "or a JSON file); options given here win. Shipped: " + ", ".join(recipe_names()),
    )  # fmt: skip


def _recipe_section(args: argparse.Namespace, section: str) -> dict:
    return recipe(args.recipe)[section] if args.recipe else {}


# --------------------------------------------------------------------------- albert params
def _params_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", action="append", help="count only these presets (repeatable)")


@command("params", _params_options)
def _run_params(args: argparse.Namespace) -> int:
    """print parameter counts for the presets and the paper's ablation grid

    Parameter counts of the presets (paper Table 1) and of the base-size ablation grid (embedding size E
    x cross-layer sharing, paper Tables 3 and 4), counted on the meta device."""
    from albert_lm.model.params import format_parameter_tables

    presets = list(dict.fromkeys(args.preset)) if args.preset else None  # each once, in the order given
    print(format_parameter_tables(presets))
    return 0


def _add_precision(p: argparse.ArgumentParser, more: tuple[str, ...], default: str, note: str) -> None:
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", *more), default=default,
        help="auto (default): bf16 where this machine computes it fast (a CUDA GPU with bf16, a CPU with "
        f"AVX512-BF16 or AMX), else fp32{note}",
    )  # fmt: skip


# --------------------------------------------------------------------------- albert finetune
def _finetune_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.tasks import TASK_NAMES  # numpy only: --help stays fast
    from albert_lm.training.finetune_config import FinetuneConfig

    add_options(p, FinetuneConfig, required=("task", "model", "data", "output"), choices={"task": TASK_NAMES})


@command("finetune", _finetune_options)
def _run_finetune(args: argparse.Namespace) -> int:
    """fine-tune a checkpoint on GLUE, SQuAD 1.1/2.0, RACE or your own CSV/JSONL data

    Fine-tune an ALBERT checkpoint (a transformers-layout folder with spiece.model) on a downstream
    task, evaluating on dev as it goes and keeping the best checkpoint in OUTPUT/best. Unset options
    take google-research's per-task defaults (docs/finetune.md). Writes OUTPUT/eval_results.json,
    OUTPUT/metrics.jsonl and OUTPUT/predictions/."""
    import json

    from albert_lm.training.finetune import FinetuneConfig, finetune

    print(json.dumps(finetune(FinetuneConfig(**option_values(args, FinetuneConfig))), sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert glue
def _glue_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.training.glue import GlueConfig

    add_options(p, GlueConfig, required=("model", "data", "output"), metavars={"model": "DIR", "data": "DIR"})


@command("glue", _glue_options)
def _run_glue(args: argparse.Namespace) -> int:
    """fine-tune one model on CoLA, SST-2, MRPC, STS-B and RTE (seeds x rates) and print the GLUE-5 table

    Fine-tunes the model on each task with every rate of --learning-rates and --seeds seeds, one process
    with one thread per run, --workers at a time; per task, the rate with the best mean dev score is kept
    and its mean +- std over seeds reported, beside the majority-class score; GLUE-5 averages CoLA MCC,
    SST-2 accuracy, MRPC accuracy, STS-B Pearson and RTE accuracy. Runs already finished in OUTPUT are
    not run again. Writes OUTPUT/glue_results.json."""
    from albert_lm.training.glue import GlueConfig, format_table, run_glue

    print(format_table(run_glue(GlueConfig(**option_values(args, GlueConfig)))))
    return 0


# --------------------------------------------------------------------------- albert evaluate
def _evaluate_options(p: argparse.ArgumentParser) -> None:
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
    p.add_argument(
        "--output", help="with --model: also write eval_results.json and predictions/ into this folder (apart "
        "from the model and the data)",
    )  # fmt: skip
    p.add_argument(
        "--overwrite", action="store_true", help="with --output: replace the eval_results.json and predictions/ "
        "already there (nothing else in the folder is touched)",
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None, help="with --model: evaluation batch size")
    p.add_argument("--max-seq-length", type=int, default=None, help="with --model: default: the task's")
    p.add_argument("--device", default="auto", help="with --model: auto (default), cpu, cuda, cuda:1, ...")
    _add_precision(p, (), "auto", " (with --model)")


@command("evaluate", _evaluate_options)
def _run_evaluate(args: argparse.Namespace) -> int:
    """score a SQuAD predictions file, or a fine-tuned model on a task's dev set

    With --predictions: score a SQuAD predictions JSON (question id -> answer text) against the official
    dev JSON as evaluate-v1.1.py / evaluate-v2.0.py do. With --model: run a fine-tuned model on the
    task's dev set. Either way the metrics are printed as one JSON object on the last line."""
    import json

    if args.predictions and args.model:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model), not both")
    if args.output and not args.model:
        raise ValueError("--output goes with --model (the scores of --predictions are printed only)")
    if args.predictions:
        if args.task not in ("squad1", "squad2"):
            raise ValueError(f"--predictions scores SQuAD files only; got --task {args.task}")
        from albert_lm.tasks.squad import score_prediction_file

        result = score_prediction_file(
            args.data, args.predictions, args.task == "squad2", args.na_probs, args.na_prob_thresh
        )
    elif args.model:
        from albert_lm.training.evaluation import evaluate_model

        result = evaluate_model(
            args.task,
            args.model,
            args.data,
            args.output,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            device=args.device,
            precision=args.precision,
            overwrite=args.overwrite,
        )
    else:
        raise ValueError("give --predictions (score a file) or --model (run a fine-tuned model)")
    print(json.dumps(result, sort_keys=True))
    return 0


# --------------------------------------------------------------------------- albert predict, albert export
command("predict", deploy_commands.predict_options)(deploy_commands.run_predict)
command("export", deploy_commands.export_options)(deploy_commands.run_export)
command("reproduce", paper_commands.reproduce_options)(paper_commands.run_reproduce)


# --------------------------------------------------------------------------- albert tokenizer train
def _tokenizer_train_options(t: argparse.ArgumentParser) -> None:
    t.add_argument("--input", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    t.add_argument("--output", required=True, help="new or empty folder for spiece.model")
    t.add_argument("--vocab-size", type=int, help="pieces in the model (default: the recipe's, else 30000)")
    _add_recipe(t)
    t.add_argument("--cased", action="store_true", help="keep upper case (default: lower-case the text)")
    t.add_argument(
        "--strip-gutenberg", action="store_true", help="use only the text between Project Gutenberg markers"
    )
    t.add_argument("--seed", type=int, default=12345, help="SentencePiece sampling seed (default 12345)")
    t.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in --output")
    t.add_argument(
        "--skip-invalid-utf8", action="store_true", help="skip lines that are not UTF-8 instead of failing"
    )
    t.add_argument(
        "--max-line-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="longest accepted input line (default 1 MiB)",
    )


@command("tokenizer train", _tokenizer_train_options)
def _run_tokenizer_train(args: argparse.Namespace) -> int:
    """train spiece.model from text files"""
    from albert_lm.data.tokenizer_training import train_tokenizer

    section = _tokenizer_recipe(args)
    tok = train_tokenizer(
        args.input,
        args.output,
        vocab_size=args.vocab_size if args.vocab_size is not None else section.get("vocab_size", 30000),
        do_lower_case=not args.cased,
        strip_gutenberg=args.strip_gutenberg,
        seed=args.seed,
        overwrite=args.overwrite,
        skip_invalid_utf8=args.skip_invalid_utf8,
        max_line_bytes=args.max_line_bytes,
    )
    print(f"wrote {tok.model_file} ({tok.vocab_size} pieces)")
    return 0


def _tokenizer_recipe(args: argparse.Namespace) -> dict:
    """The recipe's "tokenizer" section, checked: known keys only, vocab_size a whole number."""
    from albert_lm.data.tokenizer_training import MIN_VOCAB_SIZE
    from albert_lm.files import InputError

    section = _recipe_section(args, "tokenizer")
    unknown = sorted(set(section) - {"vocab_size"})
    if unknown:
        raise InputError(
            _recipe_file(args), f'"tokenizer": unknown key(s) {", ".join(unknown)}; expected vocab_size'
        )
    size = section.get("vocab_size", MIN_VOCAB_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or size < MIN_VOCAB_SIZE:
        raise InputError(
            _recipe_file(args),
            f'"tokenizer" "vocab_size": expected a whole number of at least {MIN_VOCAB_SIZE}, got {size!r}',
        )
    return section


def _recipe_file(args: argparse.Namespace) -> str:
    """The file of --recipe (a shipped recipe's name or a JSON file), for messages."""
    from albert_lm.settings import RECIPE_DIR

    return args.recipe if args.recipe.endswith(".json") else str(RECIPE_DIR / f"{args.recipe}.json")


# --------------------------------------------------------------------------- albert pretrain
def _pretrain_options(p: argparse.ArgumentParser) -> None:
    from albert_lm.training.pretrain_config import PretrainConfig

    p.add_argument("--config", default=None, metavar="FILE", help="JSON file of pretraining settings")
    _add_recipe(p)
    # Options not typed keep the config file's value (or the default): suppress=True.
    add_options(
        p, PretrainConfig, skip=("model_overrides",), suppress=True,
        metavars={"model_config": "FILE", "init_from": "DIR", "eval_text": "FILE", "data": "DIR", "time_budget": "TIME"},
    )  # fmt: skip
    p.add_argument(
        "--model-override", action="append", default=argparse.SUPPRESS, metavar="KEY=VALUE",
        dest="model_overrides", help="change one model config field, e.g. num_hidden_layers=24 (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--text", nargs="+", metavar="FILE", help="plain-text files instead of --data: with --init-from MODEL, "
        "continued pretraining on your own text in one command (examples made with the model's tokenizer in "
        "OUTPUT/data; the recipe's data settings apply)",
    )  # fmt: skip


@command("pretrain", _pretrain_options)
def _run_pretrain(args: argparse.Namespace) -> int:
    """pretrain ALBERT (masked LM + SOP, LAMB) on a folder from `albert data create`

    Pretrain ALBERT as the paper did (Section 4.1: MLM + SOP, LAMB, lr 0.00176 at batch 4096, warmup
    then linear decay). Settings come from --config (a JSON of PretrainConfig fields, e.g. a run's
    pretrain_config.json), then these options. Writes OUTPUT/checkpoint-STEP/ every --save-every steps
    (transformers' layout + training state; the last --keep-last kept), the final model in OUTPUT/,
    OUTPUT/metrics.jsonl, TensorBoard events and training_curves.png. SIGTERM/SIGINT save and exit;
    --resume continues exactly. Several processes: `torchrun --nproc-per-node N -m albert_lm.cli
    pretrain ...` (batch size is per process). The bundled demo is `albert demo`."""
    import json

    from albert_lm.training.pretrain import PretrainConfig, pretrain

    given = option_values(args, PretrainConfig)
    if "model_overrides" in given:
        given["model_overrides"] = PretrainConfig.parse_overrides(given["model_overrides"])
    cfg = PretrainConfig.load(args.config, _recipe_section(args, "pretrain"), **given)
    cfg = _shape_from_init(cfg, args, given)
    if args.text:
        from albert_lm.training.pretrain_setup import data_from_text

        cfg = data_from_text(cfg, args.text, _recipe_section(args, "data"))
    if cfg.data is None:
        raise ValueError(
            "no data: pass --data DIR (a folder made by `albert data create`), --text FILE with --init-from "
            "MODEL, or a --config FILE that names data; `albert demo` runs the bundled demo"
        )
    result = pretrain(cfg)
    print(json.dumps({"output": str(result.output), "step": result.step, "interrupted": result.interrupted}))
    if result.interrupted:  # saved, but not finished: scripts must not go on as if it had
        print(f"albert pretrain: stopped at step {result.step} (checkpoint saved); continue with --resume",
              file=sys.stderr)  # fmt: skip
        return 128 + int(result.signum or 15)
    return 0


def _shape_from_init(cfg: Any, args: argparse.Namespace, given: dict) -> Any:
    """`--init-from MODEL` with no shape asked for (no --preset or --model-config on the command line, in
    the --config file or in the recipe) takes MODEL's shape, as a user means: building the default preset
    instead would load none of MODEL's tensors. --model-override still changes it on request."""
    import dataclasses

    from albert_lm.files import read_json_object

    if not cfg.init_from or cfg.resume:
        return cfg
    sources = [given, _recipe_section(args, "pretrain")]
    if args.config:
        sources.append(read_json_object(args.config, "pretraining settings"))
    if any(key in source for source in sources for key in ("preset", "model_config")):
        return cfg
    config = Path(cfg.init_from) / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"--init-from {cfg.init_from}: no config.json there (expected a model folder)"
        )
    return dataclasses.replace(cfg, model_config=str(config))


# --------------------------------------------------------------------------- albert data create
def _data_create_options(d: argparse.ArgumentParser) -> None:
    d.add_argument("--input", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    d.add_argument("--tokenizer", required=True, help="spiece.model file or a folder holding one")
    d.add_argument("--output", required=True, help="new or empty folder (or an unfinished run to resume)")
    from albert_lm.data.examples import MASKINGS, OBJECTIVES, DataConfig

    _add_recipe(d)
    add_options(
        d, DataConfig, skip=("block_bytes", "shard_bytes"), suppress=True,
        choices={"objective": OBJECTIVES, "masking": MASKINGS, "input_format": ("lines", "paragraphs")},
        flags={"input_format": "--format"},
    )  # fmt: skip
    d.add_argument("--shard-mb", type=float, default=4.0, help="input MB per shard (default 4)")
    d.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")


@command("data create", _data_create_options)
def _run_data_create(args: argparse.Namespace) -> int:
    """create sharded pretraining examples"""
    import dataclasses

    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data, format_summary
    from albert_lm.files import check_output_apart

    values = {**_recipe_section(args, "data"), **option_values(args, DataConfig)}
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(DataConfig)})
    if unknown:
        raise ValueError(f"recipe {_recipe_file(args)}: unknown data field(s) {', '.join(unknown)}")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers}: expected at least 1")
    if not 1024 <= args.shard_mb * (1 << 20) < float(1 << 62):  # also refuses nan and inf
        raise ValueError(f"--shard-mb {args.shard_mb}: expected a number of MB from 0.001 (1 KiB) up")
    # The output must not be, hold or lie inside the tokenizer as given (a folder); the library checks
    # the inputs and the tokenizer's model file.
    check_output_apart(args.output, {"--tokenizer": args.tokenizer})
    shard_bytes = int(args.shard_mb * (1 << 20))
    cfg = DataConfig(**values, shard_bytes=shard_bytes)
    # A recipe may set the block size (small corpora want small blocks); a block never exceeds a shard.
    cfg = dataclasses.replace(cfg, block_bytes=min(cfg.block_bytes, shard_bytes))
    manifest = create_pretraining_data(
        args.input, args.tokenizer, args.output, cfg, num_workers=args.workers, progress=not args.no_progress
    )
    print(format_summary(manifest))
    return 0


# --------------------------------------------------------------------------- albert demo
def _demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", default="runs/demo", help="output folder (default runs/demo)")
    p.add_argument("--max-steps", type=int, default=None, help="training steps (default: the demo's)")


@command("demo", _demo_options)
def _run_demo(args: argparse.Namespace) -> int:
    """train a tokenizer and albert-tiny on the bundled public-domain books (2.5 to 7.5 min on 2 CPU cores)

    The end-to-end demo: trains a SentencePiece model and a 4-layer albert-tiny on a few MB of public-domain books shipped in the package (albert_lm/demo_corpus, sources in its README), reports MLM
    accuracy against a unigram guess and SOP accuracy against chance, and fills a mask."""
    from albert_lm.demo import run_demo

    run_demo(args.output, max_steps=args.max_steps)
    return 0


# --------------------------------------------------------------------------- albert bench
def _bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="albert-base", help="model size (default albert-base)")
    p.add_argument("--data", help="the shared data folder, for SST-2 (default: $ALBERT_DATA)")
    p.add_argument("--repeats", type=int, default=10, help="timed repeats per inference row")
    parts = (
        "gemm",
        "inference",
        "int8",
        "onnx",
        "pretraining",
        "sst2",
        "ablations",
    )  # = bench.PARTS (not imported: --help stays fast)
    p.add_argument("--only", nargs="+", choices=parts, default=parts)
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", "all"), default="auto",
        help="rows to run: auto (default) is fp32, plus bf16 where this CPU measures it fast; all = both",
    )  # fmt: skip
    p.add_argument(
        "--same-process",
        action="store_true",
        help="run ours and transformers in this one process instead of a worker process each",
    )
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="cpu (default): the suite above; cuda: pretraining step and inference in bf16 against transformers "
        "on this GPU, with MFU and peak memory (--only, --precision and --same-process do not apply)",
    )  # fmt: skip
    p.add_argument(
        "--compile", choices=("both", "no", "yes"), default="both",
        help="--device cuda: rows without torch.compile, with it, or both (default)",
    )  # fmt: skip
    p.add_argument("--json", help="also write the results to this JSON file")


@command("bench", _bench_options)
def _run_bench(args: argparse.Namespace) -> int:
    """time albert-lm against transformers on this machine and print the table

    Speed of albert-lm against transformers with the same weights, timings interleaved: this machine's
    matrix-multiply limits, inference (1x128, 8x128, 4x512), a pretraining step (8x128), both in fp32
    and bf16, SST-2 dev end to end, peak memory, and the gain of each of our speed choices. Each library
    runs in its own worker process, the two alternated repeat by repeat. Needs transformers (pip install
    transformers). About 17 minutes for albert-base on 2 cores."""
    import os
    from pathlib import Path

    from albert_lm.bench.runner import BenchWorkerError, check_settings
    from albert_lm.files import check_output_apart

    data = args.data or os.environ.get("ALBERT_DATA")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    check_settings(args.repeats, tuple(args.only), args.precision, Path(data) if data else None)
    if args.json:  # checked now, not after the minutes the bench takes
        check_output_apart(args.json, {"--data": data}, output_option="--json")
        if Path(args.json).is_dir():
            raise IsADirectoryError(f"--json {args.json}: is a folder; give a file name")
    try:
        return _bench(args, data, log)
    except BenchWorkerError as e:  # the worker's whole output is logged with -v; here its last line
        raise ValueError(str(e)) from None
    except OSError as e:  # a full disk, a device: say which file (the table is printed above)
        if e.filename is None and args.json:
            raise OSError(e.errno, f"--json {args.json}: {e.strerror or e}") from None
        raise


def _bench(args: argparse.Namespace, data: str | None, log: Callable[[str], None]) -> int:
    from pathlib import Path

    from albert_lm.bench.runner import format_table, run_suite
    from albert_lm.files import write_json

    if args.device == "cuda":
        from albert_lm.bench.cuda import format_cuda_table, run_cuda_suite

        modes = {"both": (False, True), "no": (False,), "yes": (True,)}[args.compile]

        def save(r: dict) -> None:
            if args.json:
                write_json(Path(args.json), r, indent=1)

        print(format_cuda_table(run_cuda_suite(args.preset, args.repeats, modes, log=log, on_row=save)))
        return 0
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
        write_json(Path(args.json), result, indent=1)
    return 0


# --------------------------------------------------------------------------- entry point
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="albert",
        description="albert-lm: ALBERT end to end in PyTorch (tokenizer, data, pretraining, fine-tuning).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for c in _COMMANDS:
        where, name = sub, c.words[0]
        if len(c.words) == 2:  # `albert data create`: the group's parser, then the action under it
            if name not in groups:
                help_, description = _GROUPS[name]
                group = sub.add_parser(name, help=help_, description=description)
                groups[name] = group.add_subparsers(dest=f"{name}_command", metavar="ACTION")
            where, name = groups[name], c.words[1]
        p = where.add_parser(name, help=c.help, description=c.description)
        c.options(p)
        p.set_defaults(func=c.run)
    return parser


_TRAINING_COMMANDS = ("pretrain", "finetune", "glue", "evaluate", "predict", "demo", "bench", "reproduce")


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
        from albert_lm.kernels.hardware import tune_cpu_allocator

        tune_cpu_allocator()  # fewer page faults per step; process-wide, so the command decides
    name = " ".join(w for w in (args.command, getattr(args, f"{args.command}_command", None)) if w)
    previous = _interruptible()
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError) as e:
        # Bad input: one clear line, non-zero exit, no traceback.
        print(f"albert {name}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the machine refused (a read-only folder, a full disk): the same, one line
        where = f": {e.filename}" if e.filename else ""
        print(f"albert {name}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except _Terminated:
        print(f"\nalbert {name}: stopped by SIGTERM", file=sys.stderr)
        return 143
    except KeyboardInterrupt:  # Ctrl-C outside a loop that handles it: one line, the shell's code
        print(f"\nalbert {name}: interrupted", file=sys.stderr)
        return 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Terminated(KeyboardInterrupt):
    """SIGTERM outside a loop that handles it (`pretrain` saves first): unwinds like Ctrl-C, so worker
    pools and temporary files are cleaned up, and ends the command with the shell's code 143."""


def _interruptible() -> dict[int, Any]:
    """SIGINT and SIGTERM stop the command with a message, also where the shell started it with SIGINT
    ignored (`albert finetune ... &` in a script). Returns the handlers replaced (none off the main
    thread, where none can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def terminate(signum: int, frame: Any) -> None:
        raise _Terminated(f"signal {signum}")

    return {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, terminate),
    }


if __name__ == "__main__":
    sys.exit(main())
