"""Does the demo learn more from more text at its fixed 2500 steps? (docs/notes/pretraining_plateau.md section 12)

Builds two larger corpora from the shared Gutenberg books (the Project Gutenberg header and footer
stripped, CRLF -> LF, as the bundled five were made): `small`, the 27 books of MANIFEST.tsv's small tier
(9.3 MB; the bundled five are among them), and `small+20`, those and the twenty novels below (19.6 MB).
Each gets `albert demo`'s whole pipeline and recipe (a 5000-piece tokenizer trained on it, 10% of its
blocks held out, 2500 steps) in one process with one thread; OUTPUT/NAME/demo_results.json has held-out
MLM accuracy on the corpus's own held-out blocks, the unigram guess and the probes.

    python benchmarks/experiments/demo_corpus_size.py --data ../shared/data --output runs/demo-corpus [--corpora small]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from albert_lm.data.corpus import gutenberg_body
from albert_lm.demo import run_demo

NOVELS = [
    "Alcott_Louisa_May__An_Old_Fashioned_Girl.txt",
    "Montgomery_L_M_Lucy_Maud__The_Golden_Road.txt",
    "Christie_Agatha__The_Mysterious_Affair_at_Styles.txt",
    "Wodehouse_P_G_Pelham_Grenville__Jill_the_Reckless.txt",
    "Wodehouse_P_G_Pelham_Grenville__Piccadilly_Jim.txt",
    "Conrad_Joseph__Lord_Jim.txt",
    "Hardy_Thomas__Far_from_the_Madding_Crowd.txt",
    "Doyle_Arthur_Conan__The_Firm_of_Girdlestone.txt",
    "London_Jack__The_Call_of_the_Wild.txt",
    "Kipling_Rudyard__The_Jungle_Book.txt",
    "Stevenson_Robert_Louis__The_Black_Arrow_A_Tale_of_Two_Roses.txt",
    "Baum_L_Frank_Lyman_Frank__The_Land_of_Oz.txt",
    "Dickens_Charles__The_Old_Curiosity_Shop.txt",
    "Burnett_Frances_Hodgson__Haworth_s.txt",
    "Wells_H_G_Herbert_George__The_Wheels_of_Chance_A_Bicycling_Idyll.txt",
    "Chesterton_G_K_Gilbert_Keith__The_Innocence_of_Father_Brown.txt",
    "Henty_G_A_George_Alfred__Beric_the_Briton_a_Story_of_the_Roman_Invasion.txt",
    "Alger_Horatio_Jr__Andy_Gordon_Or_The_Fortunes_of_A_Young_Janitor.txt",
    "Trollope_Anthony__Kept_in_the_Dark.txt",
    "Hawthorne_Nathaniel__Twice_Told_Tales.txt",
]


def write_corpus(books: Path, names: list[str], folder: Path) -> list[Path]:
    """Each book's Gutenberg body as FOLDER/NAME (LF line endings), written once."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        target = folder / name
        if not target.is_file():
            start, end = gutenberg_body(books / name)
            text = (books / name).read_bytes()[start:end].decode("utf-8").replace("\r\n", "\n").strip()
            tmp = target.with_suffix(".tmp")
            tmp.write_text(text + "\n", encoding="utf-8")
            tmp.rename(target)
        out.append(target)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=Path("../shared/data"))
    p.add_argument("--output", type=Path, default=Path("runs/demo-corpus"))
    p.add_argument("--corpora", default="small,small+20", help="comma-separated: small, small+20")
    args = p.parse_args()
    torch.set_num_threads(1)
    gutenberg = args.data / "pretrain" / "gutenberg"
    rows = [line.split("\t") for line in (gutenberg / "MANIFEST.tsv").read_text().splitlines()]
    small = [r[0] for r in rows if len(r) > 1 and r[1] == "small"]
    corpora = {"small": small, "small+20": small + NOVELS}
    for name in args.corpora.split(","):
        if name not in corpora:
            raise SystemExit(f"--corpora: unknown corpus {name!r} (expected small or small+20)")
        files = write_corpus(gutenberg / "books", corpora[name], args.output / "corpus" / name)
        run_demo(args.output / name, files=files)


if __name__ == "__main__":
    main()
