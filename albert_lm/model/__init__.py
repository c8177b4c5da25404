"""The ALBERT model family: its config and presets, the encoder, the task heads and their outputs,
weight files, transformers interop and parameter counts."""
