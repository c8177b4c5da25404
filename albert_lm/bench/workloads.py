"""The workloads of `albert bench`: each times albert-lm and transformers on the same weights.

Timing helpers (interleaved repeats), model FLOPs and the machine's matrix-multiply limits, one row
builder per workload (inference, pretraining step, SST-2 end to end) and the ablations that switch
one of our speed choices off at a time. `albert_lm.bench.runner` runs them as a suite and prints the table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch
import torch.nn.functional as F

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.kernels import linear as kernels
from albert_lm.kernels import onednn
from albert_lm.model.config import AlbertConfig

if TYPE_CHECKING:
    pass

SIDES = ("ours", "theirs")


# --------------------------------------------------------------------------- timing
def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each function, alternating them call by call after `warmup` rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(_timed(fn))
    return times


def _autocast(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# --------------------------------------------------------------------------- FLOPs and GEMM limits
def encoder_flops(config: AlbertConfig, batch: int, seq: int) -> float:
    """Forward FLOPs of the encoder's matrix multiplies (projection, L layers, attention scores)."""
    h, i, tokens = config.hidden_size, config.intermediate_size, batch * seq
    per_layer = 2 * tokens * (3 * h * h + h * h + 2 * h * i) + 2 * 2 * batch * seq * seq * h
    layers = config.num_hidden_layers * config.inner_group_num
    projection = 2 * tokens * config.embedding_size * h if config.has_projection else 0
    return float(layers * per_layer + projection)


class GemmPath(TypedDict):
    gflops: float
    dtype: str  # "fp32" or "bf16"


class GemmLimits(TypedDict):
    paths: dict[str, GemmPath]
    limits: dict[str, float]  # the best path's GFLOP/s per dtype


def gemm_limits(
    config: AlbertConfig, tokens: int = 1024, repeats: int = 10, dtypes: Sequence[str] = ("fp32", "bf16")
) -> GemmLimits:
    """GFLOP/s per path on the encoder's three matrix shapes, for the precisions `dtypes`; `limit` per
    dtype is the best path."""
    h, i = config.hidden_size, config.intermediate_size
    shapes = [(tokens, h, 3 * h), (tokens, h, i), (tokens, i, h)]
    paths: dict[str, GemmPath] = {}

    def rate(fn, flops: float) -> float:
        return flops / statistics.median(interleaved({"f": fn}, repeats, 2)["f"]) / 1e9

    for name, dtype, path in (
        ("fp32 F.linear (MKL here; what nn.Linear uses)", torch.float32, "flinear"),
        ("fp32 oneDNN", torch.float32, "onednn"),
        ("fp32 oneDNN, packed weights", torch.float32, "packed"),
        ("bf16 F.linear (what autocast uses)", torch.bfloat16, "flinear"),
        ("bf16 oneDNN", torch.bfloat16, "onednn"),
        ("bf16 oneDNN, packed weights", torch.bfloat16, "packed"),
    ):
        if ("bf16" if dtype == torch.bfloat16 else "fp32") not in dtypes:
            continue  # a precision the comparison does not run
        if (path == "onednn" and not (kernels.enabled() and onednn.primitive_works(dtype))) or (
            path == "packed" and not kernels.can_pack(dtype)
        ):
            continue  # this primitive does not exist on this CPU (e.g. bf16 below AVX-512)
        rates = []
        for m, k, n in shapes:
            x, w, b = (
                torch.randn(m, k, dtype=dtype),
                torch.randn(n, k, dtype=dtype),
                torch.zeros(n, dtype=dtype),
            )
            if path == "flinear":
                fn = lambda x=x, w=w, b=b: F.linear(x, w, b)  # noqa: E731
            else:
                if path == "packed":
                    w = onednn.pack(w, m)
                fn = lambda x=x, w=w, b=b: onednn.mm(x, w, b)  # noqa: E731
            rates.append(rate(fn, 2.0 * m * k * n))
        paths[name] = {
            "gflops": statistics.mean(rates),
            "dtype": "bf16" if dtype == torch.bfloat16 else "fp32",
        }
    limits: dict[str, float] = {}
    for dt in ("fp32", "bf16"):
        candidates = [p["gflops"] for p in paths.values() if p["dtype"] == dt]
        if candidates:
            limits[dt] = max(candidates)
    return {"paths": paths, "limits": limits}


# --------------------------------------------------------------------------- rows
@dataclass
class Row:
    workload: str
    precision: str
    unit: str
    ours: list[float]  # seconds per repeat
    theirs: list[float]
    work: float  # tokens (or sentences) per repeat
    flops: float = 0.0  # model FLOPs per repeat, for the limit column
    check: str = ""
    rss_mib: dict[str, float] = field(default_factory=dict)

    def rate(self, ts: list[float]) -> float:
        return self.work / statistics.median(ts)

    @property
    def ratio(self) -> float:
        return self.rate(self.ours) / self.rate(self.theirs) if self.theirs else float("nan")

    def limit_fraction(self, limits: dict[str, float]) -> float | None:
        if not self.flops or self.precision not in limits:
            return None
        return self.flops / statistics.median(self.ours) / 1e9 / limits[self.precision]

    def as_dict(self, limits: dict[str, float]) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            ours_rate=self.rate(self.ours),
            theirs_rate=self.rate(self.theirs) if self.theirs else None,
            ratio=self.ratio,
            limit_fraction=self.limit_fraction(limits),
        )
        return d


