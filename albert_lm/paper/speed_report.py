"""`albert reproduce speed`: Table 2's training-speed claim measured on this machine, explained, and compared.

Lan et al. (2020), Table 2: by data throughput against BERT-large (1.0x), BERT-base 4.7x, ALBERT-base 5.6x,
ALBERT-large 1.7x, ALBERT-xlarge 0.6x and ALBERT-xxlarge 0.3x (TPUs, data parallel). ALBERT-large and
BERT-large do nearly the same arithmetic per token (sharing saves parameters, not compute); what differs
scales with the parameters: the optimizer's update over every weight and its two moments, the gradients'
all-reduce between devices (18x fewer bytes), and the embedding (E 128 against 1024).

Every row (albert_lm/paper/speed.py) runs in fresh processes: first each model on one device (all the
threads of the machine), then each on `workers` processes with DDP (gloo on a CPU, NCCL on GPUs), the
threads shared out. A finished row is kept in OUTPUT/speed/rows/ and not measured again, so an interrupted
command continues where it stopped. From the rows:

- tokens per second (all processes' sequences x length / the median step) relative to BERT-large's;
- the phases of a step, and which of them makes ALBERT-large faster or not;
- a slower interconnect, simulated: each process's step without synchronisation plus a ring all-reduce of
  the gradients, 2 (N - 1) / N x bytes / bandwidth, with no overlap (the most a network can cost), and the
  bandwidth below which ALBERT-large is 1.7x BERT-large;
- other batches per device, from the measured phases: forward and backward grow with the batch, the
  update does not.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from albert_lm.files import atomic_write, folder_lock, read_json_object, write_json
from albert_lm.paper.claims import SPEED_TABLE
from albert_lm.paper.config import PHASES, ReproduceConfig
from albert_lm.paper.speed import Row, median_phases

logger = logging.getLogger(__name__)
REFERENCE, CLAIMED = "bert-large", "albert-large"
CLAIM = 1.7


def rows(cfg: ReproduceConfig, device: str, precision: str) -> list[Row]:
    """The rows to measure: every model on one device, then on `workers` processes."""
    cores = os.cpu_count() or 1
    counts = [1] if cfg.workers == 1 else [1, cfg.workers]
    if device == "cuda" and cfg.workers > 1:
        import torch

        if torch.cuda.device_count() < cfg.workers:  # NCCL wants one GPU per process
            logger.warning(
                "%d processes on %d GPU(s): one device only", cfg.workers, torch.cuda.device_count()
            )
            counts = [1]
    return [
        Row(
            name,
            n,
            max(1, cores // n),
            cfg.batch_size,
            cfg.seq_length,
            cfg.timed_steps,
            precision,
            device,
            cfg.model_overrides,
        )
        for n in counts
        for name in cfg.model_list()
    ]


def run_row(row: Row, folder: Path) -> dict[str, Any]:
    """The row's figures: measured earlier with the same settings, or now in fresh processes."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{row.name}.json"
    if file.is_file():
        found = read_json_object(file, "speed row")
        if found.get("row") == asdict(row):
            logger.info("%s: measured earlier, kept", row.name)
            return found
    command = [sys.executable, "-m", "albert_lm.paper.speed", json.dumps(asdict(row)), str(file)]
    if row.processes > 1:
        command[1:3] = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(row.processes),
                        "-m", "albert_lm.paper.speed"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(row.threads)}
    start, log = time.perf_counter(), folder / f"{row.name}.log"
    file.unlink(missing_ok=True)
    with open(log, "w") as stderr:  # the processes' messages, for a row that fails
        code = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr).returncode
    if code != 0 or not file.is_file():
        why = "killed (out of memory?)" if code in (-9, 137) else f"exit {code}"
        logger.warning("%s: %s, left out of the table; its messages: %s", row.name, why, log)
        return {"row": asdict(row), "error": f"{why} (see {log.name})"}
    logger.info("%s: measured in %.0f s", row.name, time.perf_counter() - start)
    return read_json_object(file, "speed row")


