"""The random-initialisation arm of a pretrained-vs-random comparison: a model's architecture, untrained
(torch seed 1), saved with the same spiece.model, so both arms fine-tune alike.

    python benchmarks/experiments/random_init.py runs/pretrained runs/random   # a model folder's architecture
    python benchmarks/experiments/random_init.py --recipe gpu-10min --tokenizer tok/ runs/random   # a recipe's
"""

import argparse
import shutil
from pathlib import Path

import torch

from albert_lm import AlbertConfig, AlbertForPreTraining
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.settings import recipe
from albert_lm.training.model_init import build_model_config
from albert_lm.training.pretrain_config import PretrainConfig

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("source", nargs="?", help="a model folder (config.json, spiece.model)")
p.add_argument("output")
p.add_argument("--recipe", help="instead of a model folder: the model a recipe's pretraining builds")
p.add_argument(
    "--tokenizer", help="with --recipe: the tokenizer folder (its vocabulary size sets the model's)"
)
args = p.parse_args()
torch.manual_seed(1)
if args.recipe:
    if not args.tokenizer:
        p.error("--recipe needs --tokenizer")
    spiece = Path(args.tokenizer) / "spiece.model"
    cfg = PretrainConfig.load(None, recipe(args.recipe)["pretrain"], output=args.output)
    config = build_model_config(cfg, AlbertTokenizer.from_pretrained(spiece).vocab_size)
else:
    if not args.source:
        p.error("give a model folder, or --recipe and --tokenizer")
    spiece = Path(args.source) / "spiece.model"
    config = AlbertConfig.from_pretrained(args.source)
AlbertForPreTraining(config).save_pretrained(args.output)
shutil.copy(spiece, Path(args.output) / "spiece.model")
