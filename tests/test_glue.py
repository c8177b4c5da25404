"""`albert glue`: seeds x rates per task in worker processes, the rate chosen on mean dev score, resumable."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from albert_lm.cli import main
from albert_lm.glue.config import GlueConfig
from albert_lm.glue.grid import run_glue
from albert_lm.glue.report import format_table
from albert_lm.model.heads import AlbertForPreTraining


@pytest.fixture(scope="module")
def tiny_model(albert_data, tmp_path_factory, tiny_config) -> Path:
    """A random tiny ALBERT with the released 30k vocabulary (the fine-tuning runs need its spiece.model)."""
    folder = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    AlbertForPreTraining(tiny_config(vocab_size=30000, max_position_embeddings=128)).save_pretrained(folder)
    shutil.copyfile(albert_data / "tokenizer" / "albert-30k" / "spiece.model", folder / "spiece.model")
    return folder


def _config(model: Path, data: Path, out: Path, **kw) -> GlueConfig:
    values = dict(
        model=str(model),
        data=str(data / "glue"),
        output=str(out),
        tasks="rte,stsb",
        seeds="1,2",
        learning_rates="1e-3,3e-3",
        epochs=1.0,
        batch_size=8,
        max_seq_length=64,
        max_train_examples=16,
        max_eval_examples=24,
        workers=2,
    )
    values.update(kw)
    return GlueConfig(**values)


def test_glue_suite_chooses_the_rate_on_mean_dev_score_and_resumes(tiny_model, albert_data, tmp_path):
    cfg = _config(tiny_model, albert_data, tmp_path / "glue")
    result = run_glue(cfg)
    assert list(result["tasks"]) == ["rte", "stsb"]
    for row in result["tasks"].values():
        assert set(row["by_learning_rate"]) == {"0.001", "0.003"}
        assert all(len(s) == 2 for s in row["by_learning_rate"].values())  # two seeds each
        means = {float(r): statistics.fmean(s) for r, s in row["by_learning_rate"].items()}
        assert row["learning_rate"] == max(means, key=means.__getitem__)
        assert row["mean"] == pytest.approx(means[row["learning_rate"]])
        assert row["std"] == pytest.approx(statistics.stdev(row["scores"]))
    rte_labels = [
        ln.split("\t")[-1].strip() for ln in (albert_data / "glue/RTE/dev.tsv").read_text().splitlines()[1:25]
    ]
    assert result["tasks"]["rte"]["majority"] == pytest.approx(
        max(map(rte_labels.count, set(rte_labels))) / 24
    )
    assert result["tasks"]["stsb"]["majority"] == 0.0 and result["tasks"]["stsb"]["metric"] == "pearson"
    avg = result["average"]
    assert avg["name"] == "average of 2"
    assert avg["score"] == pytest.approx(
        50 * (result["tasks"]["rte"]["mean"] + result["tasks"]["stsb"]["mean"])
    )
    assert (tmp_path / "glue" / "glue_results.json").is_file()
    table = format_table(result)
    assert "RTE" in table and "STS-B" in table and "average of 2" in table
    assert "at most 16 training examples per task" in table
    # Finished runs are not run again: the same call only re-reads them.
    done = sorted((tmp_path / "glue").glob("*/lr-*/seed-*/eval_results.json"))
    assert len(done) == 8
    stamps = [p.stat().st_mtime_ns for p in done]
    assert run_glue(cfg) == result
    assert [p.stat().st_mtime_ns for p in done] == stamps


def test_glue_refuses_bad_settings_before_running(tiny_model, albert_data, tmp_path, capsys):
    with pytest.raises(ValueError, match="--tasks"):
        run_glue(_config(tiny_model, albert_data, tmp_path, tasks="rte,qqp"))
    with pytest.raises(ValueError, match="--learning-rates"):
        run_glue(_config(tiny_model, albert_data, tmp_path, learning_rates="fast"))
    assert (
        main(["glue", "--model", str(tiny_model), "--data", str(tmp_path), "--output", str(tmp_path / "o")])
        == 1
    )
    assert "no CoLA/dev.tsv under --data" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    one_task = str(albert_data / "glue" / "RTE")  # a task's folder where the GLUE root is wanted
    assert (
        main(["glue", "--model", str(tiny_model), "--data", one_task, "--output", str(tmp_path / "o")]) == 1
    )
    assert "--data is the GLUE root (holding CoLA/, SST-2/, ...), not one task's" in capsys.readouterr().err
    model_here = tmp_path / "converted"  # a model folder as --output: its runs were written among its files
    shutil.copytree(tiny_model, model_here)
    argv = [
        "glue",
        "--model",
        str(tiny_model),
        "--data",
        str(albert_data / "glue"),
        "--output",
        str(model_here),
    ]
    assert main(argv) == 1
    assert "holds a model (config.json" in capsys.readouterr().err
    assert sorted(p.name for p in model_here.iterdir()) == sorted(p.name for p in tiny_model.iterdir())
    csv = tmp_path / "csv"  # a GLUE task's file under another name: the folder's files are named
    csv.mkdir()
    (csv / "train.csv").write_text("sentence,label\nfine,1\n")
    argv = [
        "finetune",
        "--task",
        "sst2",
        "--model",
        str(tiny_model),
        "--data",
        str(csv),
        "--output",
        str(tmp_path / "f"),
    ]
    assert main(argv) == 1
    assert f"no training file for sst2 under {csv} (it holds train.csv;" in capsys.readouterr().err


def _descendants(pid: int) -> set[int]:
    """Live descendants of a process (Linux /proc), zombies left out."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            for c in map(int, children.read_text().split()):
                if c not in found and _alive(c):
                    found.add(c)
                    todo.append(c)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _stop_all(suite: subprocess.Popen, workers: set[int]) -> None:
    """Never leave processes behind, whatever failed."""
    for w in workers | (_descendants(suite.pid) if suite.poll() is None else set()):
        if _alive(w):
            os.kill(w, signal.SIGKILL)
    suite.kill()