def summarize(found: dict[str, Any]) -> dict[str, Any]:
    """A row's figures from its measured steps."""
    row = found["row"]
    out = {
        k: found[k] for k in ("parameters", "gradient_bytes", "peak_memory_mib", "dropout", "embedding_size")
    }
    step = median_phases(found["steps"])
    tokens = row["batch"] * row["seq"] * row["processes"]
    out.update(step=step, tokens_per_s=tokens / step["total"])
    if found["local_steps"]:
        local = median_phases(found["local_steps"])
        out.update(
            local_step=local, allreduce_s=found["allreduce_s"], exposed_comm_s=step["total"] - local["total"]
        )
        n = row["processes"]
        out["allreduce_gbit_s"] = 2 * (n - 1) / n * found["gradient_bytes"] * 8 / found["allreduce_s"] / 1e9
    return out


def relative(table: dict[str, dict[str, Any]]) -> None:
    """Each model's speed against BERT-large's, in place (when BERT-large was measured)."""
    if REFERENCE in table and "tokens_per_s" in table[REFERENCE]:
        for r in table.values():
            if "tokens_per_s" in r:
                r["speedup"] = r["tokens_per_s"] / table[REFERENCE]["tokens_per_s"]


def ring_seconds(gradient_bytes: float, processes: int, gbit_s: float) -> float:
    return 2 * (processes - 1) / processes * gradient_bytes * 8 / (gbit_s * 1e9)


def simulated(table: dict[str, dict[str, Any]], processes: int, bandwidths: list[float]) -> dict[str, Any]:
    """ALBERT-large / BERT-large throughput at each bandwidth (Gbit/s), and where it reaches 1.7x."""
    a, b = table.get(CLAIMED, {}), table.get(REFERENCE, {})
    if "local_step" not in a or "local_step" not in b:
        return {}
    ca, cb = a["local_step"]["total"], b["local_step"]["total"]
    va, vb = (ring_seconds(t["gradient_bytes"], processes, 1.0) for t in (a, b))  # seconds at 1 Gbit/s
    ratios = {f"{g:g}": (cb + vb / g) / (ca + va / g) for g in bandwidths}
    # (cb + vb/g) = 1.7 (ca + va/g)  <=>  g = (vb - 1.7 va) / (1.7 ca - cb)
    if cb >= CLAIM * ca:
        at = "any"  # already 1.7x without any communication
    elif vb > CLAIM * va:
        at = (vb - CLAIM * va) / (CLAIM * ca - cb)
    else:
        at = None
    return {"ratios": ratios, "claim_below_gbit_s": at, "local_ratio": cb / ca}


def by_batch(table: dict[str, dict[str, Any]], batch: int, batches: tuple[int, ...] = (1, 8, 32, 128)):
    """ALBERT-large / BERT-large on one device at other batches: forward and backward scale, the rest not."""
    a, b = table.get(CLAIMED, {}), table.get(REFERENCE, {})
    if "step" not in a or "step" not in b:
        return {}

    def seconds(r: dict[str, Any], n: int) -> float:
        s = r["step"]
        return (s["forward"] + s["backward"]) * n / batch + s["wait_clip"] + s["update"]

    return {str(n): seconds(b, n) / seconds(a, n) for n in batches}


