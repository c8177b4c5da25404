"""Text to pretraining examples: corpus reading, the SentencePiece tokenizer and its training, n-gram
masking, SOP/NSP example building, sharded data on disk, and the dataset the training loop reads.

Nothing here imports torch at import time except `dataset` (data-creation workers stay light)."""
