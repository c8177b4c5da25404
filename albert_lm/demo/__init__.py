"""`albert demo`: the whole pipeline in minutes on two CPU cores (the cpu-10min recipe), on text shipped in the package.

1. trains a SentencePiece model (ALBERT's special pieces, `albert tokenizer train`) on the bundled books
   (`albert_lm/demo_corpus/`, five public-domain Project Gutenberg books, headers stripped; sources in
   its README.md);
2. makes SOP pretraining data with whole-word n-gram masking (`albert data create`);
3. pretrains the recipe's model with LAMB (`albert pretrain`), evaluating on the held-out blocks: 1.5M
   parameters, 4 layers of H 128 with E 128 and no cross-layer sharing (the shape of `albert-tiny`, widened);
4. reports held-out MLM accuracy beside a unigram guess (always the most frequent masked piece of the
   training data), SOP accuracy beside chance, and fills a mask in a sentence of its own.

Everything lands in OUTPUT (default runs/demo; runs/demo-LANG with --text): tokenizer/, data/, model/ (a
transformers-layout folder with checkpoints, metrics.jsonl, TensorBoard events, training_curves.png) and
demo_results.json. Running it again resumes what is unfinished (a folder of another demo is refused up
front: `albert_lm.demo.folder`). The scale is a laptop's, not the paper's: the point is to see every stage
work and the model learn, in minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from albert_lm.demo.folder import RECORD, TIMES, demo_folder, text_sources  # noqa: F401 (RECORD: the demo's API)
from albert_lm.demo.report import format_report, next_steps
from albert_lm.files import read_json_object, write_json

logger = logging.getLogger(__name__)

CORPUS_DIR = Path(__file__).resolve().parents[1] / "demo_corpus"

# The fill-mask probes, each fixed before the runs it judges (demo_corpus/probes.json says when and how): a
# sentence with one [MASK] and the words that count as right when one of them is in the model's top 5.
_PROBES = json.loads((CORPUS_DIR / "probes.json").read_text(encoding="utf-8"))
Probes = list[tuple[str, tuple[str, ...]]]
PROBES: Probes = [(s, tuple(words)) for s, words in _PROBES["en"]]
MORE_PROBES: Probes = [(s, tuple(words)) for s, words in _PROBES["more_en"]]
LANGUAGE_PROBES: dict[str, Probes] = {
    lang: [(s, tuple(words)) for s, words in probes]
    for lang, probes in _PROBES.items()
    if lang not in ("about", "en", "more_en")
}
DEMO_LANGUAGES = ("en", *LANGUAGE_PROBES)


def fill_mask_example(language: str) -> str:
    """A sentence with a [MASK] in the demo's language, for the fill-mask command it suggests next."""
    return LANGUAGE_PROBES[language][-1][0] if language in LANGUAGE_PROBES else MORE_PROBES[0][0]


RECIPE = "cpu-10min"


# The recipe's 5000 pieces cannot hold a character set of thousands: the five Chinese books of the shared
# data need 5043 pieces for their characters alone (coverage 0.9995); 8000 leave ~3000 for words.
LARGE_CHARACTER_SETS = {"zh": 8000}


def demo_recipe(**overrides: Any) -> dict[str, dict[str, Any]]:
    """The demo's settings: the cpu-10min recipe's sections, with `overrides` (field names of any
    section: vocab_size, max_seq_length, batch_size, max_steps, ...) put where they belong."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.settings import recipe
    from albert_lm.training.pretrain_config import PretrainConfig

    r = recipe(RECIPE)
    sections = {
        "tokenizer": {"vocab_size", "seed"},
        "data": {f.name for f in fields(DataConfig)},
        "pretrain": {f.name for f in fields(PretrainConfig)},
    }
    for key, value in overrides.items():
        owners = [name for name, names in sections.items() if key in names]
        if not owners:
            raise ValueError(f"demo: unknown setting {key!r}")
        for name in owners:
            r[name][key] = value
    PretrainConfig(**r["pretrain"])  # checked now (types, ranges, bounds), not once the data is made
    DataConfig(**r["data"]).validate()
    return {name: r[name] for name in sections}


def corpus_files() -> list[Path]:
    files = sorted(CORPUS_DIR.glob("*.txt"))
    if not files:
        raise FileNotFoundError(
            f"no demo corpus in {CORPUS_DIR} (the package was installed without its data)"
        )
    return files


def fill_mask(model_dir: str | os.PathLike, sentence: str, top_k: int = 5) -> list[str]:
    """The model's top-k pieces for the one [MASK] in `sentence`."""
    return _FillMask(model_dir)(sentence, top_k)


