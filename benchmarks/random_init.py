"""The random-initialisation arm of a pretrained-vs-random comparison: a model folder's architecture,
untrained (torch seed 1), saved with the same spiece.model, so both arms fine-tune alike.

    python benchmarks/random_init.py runs/pretrained runs/random
"""

import shutil
import sys

import torch

from albert_lm import AlbertConfig, AlbertForPreTraining

src, dst = sys.argv[1], sys.argv[2]
torch.manual_seed(1)
AlbertForPreTraining(AlbertConfig.from_pretrained(src)).save_pretrained(dst)
shutil.copy(f"{src}/spiece.model", f"{dst}/spiece.model")