def _random_ids(vocab: int, batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(5, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def pretraining_batch(vocab: int, batch: int, seq: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random ids with 15% of the tokens masked (never [CLS]), two segments, random SOP labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    masked = torch.rand(batch, seq, generator=g) < 0.15
    masked[:, 0] = False
    return {
        "input_ids": torch.where(masked, torch.full_like(ids, 4), ids),
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous(),
        "labels": torch.where(masked, ids, torch.full_like(ids, IGNORE_INDEX)),
        "sentence_order_label": torch.randint(0, 2, (batch,), generator=g),
    }


def train_step(
    model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], precision: str, device: str = "cpu"
) -> Callable[[], None]:
    """One pretraining step as `albert pretrain` takes it, through the training loop's own step
    (`albert_lm.training.loop.train_step`): loss, backward, clip at 1.0, LAMB, zero grads."""
    from albert_lm.training.loop import train_step as loop_step
    from albert_lm.training.loop_settings import LoopSettings
    from albert_lm.training.optim import build_optimizer

    opt = build_optimizer(model, "lamb", lr=1e-5)
    cfg, where = LoopSettings(precision=precision), torch.device(device)  # type: ignore[arg-type]
    no_stats = torch.zeros(1, dtype=torch.float64, device=where)

    def run() -> None:
        loop_step(model, opt, None, [None], cfg, where, loss=lambda _: (loss_fn(), no_stats))

    return run


@dataclass(frozen=True)
class Workload:
    """One row of the comparison: what runs, on how much input."""

    kind: str  # "inference" | "pretraining" | "sst2"
    batch: int = 0
    seq: int = 0

    @property
    def name(self) -> str:
        if self.kind == "sst2":
            return "SST-2 dev end to end (872 sentences)"
        label = "inference" if self.kind == "inference" else "pretraining step"
        return f"{label} {self.batch} x {self.seq}"

    def as_args(self) -> list[str]:
        return [self.kind, str(self.batch), str(self.seq)]


def write_weights(workload: Workload, config: AlbertConfig, folder: Path, data: Path | None) -> None:
    """Our model with seeded random weights, saved in transformers' layout: both sides load this folder."""
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.model.encoder import AlbertModel
    from albert_lm.model.heads import AlbertForPreTraining, AlbertForSequenceClassification

    torch.manual_seed(0)
    if workload.kind == "inference":
        spiece = data / "tokenizer" / "albert-30k" / "spiece.model" if data else None
        if spiece and spiece.is_file():  # the ONNX rows: `albert export` ships a tokenizer, so needs one,
            # and checks that it is the model's: the embedding gets one row a piece
            with contextlib.suppress(ValueError, OSError):  # unreadable: the worker's export says so
                config = dataclasses.replace(
                    config, vocab_size=AlbertTokenizer.from_pretrained(spiece).vocab_size
                )
        AlbertModel(config).save_pretrained(folder)
        if spiece and spiece.is_file():
            shutil.copy(spiece, folder / "spiece.model")
    elif workload.kind == "pretraining":
        AlbertForPreTraining(config).save_pretrained(folder)
    else:
        assert data is not None
        tokenizer = AlbertTokenizer.from_pretrained(data / "tokenizer" / "albert-30k" / "spiece.model")
        config = dataclasses.replace(config, num_labels=2, vocab_size=tokenizer.vocab_size)
        AlbertForSequenceClassification(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)


def runner(
    workload: Workload, side: str, precision: str, folder: Path, data: Path | None
) -> tuple[Callable[[], Any], Callable[[], torch.Tensor]]:
    """(run one repeat, the output to check) for one side, its model loaded from `folder`.

    ours: albert-lm as its commands use it; theirs: transformers with its own classes and tokenizer.
    """
    import transformers

    if workload.kind == "inference":
        from albert_lm.model.encoder import AlbertModel

        if precision.startswith("onnx") and side == "ours":
            return _onnx_runner(workload, precision, folder)
        cls = AlbertModel if side == "ours" else transformers.AlbertModel
        model = cls.from_pretrained(folder).eval()
        if precision == "int8" and side == "ours":  # the int8 rows: ours quantized, theirs fp32
            from albert_lm.deploy.int8 import quantize_int8

            model = quantize_int8(model)
        ids = _random_ids(model.config.vocab_size, workload.batch, workload.seq)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

        def infer() -> torch.Tensor:
            with torch.inference_mode(), _autocast(precision):
                return model(**inputs).last_hidden_state

        return infer, lambda: infer().float()
    if workload.kind == "pretraining":
        return _pretraining_runner(workload, side, precision, folder)
    return _sst2_runner(side, precision, folder, data)


def _onnx_runner(workload: Workload, precision: str, folder: Path):
    """ONNX Runtime on `albert export`'s graph of the same weights: fp32 (`onnx`) or its int8 file."""
    import numpy as np
    import onnxruntime as ort

    from albert_lm.deploy.export import export_onnx

    out = folder.parent / "onnx"
    export_onnx(folder, out, int8=precision == "onnx-int8", overwrite=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()  # as many as the transformers side uses
    file = out / ("model.int8.onnx" if precision == "onnx-int8" else "model.onnx")
    session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
    ids = _random_ids(AlbertConfig.from_pretrained(folder).vocab_size, workload.batch, workload.seq)
    feed = {
        "input_ids": ids.numpy(),
        "attention_mask": np.ones(tuple(ids.shape), dtype=np.int64),
        "token_type_ids": np.zeros(tuple(ids.shape), dtype=np.int64),
    }

    def infer() -> torch.Tensor:
        return torch.from_numpy(session.run(None, feed)[0])

    return infer, infer


def _pretraining_runner(workload: Workload, side: str, precision: str, folder: Path):
    import transformers

    from albert_lm.model.heads import AlbertForPreTraining
    from albert_lm.training.objective import PretrainingObjective

    if side == "ours":
        ours = AlbertForPreTraining.from_pretrained(folder).train()
        assert isinstance(ours, AlbertForPreTraining)  # from_pretrained builds the class it is called on
        model: torch.nn.Module = ours
        ours.sop_classifier.dropout.p = 0.0  # what `albert pretrain` does (google-research has none)
        data = pretraining_batch(ours.config.vocab_size, workload.batch, workload.seq)
        objective = PretrainingObjective(ours, "sop")  # MLM logits at the masked positions only
        loss_fn = lambda: objective(data)[0]  # noqa: E731
    else:
        theirs = transformers.AlbertForPreTraining.from_pretrained(folder).train()
        model = theirs
        theirs.sop_classifier.dropout.p = 0.0
        data = pretraining_batch(theirs.config.vocab_size, workload.batch, workload.seq)
        loss_fn = lambda: theirs(**data).loss  # noqa: E731

    def initial_loss() -> torch.Tensor:
        with torch.no_grad():
            return loss_fn().detach().float()

    return train_step(model, loss_fn, precision), initial_loss


def _sst2_runner(side: str, precision: str, folder: Path, data: Path | None):
    """Text in, labels out on SST-2 dev: the `albert evaluate` path against transformers' classes."""
    import transformers

    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.model.heads import AlbertForSequenceClassification
    from albert_lm.runtime.run import run_model
    from albert_lm.tasks import get_task

    assert data is not None
    batch_size = 32
    task = get_task("sst2")
    examples = task.read(data / "glue" / "SST-2" / "dev.tsv", "dev")
    if side == "ours":
        tokenizer = AlbertTokenizer.from_pretrained(folder)
        model = AlbertForSequenceClassification.from_pretrained(folder).eval()

        def classify() -> list[int]:
            features = task.featurize(examples, tokenizer, 512)
            outputs = run_model(
                model, features, batch_size, tokenizer.pad_token_id, torch.device("cpu"), precision
            )
            return task.predict(examples, features, outputs)
    else:
        texts = [ex.text_a for ex in examples]
        their_tokenizer = transformers.AlbertTokenizer.from_pretrained(folder)
        theirs = transformers.AlbertForSequenceClassification.from_pretrained(folder).eval()

        def classify() -> list[int]:
            labels: list[int] = []
            for i in range(0, len(texts), batch_size):
                enc = their_tokenizer(texts[i : i + batch_size], padding="longest", return_tensors="pt")
                with torch.inference_mode(), _autocast(precision):
                    labels += theirs(**enc).logits.argmax(-1).tolist()
            return labels

    return classify, lambda: torch.tensor(classify())


def check_line(workload: Workload, ours: torch.Tensor, theirs: torch.Tensor) -> str:
    if workload.kind == "inference":
        return f"max |diff| {(ours - theirs).abs().max().item():.1e}"
    if workload.kind == "pretraining":
        return f"initial loss |diff| {(ours - theirs).abs().item():.1e}"
    return f"same label on {(ours == theirs).float().mean().item():.1%}"


def workload_size(workload: Workload, config: AlbertConfig, data: Path | None) -> tuple[str, float, float]:
    """(unit, work per repeat, model FLOPs per repeat) for the rate and limit columns."""
    if workload.kind == "sst2":
        assert data is not None
        from albert_lm.tasks import get_task

        n = len(get_task("sst2").read(data / "glue" / "SST-2" / "dev.tsv", "dev"))
        return "sentences/s", float(n), 0.0
    flops = encoder_flops(config, workload.batch, workload.seq)
    if workload.kind == "pretraining":
        flops *= 3  # forward, grad-input, grad-weight
    return "tokens/s", float(workload.batch * workload.seq), flops