def _wait_for_workers(suite: subprocess.Popen, n: int) -> set[int]:
    deadline = time.monotonic() + 120
    while len(workers := _descendants(suite.pid)) < n and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(workers) >= n, "the suite never started its worker processes"
    return workers


_SCRIPT = "import json, sys; from albert_lm.glue.config import GlueConfig; "
_SCRIPT += "from albert_lm.glue.grid import run_glue; run_glue(GlueConfig(**json.loads(sys.argv[1])))"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from Linux /proc")
@pytest.mark.parametrize("killed", ["the suite", "a worker"])
def test_a_killed_suite_or_worker_stops_every_fine_tuning(killed, tiny_model, albert_data, tmp_path):
    """SIGTERM to the suite takes its running fine-tunings with it. A worker killed (for memory, say)
    ends the suite within seconds, naming what happened: multiprocessing.Pool, used before, started a new
    worker instead and waited forever for the lost run."""
    cfg = _config(tiny_model, albert_data, tmp_path / "glue", tasks="rte", seeds="1,2,3,4", learning_rates="1e-3",
                  epochs=100000.0)  # fmt: skip  # runs that would not end by themselves
    suite = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, json.dumps(dataclasses.asdict(cfg))],
        stderr=subprocess.PIPE,
        text=True,
    )
    workers: set[int] = set()
    try:
        workers = _wait_for_workers(suite, 2)
        time.sleep(3)  # the workers are fine-tuning now
        if killed == "the suite":
            suite.send_signal(signal.SIGTERM)
        else:  # (the other children: multiprocessing's resource tracker)
            fine_tunings = [w for w in workers if b"spawn_main" in Path(f"/proc/{w}/cmdline").read_bytes()]
            assert fine_tunings, "no worker process found"
            os.kill(fine_tunings[0], signal.SIGKILL)
        _, err = suite.communicate(timeout=60)
        assert suite.returncode != 0
        assert killed == "the suite" or "worker process ended without a result" in err
        assert "stopping after this step" not in err  # the suite speaks for its runs, not each worker
        deadline = time.monotonic() + 30
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [w for w in workers if _alive(w)], "fine-tuning workers outlived the suite"
    finally:
        _stop_all(suite, workers)


