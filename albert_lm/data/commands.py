"""`albert tokenizer train` and `albert data create`: the data stage's commands (registered by
`albert_lm.cli`). Like every command, each imports its module only when it runs: building the parser
stays free of torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from albert_lm.settings import (
    add_options,
    add_recipe_option,
    add_word,
    check_range,
    option_values,
    recipe_file,
    recipe_section,
)

INPUT_HELP = (
    "text files (plain, or compressed .gz .bz2 .xz .zst), JSON Lines (.jsonl) or Parquet files, folders "
    "(every file under them) or quoted glob patterns ('corpus/**/*.txt'); .zst needs the extra "
    "albert-lm[zstd], Parquet albert-lm[parquet]"
)
TOKENIZER_KEYS = (
    "vocab_size",
    "language",
    "cased",
    "keep_accents",
    "character_coverage",
    "input_sentence_size",
)


def tokenizer_train_options(t: argparse.ArgumentParser) -> None:

    t.add_argument("--input", nargs="+", required=True, metavar="PATH", help=INPUT_HELP)
    t.add_argument("--output", required=True, metavar="DIR", help="new or empty folder for spiece.model")
    t.add_argument(
        "--vocab-size", type=int, metavar="N", help="pieces in the model (default: the recipe's, else 30000)"
    )
    add_recipe_option(t, "tokenizer")
    _rule_options(t)
    t.add_argument(
        "--input-sentence-size",
        type=int,
        metavar="N",
        help="lines SentencePiece trains on, a uniform sample "
        "of the corpus (default 10000000; memory grows with it, not with the corpus)",
    )
    t.add_argument(
        "--strip-gutenberg",
        action="store_true",
        help="keep only the text between Project Gutenberg's markers of the books that have them (other "
        "files are read whole)",
    )
    add_text_column(t)
    t.add_argument(
        "--seed", type=int, default=12345, metavar="N", help="SentencePiece sampling seed (default 12345)"
    )
    t.add_argument("--overwrite", action="store_true", help="replace a tokenizer already in --output")
    t.add_argument(
        "--skip-invalid-utf8", action="store_true", help="skip lines that are not UTF-8 instead of failing"
    )
    t.add_argument(
        "--max-line-bytes",
        type=int,
        default=1 << 20,
        metavar="N",
        help="longest accepted input line (default 1048576 = 1 MiB)",
    )


def _rule_options(t: argparse.ArgumentParser) -> None:
    """The normalization rule's options (a language's defaults, or each by hand) and the coverage."""
    from albert_lm.data.languages import LANGUAGES

    t.add_argument(
        "--language",
        choices=tuple(LANGUAGES),
        help="the language's case, accent and character-coverage "
        "defaults (docs/data.md#languages; default: en, the released ALBERT models' rule)",
    )
    t.add_argument(
        "--cased",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep upper case (default: lower-case the text, except --language de)",
    )
    t.add_argument(
        "--keep-accents",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep accents and other combining marks (default: removed for English, kept for any --language "
        "other than en)",
    )
    t.add_argument(
        "--character-coverage",
        type=float,
        metavar="X",
        help="share of the text's characters given pieces "
        "of their own, the rest <unk> (default: 0.99995 for English, 1.0 for small alphabets, 0.9995 for "
        "zh and ja)",
    )


def add_text_column(p: argparse.ArgumentParser, suppress: bool = False) -> None:
    """`--text-column NAME` as `albert data create` has it (from DataConfig), and its hidden spelling
    `--text-field`. `suppress`: absent from the namespace unless given (data create's settings)."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.settings import field_docs

    default = argparse.SUPPRESS if suppress else "text"
    if not suppress:
        p.add_argument(
            "--text-column",
            default=default,
            metavar="NAME",
            help=f"{field_docs(DataConfig)['text_column']} (default text)",
        )
    p.add_argument("--text-field", dest="text_column", default=default, help=argparse.SUPPRESS)


def run_tokenizer_train(args: argparse.Namespace) -> int:
    """train spiece.model from text files

    Trains a unigram SentencePiece model with ALBERT's special pieces at ids 0-4 (<pad> <unk> [CLS]
    [SEP] [MASK]) on text normalized as google-research's preprocess_text does (whitespace collapsed; by
    default accents removed and lower-cased, as English wants; --language, --keep-accents and --cased
    for other languages). Writes OUTPUT/spiece.model and tokenizer_config.json."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    section = _tokenizer_recipe(args)
    tok = train_tokenizer(
        args.input,
        args.output,
        vocab_size=args.vocab_size if args.vocab_size is not None else section.get("vocab_size", 30000),
        strip_gutenberg=args.strip_gutenberg,
        seed=args.seed,
        overwrite=args.overwrite,
        skip_invalid_utf8=args.skip_invalid_utf8,
        max_line_bytes=args.max_line_bytes,
        text_column=args.text_column,
        **tokenizer_rule(args, section),
    )
    rule = f"{'cased' if not tok.do_lower_case else 'lower-cased'}, accents {'kept' if tok.keep_accents else 'removed'}"
    print(f"wrote {tok.model_file} ({tok.vocab_size} pieces; {rule})")
    return 0


def tokenizer_rule(args: argparse.Namespace, section: dict) -> dict:
    """do_lower_case, keep_accents, character_coverage, input_sentence_size and add_dummy_prefix for
    `train_tokenizer`: an option given wins, then the recipe's key, then the --language (or the
    recipe's "language") defaults, then English's."""
    from albert_lm.data.languages import language

    lang = language(args.language or section.get("language") or "en")

    def pick(option: str, key: str, fallback: object) -> object:
        given = getattr(args, option, None)
        return given if given is not None else section.get(key, fallback)

    return {
        "do_lower_case": not pick("cased", "cased", not lang.do_lower_case),
        "keep_accents": pick("keep_accents", "keep_accents", lang.keep_accents),
        "character_coverage": pick("character_coverage", "character_coverage", lang.character_coverage),
        "input_sentence_size": pick("input_sentence_size", "input_sentence_size", 10_000_000),
        "add_dummy_prefix": lang.add_dummy_prefix,
        "language": args.language or section.get("language"),  # recorded for model cards; None: not said
    }


def _tokenizer_recipe(args: argparse.Namespace) -> dict:
    """The recipe's "tokenizer" section, checked: known keys only, each of its type."""
    from albert_lm.data.languages import LANGUAGES
    from albert_lm.data.tokenizer_training import MIN_VOCAB_SIZE
    from albert_lm.files import InputError

    section = recipe_section(args, "tokenizer")
    where = recipe_file(args.recipe) if args.recipe else ""
    unknown = sorted(set(section) - set(TOKENIZER_KEYS))
    if unknown:
        raise InputError(
            where, f'"tokenizer": unknown key(s) {", ".join(unknown)}; expected {", ".join(TOKENIZER_KEYS)}'
        )
    size = section.get("vocab_size", MIN_VOCAB_SIZE)
    if isinstance(size, bool) or not isinstance(size, int) or size < MIN_VOCAB_SIZE:
        raise InputError(
            where,
            f'"tokenizer" "vocab_size": expected a whole number of at least {MIN_VOCAB_SIZE}, got {size!r}',
        )
    if section.get("language", "en") not in LANGUAGES:
        raise InputError(
            where,
            f'"tokenizer" "language": expected one of {", ".join(LANGUAGES)}, got {section["language"]!r}',
        )
    for key in ("cased", "keep_accents"):
        if not isinstance(section.get(key, False), bool):
            raise InputError(where, f'"tokenizer" "{key}": expected true or false, got {section[key]!r}')
    return section


def data_create_options(d: argparse.ArgumentParser) -> None:
    files = d.add_argument_group("text, tokenizer and output")
    files.add_argument("--input", nargs="+", required=True, metavar="PATH", help=INPUT_HELP)
    files.add_argument(
        "--tokenizer", required=True, metavar="PATH", help="spiece.model file or a folder holding one"
    )
    files.add_argument(
        "--output", required=True, metavar="DIR", help="new or empty folder (or an unfinished run to resume)"
    )
    add_word(
        files,
        "overwrite",
        help="remove the data already in --output (finished or not, made with any settings) and make it "
        "anew; other files there stay",
    )
    from albert_lm.data.examples import INPUT_FORMATS, MASKINGS, OBJECTIVES, DataConfig

    add_recipe_option(d, "data")
    add_options(
        d,
        DataConfig,
        skip=("block_bytes", "shard_bytes"),
        suppress=True,
        choices={"objective": OBJECTIVES, "masking": MASKINGS, "input_format": INPUT_FORMATS},
        flags={"input_format": "--format"},
        groups={
            "examples": (
                "max_seq_length",
                "objective",
                "masking",
                "dupe_factor",
                "short_seq_prob",
                "masked_lm_prob",
                "max_predictions_per_seq",
                "max_ngram",
                "seed",
                "eval_fraction",
            ),
            "reading the text": (
                "input_format",
                "strip_gutenberg",
                "skip_invalid_utf8",
                "max_line_bytes",
                "text_column",
            ),
        },
    )
    add_text_column(d, suppress=True)
    work = d.add_argument_group("work")
    work.add_argument(
        "--shard-mb", type=float, default=4.0, metavar="MB", help="input MB per shard (default 4)"
    )
    work.add_argument("--workers", type=int, default=None, metavar="N", help="processes (default: CPU count)")
    work.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_data_create(args: argparse.Namespace) -> int:
    """create sharded pretraining examples

    Streams text files into sharded, memory-mapped pretraining examples: SOP (or NSP) pairs of
    segments with n-gram masking (google-research's create_pretraining_data.py, its quirks fixed; see
    docs/data.md), with a manifest of their checksums. An interrupted run resumes."""
    import dataclasses

    from albert_lm.data.examples import DataConfig
    from albert_lm.data.manifest import format_summary
    from albert_lm.data.shards import create_pretraining_data
    from albert_lm.files import check_output_apart
    from albert_lm.progress import say_kept

    values = {**recipe_section(args, "data"), **option_values(args, DataConfig)}
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(DataConfig)})
    if unknown:
        raise ValueError(f"recipe {recipe_file(args.recipe)}: unknown data field(s) {', '.join(unknown)}")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers {args.workers}: expected at least 1")
    check_range(args.workers, "workers", "--workers")
    if not 1024 <= args.shard_mb * (1 << 20) < float(1 << 62):  # also refuses nan and inf
        raise ValueError(f"--shard-mb {args.shard_mb}: expected a number of MB from 0.001 (1 KiB) up")
    # The output must not be, hold or lie inside the tokenizer as given (a folder); the library checks
    # the inputs and the tokenizer's model file.
    check_output_apart(args.output, {"--tokenizer": args.tokenizer})
    shard_bytes = int(args.shard_mb * (1 << 20))
    cfg = DataConfig(**values, shard_bytes=shard_bytes)
    # A recipe may set the block size (small corpora want small blocks); a block never exceeds a shard.
    cfg = dataclasses.replace(cfg, block_bytes=min(cfg.block_bytes, shard_bytes))
    try:
        manifest = create_pretraining_data(
            args.input,
            args.tokenizer,
            args.output,
            cfg,
            num_workers=args.workers,
            progress=not args.no_progress,
            overwrite=args.overwrite,
        )
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the command line says which, and this after it
        kept = Path(args.output).is_dir()  # a run stopped before its first finished shard leaves nothing
        what = f"the shards finished in {args.output} are kept" if kept else "nothing was kept"
        say_kept(stop, f"{what}: give the same command again to {'continue' if kept else 'start it again'}")
        raise
    print(format_summary(manifest))
    return 0
