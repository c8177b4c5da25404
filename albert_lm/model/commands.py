"""`albert convert`: the model stage's command (registered by `albert_lm.cli`).

Like every command, it imports its module only when it runs: building the parser stays free of torch.
"""

from __future__ import annotations

import argparse

from albert_lm.model.config import PRESETS


def convert_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from-tf",
        required=True,
        metavar="SRC",
        help="google-research's release: the .tar.gz as downloaded, its extracted folder, a checkpoint "
        "prefix (.../model.ckpt-best) or a TF-Hub module folder",
    )
    p.add_argument(
        "--output", required=True, metavar="DIR", help="new or empty folder for the converted model"
    )
    p.add_argument(
        "--model-config", metavar="FILE", help="albert_config.json, when SRC has none beside the checkpoint"
    )
    # Its former name; every other command's --config is a settings file. Hidden from --help, still taken.
    p.add_argument("--config", dest="model_config", action=_RenamedConfig, help=argparse.SUPPRESS)
    p.add_argument(
        "--tokenizer", metavar="FILE", help="the SentencePiece model (30k-clean.model), when SRC has none"
    )
    p.add_argument("--overwrite", action="store_true", help="replace what the output folder holds")


class _RenamedConfig(argparse.Action):
    """convert's former --config (a model config, where every other command's is a settings file):
    stored as --model-config, with a warning."""

    def __call__(
        self, parser: object, namespace: argparse.Namespace, values: object, option: object = None
    ) -> None:
        import logging

        logging.getLogger("albert_lm").warning("--config is now --model-config (albert convert)")
        setattr(namespace, self.dest, values)


def run_convert(args: argparse.Namespace) -> int:
    """convert a released google-research ALBERT (TF1 checkpoint or TF-Hub module) to PyTorch, no TensorFlow

    Reads the released v1/v2 checkpoints (albert_base_v2.tar.gz and the others, or their TF-Hub modules)
    with albert-lm's own reader of TensorFlow's checkpoint format, every tensor's checksum verified, and
    writes a transformers-layout folder (config.json, model.safetensors with the MLM and SOP heads where
    the checkpoint has them, spiece.model, tokenizer_config.json) that every albert command takes as
    --model and transformers loads. Optimizer slots are skipped. See docs/released.md."""
    from albert_lm.model.convert_tf import convert_tf

    r = convert_tf(
        args.from_tf,
        args.output,
        config=args.model_config,
        tokenizer=args.tokenizer,
        overwrite=args.overwrite,
    )
    skipped = f"; {len(r.skipped)} optimizer slots skipped" if r.skipped else ""
    print(
        f"{r.folder}: {r.architecture}, {r.parameters:,} parameters in {r.tensors} tensors "
        f"from the {r.kind}{skipped}"
    )
    return 0


# --------------------------------------------------------------------------- albert params
def params_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", action="append", choices=PRESETS, help="count only these presets (repeatable)")


def run_params(args: argparse.Namespace) -> int:
    """print parameter counts for the presets and the paper's ablation grid

    Parameter counts of the presets (paper Table 1) and of the base-size ablation grid (embedding size E
    x cross-layer sharing, paper Tables 3 and 4), counted on the meta device."""
    from albert_lm.model.params import format_parameter_tables

    presets = list(dict.fromkeys(args.preset)) if args.preset else None  # each once, in the order given
    print(format_parameter_tables(presets))
    return 0