# --------------------------------------------------------------------------- distilled from teachers
def _teacher(folder: Path, task: str) -> Path:
    """A random 2-layer, H 32 BERT shaped for `task` (its labels by GLUE's names, or one regression
    output), with a WordPiece vocabulary of single characters."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    from albert_lm.tasks.glue import label_names

    folder.mkdir(parents=True)
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-$%&/")
    words = chars + [f"##{c}" for c in chars]  # every word of English text, spelt out
    (folder / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n"
    )
    names = label_names(task)
    labels = (
        {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}} if names else {}
    )
    config = BertConfig(vocab_size=len(words) + 5, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=len(names) or 1,
                        problem_type=None if names else "regression", **labels)  # fmt: skip
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def test_glue_with_teachers_distils_each_task_and_shows_the_teachers_scores(
    tiny_model, albert_data, tmp_path
):
    teachers = tmp_path / "teachers"
    _teacher(teachers / "RTE", "rte")
    cfg = _config(tiny_model, albert_data, tmp_path / "glue", seeds="1", learning_rates="1e-3",
                  teachers=str(teachers), augment=1)  # fmt: skip
    with pytest.raises(FileNotFoundError, match=r"no teacher for STS-B .*teachers/STS-B"):
        run_glue(cfg)
    assert not (tmp_path / "glue").exists()
    _teacher(teachers / "STS-B", "stsb")
    result = run_glue(cfg)
    for task, folder in (("rte", "RTE"), ("stsb", "STS-B")):
        run = tmp_path / "glue" / task / "lr-0.001" / "seed-1"
        scores = json.loads((run / "eval_results.json").read_text())
        metric = result["tasks"][task]["metric"]
        assert result["tasks"][task]["teacher"] == scores[f"teacher_{metric}"]
        row = result["tasks"][task]
        assert row["kept"] == (pytest.approx(row["mean"] / row["teacher"]) if row["teacher"] > 0 else None)
        assert result["tasks"][task]["mean"] == scores[metric]
        assert scores["teacher"] == str(teachers / folder)
        assert (run / "best" / "finetune_config.json").is_file()  # what predict and evaluate take
    avg = result["average"]
    assert avg["teacher"] == pytest.approx(50 * sum(r["teacher"] for r in result["tasks"].values()))
    assert avg["kept"] == (pytest.approx(avg["score"] / avg["teacher"]) if avg["teacher"] > 0 else None)
    table = format_table(result)
    assert "teacher" in next(line for line in table.splitlines() if line.startswith("task "))
    assert ("the student keeps" in table) == (avg["teacher"] > 0)
    stamps = [p.stat().st_mtime_ns for p in sorted((tmp_path / "glue").glob("*/*/*/eval_results.json"))]
    assert run_glue(cfg) == result  # finished runs are reused
    assert [
        p.stat().st_mtime_ns for p in sorted((tmp_path / "glue").glob("*/*/*/eval_results.json"))
    ] == stamps
    # another teacher makes the runs stale: refused, naming it
    from transformers import BertForSequenceClassification

    other = BertForSequenceClassification.from_pretrained(teachers / "RTE")
    with torch.no_grad():
        other.classifier.weight.mul_(2.0)
    other.save_pretrained(teachers / "RTE")
    with pytest.raises(ValueError, match="the task's teacher changed"):
        run_glue(cfg)


def test_glue_teacher_options_are_checked(tiny_model, albert_data, tmp_path):
    with pytest.raises(ValueError, match="--augment: only with --teachers"):
        _config(tiny_model, albert_data, tmp_path, augment=2)
    with pytest.raises(ValueError, match="--classifier-pooling: not with --teachers"):
        _config(tiny_model, albert_data, tmp_path, teachers=str(tmp_path), classifier_pooling="mean")
    with pytest.raises(ValueError, match="augment"):
        _config(tiny_model, albert_data, tmp_path, teachers=str(tmp_path), augment=-1)


def test_settings_compare_a_missing_key_as_its_default():
    """Resuming and reusing a finished GLUE run compare settings one way: a setting the saved file lacks
    (added to albert-lm since) counts as its default."""
    from albert_lm.training.finetune_config import FinetuneConfig
    from albert_lm.training.run_folder import changed_settings

    now = FinetuneConfig(task="rte", model="m", data="d", output="o")
    saved = json.loads(json.dumps(dataclasses.asdict(now)))
    assert changed_settings(saved, now) == []
    del saved["exit_heads"]  # a setting newer than the file, at its default (False): no change
    assert changed_settings(saved, now) == []
    changed = dataclasses.replace(now, classifier_pooling="mean", learning_rate=5e-5)
    assert changed_settings(saved, changed, ignore=("learning_rate",)) == [
        "classifier_pooling: None there, 'mean' now"
    ]


def test_a_finished_run_is_reused_after_a_new_setting_at_its_default(tiny_model, albert_data, tmp_path):
    """A record written before a setting existed does not make the suite refuse to go on; a changed
    setting still does."""
    cfg = _config(tiny_model, albert_data, tmp_path / "glue", tasks="rte", seeds="1", learning_rates="1e-3",
                  workers=1)  # fmt: skip
    result = run_glue(cfg)
    (record,) = (tmp_path / "glue").glob("*/lr-*/seed-*/glue_run.json")
    kept = json.loads(record.read_text())
    del kept["settings"]["exit_heads"]
    record.write_text(json.dumps(kept))
    assert run_glue(cfg) == result
    kept["settings"]["dropout"] = 0.3
    record.write_text(json.dumps(kept))
    with pytest.raises(ValueError, match="dropout: 0.3 there"):
        run_glue(cfg)


# --------------------------------------------------------------------------- each task's own settings
def test_task_settings_are_typed_from_the_command_line_and_checked_by_task():
    parse = GlueConfig.parse_task_settings
    assert parse(
        [
            "stsb.learning_rates=2e-5",
            "stsb.epochs=4",
            "stsb.bi_encoder=true",
            "mrpc.teachers=null",
            "cola.teachers=runs/t",
            "rte.precision=fp32",
        ]
    ) == {  # fmt: skip
        "stsb": {"learning_rates": "2e-5", "epochs": 4, "bi_encoder": True},
        "mrpc": {"teachers": None},
        "cola": {"teachers": "runs/t"},
        "rte": {"precision": "fp32"},
    }
    for pair in ("stsb=4", "epochs=4", ".epochs=4", "stsb.epochs"):
        with pytest.raises(ValueError, match="TASK.NAME=VALUE"):
            parse([pair])
    with pytest.raises(ValueError, match="stsb.epochs: 'four' is not a value of epochs"):
        parse(["stsb.epochs=four"])

    def refused(settings: dict, match: str, **kw) -> None:
        with pytest.raises(ValueError, match=match):
            GlueConfig(model="m", data="d", output="o", task_settings=settings, **kw)

    refused({"qqp": {"epochs": 2}}, "task_settings.qqp: no such task")
    refused({"rte": {"seeds": "1"}}, "task_settings.rte: seeds: not a setting of one task's runs")
    refused({"rte": 3}, "task_settings.rte: expected a JSON object")
    refused({"rte": {"epochs": -1}}, "task_settings.rte: epochs must be > 0")
    refused({"rte": {"learning_rates": "fast"}}, "task_settings.rte: --learning-rates 'fast'")
    refused({"cola": {"bi_encoder": True}}, "task_settings.cola.bi_encoder: only STS-B")
    refused(
        {"stsb": {"bi_encoder": True}}, r"task_settings.stsb: --bi-encoder: not with --teachers", teachers="t"
    )
    refused({"rte": {"classifier_pooling": "mean"}}, "task_settings.rte: --classifier-pooling", teachers="t")
    refused({}, "--bi-encoder: not with --teachers", teachers="t", bi_encoder=True)


def test_each_task_runs_with_its_own_settings_over_the_suites():
    cfg = GlueConfig(model="m", data="d", output="o", teachers="t", augment=4, bi_encoder=True,
                     learning_rates="3e-5", task_settings={"stsb": {"teachers": None, "epochs": 4.0},
                                                          "mrpc": {"learning_rates": "1e-4,3e-4"}})  # fmt: skip
    stsb, mrpc, rte = cfg.for_task("stsb"), cfg.for_task("mrpc"), cfg.for_task("rte")
    assert (stsb.teachers, stsb.augment, stsb.bi_encoder, stsb.epochs, stsb.rates()) == (
        None,
        0,
        True,
        4.0,
        [3e-5],
    )
    assert (mrpc.teachers, mrpc.augment, mrpc.bi_encoder, mrpc.rates()) == ("t", 4, False, [1e-4, 3e-4])
    assert (rte.teachers, rte.epochs, rte.task_settings) == ("t", 3.0, {})
    assert GlueConfig(model="m", data="d", output="o").for_task("rte").teachers is None


def test_glue_mixes_distilled_gold_label_and_bi_encoder_tasks(tiny_model, albert_data, tmp_path, capsys):
    """A teacher for RTE only: RTE task-distilled at its own rate, STS-B fine-tuned on its gold scores as a
    bi-encoder at another, from one --recipe with --task-setting over it, resumable."""
    teachers = tmp_path / "teachers"
    _teacher(teachers / "RTE", "rte")
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"glue": {"tasks": "rte,stsb", "learning_rates": "1e-3", "augment": 1,
        "task_settings": {"stsb": {"teachers": None, "bi_encoder": True, "learning_rates": "3e-3"}}}}))  # fmt: skip
    out = tmp_path / "glue"
    argv = ["glue", "--recipe", str(recipe), "--model", str(tiny_model), "--data", str(albert_data / "glue"),
            "--teachers", str(teachers), "--output", str(out), "--seeds", "1", "--epochs", "1", "--batch-size",
            "8", "--max-seq-length", "64", "--max-train-examples", "16", "--max-eval-examples", "24",
            "--workers", "1", "--precision", "fp32", "--task-setting", "stsb.epochs=2"]  # fmt: skip
    assert main(argv) == 0
    table = capsys.readouterr().out
    result = json.loads((out / "glue_results.json").read_text())
    rte, stsb = out / "rte" / "lr-0.001" / "seed-1", out / "stsb" / "lr-0.003" / "seed-1"
    assert json.loads((rte / "eval_results.json").read_text())["teacher"] == str(teachers / "RTE")
    assert "teacher" not in json.loads((stsb / "eval_results.json").read_text())  # the gold scores
    assert json.loads((stsb / "best" / "config.json").read_text())["architectures"] == [
        "AlbertForSentenceSimilarity"
    ]
    assert (
        json.loads((stsb / "best" / "finetune_config.json").read_text())["epochs"] == 2.0
    )  # the typed value won
    assert set(result["settings"]["task_settings"]["stsb"]) == {"teachers", "bi_encoder", "learning_rates",
                                                                  "epochs"}  # fmt: skip
    assert "teacher" in result["tasks"]["rte"] and "teacher" not in result["tasks"]["stsb"]
    assert "teacher" not in result["average"]  # no teachers' GLUE average from half the tasks
    header = next(line for line in table.splitlines() if line.startswith("task "))
    assert header.rstrip().endswith("teacher") and "the student keeps" not in table
    assert "rows without a teacher: fine-tuned on the gold labels" in table
    assert "STS-B: a bi-encoder" in table
    stamps = [p.stat().st_mtime_ns for p in sorted(out.glob("*/*/*/eval_results.json"))]
    assert main(argv) == 0  # resumed: both runs reused
    assert [p.stat().st_mtime_ns for p in sorted(out.glob("*/*/*/eval_results.json"))] == stamps
    assert main([*argv, "--task-setting", "cola.bi_encoder=true"]) == 1
    assert "--task-setting cola.bi_encoder: only STS-B" in capsys.readouterr().err  # as typed


def test_a_stopped_suite_says_what_is_kept_and_how_to_go_on(
    tiny_model, albert_data, tmp_path, monkeypatch, caplog
):
    """Ctrl-C said only "interrupted": nothing on the runs kept or on how to continue. Each finished run
    is logged with the time spent and the time left (the suite was silent for an hour on a CPU)."""
    import logging

    import albert_lm.glue.grid as grid
    from albert_lm.training.checkpoint import STATE_FILE

    def one_then_stopped(work, jobs, workers, command, *, on_result, **kw):
        (job, cfg, record), (_, cfg2, record2), (_, cfg3, record3) = jobs
        for run, kept in ((cfg, record), (cfg2, record2), (cfg3, record3)):
            Path(run.output).mkdir(parents=True)
            (Path(run.output) / grid.RUN_STARTED).write_text(json.dumps(kept))
        (Path(cfg.output) / grid.RUN_RECORD).write_text(json.dumps(record))
        saved = Path(cfg2.output) / "checkpoint-7"  # the second saved at step 7, the third not yet
        shutil.copytree(tiny_model, saved, ignore=shutil.ignore_patterns("*.pt", "*.json", "spiece.model"))
        shutil.copy(tiny_model / "config.json", saved)
        torch.save({}, saved / STATE_FILE)
        on_result((job, {"accuracy": 0.5}))
        raise KeyboardInterrupt

    monkeypatch.setattr(grid, "run_pool", one_then_stopped)
    cfg = _config(tiny_model, albert_data, tmp_path, tasks="rte", seeds="1,2,3", learning_rates="1e-3")
    with caplog.at_level(logging.INFO, logger="albert_lm"), pytest.raises(KeyboardInterrupt):
        run_glue(cfg)
    assert "glue 1/3: rte lr 0.001 seed 1 -> accuracy 0.5000 (0 s in, about 0 s left)" in caplog.text
    assert (
        "1 of 3 runs are finished and kept" in caplog.text
        and "the same command runs the 2 others" in caplog.text
    )
    # where each run under way was saved: it said "a run stopped part-way continues from its last
    # checkpoint" also of a run killed before it had one
    assert (
        "stopped part-way, they continue where saved: rte lr 0.001 seed 2 at step 7, rte lr 0.001 seed 3 "
        "before a first checkpoint (starts again)" in caplog.text
    )
    jobs = [("rte", 1e-3, seed) for seed in (2, 3)]
    base = grid._inputs_fingerprint(cfg, ["rte"])
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        again = grid._resumed(cfg, jobs, {j: grid.run_record(cfg, base, *j) for j in jobs})
    assert again == {("rte", 1e-3, 2)}  # and the next start says which start again
    assert "starting again, stopped before their first checkpoint: rte lr 0.001 seed 3" in caplog.text


class _StepBar:
    """Stands for the suite's progress bar: counts the optimizer steps its runs report."""

    made: list[_StepBar] = []

    def __init__(self, **kwargs):
        self.steps = 0
        _StepBar.made.append(self)

    def update(self, n):
        self.steps += n

    def set_postfix(self, *args):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *args):
        pass


