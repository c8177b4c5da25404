"""The folder of `albert demo`, made this demo's before anything is written there.

Each demo has its own default folder (runs/demo for the bundled books, runs/demo-LANG with --text), and
OUTPUT/demo_inputs.json records what its stages are made from: the language, every text file by name and
sha256, the tokenizer and data settings, the pretraining settings a resumed run may not change and the
number of steps. The same command again finds the same record and continues; a folder holding a demo
made otherwise is refused in one line that says what differs (or emptied first with --overwrite), so a
demo never reuses another demo's tokenizer, data or model, nor writes a report of settings it did not
use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from albert_lm.files import read_json_object, write_json

RECORD = "demo_inputs.json"  # what the folder's stages are made from
TIMES = "demo_times.json"  # each stage's seconds, summed over the runs that made the folder
PARTS = {"text", "tokenizer", "data", "model", "demo_results.json", TIMES, RECORD}  # all a demo writes there


def text_sources(files: list[Path]) -> dict[str, Path]:
    """The files that `files` (files, folders, globs) name, each by the name of its copy in OUTPUT/text."""
    from albert_lm.data.sources import expand_inputs

    named = expand_inputs([str(f) for f in files])
    return {f"{i:04d}_{Path(f).name}": Path(f) for i, f in enumerate(named)}


def demo_folder(
    output: str | os.PathLike | None,
    files: list[Path] | None,
    texts: dict[str, Path],
    r: dict[str, Any],
    overwrite: bool,
) -> Path:
    """OUTPUT for this demo (`output`, else the default for its text), checked before anything is written:
    new or empty, the same demo (it continues), one where nothing but the text copies was made, or with
    `overwrite` a demo made otherwise (emptied first); anything else is refused. `texts`: the text files
    by their copies' names; `r`: the demo's recipe."""
    from albert_lm.files import check_output_apart, clear_folder, describe_folder

    lang = r["tokenizer"]["language"]
    out = Path(output) if output is not None else Path(f"runs/demo-{lang}" if files else "runs/demo")
    if output is not None:
        where = f"--output {output}"
    else:
        where = f"{out} (the default --output" + (f" for --language {lang} --text)" if files else ")")
    for path in [*(files or []), *texts.values()]:  # as typed, and each file its folders and globs hold
        check_output_apart(out, {"--text": path})
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{where}: is a file; give a new or empty --output")
    held = {p.name for p in out.iterdir()} if out.is_dir() else set()
    if held - PARTS:
        raise FileExistsError(
            f"{where}: holds files that are not a demo's ({describe_folder(out)}); give a new or empty --output"
        )
    want = _record(lang, texts, r)
    differs = _differences(out, held, want)
    made_nothing = held <= {"text", RECORD, TIMES}  # text copies alone (and the time spent on them)
    if differs and not overwrite and not made_nothing:
        raise FileExistsError(
            f"{where}: holds a demo made from {differs[0]}; give another --output for this one, or "
            "--overwrite to replace that demo"
        )
    out.mkdir(parents=True, exist_ok=True)
    if held and (overwrite or differs):
        clear_folder(out)
    write_json(out / RECORD, want)
    return out


def _record(lang: str, texts: dict[str, Path], r: dict[str, Any]) -> dict[str, Any]:
    """What the demo's stages are made from, as demo_inputs.json reads back."""
    from albert_lm.files import file_sha256
    from albert_lm.training.pretrain_config import PretrainConfig
    from albert_lm.values import settings_where

    # what a resumed run may not change, and the length: the demo's report is of a run of --max-steps steps
    # from the start, so a demo of another length is another demo (not the same one extended)
    fixed = {*settings_where(PretrainConfig, "resume", False), "max_steps"}
    record = {
        "--language": lang,
        "text": [[name, file_sha256(path)] for name, path in texts.items()],
        "tokenizer": r["tokenizer"],
        "data": r["data"],
        "pretrain": {k: v for k, v in r["pretrain"].items() if k in fixed},
    }
    return json.loads(json.dumps(record))  # tuples as lists, as the file reads back


def _differences(out: Path, held: set[str], want: dict[str, Any]) -> list[str]:
    """What the demo in `out` (whose entries are `held`) was made from otherwise than `want`, as a message
    says each. A demo made before the record existed is judged by its tokenizer's rule (lower-casing,
    accents); the data stage checks its own inputs."""
    if not held:
        return []
    if RECORD in held:
        had = read_json_object(out / RECORD, "demo record")
        if isinstance(had.get("pretrain"), dict) and "max_steps" not in had["pretrain"]:
            # a record from before the length was kept: taken as this run's length
            had["pretrain"]["max_steps"] = want["pretrain"].get("max_steps")
    else:
        tok = out / "tokenizer" / "tokenizer_config.json"
        saved = read_json_object(tok, "tokenizer config") if tok.is_file() else want["tokenizer"]
        rule = {k: saved.get(k) for k in ("do_lower_case", "keep_accents")}
        had = {**want, "tokenizer": {**want["tokenizer"], **rule}}
    return [_differs(key, had.get(key), new) for key, new in want.items() if had.get(key) != new]


def _differs(key: str, had: Any, new: Any) -> str:
    """What differs, as a message says it: "--language en (this run de)", "the tokenizer setting
    vocab_size 5000 (this run 300)", "other text (12 files, this run 3; ...)"."""
    if key == "text":
        return f"other text ({len(had or [])} files, this run {len(new)}; compared by name and sha256)"
    if isinstance(new, dict):
        had = had or {}
        k = next(k for k in sorted({*had, *new}) if had.get(k) != new.get(k))
        key, had, new = f"the {key} setting {k}", had.get(k), new.get(k)
    return f"{key} {had} (this run {new})"
