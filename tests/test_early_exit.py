"""Early exit (PABEE) on ALBERT: the heads after each layer, their loss, and batched inference that gives
each row exactly what it gets alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from albert_lm.model.early_exit import EarlyExit, ExitHeads, ExitRule, exit_loss
from albert_lm.model.heads import AlbertForSequenceClassification


def _model(
    tiny_config, num_labels: int = 3, layers: int = 6
) -> tuple[AlbertForSequenceClassification, ExitHeads]:
    torch.manual_seed(0)
    config = tiny_config(num_hidden_layers=layers, num_labels=num_labels)
    model = AlbertForSequenceClassification(config).eval()
    heads = ExitHeads(config).eval()
    with torch.no_grad():  # heads that disagree now and then, so that rows stop at different depths
        for c in heads.classifiers:
            c.weight.normal_(0, 1.0)
    return model, heads


def _batch(rows: int = 12, length: int = 10, vocab: int = 99) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    for r in range(rows):
        mask[r, length - (r % 4) :] = 0  # rows of different lengths, padded
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def _per_depth(model, heads, batch) -> list[torch.Tensor]:
    """Each application's logits for every row, computed the plain way (hidden states of the full model)."""
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
        states = out.hidden_states[1:]
        pooled = [torch.tanh(model.albert.pooler(h[:, 0])) for h in states]
        logits = [c(p) for c, p in zip(heads.classifiers, pooled[:-1], strict=True)]
    return [*logits, out.logits]


