"""Hugging Face hub ids wherever a model folder is accepted: `org/name` or `org/name@revision` becomes
the folder of that snapshot in the hub cache, fetched on first use; everything after reads a folder.

An existing local path always wins, even one spelt like an id. Only what albert-lm reads is fetched:
config.json, the safetensors weights (one file, or an index and the shards it names), spiece.model (or,
where there is none, a WordPiece student's tokenizer.json and vocab.txt), tokenizer_config.json and a fine-tuned model's
finetune_config.json and eval_results.json; a pytorch_model.bin only when the repository has no
safetensors weights (a pickle: albert_lm.model.weights reads it with torch.load(weights_only=True),
which refuses anything but tensors). huggingface_hub itself honours HF_HOME, HF_HUB_CACHE,
HF_HUB_OFFLINE and HF_TOKEN; it is imported only when an id is resolved, so `import albert_lm` stays
light. Every failure is one message naming the id, never the hub's traceback.

The cache is read as untrusted input (it may be damaged, copied in by hand, or laid out by someone else):
the snapshot and every file albert-lm will read must lie inside the repository's folder of the cache
(a link leading elsewhere is refused, as is a ref or revision that climbs out with `..`); config.json
must be a model config (an ALBERT one, except for a distillation teacher), and safetensors weights must
be whole. Each refusal names the id and the file, before any command starts on the model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import zipfile
from pathlib import Path

from albert_lm.hints import near_path, not_a_folder

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
# A student of a BERT teacher (albert_lm.data.wordpiece) has these instead of spiece.model; fetched only then
# (an ALBERT repository's own tokenizer.json is transformers' fast tokenizer, which albert-lm does not read).
WORDPIECE = ("tokenizer.json", "vocab.txt")


def resolve_model(value: str | os.PathLike, what: str = "--model", *, albert: bool | None = None) -> Path:
    """The model folder `value` names: a local path as it is; a hub id `org/name[@revision]` as its
    snapshot in the hub cache (downloaded if missing), checked (the module docstring). A file is refused
    (`hints.not_a_folder`); any other path comes back as it is, for the caller's error. `what` (the option) starts every
    message. `albert`: whether config.json must be an ALBERT config; by default it must, except for a
    `--teacher` (any transformers encoder)."""
    path = Path(value)
    if path.is_file():  # a weights file, say: every command names the folder it lies in the same way
        raise not_a_folder(path, what)
    if path.exists():
        logger.info("%s: local %s %s", what, "folder" if path.is_dir() else "file", path)
        return path
    if re.fullmatch(r"albert-(base|large|xlarge|xxlarge)-v[12]", str(value)):  # the id before hub owners
        raise FileNotFoundError(
            f"{what} {value}: no such folder; the released model's hub id is albert/{value}"
        )
    match = _HUB_ID.fullmatch(str(value))
    repo = match["repo"] if match else ""
    if not match or "--" in repo or ".." in repo or repo.endswith(".git"):
        # a path that is no hub id comes back for the caller to judge (`run_folders.no_model`): a resumed
        # run's --init-from may have gone, and the run needs it no more
        return path
    revision = match["revision"]
    if revision is not None and any(part in ("", ".", "..") for part in revision.split("/")):
        raise ValueError(f"{what} {value}: {revision!r} is not a branch, tag or commit name")
    try:
        folder = _snapshot(repo, revision, f"{what} {value}")
    except FileNotFoundError as e:
        near = near_path(path, folders_only=True)  # a typo of a local folder's name
        raise (not_a_folder(path, what) if near else e) from None
    _check_files(folder, repo, f"{what} {value}", albert=what != "--teacher" if albert is None else albert)
    logger.info(
        "%s: hub %s@%s (commit %s), cached at %s", what, repo, revision or "main", folder.name, folder
    )
    return folder


def _snapshot(repo: str, revision: str | None, where: str) -> Path:
    """The cached snapshot of `repo` at `revision` holding what albert-lm reads: the listed files first,
    then what they lack (the index's shards, or the pickle of a repository without safetensors)."""
    folder = _download(repo, revision, list(FILES), where)
    if not (folder / "spiece.model").is_file():  # by commit, as below
        folder = _download(repo, folder.name, [*FILES, *WORDPIECE], where)
    wanted = _weights_wanted(folder)
    if wanted:  # by commit: the second look-up reads the same snapshot, even if the branch moved on
        folder = _download(repo, folder.name, wanted, where)
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


def _download(repo: str, revision: str | None, patterns: list[str], where: str) -> Path:
    """snapshot_download, its errors as one message; the snapshot and the files albert-lm reads in it
    checked to lie inside the repository's folder of the cache before any is read."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo, revision=revision, allow_patterns=patterns))
    except Exception as e:  # the hub's and its HTTP client's errors become one message; others go on
        raise _hub_error(e, repo, revision, where) from None
    root = _repo_folder(repo)
    if not _inside(folder, root):
        ref = _ref_file(repo, revision)
        by = f"its {ref} or a link" if ref.is_file() else "a link"
        raise ValueError(
            f"{where}: the hub cache's snapshot {folder} lies outside {root} ({by} leads "
            f"to {folder.resolve()}): a damaged or hostile cache; refused"
        )
    _check_links(folder, [*FILES, *WORDPIECE, PICKLE], root, where)
    _check_links(folder, _shards(folder), root, where)  # the index is read once it is known to be inside
    return folder


def _check_links(folder: Path, names: list[str], root: Path, where: str) -> None:
    """Each of the files `names` in `folder` that exists lies inside `root`, links followed."""
    for name in names:
        file = folder / name
        if file.is_symlink() and not file.exists():
            raise FileNotFoundError(
                f"{where}: {file} in the hub cache is a link to {os.readlink(file)}, "
                "which does not exist (a damaged cache)"
            )
        if file.exists() and not _inside(file, root):
            raise ValueError(
                f"{where}: {file} in the hub cache leads outside {root} (to {file.resolve()}): "
                "a damaged or hostile cache; refused"
            )


def _repo_folder(repo: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"


def _ref_file(repo: str, revision: str | None) -> Path:
    return _repo_folder(repo) / "refs" / (revision or "main")


def _inside(path: Path, root: Path) -> bool:
    """Whether `path`, every link followed, lies inside `root` (followed too)."""
    return path.resolve().is_relative_to(root.resolve())


def _shards(folder: Path) -> list[str]:
    """The files model.safetensors.index.json names (none where it is missing or unreadable)."""
    try:
        return sorted(
            set(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _check_files(folder: Path, repo: str, where: str, albert: bool) -> None:
    """config.json a model config (an ALBERT one where `albert`) and the weights albert-lm will read
    whole, each refusal naming the id (`where`) and the file."""
    from safetensors import safe_open

    from albert_lm.files import read_json_object

    at = f"{where}: the hub snapshot {repo}@{folder.name}"
    index = folder / "model.safetensors.index.json"
    try:
        config = read_json_object(folder / "config.json", "model config")  # its values: when the model loads
        model_type = config.get("model_type", "albert")
        if albert and model_type not in ("albert", "albert-lm"):
            raise ValueError(f"{folder / 'config.json'}: model_type is {model_type!r}, expected 'albert'")
        if index.is_file() and not (folder / "model.safetensors").is_file():
            weight_map = read_json_object(index, "safetensors index").get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError(f"{index}: no 'weight_map' object of tensor names to shard files")
    except ValueError as e:
        raise ValueError(f"{at}: {e}") from None
    for name in _safetensors_read(folder):
        try:
            with safe_open(folder / name, "numpy"):
                pass
        except Exception as e:  # the library's SafetensorError, and OSError
            raise ValueError(
                f"{at}: {folder / name}: not a whole safetensors file (truncated or damaged?): {e}"
            ) from None
    pickle = folder / PICKLE
    if not _safetensors_read(folder) and pickle.is_file():
        with open(pickle, "rb") as f:
            zipped = f.read(2) == b"PK"
        if zipped and not zipfile.is_zipfile(pickle):  # torch.save's zip archive, its directory gone
            raise ValueError(f"{at}: {pickle}: truncated (its zip directory is missing)")


def _safetensors_read(folder: Path) -> list[str]:
    """The safetensors files albert_lm.model.weights reads from `folder`, in its order of preference."""
    if (folder / "model.safetensors").is_file():
        return ["model.safetensors"]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return _shards(folder)
    return ["albert_lm.safetensors"] if (folder / "albert_lm.safetensors").is_file() else []


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


def _dangling_ref(repo: str, revision: str | None) -> str:
    """What is wrong where the cache's ref file for `revision` names a commit it has no snapshot of;
    "" where it does not (no such ref, or the commit is there)."""
    ref = _ref_file(repo, revision)
    try:
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    if (_repo_folder(repo) / "snapshots" / commit).is_dir():
        return ""
    return (
        f"the hub cache's {ref} points at commit {commit[:80]!r}, which has no snapshot folder there "
        "(a damaged cache)"
    )


def _local_hint(repo: str) -> str:
    """Where `repo` reads as a path too (its first part is a folder here): what that folder lacks."""
    parent, name = repo.split("/", 1)
    if not Path(parent).is_dir():
        return ""
    made = " (`albert convert` writes a released model there, docs/released.md)" if parent == "models" else ""
    return f": {parent}/ holds no {name}{made}"


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
        dangling = _dangling_ref(repo, revision)
        if dangling:
            return FileNotFoundError(f"{where}: {dangling} while {why}; {_fetch_hint(repo, revision)}")
        return FileNotFoundError(
            f"{where}: no such local folder{_local_hint(repo)}, and the hub model {repo}{rev} is not "
            f"(completely) in the hub cache ({constants.HF_HUB_CACHE}) while {why}; {_fetch_hint(repo, revision)}"
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
