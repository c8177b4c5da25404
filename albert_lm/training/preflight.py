"""Checks a pretraining run makes before it spends time: everything it was given must fit together.

- the output folder: another run there is refused (the ways forward named), unless `--resume` or
  `--overwrite`; an output that is, holds, or lies inside one of the run's inputs is refused always;
- a resumed run keeps its settings: a change that would make `pretrain_config.json` differ from what ran
  is refused (where it writes, how often it logs, saves and evaluates, and where it runs may change);
- the tokenizer: the data's vocabulary must be the one the model's embeddings were trained with (the
  checkpoint's or the `--init-from` folder's spiece.model, by `AlbertTokenizer.fingerprint`), and fit
  the model's embedding;
- the data: its sequences must fit the model's positions; its files must match the manifest's checksums.

Each failure is a ValueError (or FileExistsError) whose message names the file or option and what was
expected; the CLI prints it as one line.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from albert_lm.files import read_json_object
from albert_lm.model.config import AlbertConfig
from albert_lm.training import run_folder
from albert_lm.training.pretrain_config import PretrainConfig
from albert_lm.training.run_folder import MODEL_FILES, RunKind
from albert_lm.values import settings_where

logger = logging.getLogger(__name__)

# What a resumed run may change: where it reads and writes, how often it logs, saves and evaluates, and
# where it runs, as each field's metadata says (`albert_lm.values.setting`). Anything else changed would
# make the run's record differ from what ran.
RESUME_MAY_CHANGE = settings_where(PretrainConfig, "resume")

# Files that mark a folder as a pretraining run's (besides checkpoint-N folders).
RUN_FILES = ("pretrain_config.json", "model.safetensors", "metrics.jsonl")
SETTINGS_FILE = "pretrain_config.json"  # every setting of the run, in the output and in each checkpoint
TEXT_DATA = "data"  # OUTPUT/data: the examples `pretrain --text` makes
PRETRAINING = RunKind(
    "pretraining",
    RUN_FILES,
    SETTINGS_FILE,
    RESUME_MAY_CHANGE,
    state_keys=("step", "epoch", "offset", "optimizer", "scheduler", "ranks"),  # what resuming reads
    new_run_hint="start a new run from these weights with --init-from {latest}",
    writes=MODEL_FILES,
)


def check_output(cfg: PretrainConfig, latest: Path | None, locked: bool = False) -> None:
    """Refuse an output folder that another command is writing (unless `locked`: this run holds it), that
    holds another run (unless resuming or overwriting), or that is, holds or lies inside one of the run's
    inputs."""
    out = Path(cfg.output)
    inputs = {"--data": cfg.data, "--init-from": cfg.init_from, "--model-config": cfg.model_config,
              "--eval-text": cfg.eval_text}  # fmt: skip
    # `pretrain --text` makes its examples in OUTPUT/data (text_data.data_from_text; it has already
    # done any --overwrite): the run's files go beside them. Under --overwrite they would be deleted.
    generated = out / TEXT_DATA
    if cfg.data and Path(cfg.data).resolve() == generated.resolve() and not cfg.overwrite:
        inputs.pop("--data")
    run_folder.check_output(
        PRETRAINING, out, inputs, resume=cfg.resume, overwrite=cfg.overwrite, latest=latest, locked=locked
    )


def is_text_data(data: str | Path, output: str | Path) -> bool:
    """Whether `data` is OUTPUT/data, the examples `pretrain --text` made (a path written either way)."""
    return os.path.abspath(data) == os.path.abspath(Path(output) / TEXT_DATA)


def remove_run(out: Path) -> None:
    """--overwrite: the run's files and checkpoints, and OUTPUT/data where the run's own --text made it
    (its pretrain_config.json says so); a data folder of the user's there stays."""
    made = out / SETTINGS_FILE
    data = read_json_object(made, "run configuration").get("data") if made.is_file() else None
    run_folder.remove_run(PRETRAINING, out)
    if isinstance(data, str) and is_text_data(data, out) and (out / TEXT_DATA).is_dir():
        shutil.rmtree(out / TEXT_DATA)


