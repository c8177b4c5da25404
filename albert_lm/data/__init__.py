"""Text to pretraining examples: where the text comes from (`sources`: files, folders, globs; compressed,
JSON Lines, Parquet; `records`), corpus reading (`corpus`, `layout` for --format auto, `unspaced` for text
written without spaces), the SentencePiece tokenizer (`tokenizer`, `normalization`), its training
(`tokenizer_training`, `languages` for each language's rule), n-gram masking, SOP/NSP example building,
sharded data on disk, and the dataset the training loop reads.

Nothing here imports torch at import time except `dataset` (data-creation workers stay light)."""
