"""`albert distill general`: a small ALBERT learns a sentence-embedding teacher's vectors on raw text.

The losses (each with its weight; docs/distill.md says why the defaults are what they are):
- (a) sentence embedding: the student's last layer, mean-pooled over the text's tokens as `albert embed`
  pools it ([CLS] and [SEP] included, padding left out), through a learned linear projection H -> the
  teacher's width, against the teacher's pooled vector: 1 - cosine (default) or the squared distance;
- (b) in-batch relations: the mean squared difference between the cosine-similarity matrices of the
  batch, the student's (on its own mean-pooled vectors, no projection: what `albert embed` gives and
  zero-shot similarity uses) against the teacher's;
- (c) masked LM: the student's MLM head on whole-word n-gram masked input (pretraining's masking). With
  (c) on, one forward pass reads the masked text for all three losses (cheaper than two; the masking is
  then noise for (a) and (b), as dropout would be);
- (d) token level, for a student that reads the teacher's tokens (`--tokenizer teacher`): the last
  layer's self-attention relations and per-token states against the teacher's, which runs on the same
  ids in each step, or once per sentence into the teacher cache with --token-cache
  (`albert_lm.distill.token_level`). The teacher's sentence vectors of (a) and (b) then come from that
  pass, its last states pooled as it pools ("pass"; not with (c), whose masks it would pool); otherwise
  each sentence's vector is computed once into the teacher cache before the first step ("cache"), a
  pass of its own over the text (on a shared GPU, ~2,700 sentences a second: docs/gpu.md, round 3).

The projection is not part of the student: it is saved beside it as distill_head.safetensors (weight
(D, H), bias (D,)), for users who want vectors in the teacher's space; the model folder itself is an
ordinary ALBERT folder (AlbertForPreTraining weights in transformers' layout, spiece.model) that
`albert finetune`, `glue`, `embed`, `export` and transformers take as it is.

Evaluation: the held-out sentences' losses, and with --sts FILE the zero-shot Spearman and Pearson
correlation of the cosine of the student's mean-pooled vectors with STS-B's gold scores (the teacher's
own figures recorded once beside them, split "teacher" in metrics.jsonl).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from albert_lm.data.masking import IGNORE_INDEX
from albert_lm.data.sources import expand_inputs
from albert_lm.data.tokenizer import AlbertTokenizer
from albert_lm.data.wordpiece import WordPieceTokenizer, is_wordpiece_folder
from albert_lm.distill.cache import TeacherCache, cached_teacher_outputs, default_cache_dir
from albert_lm.distill.cards import HEAD_FILE, write_general_card
from albert_lm.distill.config import GeneralDistillConfig
from albert_lm.distill.data import (
    Encoded,
    Masker,
    collate_ids,
    held_out,
    read_sentences,
    sts_pairs,
    sts_scores,
)
from albert_lm.distill.distiller import (
    CONFIG_FILE,
    Distiller,
    check_output,
    distill,
    prepare_output,
)
from albert_lm.distill.from_teacher import bert_parts
from albert_lm.distill.student import build_student, student_config, student_tokenizer, trained_part
from albert_lm.distill.teacher import SentenceTeacher
from albert_lm.distill.teacher_files import local_teacher
from albert_lm.distill.token_level import (
    CachedTeacherTokens,
    StudentQKV,
    TeacherTokens,
    cached_token_teacher,
    hidden_loss,
    padded_forward,
    relation_heads,
    relation_kl,
)
from albert_lm.files import check_output_apart, folder_lock, write_json
from albert_lm.hub import resolve_model
from albert_lm.kernels.device import pick_device
from albert_lm.kernels.precision import resolve_precision
from albert_lm.model.encoder import mean_pool
from albert_lm.model.heads import AlbertForPreTraining
from albert_lm.model.weights import write_weights
from albert_lm.tasks.batches import length_bucketed_batches
from albert_lm.training.loop import LoopResult, Progress

logger = logging.getLogger(__name__)

RESULTS_FILE = "distill_results.json"


# --------------------------------------------------------------------------- losses
def embedding_loss(projected: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """(B, D) student vectors in the teacher's space against the teacher's (B, D)."""
    if kind == "cosine":
        return (1.0 - F.cosine_similarity(projected, target, dim=-1)).mean()
    return (projected - target).pow(2).sum(-1).mean()


def relation_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """MSE between the (B, B) cosine-similarity matrices of the student's (B, H) and teacher's (B, D)."""
    s = F.normalize(student, dim=-1)
    t = F.normalize(teacher, dim=-1)
    return (s @ s.T - t @ t.T).pow(2).mean()


# --------------------------------------------------------------------------- the mode
@dataclasses.dataclass
class _Text:
    """The sentences, which are held out, the student's ids, the teacher's vectors (a memory map; None
    where they come from the teacher's pass in each step: `sentence_target_source`)."""

    sentences: list[str]
    held: np.ndarray  # (N,) bool
    encoded: Encoded
    targets: np.ndarray | None  # (N, D) float16


class GeneralDistiller(Distiller):
    cfg: GeneralDistillConfig
    model: AlbertForPreTraining

    def __init__(
        self,
        cfg: GeneralDistillConfig,
        out: Path,
        device: torch.device,
        precision: str,
        tokenizer: AlbertTokenizer,
        model: AlbertForPreTraining,
        text: _Text,
        sts: dict[str, Any] | None,
        teacher: dict[str, Any],
        token_teacher: TeacherTokens | CachedTeacherTokens | None = None,
        pool: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.cfg, self.out, self.device, self.precision = cfg, out, device, precision
        self.tokenizer, self.model, self.text, self.sts, self.teacher = tokenizer, model, text, sts, teacher
        self.projection = nn.Linear(model.config.hidden_size, teacher["dim"]).to(device)
        self.pool = pool  # the teacher's pooling, for sentence vectors from its pass in each step
        self.module = nn.ModuleDict({"student": model, "projection": self.projection})
        self.total_steps = cfg.max_steps
        self.train_idx = np.flatnonzero(~text.held)
        self.masker = Masker(tokenizer, cfg.masked_lm_prob) if cfg.mlm_weight else None
        self.limit = cfg.max_seq_length - 2  # room for [CLS] and [SEP]
        self.token_teacher = token_teacher
        if token_teacher is not None:
            self.student_qkv = StudentQKV(model)
            self.heads = relation_heads(model.config.hidden_size, token_teacher.width, cfg.relation_heads)
        token = token_teacher is not None
        on = {"embedding_loss": cfg.embedding_weight, "relation_loss": cfg.relation_weight, "cls_loss": cfg.cls_weight,
              "token_relation_loss": token and cfg.token_relation_weight, "token_hidden_loss": token and
              cfg.token_hidden_weight, "mlm_loss": cfg.mlm_weight, "mlm_acc": cfg.mlm_weight}  # fmt: skip
        self.parts = (*(k for k, w in on.items() if w), "loss")  # what `_losses` reports

    def batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        lengths = np.minimum(self.text.encoded.lengths[self.train_idx], self.limit)
        batches = length_bucketed_batches(lengths, self.cfg.batch_size, rng)
        return [self.train_idx[b].tolist() for b in batches if len(b) > 1]  # relations need two

    def _inputs(self, batch: list[int]) -> dict[str, torch.Tensor]:
        rows = [self.text.encoded.row(i, self.limit) for i in batch]
        t = self.tokenizer
        return collate_ids(rows, t.cls_token_id, t.sep_token_id, t.pad_token_id)

    def loss_parts(self, batch: list[int], step: int) -> tuple[torch.Tensor, dict[str, float]]:
        inputs = self._inputs(batch)
        labels = None
        if self.masker is not None:
            inputs["input_ids"], labels = self.masker(
                inputs["input_ids"], np.random.default_rng([self.cfg.seed, step])
            )
        encoder = self.model.albert.encoder
        full = len(encoder.full_schedule)
        rng = np.random.default_rng([self.cfg.seed, step, 1])
        if full > 1 and rng.random() < self.cfg.random_depth:  # a shallower prefix this step
            encoder.set_depth(int(rng.integers(1, full)))
        try:
            return self._losses(inputs, labels, batch)
        finally:
            encoder.set_depth(full)

    def _teacher(
        self, ids: torch.Tensor, mask: torch.Tensor, batch: list[int]
    ) -> tuple[dict[str, torch.Tensor] | None, torch.Tensor]:
        """The teacher's token outputs on the student's ids (masked too, with --mlm-weight; None without the
        token-level losses) and its sentence vectors: from the cache, or pooled from that same pass."""
        t = None if self.token_teacher is None else self.token_teacher(ids, mask, batch)
        if self.text.targets is None:  # the sentence as the student reads it, cut at max_seq_length
            assert t is not None and self.pool is not None
            return t, self.pool(t["hidden"], mask)
        rows = np.asarray(self.text.targets[np.asarray(batch)], dtype=np.float32)
        return t, torch.from_numpy(rows).to(self.device)

    def _losses(
        self, inputs: dict[str, torch.Tensor], labels: torch.Tensor | None, batch: list[int]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, dev = self.cfg, self.device
        mask = inputs["attention_mask"].to(dev)
        with padded_forward(self.token_teacher is not None):
            encoded = self.model.albert(input_ids=inputs["input_ids"].to(dev), attention_mask=mask)
        hidden = encoded.last_hidden_state
        pooled = mean_pool(hidden.float(), mask)  # (B, H)
        t, target = self._teacher(inputs["input_ids"].to(dev), mask, batch)
        total = torch.zeros((), device=dev)
        parts: dict[str, float] = {}
        if cfg.embedding_weight:
            e = embedding_loss(self.projection(pooled), target, cfg.embedding_loss)
            total, parts["embedding_loss"] = total + cfg.embedding_weight * e, float(e.detach())
        if cfg.relation_weight:
            r = relation_loss(pooled, target)
            total, parts["relation_loss"] = total + cfg.relation_weight * r, float(r.detach())
        if cfg.cls_weight:  # the vector fine-tuning's classifier reads, taught the same two things
            cls = encoded.pooler_output.float()
            c = embedding_loss(self.projection(cls), target, cfg.embedding_loss) + relation_loss(cls, target)
            total, parts["cls_loss"] = total + cfg.cls_weight * c, float(c.detach())
        if t is not None:
            if cfg.token_relation_weight:
                r = torch.stack(
                    [
                        relation_kl(s, t[k], mask, self.heads)
                        for s, k in zip(self.student_qkv.take(), "qkv", strict=True)
                    ]
                ).mean()
                total, parts["token_relation_loss"] = total + cfg.token_relation_weight * r, float(r.detach())
            if cfg.token_hidden_weight:
                h = hidden_loss(self.projection(hidden.float()), t["hidden"], mask)
                total, parts["token_hidden_loss"] = total + cfg.token_hidden_weight * h, float(h.detach())
        if labels is not None:
            picked = labels.to(dev) != IGNORE_INDEX
            logits = self.model.predictions(hidden[picked]).float()  # (N, V) at the masked positions only
            target_ids = labels.to(dev)[picked]
            m = F.cross_entropy(logits, target_ids)
            total, parts["mlm_loss"] = total + cfg.mlm_weight * m, float(m.detach())
            parts["mlm_acc"] = float((logits.argmax(-1) == target_ids).float().mean())
        parts["loss"] = float(total.detach())
        return total, parts

    @torch.no_grad()
    def scores(self, step: int) -> dict[str, Any]:
        self.module.eval()
        held = np.flatnonzero(self.text.held)
        sums: dict[str, float] = {}
        batches = [
            held[i : i + self.cfg.batch_size].tolist() for i in range(0, len(held), self.cfg.batch_size)
        ]
        for k, batch in enumerate(b for b in batches if len(b) > 1):
            inputs, labels = self._inputs(batch), None
            if self.masker is not None:  # the same masks at every evaluation
                inputs["input_ids"], labels = self.masker(inputs["input_ids"], np.random.default_rng([0, k]))
            with self.autocast():
                _, parts = self._losses(inputs, labels, batch)
            for name, v in parts.items():
                sums[name] = sums.get(name, 0.0) + v * len(batch)
        count = sum(len(b) for b in batches if len(b) > 1)
        results: dict[str, Any] = {k: v / count for k, v in sums.items()} if count else {}
        if self.sts is not None:
            results.update(sts_scores(self.embed(self.sts["sentences"]), self.sts))
        return results

    @torch.no_grad()
    def embed(self, sentences: list[str]) -> np.ndarray:
        """(N, H) float32: the student's mean-pooled vectors, as `albert embed` computes them."""
        self.model.eval()
        encoded = Encoded.of(self.tokenizer, sentences)
        order = np.argsort(np.minimum(encoded.lengths, self.limit), kind="stable")
        out = np.zeros((len(sentences), self.model.config.hidden_size), dtype=np.float32)
        for i in range(0, len(order), 128):
            idx = order[i : i + 128]
            t = self.tokenizer
            inputs = collate_ids(
                [encoded.row(j, self.limit) for j in idx], t.cls_token_id, t.sep_token_id, t.pad_token_id
            )
            mask = inputs["attention_mask"].to(self.device)
            with self.autocast():
                hidden = self.model.albert(input_ids=inputs["input_ids"].to(self.device), attention_mask=mask)
            out[idx] = mean_pool(hidden.last_hidden_state.float(), mask).cpu().numpy()
        return out

    def write_files(self, folder: Path, p: Progress | None = None) -> None:
        self.tokenizer.save_pretrained(folder)
        write_json(folder / CONFIG_FILE, self.cfg.to_dict())
        # the projection from the student's mean-pooled last layer into the teacher's space (docs/distill.md)
        write_weights(folder / HEAD_FILE, {k: v.float() for k, v in self.projection.state_dict().items()})

    def own_state(self) -> dict[str, Any]:
        return {"projection": {k: v.detach().cpu() for k, v in self.projection.state_dict().items()}}

    def restore_own(self, state: dict[str, Any]) -> None:
        self.projection.load_state_dict(state["projection"])

    def complete(self, last: dict[str, Any]) -> dict[str, Any]:
        saved = trained_part(self.model, self.cfg.mlm_weight)
        if self.cfg.save_precision == "fp16":  # a copy: the student in memory stays fp32
            saved = copy.deepcopy(saved).half()
            saved.config.extra["dtype"] = "float32"  # transformers too loads it back in fp32
        saved.save_pretrained(self.out)
        self.write_files(self.out)
        result = {
            **last, "student_parameters": self.model.albert.num_parameters(),
            "student_parameters_with_heads": self.model.num_parameters(), "teacher": self.teacher["name"],
            "teacher_vectors_from": self.teacher["vectors"],
            **{f"teacher_{k}": v for k, v in self.teacher.get("sts", {}).items()},
        }  # fmt: skip
        write_json(self.out / RESULTS_FILE, result)
        held, warmup = int(self.text.held.sum()), self.warmup_taken()
        write_general_card(self.out, self.cfg, self.teacher, len(self.train_idx), held, last, warmup)
        logger.info("student in %s: %s", self.out, ", ".join(f"{k} {v:.4f}" for k, v in last.items()))
        return result


# --------------------------------------------------------------------------- setting up
def _teacher_sts(
    cfg: GeneralDistillConfig, teacher: SentenceTeacher, root: Path, sts: dict[str, Any]
) -> None:
    """The teacher's own STS-B scores (its vectors cached like the training text's), in sts["teacher"]."""
    sentences = sts["sentences"]
    cache = TeacherCache(
        root,
        "sentence",
        teacher.fingerprint,
        sentences,
        teacher.dim,
        "float16",
        {"teacher": cfg.teacher, "what": f"pooled vectors of {cfg.sts}"},
    )
    vectors = cached_teacher_outputs(
        cache, teacher, cfg.teacher_batch_size, [len(s) for s in sentences], "teacher: STS-B"
    )
    sts["teacher"] = sts_scores(np.asarray(vectors, dtype=np.float32), sts)
    logger.info(
        "teacher on STS-B: spearman %.4f, pearson %.4f",
        sts["teacher"]["sts_spearman"],
        sts["teacher"]["sts_pearson"],
    )


def distill_general(cfg: GeneralDistillConfig, progress: bool = True) -> LoopResult:
    """Run (or resume) general distillation as `cfg` says (module docstring)."""
    if cfg.init_from:  # a hub id: its cached snapshot from here on
        cfg = dataclasses.replace(cfg, init_from=str(resolve_model(cfg.init_from, "--init-from")))
    # folders and globs as `albert data create` takes them
    cfg = dataclasses.replace(cfg, text=expand_inputs(cfg.text))
    root = Path(cfg.cache) if cfg.cache else default_cache_dir()
    inputs = {"--tokenizer": cfg.tokenizer, "--init-from": cfg.init_from, "--model-config": cfg.model_config,
              "--sts": cfg.sts, "--cache": root, "--teacher": local_teacher(cfg.teacher)}  # fmt: skip
    latest = check_output(cfg, inputs)
    for file in cfg.text:
        check_output_apart(cfg.output, {"--text": file})
    tokenizer = student_tokenizer(cfg)
    device = pick_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)[0]
    teacher = SentenceTeacher(cfg.teacher, device, cfg.teacher_batch_size)
    mc = student_config(cfg, tokenizer.vocab_size, teacher.hf_config)
    live = _token_teacher(cfg, teacher, tokenizer)  # refused before anything is written
    if cfg.teacher_init != "no" and latest is None:
        bert_parts(teacher.model, cfg.teacher)  # a teacher whose layers cannot be copied: before its passes
    sts = sts_pairs(cfg.sts) if cfg.sts else None  # a bad --sts file named before the text is read
    sentences = read_sentences(
        cfg.text,
        cfg.input_format,
        strip_gutenberg=cfg.strip_gutenberg,
        min_words=cfg.min_words,
        max_segments=cfg.max_segments,
        progress=progress,
    )
    from_pass = sentence_target_source(cfg) == "pass"
    targets = None if from_pass else _cached_targets(cfg, root, teacher, sentences, progress)
    token_teacher: TeacherTokens | CachedTeacherTokens | None = live
    if live is not None and cfg.token_cache:  # the teacher's token outputs once, not in each step
        where = (root, teacher.fingerprint, cfg.teacher_batch_size)
        token_teacher = cached_token_teacher(live, tokenizer, sentences, where, cfg.max_seq_length, progress)
    if sts is not None:
        _teacher_sts(cfg, teacher, root, sts)
    text = _Text(sentences, held_out(sentences, cfg.eval_segments), Encoded.of(tokenizer, sentences), targets)
    pooling = f"{teacher.pooling.mode} pooling" + (", normalized" if teacher.pooling.normalize else "")
    vectors = "its token-level pass in each step" if from_pass else "the teacher cache"  # said in the results
    about = {"name": cfg.teacher, "pooling": pooling, "sts": sts["teacher"] if sts else {}, "dim": teacher.dim,
             "vectors": vectors}  # fmt: skip
    with folder_lock(cfg.output):
        out = prepare_output(cfg, latest)
        model = build_student(cfg, mc, latest, teacher, tokenizer).to(device)
        pool = teacher.pool if from_pass else None  # the sentence vectors from the token-level pass
        d = GeneralDistiller(cfg, out, device, precision, tokenizer, model, text, sts, about, token_teacher,
                             pool)  # fmt: skip
        logger.info(
            "student: %.2fM parameters (encoder), %d sentences (%d held out), teacher %s (its vectors from "
            "%s), %s", model.albert.num_parameters() / 1e6, len(sentences), int(text.held.sum()), cfg.teacher,
            vectors, precision,
        )  # fmt: skip
        if latest is None and sts is not None:
            _record_teacher(out, sts["teacher"])
        return distill(d, latest)


def sentence_target_source(cfg: GeneralDistillConfig) -> str:
    """Where the teacher's sentence vectors come from (module docstring): "pass" or "cache"."""
    return "pass" if cfg.token_weights and not cfg.mlm_weight else "cache"


def _cached_targets(
    cfg: GeneralDistillConfig, root: Path, teacher: SentenceTeacher, sentences: list[str], progress: bool
) -> np.ndarray:
    """The teacher's pooled vector of every sentence, (N, D) fp16, from the teacher cache (filled first
    where rows are missing)."""
    what = {"teacher": cfg.teacher, "what": "pooled sentence vectors", "files": cfg.text}
    cache = TeacherCache(root, "sentence", teacher.fingerprint, sentences, teacher.dim, "float16", what)
    lengths = [len(s) for s in sentences]
    return cached_teacher_outputs(
        cache, teacher, cfg.teacher_batch_size, lengths, "teacher", progress=progress
    )


def _token_teacher(
    cfg: GeneralDistillConfig, teacher: SentenceTeacher, tokenizer: AlbertTokenizer
) -> TeacherTokens | None:
    """With token-level losses: the teacher's last layer, once the student is seen to read its tokens."""
    if not cfg.token_weights:
        return None
    theirs = teacher.folder
    if not is_wordpiece_folder(theirs) or WordPieceTokenizer.from_pretrained(theirs).fingerprint != (
        tokenizer.fingerprint
    ):
        raise ValueError(
            "--token-relation-weight / --token-hidden-weight compare the student and the teacher token by "
            f"token: the student must read the teacher's tokens; give --tokenizer teacher (now {cfg.tokenizer})"
        )
    return TeacherTokens(teacher.model, cfg.teacher)


def _record_teacher(out: Path, scores: dict[str, float]) -> None:
    """The teacher's STS-B figures, once, as the first line of metrics.jsonl (split "teacher")."""
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 0, "split": "teacher", **scores}) + "\n")
