"""The documentation's links and words: README.md and docs/**/*.md, no network.

- every relative link and image (inline `[text](target)`, reference definitions `[id]: target`,
  HTML `src=` / `href=`) points to a file or folder that exists, relative to the page;
- every `#anchor` (alone, or after a .md target) names a heading of that page, by GitHub's slug rules
  (lower case; punctuation dropped except `-` and `_`; spaces to `-`; repeats get -1, -2, ...);
- no page outside docs/notes/ (the research log) says "today", "this session" or "the issue".

Links inside code (fenced blocks and `inline code`) are not links and are skipped, as are http(s),
mailto and other URL schemes.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "docs" / "notes"
FORBIDDEN = re.compile(r"\b(today|this session|the issue)\b", re.IGNORECASE)

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE_LINK = re.compile(r"\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
_HTML_ATTR = re.compile(r"""<[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HTML_ID = re.compile(r"""<[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def strip_fences(text: str) -> str:
    """The text with fenced code blocks blanked (line numbers kept)."""
    out: list[str] = []
    fence = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def strip_code(text: str) -> str:
    """The text without fenced code blocks and inline code spans (line numbers kept)."""
    return _INLINE_CODE.sub(lambda m: "\n" * m.group(0).count("\n"), strip_fences(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger): the rendered text lower-cased, every
    character that is not a letter, digit, space, `-` or `_` dropped, each space made a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", text)  # _emphasis_, not snake_case
    text = text.strip().lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a page has: its headings' slugs (repeats numbered as GitHub does) and HTML ids."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    text = path.read_text(encoding="utf-8")
    for line in strip_fences(text).splitlines():  # a heading's `code` is part of its anchor
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        found.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    found.update(_HTML_ID.findall(text))
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image on a page, outside code."""
    text = strip_code(path.read_text(encoding="utf-8"))
    found = []
    for pattern in (_INLINE_LINK, _REF_DEF, _HTML_ATTR):
        for m in pattern.finditer(text):
            target = m.group(1).strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            found.append((text.count("\n", 0, m.start()) + 1, target))
    return sorted(found)


def broken_links(path: Path) -> list[str]:
    problems = []
    for line, target in links(path):
        if not target or _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto, ...: not checked (no network)
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{_rel(path)}:{line}: {target}"
        if not dest.exists():
            shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
            problems.append(f"{where}: no such file {shown}")
            continue
        if (
            anchor
            and dest.suffix == ".md"
            and dest.is_file()
            and unquote(anchor).lower() not in anchors(dest)
        ):
            problems.append(f"{where}: no heading with anchor #{anchor} in {_rel(dest)}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=_rel)
def test_links_and_images_resolve(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", [p for p in pages() if not p.is_relative_to(NOTES)], ids=_rel)
def test_user_pages_do_not_speak_of_the_work_log(page: Path) -> None:
    hits = [
        f"{_rel(page)}:{n}: {m.group(0)!r} in: {line.strip()}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for m in FORBIDDEN.finditer(line)
    ]
    assert not hits, "words for the research log (docs/notes/), not a user page:\n" + "\n".join(hits)


def test_pages_exist() -> None:
    assert (ROOT / "README.md").is_file() and (ROOT / "docs" / "index.md").is_file()


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Install", "install"),
        ("`albert predict`", "albert-predict"),
        (
            "int8: `albert_lm.quantize_int8(model)` and `predict --int8`",
            "int8-albert_lmquantize_int8model-and-predict---int8",
        ),
        ("What's measured? (CPU, 2 cores)", "whats-measured-cpu-2-cores"),
        ("Table 4 — what to share", "table-4--what-to-share"),
        ("See [the guide](guide.md)", "see-the-guide"),
        ("**Bold** and *em*", "bold-and-em"),
    ],
)
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_checker_finds_a_broken_link_and_anchor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Top\n\n## Same\n\n## Same\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#top) [dup](a.md#same-1) [gone](missing.md) [bad](a.md#nowhere) ![img](i.png)\n"
        "[web](https://example.com/x) `[code](nope.md)`\n\n```\n[fenced](nope.md)\n```\n[self](#own)\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert len(problems) == 4, problems
    assert any("missing.md" in p for p in problems) and any("#nowhere" in p for p in problems)
    assert any("i.png" in p for p in problems) and any("#own" in p for p in problems)


def test_the_readme_is_a_front_page() -> None:
    """The README answers "should I use this, and what do I get" before any command: a short opening that
    names the ready model and where every figure is; a few figures, each with the page that measured it
    (the rest on docs/results.md); no dates (results pages carry them); a length a reader finishes."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    opening = text[: text.index("## Install")]
    assert len(opening.split()) <= 300, "the opening is a screen, not a page"
    assert "models/albert-minilm-small-en" in opening and "docs/results.md" in opening
    section = text[text.index("## What you get") :]
    rows = [
        ln for ln in section[: section.index("\n## ")].splitlines() if ln.startswith("| ") and "---" not in ln
    ]
    assert 1 < len(rows) <= 8, "a handful of figures; the full table is docs/results.md"
    assert all(re.search(r"\]\(docs/[a-z_]+\.md", row) for row in rows[1:]), "each figure links its page"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dates belong to the results pages"
    assert len(strip_fences(text).split()) <= 1500
    assert "](results.md)" in (ROOT / "docs" / "index.md").read_text(
        encoding="utf-8"
    )  # the full table's page