def remove_finished_model(cfg: PretrainConfig, latest: Path) -> None:
    """A finished run resumed to train on (another --max-steps or --time-budget): the model files it finished
    with in the output folder (weights, config, tokenizer, settings, card) removed, said, before it trains,
    so that a run stopped again leaves no older model beside its newer checkpoints, nor a settings file a
    resume would read its old length from. Its checkpoint of that step keeps that model while it is kept."""
    from albert_lm.model.card import CARD_FILE, is_model_card
    from albert_lm.training.checkpoint import WEIGHTS
    from albert_lm.training.clock import budget_seconds

    out = Path(cfg.output)
    if not any((out / name).is_file() for name in (*WEIGHTS, SETTINGS_FILE)):
        return
    made = (
        out / SETTINGS_FILE if (out / SETTINGS_FILE).is_file() else latest / SETTINGS_FILE
    )  # of those files
    saved = read_json_object(made, "run configuration")
    if (
        saved.get("max_steps") == cfg.max_steps
        and budget_seconds(saved.get("time_budget")) == cfg.time_budget_s
    ):
        return  # the same run: nothing to train, or its final files written again
    names = [*WEIGHTS, *MODEL_FILES, SETTINGS_FILE, *([CARD_FILE] if is_model_card(out / CARD_FILE) else [])]
    found = [name for name in dict.fromkeys(names) if (out / name).is_file()]  # the weights first
    logger.warning(
        "--resume: the run in %s had finished; it trains on, so its model files there (%s) are removed now "
        "and written again when it ends (%s holds the model of step %s while it is kept)",
        out, ", ".join(found), latest, latest.name.rsplit("-", 1)[-1],
    )  # fmt: skip
    for name in found:
        (out / name).unlink()


def check_resume(cfg: PretrainConfig, latest: Path) -> None:
    """A resumed run keeps the settings it was started with (RESUME_MAY_CHANGE aside)."""
    run_folder.check_resume(PRETRAINING, latest, cfg)


def check_tokenizer(tokenizer: Any, folder: Path, option: str) -> None:
    """The model folder's own tokenizer (if it has one) is the data's vocabulary."""
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.data.wordpiece import has_tokenizer

    if tokenizer is None or not has_tokenizer(folder):
        return
    theirs = AlbertTokenizer.from_pretrained(folder)
    if theirs.fingerprint != tokenizer.fingerprint:
        raise ValueError(
            f"{option} {folder}: its tokenizer ({theirs.vocab_size} pieces, fingerprint {theirs.fingerprint}) "
            f"is not the data's ({tokenizer.model_file}: {tokenizer.vocab_size} pieces, fingerprint "
            f"{tokenizer.fingerprint}); its embeddings belong to its own tokenizer: make the data with "
            f"`albert data create --tokenizer {folder}`"
        )


def check_model_fits(
    model_config: AlbertConfig, where: str, vocab_size: int | None, seq_len: int | None
) -> None:
    """The data's vocabulary fits the model's embedding and its sequences the model's positions."""
    if vocab_size is not None and vocab_size > model_config.vocab_size:
        raise ValueError(
            f"{where}: the model's embedding has {model_config.vocab_size} rows, the data's tokenizer "
            f"{vocab_size} pieces; use data made with the model's tokenizer"
        )
    if seq_len is not None and seq_len > model_config.max_position_embeddings:
        raise ValueError(
            f"{where}: the model has {model_config.max_position_embeddings} positions, the data's sequences "
            f"are {seq_len} tokens; make the data with --max-seq-length {model_config.max_position_embeddings} "
            "or less"
        )


def check_data(datasets: list[Any]) -> None:
    """Each data set that can verify its files against the manifest does (`PretrainingDataset.verify`)."""
    for dataset in datasets:
        verify = getattr(dataset, "verify", None)
        if callable(verify):
            verify()