class _FillMask:
    """A model folder's tokenizer and MLM head, loaded once for many sentences."""

    def __init__(self, model_dir: str | os.PathLike) -> None:
        from albert_lm.data.tokenizer import AlbertTokenizer
        from albert_lm.model.heads import AlbertForPreTraining

        self.tok = AlbertTokenizer.from_pretrained(model_dir)
        self.model = AlbertForPreTraining.from_pretrained(model_dir).eval()

    def __call__(self, sentence: str, top_k: int = 5) -> list[str]:
        import torch

        tok = self.tok
        left, right = sentence.split("[MASK]")
        # The tokenizer does not parse "[MASK]" inside text (as google-research): put the id in by hand.
        a, b = tok.encode(left, add_special_tokens=False), tok.encode(right, add_special_tokens=False)
        ids = [tok.cls_token_id, *a, tok.mask_token_id, *b, tok.sep_token_id]
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids])).prediction_logits[0, len(a) + 1]  # (V,)
        return [str(t) for t in tok.convert_ids_to_tokens(logits.topk(top_k).indices.tolist())]


def run_demo(
    output: str | os.PathLike | None = None,
    max_steps: int | None = None,
    files: list[Path] | None = None,
    language: str = "en",
    overwrite: bool = False,
    **overrides: Any,
) -> dict:
    """Tokenizer -> data -> pretraining -> report, in OUTPUT; returns (and writes) the results.

    `files` replaces the bundled books (needed for any `language` but English: the package ships English
    books only); they are copied into OUTPUT/text first, Project Gutenberg's header and licence cut where
    a file has them. `language` picks the tokenizer's rule (`albert_lm.data.languages`), `--format auto`
    for the text, and the fill-mask probes. `overrides` change the recipe's settings (`demo_recipe`).
    OUTPUT: `demo_folder`."""
    from albert_lm.data.languages import language as language_defaults

    if language not in DEMO_LANGUAGES:
        raise ValueError(
            f"--language {language!r}: the demo has probes for {', '.join(DEMO_LANGUAGES)}; for another "
            "language, follow docs/data.md (albert tokenizer train, data create, pretrain)"
        )
    if language != "en" and not files:
        raise ValueError(
            f"--language {language}: the package bundles English books only; give --text with text in that "
            "language (files, folders or globs; Project Gutenberg, gutenberg.org, has public-domain books in "
            "many languages)"
        )
    if max_steps is not None:
        overrides["max_steps"] = max_steps
    if files:
        overrides.setdefault("input_format", "auto")  # the user's text: told apart per file
    if language in LARGE_CHARACTER_SETS:
        overrides.setdefault("vocab_size", LARGE_CHARACTER_SETS[language])
    r = demo_recipe(**overrides)
    r["tokenizer"].update(language_defaults(language).settings(), language=language)
    texts = text_sources(files) if files else {f.name: f for f in corpus_files()}  # each by its copy's name
    out = demo_folder(output, files, texts, r, overwrite)
    paths = prepare_texts(texts, out / "text") if files else list(texts.values())
    mb = sum(f.stat().st_size for f in paths) / 1e6
    logger.info("demo (%s) in %s: %d files, %.1f MB", language, out, len(paths), mb)
    times = _spent(out)
    with _timed(out, times, "tokenizer_s"):
        make_tokenizer(paths, out / "tokenizer", r["tokenizer"])
    with _timed(out, times, "data_s"):
        make_data(paths, out / "tokenizer", out / "data", r["data"])
    with _timed(out, times, "pretrain_s"):
        metrics = pretrain_model(out / "data", out / "model", r["pretrain"])
    report = build_report(out, r, metrics, times, language)
    write_json(out / "demo_results.json", report)
    print(format_report(report) + next_steps(out, fill_mask_example(language)))
    return report


def prepare_texts(texts: dict[str, Path], dest: Path) -> list[Path]:
    """Copies of `texts` (`text_sources`: each file by its copy's name) in `dest` (kept if already there),
    each cut to the text between Project Gutenberg's START and END markers where it has them (a folder
    of books mixes both kinds)."""
    from albert_lm.data.gutenberg import text_range
    from albert_lm.data.sources import reading
    from albert_lm.files import atomic_write

    dest.mkdir(parents=True, exist_ok=True)
    copies = []
    for name, path in texts.items():
        copy = dest / name
        if not copy.is_file():
            start, end = text_range(path, strip_gutenberg=True)
            with reading(path) as f:
                atomic_write(copy, f.read()[start:end])
        copies.append(copy)
    return copies


