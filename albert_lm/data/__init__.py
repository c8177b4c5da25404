"""Text to pretraining examples: where the text comes from (`sources`: files, folders, globs; compressed,
JSON Lines, Parquet; `records`), corpus reading (`corpus`, `layout` for --format auto, `unspaced` for text
written without spaces), the SentencePiece tokenizer (`tokenizer`, `normalization`, `truncation`; BERT's
WordPiece behind the same interface: `wordpiece`), its training (`tokenizer_training`, `languages` for
each language's rule), n-gram masking, SOP/NSP example building, sharded data on disk, and the dataset the
training loop reads.

Nothing here imports torch at import time except `dataset` (data-creation workers stay light)."""

# BERT's WordPiece vocabulary is one of the tokenizers `AlbertTokenizer.from_pretrained` reads: its module
# adds it to `AlbertTokenizer.other_kinds` when imported, here, before any tokenizer is loaded.
from albert_lm.data import wordpiece  # noqa: F401
