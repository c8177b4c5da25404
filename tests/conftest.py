"""Shared fixtures: the one way tests find the real data in ../shared/data, the tiny model every model
test builds, a tiny tokenizer trained once per session and the worlds built from it; and the command
lines and small files many tests build, written once (`from conftest import ...`; each `*_argv` helper's
`more` come last, so they win over a default given before them)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import numpy as np
import pytest

from albert_lm.model.config import AlbertConfig

# A model small enough for any test (a few thousand parameters); tests change fields by keyword.
TINY_MODEL = dict(
    vocab_size=99,
    embedding_size=16,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)

# --------------------------------------------------------------------------- command lines and small files
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                 max_position_embeddings=128)  # fmt: skip
# The tiny model as `--model-override` values (on the albert-tiny preset).
TINY_OVERRIDES = ["hidden_size=32", "embedding_size=16", "num_attention_heads=2", "intermediate_size=64",
                  "num_hidden_layers=2", "max_position_embeddings=64"]  # fmt: skip


def made_up_text(path: Path, seed: int) -> Path:
    """150 documents of 8 sentences of made-up words (a sentence per line, a blank line between
    documents), the same for the same seed; written to `path`, returned."""
    rng = np.random.default_rng(seed)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["".join(rng.choice(syll, size=int(rng.integers(1, 4)))) for _ in range(300)]
    docs = [
        "\n".join(" ".join(rng.choice(words, size=int(rng.integers(4, 16)))) + "." for _ in range(8))
        for _ in range(150)
    ]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def labelled_rows(
    folder: Path, words: Mapping[str, Sequence[str]], sizes: Mapping[str, int], seed: int = 0
) -> Path:
    """A classification set in JSON Lines: `folder/SPLIT.jsonl` for each split of `sizes` with that many
    rows of 4 words drawn from the words of a label chosen at random (numpy's generator of `seed`)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    labels = list(words)
    for split, n in sizes.items():
        rows = []
        for _ in range(n):
            label = str(rng.choice(labels))
            rows.append(json.dumps({"text": " ".join(rng.choice(words[label], size=4)), "label": label}))
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return folder


def tokenizer_argv(corpus: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert tokenizer train --input CORPUS --output OUTPUT MORE...`."""
    return ["tokenizer", "train", "--input", str(corpus), "--output", str(output), *more]


def data_argv(corpus: Path | str, tokenizer: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert data create --input CORPUS --tokenizer TOKENIZER --output OUTPUT MORE...`."""
    return ["data", "create", "--input", str(corpus), "--tokenizer", str(tokenizer), "--output", str(output),
            *more]  # fmt: skip


def pretrain_argv(data: Path | str, output: Path | str, *more: str) -> list[str]:
    """`albert pretrain --data DATA --output OUTPUT MORE...`."""
    return ["pretrain", "--data", str(data), "--output", str(output), *more]


def finetune_argv(
    task: str, model: Path | str, data: Path | str, output: Path | str, *more: str
) -> list[str]:
    """`albert finetune --task TASK --model MODEL --data DATA --output OUTPUT MORE...`."""
    return ["finetune", "--task", task, "--model", str(model), "--data", str(data), "--output", str(output),
            *more]  # fmt: skip


def tiny_pretrain_argv(data: Path | str, output: Path | str, *more: str) -> list[str]:
    """Two steps of pretraining the tiny model (batch 4, logged every step, no TensorBoard or plot)."""
    over = [x for kv in TINY_OVERRIDES for x in ("--model-override", kv)]
    return pretrain_argv(data, output, "--preset", "albert-tiny", *over, "--batch-size", "4", "--warmup-steps",
                         "1", "--learning-rate", "0.005", "--log-every", "1", "--no-tensorboard", "--no-plot",
                         "--max-steps", "2", *more)  # fmt: skip


def two_step_finetune_argv(model: Path | str, data: Path | str, output: Path | str, *more: str) -> list[str]:
    """Two steps of fine-tuning on a classification task, batch 8."""
    return finetune_argv(
        "classification", model, data, output, "--max-steps", "2", "--batch-size", "8", *more
    )


def distill_general_argv(
    teacher: Path | str,
    text: Path | str,
    tokenizer: Path | str,
    output: Path | str,
    cache: Path | str,
    *more: str,
) -> list[str]:
    """`albert distill general --teacher TEACHER --text TEXT --tokenizer TOKENIZER --output OUTPUT --cache
    CACHE MORE...`."""
    return ["distill", "general", "--teacher", str(teacher), "--text", str(text), "--tokenizer", str(tokenizer),
            "--output", str(output), "--cache", str(cache), *more]  # fmt: skip


def distill_task_argv(
    model: Path | str,
    teacher: Path | str,
    data: Path | str,
    output: Path | str,
    cache: Path | str,
    *more: str,
) -> list[str]:
    """`albert distill task --task classification --model MODEL --teacher TEACHER --data DATA --output OUTPUT
    --cache CACHE MORE...`."""
    return ["distill", "task", "--task", "classification", "--model", str(model), "--teacher", str(teacher),
            "--data", str(data), "--output", str(output), "--cache", str(cache), *more]  # fmt: skip


# A command in a process of its own that sends itself SIGTERM right after optimizer step N (-1: never):
# how the resume tests stop a training loop where they choose.
_STOP_AFTER_STEP = """
import os, signal, sys
from albert_lm.cli import main
from albert_lm.training import loop
stop_at = int(sys.argv[1])
take = loop._take_step
def step_then_signal(obj, progress, scaler):
    last = take(obj, progress, scaler)
    if progress.step == stop_at:
        os.kill(os.getpid(), signal.SIGTERM)
    return last
loop._take_step = step_then_signal
sys.exit(main(sys.argv[2:]))
"""


def run_stopped_at(stop_at: int, argv: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`albert ARGV` in a process of its own (one thread), SIGTERM after optimizer step `stop_at`."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", _STOP_AFTER_STEP, str(stop_at), *argv], env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def signal_after_step(monkeypatch: pytest.MonkeyPatch, stop_at: int = 1) -> Callable:
    """In this process: the training loop sends itself SIGTERM right after optimizer step `stop_at`.
    Returns the loop's own step, to put back (`monkeypatch.setattr(loop, "_take_step", it)`)."""
    import signal

    from albert_lm.training import loop

    take = loop._take_step

    def step_then_signal(obj, progress, scaler):  # noqa: ANN001, ANN202 - the loop's own arguments
        last = take(obj, progress, scaler)
        if progress.step == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return last

    monkeypatch.setattr(loop, "_take_step", step_then_signal)
    return take


_ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- what the suite may touch
# Tests run as root in CI: they must leave the machine as they found it. Every temporary file of the
# session (pytest's tmp_path, tempfile in the code under test, in its subprocesses and in libraries) and
# the libraries' home caches go to one folder of the session, removed at its end; /dev is listed before
# and after, and the session fails if it changed (a rename over /dev/stdout once replaced the system's
# link with a file).


def web_missing(reason: str) -> NoReturn:
    """Skip a browser or node test whose tools are absent, saying which; CI sets ALBERT_REQUIRE_WEB=1
    (it installs chromium, node and the npm packages), so there a missing tool fails the test instead."""
    if os.environ.get("ALBERT_REQUIRE_WEB") == "1":
        pytest.fail(f"ALBERT_REQUIRE_WEB=1 but {reason}")
    pytest.skip(reason)


def _dev_listing() -> dict[str, tuple[int, str]]:
    listing = {}
    for entry in os.scandir("/dev") if os.path.isdir("/dev") else ():
        mode = entry.stat(follow_symlinks=False).st_mode
        listing[entry.name] = (stat.S_IFMT(mode), os.readlink(entry.path) if stat.S_ISLNK(mode) else "")
    return listing


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller holds the folder
        return
    session_tmp = tempfile.mkdtemp(prefix="albert-lm-tests-")
    config.stash[_SESSION_TMP] = (session_tmp, os.environ.get("TMPDIR"), _dev_listing())
    os.environ["TMPDIR"] = session_tmp
    tempfile.tempdir = session_tmp
    # Libraries' caches and settings in the home folder (matplotlib's fonts, the hub's files) too.
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "MPLCONFIGDIR", "HF_HOME"):
        os.environ[name] = os.path.join(session_tmp, name.lower())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _SESSION_TMP not in session.config.stash:
        return
    before = session.config.stash[_SESSION_TMP][2]
    after = _dev_listing()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    messages = []
    if changed:
        messages.append(
            f"the test session changed /dev ({', '.join(changed)}): tests must touch nothing there"
        )
    # A worker process left alive would keep the interpreter from exiting (a process pool's manager
    # thread waits for it): ended here, and the run fails naming it.
    left = multiprocessing.active_children()
    for child in left:
        child.kill()
        child.join(timeout=10)
    if left:
        messages.append(f"child processes the tests left running (killed now): {', '.join(map(str, left))}")
    if messages:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write("\n")
            for message in messages:
                reporter.write_line(message, red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _SESSION_TMP not in config.stash:
        return
    session_tmp, before_tmpdir, _ = config.stash[_SESSION_TMP]
    tempfile.tempdir = None
    if before_tmpdir is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before_tmpdir
    shutil.rmtree(session_tmp, ignore_errors=True)


_SESSION_TMP = pytest.StashKey[tuple[str, "str | None", dict[str, tuple[int, str]]]]()


def _data_root() -> Path:
    return Path(os.environ.get("ALBERT_DATA", _ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def albert_data() -> Path:
    """The real shared data folder (env ALBERT_DATA, default ../shared/data); skips when absent."""
    root = _data_root()
    if not (root / "README.md").is_file():
        pytest.skip(f"real data not found at {root} (set ALBERT_DATA to the shared data folder)")
    return root


@pytest.fixture(autouse=True, scope="session")
def _kernel_cache(tmp_path_factory) -> None:
    """Kernel timings go to a folder of this test session, never the user's ~/.cache (subprocesses too)."""
    os.environ["ALBERT_LM_CACHE_DIR"] = str(tmp_path_factory.mktemp("kernel-cache"))


@pytest.fixture(scope="session")
def tiny_config() -> Callable[..., AlbertConfig]:
    """`tiny_config(**changes)`: the tiny model's AlbertConfig with some fields changed."""
    return lambda **changes: AlbertConfig(**{**TINY_MODEL, **changes})


@pytest.fixture(scope="session")
def tiny_corpus_and_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A generated corpus in google-research's format (a sentence per line, a blank line between
    documents) and a 200-piece tokenizer trained on it: (corpus file, tokenizer folder)."""
    import numpy as np

    from albert_lm.data.tokenizer_training import train_tokenizer

    d = tmp_path_factory.mktemp("tiny-corpus")
    rng = np.random.default_rng(0)
    syll = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = ["".join(rng.choice(syll, size=int(rng.integers(1, 4)))) for _ in range(300)]
    docs = []
    for _ in range(120):
        sents = [
            " ".join(rng.choice(words, size=int(rng.integers(4, 20)))).capitalize() + "."
            for _ in range(int(rng.integers(2, 12)))
        ]
        docs.append("\n".join(sents))
    (d / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    train_tokenizer([d / "corpus.txt"], d / "tok", vocab_size=200, num_threads=1)
    return d / "corpus.txt", d / "tok"


@pytest.fixture(scope="session")
def two_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two made-up texts (corpus: `made_up_text` of seed 0, corpus_b: of seed 1), a 120-piece tokenizer
    trained on each (tok_a, tok_b) and pretraining data made with each (data_a, data_b: 48 tokens, a fifth
    held out, 10 kB shards). Read only: tests that change a folder copy it first."""
    from albert_lm.cli import main

    d = tmp_path_factory.mktemp("two-tokenizers")
    w = {"corpus": made_up_text(d / "a.txt", 0), "corpus_b": made_up_text(d / "b.txt", 1)}
    for name, corpus in (("a", w["corpus"]), ("b", w["corpus_b"])):
        w[f"tok_{name}"], w[f"data_{name}"] = d / f"tok_{name}", d / f"data_{name}"
        assert main(tokenizer_argv(corpus, w[f"tok_{name}"], "--vocab-size", "120")) == 0
        more = ["--max-seq-length", "48", "--eval-fraction", "0.2", "--shard-mb", "0.01", "--workers", "1"]
        assert main(data_argv(corpus, w[f"tok_{name}"], w[f"data_{name}"], *more, "--no-progress")) == 0
    return w


@pytest.fixture(scope="session")
def run_world(two_tokenizers, tmp_path_factory) -> dict[str, Path]:
    """`two_tokenizers`, a finished pretraining run on A's data (run: 2 steps of `tiny_pretrain_argv`, with
    checkpoints) and a small classification task (task: 40 train, 20 dev rows). Read only: tests that
    change a folder copy it first (the bad-input tests hash them before and after)."""
    from albert_lm.cli import main

    d = tmp_path_factory.mktemp("world")
    w = {**two_tokenizers, "root": d, "run": d / "run", "task": d / "task"}
    assert main(tiny_pretrain_argv(w["data_a"], w["run"], "--max-steps", "2", "--save-every", "1")) == 0
    w["task"].mkdir()
    for split, n in (("train", 40), ("dev", 20)):
        rows = [
            json.dumps({"text": f"word{i % 7} river", "label": "yes" if i % 2 else "no"}) for i in range(n)
        ]
        (w["task"] / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    return w


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory, tiny_config, tiny_corpus_and_tokenizer) -> Path:
    """A random tiny ALBERT with the tiny 200-piece tokenizer, as a pretraining run saves it (read only:
    tests that change it copy it first)."""
    import torch

    from albert_lm.model.heads import AlbertForPreTraining

    folder = tmp_path_factory.mktemp("tiny-pretrained")
    torch.manual_seed(0)
    AlbertForPreTraining(tiny_config(vocab_size=200)).save_pretrained(folder)
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", folder / "spiece.model")
    return folder


@pytest.fixture(scope="session")
def tiny_sst2(tmp_path_factory, tiny_config, tiny_corpus_and_tokenizer) -> Path:
    """base/: a tiny 4-layer pretrained ALBERT with the fixture tokenizer; sst2/: an SST-2-like folder
    (32 train, 16 dev rows of made-up words). Read only: tests write their runs elsewhere."""
    import numpy as np
    import torch

    from albert_lm.model.heads import AlbertForPreTraining

    root = tmp_path_factory.mktemp("tiny-sst2")
    torch.manual_seed(0)
    AlbertForPreTraining(tiny_config(vocab_size=200, num_hidden_layers=4)).save_pretrained(root / "base")
    shutil.copy(tiny_corpus_and_tokenizer[1] / "spiece.model", root / "base" / "spiece.model")
    rng = np.random.default_rng(0)
    words = ["bala", "kemo", "fira", "dusa", "tovi", "ramu"]
    (root / "sst2").mkdir()
    for split, n in (("train", 32), ("dev", 16)):
        rows = [f"{' '.join(rng.choice(words, size=5))}\t{i % 2}" for i in range(n)]
        (root / "sst2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="session")
def tiny_exit_run(tmp_path_factory, tiny_sst2) -> Path:
    """The tiny 4-layer model fine-tuned on tiny_sst2's SST-2-like folder with --exit-heads: run/best/,
    with base/ and sst2/ linked to the shared fixture's, and texts.txt and masked.txt to read (read only:
    tests that change a folder copy it first)."""
    from albert_lm.cli import main

    root = tmp_path_factory.mktemp("exit")
    for name in ("base", "sst2"):
        (root / name).symlink_to(tiny_sst2 / name, target_is_directory=True)
    args = ["finetune", "--task", "sst2", "--model", str(root / "base"), "--data", str(root / "sst2"),
            "--output", str(root / "run"), "--max-steps", "4", "--batch-size", "8", "--max-seq-length", "32",
            "--device", "cpu", "--precision", "fp32", "--no-tensorboard", "--no-plot", "--exit-heads",
            "-q"]  # fmt: skip
    assert main(args) == 0
    (root / "texts.txt").write_text("bala kemo fira\ndusa tovi ramu bala\nkemo\n")
    (root / "masked.txt").write_text("bala [MASK] fira\n")
    return root


@pytest.fixture
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids OpenMP spin contention (and makes the
    in-process and subprocess runs use the same kernels)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def stand_ins(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """Stand-ins for the system paths a hostile test needs, made in the test's own folder, so that no
    test touches /dev, /sys or /proc itself:
    - `stdout`: a link to this process's standard output (what /dev/stdout is);
    - `fifo`: a named pipe (a special file, like /dev/null);
    - `broken_pipe`: a link to a pipe whose reader is gone: every write fails (like /dev/full);
    - `unwritable`: a path no folder can be made at (a read-only folder; as root, which may write
      anywhere, a path under a regular file)."""
    d = tmp_path / "stand-ins"
    d.mkdir()
    os.symlink("/proc/self/fd/1", d / "stdout")
    os.mkfifo(d / "fifo")
    read, write = os.pipe()
    os.close(read)
    os.symlink(f"/proc/self/fd/{write}", d / "broken-pipe")
    if os.geteuid() == 0:
        (d / "a-file").write_text("not a folder\n")
        unwritable = d / "a-file" / "out"
    else:
        (d / "read-only").mkdir(mode=0o555)
        unwritable = d / "read-only" / "out"
    yield SimpleNamespace(
        stdout=d / "stdout", fifo=d / "fifo", broken_pipe=d / "broken-pipe", unwritable=unwritable
    )
    os.close(write)
    if (d / "read-only").exists():
        (d / "read-only").chmod(0o755)  # pytest removes its folders later


@pytest.fixture
def fake_modules(tmp_path) -> Path:
    """A node_modules with tiny stand-ins for the files the export copies, at the pinned versions (they
    pass its checks, tests/test_hostile_web.py): an export runs whole without npm or a browser."""
    from albert_lm.files import write_json

    page = Path(__file__).resolve().parents[1] / "albert_lm" / "deploy" / "web"
    pins = json.loads((page / "package.json").read_text())["dependencies"]
    lock = json.loads((page / "package-lock.json").read_text())["packages"]
    root = tmp_path / "node_modules"
    files = {
        "@huggingface/transformers/dist/transformers.min.js": b"export const env = {};\n",
        "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs": b"export default 0;\n",
        "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm": b"\0asm\x01\0\0\0",
        "@huggingface/transformers/LICENSE": b"Apache License (stand-in)\n",
        "@huggingface/tokenizers/LICENSE": b"Apache License (stand-in)\n",
        "@huggingface/jinja/LICENSE": b"MIT License (stand-in)\n",
    }
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    for package, version in (
        ("@huggingface/transformers", pins["@huggingface/transformers"]),
        ("onnxruntime-web", lock["node_modules/onnxruntime-web"]["version"]),
        ("@huggingface/tokenizers", "0.0.0"),
        ("@huggingface/jinja", "0.0.0"),
        ("onnxruntime-common", "0.0.0"),
    ):
        write_json(root / package / "package.json", {"name": package, "version": version, "license": "MIT"})
    return root
