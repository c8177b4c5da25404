"""albert-lm: ALBERT (Lan et al., ICLR 2020) end to end in PyTorch."""

from albert_lm.config import PRESETS, AlbertConfig

__version__ = "0.1.0"

__all__ = ["PRESETS", "AlbertConfig", "__version__"]
