"""Hugging Face hub ids wherever a model folder is accepted: `org/name` or `org/name@revision` becomes
the folder of that snapshot in the hub cache, fetched on first use; everything after reads a folder.

An existing local path always wins, even one spelt like an id. Only what albert-lm reads is fetched:
config.json, the safetensors weights (one file, or an index and the shards it names), spiece.model,
tokenizer_config.json and a fine-tuned model's finetune_config.json and eval_results.json; a
pytorch_model.bin only when the repository has no safetensors weights (a pickle: albert_lm.model.weights
reads it with torch.load(weights_only=True), which refuses anything but tensors). huggingface_hub itself
honours HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE and HF_TOKEN; it is imported only when an id is resolved,
so `import albert_lm` stays light. Every failure is one message naming the id, never the hub's traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

__all__ = ["resolve_model"]

logger = logging.getLogger(__name__)

# The hub's rules (huggingface_hub.utils.validate_repo_id): ASCII letters, digits, "_", "-", "."; each
# part starts and ends with a letter, digit or "_", at most 96 long; no "--" or "..". A revision is a
# branch, tag or commit ("refs/pr/1" included).
_PART = r"\w(?:[\w.-]{0,94}\w)?"
_HUB_ID = re.compile(rf"(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[\w.\-/]+))?", re.ASCII)

FILES = (
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "albert_lm.safetensors",
    "spiece.model",
    "tokenizer_config.json",
    "finetune_config.json",
    "eval_results.json",
)
PICKLE = "pytorch_model.bin"


def resolve_model(value: str | os.PathLike, what: str = "--model") -> Path:
    """The model folder `value` names: a local path as it is; a hub id `org/name[@revision]` as its
    snapshot in the hub cache (downloaded if missing). Anything else comes back as a path, for the
    caller's "no such folder" error. `what` (the option) starts every message."""
    path = Path(value)
    if path.exists():
        logger.info("%s: local folder %s", what, path)
        return path
    match = _HUB_ID.fullmatch(str(value))
    repo = match["repo"] if match else ""
    if not match or "--" in repo or ".." in repo or repo.endswith(".git"):
        return path
    revision = match["revision"]
    folder = _snapshot(repo, revision, f"{what} {value}")
    logger.info(
        "%s: hub %s@%s (commit %s), cached at %s", what, repo, revision or "main", folder.name, folder
    )
    return folder


def _snapshot(repo: str, revision: str | None, where: str) -> Path:
    """The cached snapshot of `repo` at `revision` holding what albert-lm reads: the listed files first,
    then what they lack (the index's shards, or the pickle of a repository without safetensors)."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=list(FILES)))
        wanted = _weights_wanted(folder)
        if wanted:  # by commit: the second look-up reads the same snapshot, even if the branch moved on
            folder = Path(snapshot_download(repo, revision=folder.name, allow_patterns=wanted))
    except Exception as e:  # the hub's and its HTTP client's errors become one message; others go on
        raise _hub_error(e, repo, revision, where) from None
    missing = ["config.json"] if not (folder / "config.json").is_file() else _weights_wanted(folder)
    if missing == [PICKLE]:
        missing = [
            "weights (model.safetensors, its index and shards, albert_lm.safetensors or pytorch_model.bin)"
        ]
    if missing:
        raise FileNotFoundError(
            f"{where}: the hub snapshot {repo}@{folder.name} (in {folder}) has no {', '.join(missing)}: "
            f"not a transformers model, or not completely in the cache; {_fetch_hint(repo, revision)}"
        )
    return folder


def _weights_wanted(folder: Path) -> list[str]:
    """The weight files `folder` still lacks, in the order albert_lm.model.weights looks for them: none
    beside model.safetensors; the shards an index names; else albert_lm.safetensors, else the pickle."""
    if (folder / "model.safetensors").is_file():
        return []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            return []  # albert_lm.model.weights names the broken index when it reads it
        return [s for s in shards if not (folder / s).is_file()]
    if (folder / "albert_lm.safetensors").is_file() or (folder / PICKLE).is_file():
        return []
    return [PICKLE]


def _fetch_hint(repo: str, revision: str | None) -> str:
    rev = f" --revision {revision}" if revision else ""
    return f"fetch it on a machine with network: `hf download {repo}{rev} --local-dir DIR`, then give DIR"


def _hub_error(e: Exception, repo: str, revision: str | None, where: str) -> Exception:
    """One clear error for what snapshot_download raised; anything not the hub's is raised as it is."""
    from huggingface_hub import constants
    from huggingface_hub.utils import (  # where 0.24 and 2.x both export them
        GatedRepoError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    detail = (str(e).strip().splitlines() or [type(e).__name__])[0].removeprefix("Got: ")
    if isinstance(e, LocalEntryNotFoundError):
        offline = constants.HF_HUB_OFFLINE
        why = "HF_HUB_OFFLINE is set" if offline else f"the hub could not be reached ({detail})"
        rev = f"@{revision}" if revision else ""
        return FileNotFoundError(
            f"{where}: no such local folder, and the hub model {repo}{rev} is not (completely) in the hub cache "
            f"({constants.HF_HUB_CACHE}) while {why}; {_fetch_hint(repo, revision)}"
            + (" (or unset HF_HUB_OFFLINE to download it here)" if offline else "")
        )
    if isinstance(e, RevisionNotFoundError):
        return FileNotFoundError(f"{where}: the hub repository {repo} has no revision {revision!r}")
    if isinstance(e, GatedRepoError):
        return FileNotFoundError(
            f"{where}: the hub repository {repo} is gated: accept its terms on huggingface.co and log in "
            "(`hf auth login`, or set HF_TOKEN)"
        )
    if isinstance(e, RepositoryNotFoundError):
        return FileNotFoundError(
            f"{where}: no such local folder, and no repository {repo} on the Hugging Face hub (if it is "
            "private, log in with `hf auth login` or set HF_TOKEN)"
        )
    library = type(e).__module__.split(".")[0]
    if isinstance(e, HfHubHTTPError | HFValidationError | OSError) or library in (
        "huggingface_hub",
        "httpx",
        "httpx2",
    ):
        return FileNotFoundError(f"{where}: the hub model {repo} could not be fetched: {detail}")
    return e
