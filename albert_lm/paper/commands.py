"""`albert reproduce CLAIM`: the paper stage's command (registered by `albert_lm.cli`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from albert_lm.paper.claims import CLAIMS
from albert_lm.paper.config import SPEED, ReproduceConfig
from albert_lm.settings import add_config_option, add_options, merge_settings, option_values


def reproduce_options(p: argparse.ArgumentParser) -> None:
    titles = [
        f"{c.name}: {c.title} (cells {', '.join(cell.name for cell in c.cells)})" for c in CLAIMS.values()
    ]
    titles.append(f"{SPEED}: Table 2, training speed against BERT-large (random batches; no --data)")
    p.add_argument("claim", choices=[*CLAIMS, SPEED], metavar="CLAIM", help="; ".join(titles))
    add_config_option(p, "reproduce")
    add_options(
        p,
        ReproduceConfig,
        skip=("claim", "model_overrides"),
        suppress=True,
        metavars={"data": "DIR", "nsp_data": "DIR", "output": "DIR", "seeds": "LIST"},
    )
    p.add_argument(
        "--model-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="model_overrides",
        help="change one model config field in every cell, e.g. hidden_size=256 (repeatable; not a field the "
        "claim's cells set themselves, such as sharing's embedding_size)",
    )


def run_reproduce(args: argparse.Namespace) -> int:
    """reproduce one of the paper's ablations in small pretraining runs on your data, or its speed claim

    Pretrains each cell of the claim (its switch changed, everything else the recipe's, a time budget per
    cell, once per seed), scores all on the same held-out examples, and writes OUTPUT/CLAIM/results.json,
    table.md (beside the paper's figures, with whether each direction reproduced) and CLAIM.png. `speed`
    times Table 2's six models instead (a few pretraining steps of 512 tokens each, on one device, then
    over --workers processes with DDP) and writes OUTPUT/speed/results.json and table.md. An interrupted
    run continues where it stopped when the command is given again."""
    from albert_lm.paper.reproduce import CellStopped, reproduce
    from albert_lm.training.pretrain_config import PretrainConfig

    values = option_values(args, ReproduceConfig)
    values.pop("model_overrides", None)  # the option's list of KEY=VALUE, not yet the field's object
    if args.model_overrides:  # typed ones win over a --config file's
        values["model_overrides"] = PretrainConfig.parse_overrides(args.model_overrides)
    cfg = merge_settings(
        ReproduceConfig, values, args.config, required=() if args.claim == SPEED else ("data",)
    )
    if cfg.claim == SPEED:
        from albert_lm.paper.report import format_speed_table
        from albert_lm.paper.speed_report import reproduce_speed

        try:
            result = reproduce_speed(cfg)
        except KeyboardInterrupt:  # the rows measured are kept (the CLI then says why it stopped)
            print(
                "\nalbert reproduce: the rows measured are kept: the same command measures the others",
                file=sys.stderr,
            )
            raise
        print(format_speed_table(result))
        print(f"written: {Path(cfg.output) / SPEED}/results.json, table.md")
        return 0
    try:
        result = reproduce(cfg)
    except CellStopped as e:  # its checkpoint saved: the way on is this command again, not --resume
        print(f"albert reproduce: {e}", file=sys.stderr)
        return 128 + e.signum  # as the shell reports a process its signal ended
    if result.get("waiting_for"):
        print(f"{result['claim']}: the cells given are done; waiting for {', '.join(result['waiting_for'])}")
        return 0
    from albert_lm.paper.report import format_table

    print(format_table(result))
    print(f"written: {Path(cfg.output) / cfg.claim}/results.json, table.md, {cfg.claim}.png")
    return 0
