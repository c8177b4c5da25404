"""`albert pretrain --text FILE ... --init-from MODEL`: continued (task- or domain-adaptive) pretraining
on plain text in one command. The text becomes pretraining examples with the model's own tokenizer in
OUTPUT/data (made, and resumed, like any `albert data create`), and the run reads them from there.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from albert_lm.hub import resolve_model
from albert_lm.model.config import AlbertConfig
from albert_lm.training import checkpoint as ckpt
from albert_lm.training import preflight
from albert_lm.training.preflight import TEXT_DATA
from albert_lm.training.pretrain_config import PretrainConfig

logger = logging.getLogger(__name__)


def data_from_text(
    cfg: PretrainConfig, files: list[str], settings: dict[str, Any] | None = None, progress: bool = True
) -> PretrainConfig:
    """`albert pretrain --text FILE ... --init-from MODEL`: pretraining examples from plain text with the
    model's own tokenizer, in OUTPUT/data (resumed like any `data create`), and `cfg` pointing at them:
    continued (task- or domain-adaptive) pretraining in one command. `settings`: DataConfig fields (a
    recipe's data section); sequences default to min(128, the model's positions), the layout of each
    file is guessed (`--format auto`). `files`: files, folders or glob patterns."""
    from albert_lm.data.corpus import check_input_file
    from albert_lm.data.examples import DataConfig
    from albert_lm.data.shards import create_pretraining_data
    from albert_lm.data.sources import expand_inputs
    from albert_lm.data.tokenizer import MODEL_FILE
    from albert_lm.data.wordpiece import has_tokenizer

    own = cfg.resume and cfg.data is not None and preflight.is_text_data(cfg.data, cfg.output)
    if cfg.data is not None and not own:  # (a resumed run's saved settings name the examples it made)
        raise ValueError(
            "give --data (examples made by `albert data create`) or --text (plain text), not both"
        )
    source = Path(cfg.output) if cfg.resume else None
    if cfg.init_from:  # a hub id: its cached snapshot (a folder was resolved, and said, already)
        source = (
            Path(cfg.init_from)
            if Path(cfg.init_from).is_dir()
            else resolve_model(cfg.init_from, "--init-from")
        )
    if source is None or not has_tokenizer(source):
        raise ValueError(
            "--text needs the tokenizer of the model it continues: --init-from a model folder holding "
            f"{MODEL_FILE} (for a new model, make a tokenizer and data with `albert tokenizer train` and "
            "`albert data create`)"
        )
    files = expand_inputs(files)  # folders and globs as `albert data create` takes them
    for file in files:
        check_input_file(Path(file))
    positions = AlbertConfig.from_pretrained(source).max_position_embeddings
    data_cfg = DataConfig(
        **{"max_seq_length": min(128, positions), "input_format": "auto", **(settings or {})}
    )
    data_cfg.validate()
    output = Path(cfg.output)
    preflight.check_output(cfg, ckpt.latest_checkpoint(output))
    if cfg.overwrite and output.is_dir():  # the old run goes now, so the new examples are not removed with it
        preflight.remove_run(output)
        cfg = dataclasses.replace(cfg, overwrite=False)
    out = output / TEXT_DATA
    manifest = create_pretraining_data(files, source, out, data_cfg, num_workers=1, progress=progress)
    if left_out := manifest.get("summary", {}).get("records_without_text"):  # as `data create` says it
        logger.warning("--text: %d records had a null or empty text field (left out)", left_out)
    return dataclasses.replace(cfg, data=str(out))