def test_full_depth_is_the_model_itself_and_a_fixed_depth_is_that_head(tiny_config):
    model, heads = _model(tiny_config)
    batch = _batch()
    per_depth = _per_depth(model, heads, batch)
    full = EarlyExit(model, heads, ExitRule(depth=6))(**batch)
    assert torch.equal(full.logits, per_depth[-1])  # bit for bit
    assert full.depth.tolist() == [6] * 12
    two = EarlyExit(model, heads, ExitRule(depth=2))(**batch)
    torch.testing.assert_close(two.logits, per_depth[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule", [ExitRule(patience=1), ExitRule(patience=2), ExitRule(confidence=0.45)])
def test_batched_exit_gives_each_row_what_it_gets_alone(tiny_config, rule):
    model, heads = _model(tiny_config)
    batch = _batch()
    together = EarlyExit(model, heads, rule)(**batch)
    for r in range(12):
        n = int(batch["attention_mask"][r].sum())
        alone = EarlyExit(model, heads, rule)(**{k: v[r : r + 1, :n] for k, v in batch.items()})
        assert int(alone.depth[0]) == int(together.depth[r])
        torch.testing.assert_close(alone.logits[0], together.logits[r], rtol=1e-4, atol=1e-5)
    assert len(set(together.depth.tolist())) > 1  # rows left at different depths: the batch shrank


def test_patience_is_pabees_rule(tiny_config):
    model, heads = _model(tiny_config)
    batch = _batch()
    preds = torch.stack([x.argmax(-1) for x in _per_depth(model, heads, batch)], 1)  # (rows, L)
    out = EarlyExit(model, heads, ExitRule(patience=2))(**batch)
    for r in range(12):
        expect, streak = 6, 0
        for i in range(1, 6):
            streak = streak + 1 if preds[r, i] == preds[r, i - 1] else 0
            if streak >= 2:
                expect = i + 1
                break
        assert int(out.depth[r]) == expect
        assert int(out.logits[r].argmax()) == int(preds[r, expect - 1])


def test_the_loss_weighs_deeper_heads_more_and_trains_every_head(tiny_config):
    model, heads = _model(tiny_config)
    model.train()
    batch = _batch()
    labels = torch.arange(12) % 3
    loss = exit_loss(model, heads, batch, labels)
    loss.backward()
    assert all(c.weight.grad is not None and c.weight.grad.abs().sum() > 0 for c in heads.classifiers)
    assert model.classifier.weight.grad is not None


def test_heads_round_trip_and_bad_rules_are_refused(tiny_config, tmp_path):
    model, heads = _model(tiny_config)
    heads.save(tmp_path)
    again = ExitHeads.load(tmp_path, model.config)
    assert again is not None
    for a, b in zip(heads.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert ExitHeads.load(tmp_path / "none", model.config) is None
    with pytest.raises(ValueError, match="one exit rule"):
        ExitRule(patience=2, depth=3)
    with pytest.raises(ValueError, match="--depth 9"):
        EarlyExit(model, heads, ExitRule(depth=9))
    with pytest.raises(ValueError, match="inner_group_num"):
        ExitHeads(tiny_config(inner_group_num=2))


def test_rules_that_cannot_stop_a_row_early_or_stop_every_row_at_once_are_refused(tiny_config):
    """On 6 layers, patience 5 first stops a row after layer 6 (the full depth); a confidence of 1/3 or
    less on 3 classes stops every row after layer 1; a regressor has no probability to be confident in."""
    model, heads = _model(tiny_config)
    EarlyExit(model, heads, ExitRule(patience=4))
    with pytest.raises(
        ValueError, match="--patience 5: a row stops after layer 6 at the earliest.*at most 4"
    ):
        EarlyExit(model, heads, ExitRule(patience=5))
    EarlyExit(model, heads, ExitRule(confidence=0.34))
    with pytest.raises(ValueError, match="--exit-confidence 0.3: with 3 classes .* at least 0.333"):
        EarlyExit(model, heads, ExitRule(confidence=0.3))
    regressor, regressor_heads = _model(tiny_config, num_labels=1)
    EarlyExit(regressor, regressor_heads, ExitRule(patience=2))
    with pytest.raises(ValueError, match="regressor"):
        EarlyExit(regressor, regressor_heads, ExitRule(confidence=0.9))


# --------------------------------------------------------------------------- the commands
def test_finetune_saves_the_heads_beside_a_folder_transformers_reads_unchanged(tiny_exit_run):
    transformers = pytest.importorskip("transformers")
    from albert_lm.model.early_exit import EXIT_FILE

    best = tiny_exit_run / "run" / "best"
    assert (best / EXIT_FILE).is_file() and "early exit" in (best / "README.md").read_text()
    # the best model's dev accuracy at every depth: the last is the model's own
    results = json.loads((tiny_exit_run / "run" / "eval_results.json").read_text())
    by_depth = results["by_depth"]["accuracy"]
    assert len(by_depth) == 4 and by_depth[-1] == results["accuracy"]
    ours = AlbertForSequenceClassification.from_pretrained(best).eval()
    heads = ExitHeads.load(best, ours.config)
    assert heads is not None and len(heads.classifiers) == 3
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(best).eval()
    batch = _batch(rows=4, vocab=200)
    with torch.no_grad():
        full = EarlyExit(ours, heads, ExitRule(depth=4))(**batch).logits
        torch.testing.assert_close(theirs(**batch).logits, full, rtol=1e-4, atol=1e-5)


def test_predict_and_evaluate_exit_early_and_say_the_depth(tiny_exit_run, capsys, tmp_path):
    from albert_lm.cli import main

    best, texts = tiny_exit_run / "run" / "best", tiny_exit_run / "texts.txt"
    assert (
        main(
            ["predict", "--model", str(best), "--input", str(texts), "--depth", "2", "--device", "cpu", "-q"]
        )
        == 0
    )
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [r["depth"] for r in rows] == [2, 2, 2] and all("label" in r for r in rows)
    assert main(["predict", "--model", str(best), "--input", str(texts), "--depth", "3"]) == 0
    assert "3 of 3 rows predicted; early exit: 3.00 of 4 layers per row on average" in capsys.readouterr().err
    assert main(["predict", "--model", str(best), "--input", str(texts), "--device", "cpu", "-q"]) == 0
    assert all("depth" not in json.loads(ln) for ln in capsys.readouterr().out.splitlines())
    data = tiny_exit_run / "sst2"
    args = ["evaluate", "--task", "sst2", "--model", str(best), "--data", str(data), "--device", "cpu", "-q"]
    assert main([*args, "--patience", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 2 <= result["mean_depth"] <= 4 and result["exit_patience"] == 1 and "accuracy" in result
    assert main([*args, "--patience", "1", "--output", str(tmp_path / "ev")]) == 0  # and each row's depth
    capsys.readouterr()
    depths = [int(d) for d in (tmp_path / "ev" / "predictions" / "depth_dev.txt").read_text().split()]
    assert len(depths) == result["eval_examples"]["dev"] and np.mean(depths) == result["mean_depth"]
    assert main([*args, "--depth", "2"]) == 0  # fine-tuning's figure at depth 2 is evaluate's at --depth 2
    at_two = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"]
    assert (
        at_two
        == json.loads((tiny_exit_run / "run" / "eval_results.json").read_text())["by_depth"]["accuracy"][1]
    )
    assert result["rows_per_s"] > 0  # the model's speed under the rule
    # beside it the full depth's, measured in the same run: its accuracy, its rate and the speed-up
    assert {
        "full_depth_accuracy",
        "full_depth_rows_per_s",
    } <= result.keys() and "full_depth_mean_depth" not in result
    assert result["speedup"] == pytest.approx(result["rows_per_s"] / result["full_depth_rows_per_s"])
    assert main(args) == 0  # without a rule: the rate to compare with, and nothing of early exit
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["rows_per_s"] > 0 and not any(
        k.startswith(("full_depth", "speedup", "mean_depth")) for k in plain
    )
    from albert_lm.deploy.api import Predictor

    rows = Predictor(best, device="cpu", depth=1).predict(["bala kemo", "fira"])
    assert [r["depth"] for r in rows] == [1, 1]


def test_early_exit_is_refused_where_it_cannot_run(tiny_exit_run, tmp_path, capsys):
    from albert_lm.cli import main

    plain = tmp_path / "plain"
    import shutil

    shutil.copytree(tiny_exit_run / "run" / "best", plain)
    (plain / "exit_heads.safetensors").unlink()
    texts = str(tiny_exit_run / "texts.txt")
    assert (
        main(["predict", "--model", str(plain), "--input", texts, "--patience", "2", "--device", "cpu"]) != 0
    )
    assert "fine-tune with --exit-heads" in capsys.readouterr().err
    best = str(tiny_exit_run / "run" / "best")
    assert main(["predict", "--model", best, "--input", texts, "--patience", "2", "--depth", "1"]) != 0
    assert "one exit rule" in capsys.readouterr().err
    assert main(["predict", "--model", best, "--input", texts, "--depth", "9"]) != 0
    assert "--depth 9" in capsys.readouterr().err
    assert main(["predict", "--model", best, "--input", texts, "--patience", "3"]) != 0
    assert "no row would stop early; expected at most 2" in capsys.readouterr().err  # 4 layers
    assert main(["predict", "--model", best, "--input", texts, "--exit-confidence", "0.5"]) != 0
    assert "with 2 classes every top probability is at least 0.5" in capsys.readouterr().err
    from albert_lm.deploy.api import Predictor

    with pytest.raises(ValueError, match="^.*plain: no exit_heads.safetensors"):
        Predictor(plain, patience=2)  # when made, not at the first call
    with pytest.raises(ValueError, match="^patience 3: a row stops"):
        Predictor(best, patience=3)
    assert repr(Predictor(best, exit_confidence=0.8)).endswith("exit_confidence=0.8)")
    for option, value in (("--patience", "-1"), ("--depth", "0"), ("--exit-confidence", "1.5")):
        assert main(["predict", "--model", best, "--input", texts, option, value, "--device", "cpu"]) != 0
        err = capsys.readouterr().err
        assert f"{option} {value}" in err and len(err.strip().splitlines()) == 1, err


def test_patience_0_and_the_full_depth_are_the_plain_model_bit_for_bit(tiny_exit_run, capsys):
    from albert_lm.cli import main

    best, texts = str(tiny_exit_run / "run" / "best"), str(tiny_exit_run / "texts.txt")
    outputs = []
    for extra in ((), ("--patience", "0"), ("--depth", "4")):
        assert main(["predict", "--model", best, "--input", texts, "--device", "cpu", "-q", *extra]) == 0
        rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
        outputs.append([r["probabilities"] for r in rows])
    assert outputs[0] == outputs[1] == outputs[2]


def test_fill_mask_and_embed_at_a_depth_are_that_prefix_of_the_shared_layer(tiny_exit_run, tmp_path):
    """--depth K on an all-shared model is the same weights with K layers: a copy of the folder whose
    config says num_hidden_layers K gives the same vectors and candidates."""
    import shutil

    import numpy as np

    from albert_lm.deploy.api import Predictor

    base = tiny_exit_run / "base"
    config = json.loads((base / "config.json").read_text())
    assert config.get("num_hidden_groups", 1) == 1 and config["num_hidden_layers"] == 4
    one = tmp_path / "one-layer"
    shutil.copytree(base, one)
    (one / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    texts, masked = ["bala kemo fira", "dusa tovi ramu bala"], ["bala [MASK] fira"]

    def run(folder, **kw):
        p = Predictor(folder, device="cpu", precision="fp32", **kw)
        return p.embed(texts), p.fill_mask(masked)

    full, full_fill = run(base)
    at4, at4_fill = run(base, depth=4)
    at1, at1_fill = run(base, depth=1)
    ref1, ref1_fill = run(one)
    np.testing.assert_allclose(at4, full, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(at1, ref1, rtol=1e-5, atol=1e-6)
    assert not np.allclose(at1, full, atol=1e-3)
    assert at4_fill == full_fill and at1_fill == ref1_fill
    with pytest.raises(ValueError, match="^depth 5: this model has 4"):
        Predictor(base, device="cpu", depth=5)  # refused when made, in the API's words
    with pytest.raises(ValueError, match="one exit rule"):
        Predictor(base, patience=2, depth=1)  # refused at once, before any model is loaded


@pytest.mark.slow
def test_onnx_exit_graphs_stop_each_row_where_pytorch_does(tiny_exit_run, tmp_path, capsys):
    """`albert export` writes the embeddings and the shared layer as graphs of their own; the loop of
    docs/finetune.md, run as written on them, gives each row PyTorch's depth and probabilities."""
    pytest.importorskip("onnxruntime")
    import shutil
    from pathlib import Path

    import numpy as np

    from albert_lm import AlbertTokenizer
    from albert_lm.cli import main
    from albert_lm.deploy.api import Predictor
    from albert_lm.deploy.onnx_exit import EXIT_SNIPPET

    best, out = tmp_path / "best", tmp_path / "onnx"
    shutil.copytree(tiny_exit_run / "run" / "best", best)
    tokenizer = AlbertTokenizer.from_pretrained(best)
    pieces = sorted(p.lstrip("\u2581") for p in tokenizer.get_vocab() if p.isalpha())
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(pieces, size=int(rng.integers(1, 12)))) for _ in range(24)]
    model = AlbertForSequenceClassification.from_pretrained(best).eval()
    heads = ExitHeads.load(best, model.config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # heads that split these texts in two, so that rows stop at different depths
        states = model(**tokenizer(texts, padding=True, return_tensors="pt"), output_hidden_states=True)
        for c, h in zip(heads.classifiers, states.hidden_states[1:], strict=False):
            c.weight.normal_(0, 1.0, generator=g)
            logits = c(torch.tanh(model.albert.pooler(h[:, 0])))
            m = (logits[:, 1] - logits[:, 0]).sort().values
            i = int((m[7:17] - m[6:16]).argmax()) + 6  # the widest gap in the middle: no row near the line
            c.bias[1] -= (m[i] + m[i + 1]) / 2
    heads.save(best)
    capsys.readouterr()
    assert main(["export", "--model", str(best), "--output", str(out), "--int8", "-q"]) == 0
    assert "early-exit graphs in exit/" in capsys.readouterr().out  # the summary line says they are there
    spec = json.loads((out / "export.json").read_text())["early_exit"]
    assert spec["schedule"] == [0, 0, 0, 0] and spec["layers"] == ["exit/layer_0.onnx"]  # one file, 4 times
    assert spec["max_abs_diff_fp32"] <= 1e-4 and spec["int8_cosine"] >= 0.9
    docs = (Path(__file__).parents[1] / "docs" / "finetune.md").read_text()
    assert EXIT_SNIPPET.strip() in docs  # the page shows the loop this test runs
    for int8 in (False, True):
        namespace: dict = {}
        code = EXIT_SNIPPET.replace('"runs/sst2-onnx"', repr(str(out)))
        exec(code.replace('spec["layers"]]', 'spec["layers_int8"]]') if int8 else code, namespace)
        for patience in (1, 2):
            logits, depth = namespace["predict"](texts, patience=patience)
            rows = Predictor(best, device="cpu", precision="fp32", patience=patience).predict(texts)
            probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
            wanted = np.array([list(r["probabilities"].values()) for r in rows])
            if int8:
                # runs; its closeness is the export's check (cosine above); its accuracy, docs/finetune.md's
                assert np.isfinite(logits).all() and set(depth.tolist()) <= {1, 2, 3, 4}
            else:
                assert depth.tolist() == [r["depth"] for r in rows]
                np.testing.assert_allclose(probabilities, wanted, atol=1e-4)
                assert len(set(depth.tolist())) > 1  # rows stopped at different depths: the batch shrank