def _stopped_in_this_process(grid, cfg, job, monkeypatch) -> None:
    """The run `job` of the suite `cfg`, as a worker runs it (one thread), stopped by SIGTERM after step 3."""
    import logging

    from conftest import signal_after_step

    from albert_lm.training import loop

    record = grid.run_record(cfg, grid._inputs_fingerprint(cfg, [job[0]]), *job)
    take, level, threads = (
        signal_after_step(monkeypatch, 3),
        logging.getLogger("albert_lm").level,
        torch.get_num_threads(),
    )
    torch.set_num_threads(1)  # as a worker of the suite: the resumed run then ends bit for bit as a whole one
    try:
        with pytest.raises(KeyboardInterrupt):
            grid._run((job, grid.run_config(cfg, *job), record))
    finally:
        torch.set_num_threads(threads)
        logging.getLogger("albert_lm").setLevel(level)
        monkeypatch.setattr(loop, "_take_step", take)


def test_a_run_stopped_part_way_continues_from_its_checkpoint(
    tiny_model, albert_data, tmp_path, monkeypatch, caplog
):
    """A suite stopped part-way started its unfinished runs again: hours lost for all of SST-2 on a CPU.
    A run stopped after step 3 now continues from that checkpoint and ends as if it had never stopped; one
    started from other inputs starts again. The suite's bar counts the steps its runs take."""
    import logging

    import albert_lm.glue.grid as grid
    from albert_lm.training import checkpoint

    _StepBar.made.clear()
    monkeypatch.setattr(grid, "progress_bar", _StepBar)
    kw = dict(tasks="rte", seeds="1", learning_rates="1e-3", epochs=2.0)  # 4 steps
    whole = run_glue(_config(tiny_model, albert_data, tmp_path / "whole", **kw))
    cfg, job = _config(tiny_model, albert_data, tmp_path / "stopped", **kw), ("rte", 1e-3, 1)
    _stopped_in_this_process(grid, cfg, job, monkeypatch)
    folder = grid.run_folder(cfg, *job)
    assert checkpoint.checkpoint_step(checkpoint.latest_checkpoint(folder)) == 3
    other = tmp_path / "other"  # the same stopped run, started from another tokenizer
    shutil.copytree(tmp_path / "stopped", other)
    started = grid.run_folder(dataclasses.replace(cfg, output=str(other)), *job) / grid.RUN_STARTED
    started.write_text(json.dumps({**json.loads(started.read_text()), "tokenizer": "another"}))
    given, pool = [], grid.run_pool

    def recording(work, jobs, *args, **kwargs):
        given.extend((c.resume, c.overwrite) for _, c, _ in jobs)
        return pool(work, jobs, *args, **kwargs)

    monkeypatch.setattr(grid, "run_pool", recording)
    with pytest.raises(ValueError, match=r"the run .* stopped at step 3, was started from another model, data "
                       r"or settings \(the tokenizer's vocabulary changed\): give the same to continue it, "
                       "--overwrite"):  # fmt: skip  # as a finished run is: a typo never throws away hours
        run_glue(dataclasses.replace(cfg, output=str(other)))
    with caplog.at_level(logging.INFO, logger="albert_lm"):
        resumed = run_glue(cfg)
        restarted = run_glue(dataclasses.replace(cfg, output=str(other), overwrite=True))
    assert given == [(True, False), (False, True)]
    assert [b.steps for b in _StepBar.made] == [4, 1, 4]  # the resumed run took the one step it had left
    assert "continuing from checkpoints: rte lr 0.001 seed 1 (step 3)" in caplog.text
    assert "starting " in caplog.text and " again: the tokenizer's vocabulary changed" in caplog.text
    assert resumed["tasks"] == whole["tasks"] == restarted["tasks"]
    assert not (folder / grid.RUN_STARTED).exists() and checkpoint.latest_checkpoint(folder) is None
    assert (folder / grid.RUN_RECORD).is_file()


def test_the_time_left_counts_the_runs_under_way():
    """4 runs on 2 workers, the first done at 55 s: "about 3 min left", and the suite ended 21 s later."""
    from albert_lm.glue.grid import time_left

    assert time_left(55.0, 1, 4, 2) == pytest.approx(55.0)
    assert time_left(120.0, 1, 2, 2) == pytest.approx(40.0)  # the last run, under way: not another 120 s
    assert time_left(100.0, 4, 8, 1) == pytest.approx(100.0 / 4.5 * 3.5)