def _spent(out: Path) -> dict[str, float]:
    """The seconds each stage has taken in `out` so far (a stopped demo's, then continued)."""
    file = out / TIMES
    return {k: float(v) for k, v in read_json_object(file, "demo times").items()} if file.is_file() else {}


@contextlib.contextmanager
def _timed(out: Path, times: dict[str, float], key: str) -> Iterator[None]:
    """Add the seconds the block takes to `times[key]`, kept in OUTPUT/demo_times.json (a stopped stage's
    too): a demo run again reports the time its stages took, not the seconds it took to find them done."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times[key] = times.get(key, 0.0) + time.perf_counter() - start
        write_json(out / TIMES, times)


def make_tokenizer(files: list[Path], tok_dir: Path, settings: dict[str, Any]) -> None:
    """Stage 1: a SentencePiece model in `tok_dir` (kept if already there)."""
    from albert_lm.data.tokenizer_training import train_tokenizer

    if not (tok_dir / "spiece.model").is_file():
        logger.info("1/3 tokenizer: a %d-piece SentencePiece model (seconds)", settings["vocab_size"])
        keys = (
            "vocab_size",
            "seed",
            "do_lower_case",
            "keep_accents",
            "character_coverage",
            "add_dummy_prefix",
            "language",
        )
        train_tokenizer([str(f) for f in files], tok_dir, **{k: settings[k] for k in keys if k in settings})


def make_data(files: list[Path], tok_dir: Path, data_dir: Path, settings: dict[str, Any]) -> None:
    """Stage 2: SOP pretraining data, paragraphs as documents, part of the blocks held out (resumes)."""
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data

    logger.info("2/3 pretraining data: SOP pairs with n-gram masking (seconds)")
    create_pretraining_data(
        [str(f) for f in files], tok_dir, data_dir, DataConfig(**settings), progress=False
    )


def pretrain_model(data_dir: Path, model_dir: Path, settings: dict[str, Any]) -> dict[str, float]:
    """Stage 3: the recipe's model pretrained (resuming a checkpoint); returns its final metrics."""
    from albert_lm.training.checkpoint import latest_checkpoint
    from albert_lm.training.pretrain import PretrainConfig, pretrain

    resume = latest_checkpoint(model_dir) is not None  # a rerun continues (or re-reports) the run
    logger.info("3/3 pretraining (minutes; the clock says how many a few steps in)")
    cfg = PretrainConfig(**{**settings, "data": str(data_dir), "output": str(model_dir), "resume": resume})
    result = pretrain(cfg, again=AGAIN, slow_advice=SLOW_DEMO_ADVICE)
    if result.interrupted:  # nothing to report on a model half made: the next run goes on from its checkpoint
        raise DemoStopped(result.signum or 15, result.step)
    return result.metrics


def probe(
    model_dir: str | os.PathLike, probes: list[tuple[str, tuple[str, ...]]] = PROBES, language: str = "en"
) -> list[dict[str, Any]]:
    """Each probe: the model's top 5 and whether an expected word is among them: a piece that starts a
    word (SentencePiece's "\u2581") and is the whole word; in a language written without spaces any
    piece, since there nothing marks a word's start. Both sides lower-cased where the language's
    tokenizer lower-cases."""
    from albert_lm.data.languages import language as language_defaults

    lang = language_defaults(language)
    fold = str.lower if lang.do_lower_case else str
    fill = _FillMask(model_dir)
    results = []
    for sentence, expected in probes:
        top5 = fill(sentence)
        words = [
            t.removeprefix("\u2581") for t in top5 if t.startswith("\u2581") or not lang.add_dummy_prefix
        ]
        hit = bool({fold(w) for w in words} & {fold(e) for e in expected})
        results.append({"sentence": sentence, "expected": list(expected), "top5": top5, "hit": hit})
    return results


