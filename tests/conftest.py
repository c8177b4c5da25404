"""Shared fixtures: the one way tests find the real data in ../shared/data, the tiny model every model
test builds, and a tiny tokenizer trained once per session."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

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

_ROOT = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids OpenMP spin contention (and makes the
    in-process and subprocess runs use the same kernels)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
