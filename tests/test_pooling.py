"""classifier_pooling "mean": a sequence classifier that reads the mean of the tokens' vectors (what
general distillation teaches) instead of [CLS], in the model, in early exit, and through
`finetune --classifier-pooling`."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from albert_lm.model.config import AlbertConfig
from albert_lm.model.early_exit import EarlyExit, ExitHeads, ExitRule
from albert_lm.model.heads import (
    AlbertForMultipleChoice,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (6, 10), generator=g)
    mask = torch.ones_like(ids)
    for r in range(6):
        mask[r, 10 - r :] = 0  # rows of different lengths, padded
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def test_mean_pooling_reads_the_mean_of_the_kept_tokens(tiny_config, tmp_path):
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_config(classifier_pooling="mean", num_labels=3)).eval()
    batch = _batch()
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        hidden, keep = out.hidden_states[-1], batch["attention_mask"][..., None].float()
        mean = (hidden * keep).sum(1) / keep.sum(1)
        wanted = model.classifier(torch.tanh(model.albert.pooler(mean)))
        torch.testing.assert_close(out.logits, wanted)
        for r in range(6):  # padding changes nothing: each row alone, unpadded
            n = int(batch["attention_mask"][r].sum())
            alone = model(**{k: v[r : r + 1, :n] for k, v in batch.items()}).logits
            torch.testing.assert_close(alone[0], out.logits[r], rtol=1e-4, atol=1e-5)
        cls = AlbertForSequenceClassification(tiny_config(num_labels=3)).eval()
        cls.load_state_dict(model.state_dict())
        assert not torch.allclose(cls(**batch).logits, out.logits)  # [CLS] is another vector
    model.save_pretrained(tmp_path / "mean")
    cls.save_pretrained(tmp_path / "cls")
    assert json.loads((tmp_path / "mean" / "config.json").read_text())["classifier_pooling"] == "mean"
    assert "classifier_pooling" not in json.loads(
        (tmp_path / "cls" / "config.json").read_text()
    )  # as transformers
    assert AlbertConfig.from_pretrained(tmp_path / "mean").classifier_pooling == "mean"
    with pytest.raises(ValueError, match="classifier_pooling must be one of"):
        tiny_config(classifier_pooling="max")


def test_early_exit_pools_as_the_model_does(tiny_config):
    torch.manual_seed(0)
    config = tiny_config(classifier_pooling="mean", num_labels=3, num_hidden_layers=4)
    model, heads = AlbertForSequenceClassification(config).eval(), ExitHeads(config).eval()
    batch = _batch()
    full = EarlyExit(model, heads, ExitRule(depth=4))(**batch)
    with torch.no_grad():
        torch.testing.assert_close(full.logits, model(**batch).logits)
    together = EarlyExit(model, heads, ExitRule(patience=1))(**batch)
    for r in range(6):  # the shrinking batch pools each row over its own tokens
        n = int(batch["attention_mask"][r].sum())
        alone = EarlyExit(model, heads, ExitRule(patience=1))(
            **{k: v[r : r + 1, :n] for k, v in batch.items()}
        )
        assert int(alone.depth[0]) == int(together.depth[r])
        torch.testing.assert_close(alone.logits[0], together.logits[r], rtol=1e-4, atol=1e-5)


def test_finetune_pooling_mean_says_what_transformers_reads(tiny_sst2, tmp_path, caplog, capsys):
    from albert_lm.cli import main

    root = tiny_sst2
    args = ["finetune", "--task", "sst2", "--model", str(root / "base"), "--data", str(root / "sst2"),
            "--output", str(tmp_path / "mean"), "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "32",
            "--device", "cpu", "--precision", "fp32", "--no-tensorboard", "--no-plot", "--classifier-pooling", "mean",
            "-q"]  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert main(args) == 0
    assert "transformers' AlbertForSequenceClassification reads [CLS]" in caplog.text
    best = tmp_path / "mean" / "best"
    assert AlbertConfig.from_pretrained(best).classifier_pooling == "mean"
    assert "mean of the tokens' vectors" in (best / "README.md").read_text()
    squad = [*args[:2], "squad1", *args[3:8], str(tmp_path / "squad"), *args[9:]]
    assert main(squad) != 0 and "--classifier-pooling" in capsys.readouterr().err


def test_a_regressor_under_bf16_autocast_answers_in_fp32(tiny_config):
    """bf16 rounds scores near 2.5 to steps of 1/64: a regressor whose answers differ by less than that
    answered one value for every pair (STS-B Pearson 0). Its last linear now runs in fp32."""
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny_config(num_labels=1)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(0.01)  # answers close together, as early in fine-tuning
        model.classifier.bias.fill_(2.5)
        batch = _batch()
        exact = model(**batch).logits[:, 0]
        assert float(exact.max() - exact.min()) < 1 / 64  # bf16 would give them one value
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model(**batch).logits[:, 0]
    assert got.dtype == torch.float32
    assert len(set(got.tolist())) == len(got)  # every pair its own answer
    torch.testing.assert_close(got, exact, rtol=0, atol=2e-3)  # the encoder's bf16 error only


@pytest.mark.parametrize(
    "head", [AlbertForQuestionAnswering, AlbertForMultipleChoice, AlbertForTokenClassification]
)
def test_span_choice_and_token_heads_under_bf16_autocast_answer_in_fp32(tiny_config, head):
    """A SQuAD 2.0 null score difference (start + end at [CLS] against the best span) came out of bf16 as
    0 or -0.03125, nothing between, so its threshold chose on ties; the span, choice and token heads'
    last linear now runs in fp32 as the classifier's does."""
    torch.manual_seed(0)
    model = head(tiny_config(num_labels=2)).eval()
    batch = _batch()
    if head is AlbertForMultipleChoice:  # (B, C, S): two choices per row
        batch = {k: v.unsqueeze(1).expand(-1, 2, -1).contiguous() for k, v in batch.items()}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch)
    logits = out.start_logits if head is AlbertForQuestionAnswering else out.logits
    assert logits.dtype == torch.float32
    assert len(set(logits.flatten().tolist())) >= logits.numel() // 2  # not rounded to a few bf16 values