def build_report(
    out: Path,
    r: dict[str, dict[str, Any]],
    m: dict[str, float],
    times: dict[str, float],
    language: str = "en",
) -> dict[str, Any]:
    """Stage 4: held-out metrics `m` beside the baselines, the probes, settings and timings."""
    import torch

    from albert_lm.data.dataset import PretrainingDataset
    from albert_lm.training.pretrain import unigram_baseline
    from albert_lm.training.pretrain_config import PretrainConfig

    settings = PretrainConfig(**r["pretrain"])
    baseline = unigram_baseline(  # on the sequences the held-out evaluation scored, as pretraining reports it
        PretrainingDataset(out / "data", "train"),
        PretrainingDataset(out / "data", "eval"),
        eval_limit=settings.eval_batches * settings.batch_size,
    )
    seconds = {k: round(v, 1) for k, v in times.items()}
    seconds["total"] = round(sum(times.values()), 1)
    first, second = (PROBES, MORE_PROBES) if language == "en" else (LANGUAGE_PROBES[language], [])
    both = probe(out / "model", first + second, language)  # one model load for all
    probes, more = both[: len(first)], both[len(first) :]
    return {
        "recipe": RECIPE,
        "recipe_steps": demo_recipe()["pretrain"]["max_steps"],
        "language": language,
        "settings": r,
        "eval_mlm_acc": m.get("eval_mlm_acc"),
        "eval_mlm_loss": m.get("eval_mlm_loss"),
        "eval_sop_acc": m.get("eval_sop_acc"),
        **baseline,
        "probes": probes,
        "probe_hits": sum(p["hit"] for p in probes),
        "more_probes": more,
        "more_probe_hits": sum(p["hit"] for p in more),
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        # What --precision auto chose here (pretrain_config.json records it): fp32 trains the same model on
        # every machine; bf16, chosen where a CPU computes it fast, rounds differently.
        "precision": read_json_object(out / "model" / "pretrain_config.json", "run settings").get(
            "precision"
        ),
    }


# --------------------------------------------------------------------------- the command (registered by albert_lm.cli)
def demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--output",
        default=None,
        help="output folder (default runs/demo; with --text runs/demo-LANG, "
        "e.g. runs/demo-de); the same command again continues there",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="empty OUTPUT first where it holds a demo made otherwise"
    )
    p.add_argument(
        "--max-steps", type=int, default=None, metavar="N", help="training steps (default: the demo's)"
    )
    from albert_lm.data.languages import LANGUAGES

    p.add_argument(
        "--language",
        choices=tuple(LANGUAGES),  # every language's name, as tokenizer train takes it; the demo's are fewer
        default="en",
        help="the text's language: its tokenizer rule (docs/data.md#languages) and fill-mask probes "
        f"(default en; the demo has probes for {', '.join(DEMO_LANGUAGES)}; any but en needs --text; for "
        "another language, follow docs/data.md: albert tokenizer train, data create, pretrain)",
    )
    p.add_argument(
        "--text",
        nargs="+",
        metavar="FILE",
        default=None,
        help="text to use instead of the bundled English "
        "books: files, folders or globs (Project Gutenberg headers cut where found)",
    )


AGAIN = "run `albert demo` again (the same --output) to continue from this step"
# What a demo far slower than its 7 to 13 minutes is told (the clock says it a few steps in).
SLOW_DEMO_ADVICE = (
    "The demo's timing is an idle machine's: stop it (Ctrl-C; `albert demo` again continues from its "
    "last checkpoint) and run it when the machine is free, or see the whole road quickly with "
    "`albert demo --max-steps 200` (the same model, less trained)"
)


class DemoStopped(Exception):
    """A signal stopped the demo's pretraining (a checkpoint saved): there is no model to report on yet."""

    def __init__(self, signum: int, step: int) -> None:
        super().__init__(f"stopped at step {step} of pretraining; {AGAIN}")
        self.signum = signum


def run_demo_command(args: argparse.Namespace) -> int:
    """train a tokenizer and a 1.5M-parameter ALBERT on the bundled books (7 to 13 min on 2 CPU cores)

    The end-to-end demo: trains a SentencePiece model and a 1.5M-parameter ALBERT (4 layers, H 128, E 128,
    no cross-layer sharing; the cpu-10min recipe) on a few MB of
    public-domain books shipped in the package (albert_lm/demo_corpus, sources in its README), reports
    MLM accuracy against a unigram guess and SOP accuracy against chance, and fills a mask."""
    files = [Path(t) for t in args.text] if args.text else None
    try:
        overwrite = getattr(args, "overwrite", False)  # a Namespace built by hand may lack it
        run_demo(args.output, args.max_steps, files, args.language, overwrite=overwrite)
    except DemoStopped as e:
        print(f"albert demo: {e}", file=sys.stderr)
        return 128 + e.signum  # as the shell reports a process its signal ended
    except KeyboardInterrupt:  # before pretraining: the stages done are kept too (the CLI then says why)
        print(f"\nalbert demo: {AGAIN.replace('from this step', 'where it stopped')}", file=sys.stderr)
        raise
    return 0