def where_saved(table: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Of the seconds BERT-large's step takes beyond ALBERT-large's, each phase's share (sums to 1)."""
    a, b = table.get(CLAIMED, {}).get("step"), table.get(REFERENCE, {}).get("step")
    if not a or not b or b["total"] <= a["total"]:
        return {}
    return {k: (b[k] - a[k]) / (b["total"] - a["total"]) for k in PHASES}


def verdicts(result: dict[str, Any]) -> list[str]:
    out = []
    one = result["one_device"]
    if "speedup" in one.get(CLAIMED, {}):
        r = one[CLAIMED]["speedup"]
        ok = r >= 0.9 * CLAIM
        how = (
            ("more than the paper's" if r > 1.2 * CLAIM else "as the paper's")
            if ok
            else ("faster, by less than the paper's" if r > 1 else "not faster, against the paper's")
        )
        out.append(f"{'reproduced' if ok else 'NOT reproduced'} on one device: ALBERT-large trains {r:.2f}x "
                   f"as many tokens per second as BERT-large, {how} 1.7x")  # fmt: skip
        if shares := where_saved(one):
            words = {
                "forward": "forward",
                "backward": "backward",
                "wait_clip": "clipping",
                "update": "LAMB's update",
            }
            parts = ", ".join(f"{words[k]} {v:.0%}" for k, v in shares.items())
            out.append(f"where ALBERT-large's step saves time on one device: {parts}")
        measured = [n for n in SPEED_TABLE if "speedup" in one.get(n, {})]
        ours = sorted(measured, key=lambda n: -one[n]["speedup"])
        paper = sorted(measured, key=lambda n: -SPEED_TABLE[n][1])
        out.append(f"{'reproduced' if ours == paper else 'NOT reproduced'}: the order by speed, "
                   f"{' > '.join(ours)} (paper: {' > '.join(paper)})")  # fmt: skip
    many, n = result.get("processes_table", {}), result["processes"]
    if "speedup" in many.get(CLAIMED, {}):
        r = many[CLAIMED]["speedup"]
        out.append(f"{'reproduced' if r >= 0.9 * CLAIM else 'NOT reproduced'} on {n} processes of this "
                   f"machine: ALBERT-large {r:.2f}x BERT-large")  # fmt: skip
    sim = result.get("simulated") or {}
    at = sim.get("claim_below_gbit_s")
    if at == "any":
        out.append(f"with {n} processes ALBERT-large is {sim['local_ratio']:.2f}x BERT-large before any "
                   "communication (steps without synchronisation): 1.7x holds at every bandwidth")  # fmt: skip
    elif at is not None:
        out.append(f"with {n} processes 1.7x appears once the interconnect is slower than {at:.2f} Gbit/s "
                   "(simulated: each process's step, then a ring all-reduce of the gradients, no overlap)")  # fmt: skip
    return out


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the system has none: Windows)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_machine(load: dict[str, Any]) -> str:
    """Why the timings cannot be trusted, from the load average before and after the measurement ("" when
    they can): before, any load over the cores is other work; after, the measurement's own processes (one
    thread per core) count in it too, so only a load over twice the cores says that other work shared them."""
    cores, before, after = load["cores"], load.get("before"), load.get("after")
    if before is not None and before > cores:
        when = f"{before:.1f} before the measurement"
    elif after is not None and after > 2 * cores:
        when = f"{after:.1f} after the measurement (its own processes count for about {cores})"
    else:
        return ""
    return (
        f"the timings are not trustworthy: the machine was busy (load average {when}, on {cores} cores), "
        "other work shared the cores and the speeds can change from one run to the next; measure again on an "
        "idle machine with another --output (a row measured here is kept and not measured again)"
    )


def reproduce_speed(cfg: ReproduceConfig) -> dict[str, Any]:
    """Measure every row (or find it measured), then write results.json and table.md."""
    from albert_lm.kernels.device import pick_device, resolved_precision
    from albert_lm.paper.report import format_speed_table, machine

    device = pick_device(cfg.device)
    precision = resolved_precision(cfg.precision, device)
    out = Path(cfg.output) / "speed"
    with folder_lock(out):
        # the load average counts the whole machine's processes: against all its cores, not this process's share
        load: dict[str, Any] = {"before": load_average(), "cores": os.cpu_count() or 1}
        todo = rows(cfg, device.type, precision)
        measured: dict[int, dict[str, dict[str, Any]]] = {}
        for i, row in enumerate(todo, 1):
            logger.info("speed: %s on %d process(es), %d of %d", row.config, row.processes, i, len(todo))
            found = run_row(row, out / "rows")
            measured.setdefault(row.processes, {})[row.config] = (
                summarize(found) if "steps" in found else found
            )
        for table in measured.values():
            relative(table)
        result: dict[str, Any] = {
            "claim": "speed", "machine": machine(device), "device": device.type, "precision": precision,
            "batch": cfg.batch_size, "seq": cfg.seq_length, "steps": cfg.timed_steps, "processes": cfg.workers,
            "threads": {str(n): todo[0].threads if n == 1 else todo[-1].threads for n in measured},
            "one_device": measured[1],
            "paper": {k: {"parameters": p, "speedup": s} for k, (p, s) in SPEED_TABLE.items()},
        }  # fmt: skip
        if cfg.workers in measured and cfg.workers > 1:
            result["processes_table"] = measured[cfg.workers]
            result["simulated"] = simulated(measured[cfg.workers], cfg.workers, cfg.bandwidth_list())
        result["by_batch"] = by_batch(measured[1], cfg.batch_size)
        result["verdicts"] = verdicts(result)
        load["after"] = load_average()
        result["load_average"] = load
        if note := busy_machine(load):
            result["busy"] = note
            logger.warning("speed: %s", note)
        write_json(out / "results.json", result)
        atomic_write(out / "table.md", format_speed_table(result) + "\n")
    return result
