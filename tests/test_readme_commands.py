"""The README's commands as a new user meets them on a fresh clone, offline.

Every `albert ...` line of the README's code blocks (and of docs/released.md's offline conversion) parses
with the command's own parser, so a renamed or removed option fails here before a user finds it. The ones
that run offline in minutes run as written, in a folder of their own: the smoke test, the conversion of
the release fixture and its fill-mask / embed, the quick start's ready model, and workflow 2's tokenizer,
data and pretraining on two of the package's five books (pretraining bounded by `--time-budget`, the one
change: the recipe's hour). The rest need a download (a released model, GLUE) or hours.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from albert_lm.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RELEASED = ROOT / "docs" / "released.md"


def _code_lines(page: Path) -> list[str]:
    """The command lines of a page's ```bash blocks and of its inline `albert ...` spans: continuations
    joined, comments cut, `a && b` split."""
    text = page.read_text(encoding="utf-8")
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while "&&" in words:
                lines.append(shlex.join(words[: words.index("&&")]))
                words = words[words.index("&&") + 1 :]
            lines.append(shlex.join(words))
    # inline commands of four words or more (shorter spans name a command in a sentence)
    lines += [span for span in re.findall(r"`(albert [^`]+)`", text) if len(shlex.split(span)) >= 4]
    return [ln.strip() for ln in lines if ln.strip()]


def _albert_lines(page: Path) -> list[str]:
    return [ln for ln in _code_lines(page) if ln.startswith("albert ") or ln == "albert"]


def test_the_readme_shows_commands_of_every_workflow():
    lines = _albert_lines(README)
    for command in ("tokenizer train", "data create", "pretrain", "distill general", "distill task", "finetune",
                    "evaluate", "glue", "predict", "fill-mask", "embed", "export", "reproduce", "convert"):  # fmt: skip
        assert any(ln.startswith(f"albert {command} ") for ln in lines), (
            f"no `albert {command}` in the README"
        )


@pytest.mark.parametrize("line", _albert_lines(README) + _albert_lines(RELEASED))
def test_every_albert_command_shown_parses(line):
    argv = shlex.split(line)[1:]
    if argv in ([], ["--version"], ["--help"], ["demo"]):
        return  # run by test_the_offline_commands_run_as_written or the demo's own tests
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code == 0:
            return  # --help
        pytest.fail(f"the docs show `{line}`, which the parser refuses (exit {e.code})")


def test_the_distill_workflow_names_the_extra_that_its_teacher_command_needs():
    """The teacher step fine-tunes with transformers' Trainer, which needs accelerate: `[distill]`, the
    extra the README's workflow installs, brings it."""
    readme = README.read_text(encoding="utf-8")
    assert 'pip install -e ".[distill]"' in readme and "albert distill teacher" in readme
    script = (ROOT / "albert_lm" / "distill" / "teacher_training.py").read_text(encoding="utf-8")
    assert "transformers.Trainer(" in script
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ]", req)[0] for req in extras["distill"]}
    assert {"transformers", "accelerate"} <= names


def _run(line: str, cwd: Path, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    argv = [a for word in shlex.split(line)[1:] for a in (sorted(map(str, cwd.glob(word))) or [word])]
    albert = [sys.executable, "-c", "import sys; from albert_lm.cli import main; sys.exit(main())"]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    done = subprocess.run([*albert, *argv, *extra], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"`{line}` failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return done


def _find(lines: list[str], start: str) -> str:
    found = [ln for ln in lines if " ".join(shlex.split(ln)).startswith(start)]
    assert found, f"no `{start} ...` in the docs"
    return found[0]


@pytest.mark.slow
def test_the_offline_commands_run_as_written(tmp_path):
    readme, released = _albert_lines(README), _albert_lines(RELEASED)
    assert _run("albert --version", tmp_path).stdout.startswith("albert-lm ")
    assert "pretrain" in _run("albert --help", tmp_path).stdout

    # docs/released.md: the release fixture converted and used, offline
    (tmp_path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    convert = _find(released, "albert convert --from-tf tests/")
    _run(convert, tmp_path)
    for start in ("albert fill-mask --model runs/tiny-release", "albert embed --model runs/tiny-release"):
        assert '"line": 1' in _run(_find(released, start), tmp_path).stdout

    # the quick start's ready model, as shipped in the clone
    (tmp_path / "models").symlink_to(ROOT / "models", target_is_directory=True)
    (tmp_path / "sentences.txt").write_text(
        "A man is playing a guitar.\nThe sun is shining.\n", encoding="utf-8"
    )
    _run(_find(readme, "albert embed --model models/albert-minilm-small-en"), tmp_path)
    assert (tmp_path / "vectors.npy").is_file()

    # workflow 2 on the package's five books
    books = tmp_path / "books"
    books.mkdir()
    for book in sorted((ROOT / "albert_lm" / "demo_corpus").glob("*.txt")):
        # as Project Gutenberg serves them: licence header and footer around the text (--strip-gutenberg)
        title = book.stem.upper()
        text = book.read_text(encoding="utf-8")
        (books / book.name).write_text(
            f"The Project Gutenberg eBook of {title}\n\n*** START OF THE PROJECT GUTENBERG EBOOK {title} ***\n\n"
            f"{text}\n*** END OF THE PROJECT GUTENBERG EBOOK {title} ***\n\nSection 1. General Terms of Use\n",
            encoding="utf-8",
        )
    _run(_find(readme, "albert tokenizer train --recipe cpu-1h --input books/"), tmp_path)
    _run(_find(readme, "albert data create --recipe cpu-1h --input books/"), tmp_path)
    _run(_find(readme, "albert pretrain --recipe cpu-1h --data data"), tmp_path, ("--time-budget", "15s"))
    assert (tmp_path / "runs" / "mine" / "model.safetensors").is_file()
