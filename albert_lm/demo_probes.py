"""The fill-mask probes of `albert demo`: sentences with one [MASK] and the words that count as right when
one of them is in the model's top 5, per language (kept apart from demo.py, which imports torch, so
that the command line can list the languages quickly)."""

from __future__ import annotations

__all__ = ["DEMO_LANGUAGES", "LANGUAGE_PROBES", "MORE_PROBES", "PROBES"]

# Five probes fixed before any tuning (issue 12): a sentence with one [MASK] and the words that count as
# right when one of them is in the model's top 5.
PROBES: list[tuple[str, tuple[str, ...]]] = [
    ("He put his hand into his [MASK] and took out a letter.", ("pocket",)),
    ("She opened the [MASK] and walked into the room.", ("door",)),
    ("The sun rose in the [MASK] and set in the west.", ("east",)),
    ("He drank a cup of [MASK] before breakfast.", ("tea", "coffee", "water", "milk")),
    ("They lived in a small [MASK] near the river.", ("house", "cottage", "village", "town")),
]
# Twenty more, a second opinion (written 2026-11-25 before any of that day's demo variants had finished):
# with five probes one lucky or unlucky answer moves the count by 20 points, and a recipe or corpus chosen
# on the five could fit them alone. Same rule: an expected word in the top 5.
MORE_PROBES: list[tuple[str, tuple[str, ...]]] = [
    ("She wrote a [MASK] to her mother.", ("letter", "note")),
    ("He sat down at the [MASK] and ate his dinner.", ("table",)),
    ("She looked out of the [MASK] at the garden.", ("window",)),
    ("He took off his [MASK] and bowed.", ("hat", "cap")),
    ("They went to [MASK] on Sunday morning.", ("church",)),
    ("The ship sailed across the [MASK].", ("sea", "ocean")),
    ("He climbed up the [MASK] to his room.", ("stairs", "ladder")),
    ("The birds were singing in the [MASK].", ("trees", "garden", "wood", "woods", "forest")),
    ("She put the baby to [MASK].", ("bed", "sleep")),
    ("He rode his [MASK] into the town.", ("horse", "pony", "bicycle")),
    ("Her eyes filled with [MASK].", ("tears",)),
    ("He lit his [MASK] and smoked in silence.", ("pipe", "cigar", "cigarette")),
    ("The old man shook his [MASK] sadly.", ("head", "fist")),
    ("I have not seen him for many [MASK].", ("years", "days", "months", "weeks")),
    ("She knocked at the [MASK].", ("door", "gate", "window")),
    ("The king and the [MASK] sat on their thrones.", ("queen", "prince", "princess")),
    ("He paid ten [MASK] for the horse.", ("pounds", "dollars", "shillings", "guineas")),
    ("The dog [MASK] at the stranger.", ("barked", "growled", "snarled")),
    ("It was a cold [MASK] in December.", ("day", "night", "morning", "evening", "winter")),
    ("He opened the book and began to [MASK].", ("read", "write")),
]


# Probes for the other languages' demos (`albert demo --language CODE --text ...`), written before any of
# their runs, on the same rule: an expected word (for Chinese, a piece: words have no spaces) in the top 5.
# Expected words as the books spell them (German of ~1900 wrote Thür and Thee too); the tokenizer's
# lower-casing is applied to both sides before comparing.
LANGUAGE_PROBES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "de": [
        ("Er öffnete die [MASK] und trat in das Zimmer.", ("Tür", "Thür", "Thüre", "Türe")),
        ("Sie tranken zusammen eine Tasse [MASK].", ("Kaffee", "Tee", "Thee", "Milch")),
        ("Sie setzten sich an den [MASK] und aßen.", ("Tisch",)),
        ("Er nahm seinen [MASK] und ging hinaus.", ("Hut", "Mantel", "Stock")),
        ("Sie schrieb einen [MASK] an ihre Mutter.", ("Brief",)),
    ],
    "fr": [
        ("Il ouvrit la [MASK] et entra dans la chambre.", ("porte",)),
        ("Elle but une tasse de [MASK].", ("thé", "café", "lait", "chocolat")),
        ("Ils s'assirent à [MASK] pour dîner.", ("table",)),
        ("Il mit la main dans sa [MASK] et en tira une lettre.", ("poche",)),
        ("Elle écrivit une [MASK] à sa mère.", ("lettre",)),
    ],
    "ru": [
        ("Он открыл [MASK] и вошёл в комнату.", ("дверь",)),
        ("Она выпила чашку [MASK].", ("чаю", "чая", "кофе", "молока")),
        ("Он сел за [MASK] и начал писать.", ("стол",)),
        ("Она написала [MASK] матери.", ("письмо",)),
        ("Он снял [MASK] и поклонился.", ("шляпу", "шапку", "фуражку")),
    ],
    "zh": [
        ("兩人騎著[MASK]出城去了。", ("馬",)),
        ("他拿起筆來，寫了一封[MASK]。", ("書", "信")),
        ("我有一句[MASK]要對你說。", ("話",)),
        ("他們一同喝了幾杯[MASK]。", ("酒", "茶")),
        ("天色已晚，眾人各自回[MASK]歇息。", ("房", "去", "家")),
    ],
}
DEMO_LANGUAGES = ("en", *LANGUAGE_PROBES)
