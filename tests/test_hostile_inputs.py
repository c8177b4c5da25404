"""Hostile input to what fine-tuning, evaluation, prediction and export read and write: task rows whose
text or label is null, missing or not text; a fine-tuned model's finetune_config.json and config.json
holding values of the wrong type or range; damaged safetensors weights; writes cut short by a file-size
limit (`ulimit -f`); JSON nested too deeply for the parser. Each is one error line naming the file (and
the line or the field), never a traceback, never a run that goes on with a wrong value."""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import finetune_argv
from test_bad_input import refused

from albert_lm.cli import main
from albert_lm.files import InputError
from albert_lm.model.config import AlbertConfig
from albert_lm.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]
FT = ["--max-steps", "1", "--batch-size", "4", "--precision", "fp32", "--max-seq-length", "32",
      "--no-tensorboard", "--no-plot"]  # fmt: skip
DEEP = "[" * 100_000 + "]" * 100_000


def _rows(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _good(n: int) -> list[dict[str, str]]:
    return [{"text": f"word{i} river", "label": "yes" if i % 2 else "no"} for i in range(n)]


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_pretrained) -> dict[str, Path]:
    """A tiny pretrained model (200 pieces: the session's `tiny_pretrained`), a task folder, and a classifier
    fine-tuned on it (best/)."""
    d = tmp_path_factory.mktemp("hostile-inputs")
    (d / "task").mkdir()
    (d / "task" / "train.jsonl").write_text(_rows(*_good(12)))
    (d / "task" / "dev.jsonl").write_text(_rows(*_good(6)))
    (d / "rows.jsonl").write_text(_rows({"text": "word1 river"}, {"text": "word2"}))
    assert main(finetune_argv("classification", tiny_pretrained, d / "task", d / "ft", *FT)) == 0
    return {
        "root": d,
        "pre": tiny_pretrained,
        "task": d / "task",
        "best": d / "ft" / "best",
        "rows": d / "rows.jsonl",
    }


def _copy(models: dict[str, Path], tmp_path: Path, name: str = "model") -> Path:
    return Path(shutil.copytree(models["best"], tmp_path / name))


def _predict(model: Path, models: dict[str, Path], tmp_path: Path) -> list[str]:
    """`albert predict` of MODEL on the rows of `models`, into tmp_path/o.jsonl."""
    return ["predict", "--model", str(model), "--input", str(models["rows"]), "--output",
            str(tmp_path / "o.jsonl")]  # fmt: skip


def _edit_json(path: Path, **changes: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


# --------------------------------------------------------------------------- task rows
@pytest.mark.parametrize(
    ("row", "column"),
    [
        ({"text": ["word1", "river"], "label": "yes"}, "text"),  # was read as the text "['word1', 'river']"
        ({"text": {"a": "word1"}, "label": "no"}, "text"),
        ({"text": "   ", "label": "no"}, "text"),  # blank: an example of [CLS] [SEP] alone
        ({"text": "word1", "label": ["yes"]}, "label"),  # a label "['yes']"
        ({"text": "word1", "text_pair": {"b": 1}, "label": "yes"}, "text_pair"),
    ],
)
def test_classification_rows_that_are_not_text_are_refused(tmp_path, row, column):
    path = tmp_path / "train.jsonl"
    path.write_text(_rows(*_good(2), row, *_good(2)))
    with pytest.raises(InputError, match=rf"train.jsonl:3: .*'{column}'"):
        get_task("classification").read(path, "train")


def test_a_missing_column_is_named_with_the_columns_the_row_has(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("sentence,label\nword1,yes\n")
    with pytest.raises(
        InputError,
        match=r"train.csv:1: --text-column text: the file has no such column \(its columns: 'sentence', "
        r"'label'\); did you mean --text-column sentence\?",
    ):
        get_task("classification").read(path, "train")
    path = tmp_path / "train.jsonl"  # JSON Lines rows may differ: named by the row
    path.write_text('{"sentence": "word1", "label": "yes"}\n')
    with pytest.raises(
        InputError,
        match=r"train.jsonl:1: missing value for column 'text' \(the row has no such column: 'sentence', 'label'\)",
    ):
        get_task("classification").read(path, "train")


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ({"tokens": ["word1", None], "tags": ["O", "O"]}, "tokens"),  # was the word "None"
        ({"tokens": {"w": 1}, "tags": ["O"]}, "tokens"),
        ({"tokens": ["word1", "river"], "tags": ["O", ["B-X"]]}, "tags"),
    ],
)
def test_token_rows_with_words_that_are_not_text_are_refused(tmp_path, row, column):
    path = tmp_path / "train.jsonl"
    good = {"tokens": ["word1"], "tags": ["O"]}
    path.write_text(_rows(good, good, row))
    with pytest.raises(InputError, match=rf"train.jsonl:3: column '{column}'"):
        get_task("token-classification").read(path, "train")


def test_race_rows_without_an_article_or_question_text_are_refused(tmp_path):
    good = {"article": "word1 river.", "question": "What?", "options": ["a", "b", "c", "d"], "answer": "A"}
    path = tmp_path / "train.jsonl"
    path.write_text(_rows(good, {**good, "article": None}))  # was an AttributeError in the tokenizer
    with pytest.raises(
        InputError, match=r"train.jsonl:2: field 'article': expected a non-empty text, got null"
    ):
        get_task("race").read(path, "train")
    path.write_text(_rows(good, {**good, "question": ["q"]}))  # was the question "['q']"
    with pytest.raises(InputError, match=r"train.jsonl:2: field 'question': expected a text"):
        get_task("race").read(path, "train")
    folder = tmp_path / "RACE" / "train" / "middle"
    folder.mkdir(parents=True)
    (folder / "1.txt").write_text(json.dumps({"article": "a.", "questions": 5, "options": [], "answers": []}))
    with pytest.raises(InputError, match=r"1.txt: field 'questions': expected a list, got 5"):
        get_task("race").read(tmp_path / "RACE" / "train", "train")


def _squad(qa: dict[str, object]) -> str:
    par = {"context": "word1 river", "qas": [qa]}
    return json.dumps({"data": [{"title": "t", "paragraphs": [par]}]})


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"answers": None}, "answers"),
        ({"answers": "river"}, "answers"),
        ({"is_impossible": "no", "answers": []}, "is_impossible"),
    ],
)
def test_squad_questions_with_fields_of_the_wrong_kind_are_refused(tmp_path, change, field):
    path = tmp_path / "train.json"
    qa = {"id": "q1", "question": "Which?", "answers": [{"text": "river", "answer_start": 6}], **change}
    path.write_text(_squad(qa))
    with pytest.raises(InputError, match=rf"train.json:\d+: .*q1.*{field}"):
        get_task("squad2").read(path, "train")


def test_squad_qas_that_is_no_list_is_refused(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": None}]}]}))
    with pytest.raises(
        InputError, match=r'train.json:1: data\[0\].paragraphs\[0\]: field "qas": expected a list'
    ):
        get_task("squad1").read(path, "train")


def _squad_lines(path: Path, paragraphs: list[dict[str, object]]) -> list[str]:
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}, indent=1))
    return path.read_text().splitlines()


def _refused_at(
    path: Path, lines: list[str], match: str, found: str, task: str = "squad2", split: str = "train"
) -> None:
    """The reader's error matches and names a line of the file holding `found`."""
    with pytest.raises(InputError, match=match) as e:
        get_task(task).read(path, split)
    assert e.value.line is not None and found in lines[e.value.line - 1], (str(e.value), found)


def test_squad_question_ids_given_twice_are_refused_at_the_second_in_dev_only(tmp_path, caplog):
    """Predictions are keyed by id: a second question of the same id lost one (80 questions, 79 scored).
    Training keys nothing by id, and merged training sets repeat ids: there they are taken, with a warning."""
    path = tmp_path / "dev.json"
    first = {"id": "q1", "question": "Which?", "answers": [{"text": "river", "answer_start": 6}]}
    second = {**first, "question": "Which again?"}
    par = {"context": "word1 river", "qas": [first]}
    lines = _squad_lines(path, [par, {**par, "qas": [second]}])
    match = r"dev.json:\d+: data\[0\].paragraphs\[1\].qas\[0\] \(question id 'q1'\): duplicate question id"
    _refused_at(path, lines, match + r" \(first at data\[0\].paragraphs\[0\].qas\[0\]\)", '"q1"', split="dev")
    line = [n for n, text in enumerate(lines, 1) if '"q1"' in text][1]
    with pytest.raises(InputError, match=rf"dev.json:{line}: "):
        get_task("squad1").read(path, "dev")
    with caplog.at_level("WARNING", logger="albert_lm"):
        taken = get_task("squad2").read(path, "train")
    assert [e.question for e in taken] == ["Which?", "Which again?"]
    assert "dev.json: 1 question reuses an earlier question's id; all are trained on" in caplog.text


@pytest.mark.parametrize(
    ("drop", "message", "found"),
    [
        ("id", 'missing field "id"', '"Which?"'),
        ("question", 'missing field "question"', '"q1"'),
        ("answer_start", 'missing field "answer_start"', '"q1"'),
    ],
)
def test_squad_missing_question_fields_are_named_with_a_line(tmp_path, drop, message, found):
    path = tmp_path / "train.json"
    answer = {k: v for k, v in {"text": "river", "answer_start": 6}.items() if k != drop}
    qa = {k: v for k, v in {"id": "q1", "question": "Which?", "answers": [answer]}.items() if k != drop}
    lines = _squad_lines(path, [{"context": "word1 river", "qas": [qa]}])
    _refused_at(path, lines, rf"train.json:\d+: data\[0\].paragraphs\[0\].qas\[0\].*: {message}$", found)


def test_squad_paragraph_and_answer_fields_are_named_with_a_line(tmp_path):
    path = tmp_path / "train.json"
    qa = {"id": "q1", "question": "Which?", "answers": [{"text": "river", "answer_start": "6"}]}
    lines = _squad_lines(path, [{"context": "word1 river", "qas": [qa]}])
    _refused_at(
        path, lines, r'field "answer_start": expected a character offset .*, got the string "6"', '"q1"'
    )
    lines = _squad_lines(path, [{"qas": [qa]}])
    _refused_at(path, lines, r'train.json:\d+: data\[0\].paragraphs\[0\]: missing field "context"$', '"q1"')
    lines = _squad_lines(path, [{"context": 5, "qas": []}])
    _refused_at(path, lines, r'field "context": expected a text, got the number 5', '"context"')
    lines = _squad_lines(path, [{"context": "word1 river"}])
    _refused_at(path, lines, r'paragraphs\[0\]: missing field "qas"$', '"word1 river"')


def test_glue_rows_with_an_empty_text_are_refused(tmp_path):
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    row = "{}\tg\tf\t2012\t0\ts\ts\t{}\tword2 stone\t3.0\n"
    path = tmp_path / "train.tsv"
    path.write_text(head + row.format(0, "word1") + row.format(1, "") + row.format(2, "word3"))
    with pytest.raises(InputError, match=r"train.tsv:3: empty value in column 'sentence1'"):
        get_task("stsb").read(path, "train")


def test_finetune_refuses_a_row_whose_text_is_a_list(capsys, models, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text(_rows(*_good(2), {"text": ["a"], "label": "no"}, *_good(6)))
    argv = ["finetune", "--task", "classification", "--model", str(models["pre"]), "--data", str(data)]
    refused(capsys, [*argv, "--output", str(tmp_path / "out"), *FT], "train.jsonl:3", "'text'")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- finetune_config.json, config.json
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_seq_length", "abc"),  # was a TypeError comparing it with a number
        ("labels", "yes"),  # was read as three labels y, e, s
        ("labels", ["no", None]),
        ("eval_batch_size", "16"),  # was ignored by predict
        ("task", "nonsense"),  # the message did not name the file
    ],
)
def test_predict_names_finetune_config_and_the_field(capsys, models, tmp_path, field, value):
    model = _copy(models, tmp_path)
    _edit_json(model / "finetune_config.json", **{field: value})
    argv = _predict(model, models, tmp_path)
    refused(capsys, argv, str(model / "finetune_config.json"), field)
    assert not (tmp_path / "o.jsonl").exists()


def test_evaluate_and_finetune_name_finetune_config(capsys, models, tmp_path):
    model = _copy(models, tmp_path)
    _edit_json(model / "finetune_config.json", max_seq_length="abc")
    ev = ["evaluate", "--task", "classification", "--model", str(model), "--data", str(models["task"])]
    refused(capsys, ev, "finetune_config.json", "max_seq_length")
    _edit_json(model / "finetune_config.json", max_seq_length=32, tokenizer_fingerprint=5)
    ft = ["finetune", "--task", "classification", "--model", str(model), "--data", str(models["task"])]
    refused(
        capsys, [*ft, "--output", str(tmp_path / "out"), *FT], "finetune_config.json", "tokenizer_fingerprint"
    )


def test_evaluate_names_finetune_config_for_a_training_setting(capsys, models, tmp_path):
    """Evaluate takes all its settings from the file, the training ones too (a learning rate the runtime's
    readers, predict and export, never use): each is checked there, the file and the field named."""
    model = _copy(models, tmp_path)
    _edit_json(model / "finetune_config.json", learning_rate="abc")
    ev = ["evaluate", "--task", "classification", "--model", str(model), "--data", str(models["task"])]
    refused(capsys, ev, "finetune_config.json", "learning_rate")


def test_evaluate_without_output_runs(capsys, models):
    """The saved settings are read with a placeholder output folder: none is needed to print the scores."""
    argv = [
        "evaluate",
        "--task",
        "classification",
        "--model",
        str(models["best"]),
        "--data",
        str(models["task"]),
    ]
    assert main(argv) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_a_squad2_threshold_that_is_no_number_is_named(capsys, models, tmp_path):
    model = _copy(models, tmp_path)
    _edit_json(model / "eval_results.json", null_score_diff_threshold="high")
    argv = _predict(model, models, tmp_path)
    refused(capsys, argv, "eval_results.json", "null_score_diff_threshold")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_dropout_prob", 1.5),  # torch's message named no file
        ("attention_probs_dropout_prob", -0.1),
        ("pad_token_id", 100_000),  # an assertion inside torch's Embedding
        ("layer_norm_eps", 0.0),
        ("id2label", {"0": "no", "one": "yes"}),  # "invalid literal for int()"
        ("id2label", {"0": "no", "1": ["yes"]}),
        ("id2label", {"0": "no", "5": "yes"}),
    ],
)
def test_config_json_values_out_of_range_are_named(models, tmp_path, field, value):
    model = _copy(models, tmp_path)
    _edit_json(model / "config.json", **{field: value})
    with pytest.raises(ValueError, match=rf"config.json: AlbertConfig: {field}"):
        AlbertConfig.from_pretrained(model)


def test_predict_refuses_a_config_with_a_pad_id_outside_the_vocabulary(capsys, models, tmp_path):
    model = _copy(models, tmp_path)
    _edit_json(model / "config.json", pad_token_id=100_000)
    argv = _predict(model, models, tmp_path)
    refused(capsys, argv, str(model / "config.json"), "pad_token_id")


# --------------------------------------------------------------------------- weights
def _header(tensors: dict[str, object], data: bytes = b"\0" * 16) -> bytes:
    raw = json.dumps(tensors).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


def test_a_header_declaring_enormous_shapes_is_named(capsys, models, tmp_path):
    model = _copy(models, tmp_path)
    name = "albert.embeddings.word_embeddings.weight"
    (model / "model.safetensors").write_bytes(
        _header({name: {"dtype": "F32", "shape": [1 << 31, 1 << 31], "data_offsets": [0, 16]}})
    )
    argv = [
        "embed",
        "--model",
        str(model),
        "--input",
        str(models["rows"]),
        "--output",
        str(tmp_path / "e.jsonl"),
    ]
    refused(capsys, argv, str(model / "model.safetensors"), "not a readable safetensors file")


def test_a_sharded_index_nested_too_deeply_is_named(capsys, models, tmp_path):
    model = _copy(models, tmp_path)
    (model / "model.safetensors").unlink()
    (model / "model.safetensors.index.json").write_text('{"weight_map": ' + DEEP + "}")
    argv = _predict(model, models, tmp_path)
    refused(capsys, argv, "model.safetensors.index.json", "nested too deeply")
    (model / "model.safetensors.index.json").write_text('{"weight_map": {"w": "../elsewhere.safetensors"}}')
    refused(capsys, argv, "model.safetensors.index.json", "weight_map")


def _limited(code: str, limit: int, cwd: Path) -> subprocess.CompletedProcess:
    """`python -c CODE` whose files may be at most `limit` bytes (`ulimit -f`)."""

    def fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=fsize,
        timeout=300,
    )


def test_weights_cut_short_by_a_file_size_limit_are_an_oserror_naming_the_file(tmp_path):
    code = (
        "import torch\nfrom pathlib import Path\nfrom albert_lm.model.weights import write_weights\n"
        "try:\n    write_weights(Path('w') / 'model.safetensors', {'w': torch.zeros(4096)})\n"
        "except OSError as e:\n    print('OSError', e.errno, e)\n"
    )
    run = _limited(code, 4096, tmp_path)
    assert run.returncode == 0, run.stderr
    assert (
        "OSError 27 " in run.stdout and "File too large" in run.stdout and "model.safetensors" in run.stdout
    )
    assert os.listdir(tmp_path / "w") == []  # no temporary file left behind


def test_export_under_a_file_size_limit_names_the_output_and_the_cause(models, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    out = tmp_path / "o"
    code = (
        "from albert_lm.cli import main\n"
        f"raise SystemExit(main(['export', '--model', {str(models['best'])!r}, '--output', {str(out)!r}]))"
    )
    run = _limited(code, 20_000, tmp_path)
    line = next(ln for ln in run.stderr.splitlines() if "error:" in ln)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "File too large" in line and str(out / "model.onnx") in line, line
    assert "problem writing element" not in line
    assert [p.name for p in tmp_path.iterdir()] == []  # no output and no temporary folder left


def test_export_refuses_a_fine_tuned_model_whose_settings_are_damaged(capsys, models, tmp_path):
    """It was exported as a bare encoder, the damaged settings file copied beside it."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = _copy(models, tmp_path)
    _edit_json(model / "finetune_config.json", max_seq_length="abc")
    refused(
        capsys,
        ["export", "--model", str(model), "--output", str(tmp_path / "o")],
        "finetune_config.json",
        "max_seq_length",
    )
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- JSON nested too deeply
def test_a_list_column_nested_too_deeply_is_named():
    from albert_lm.deploy.inputs import Fields

    with pytest.raises(InputError, match=r"rows.csv:7: column 'options': expected a JSON list"):
        Fields("rows.csv").strings({"options": "[" * 100_000}, "options", 7)


def test_glue_summary_names_a_finished_run_whose_results_were_damaged(tmp_path):
    from albert_lm.glue.config import GLUE5, GlueConfig, run_folder
    from albert_lm.glue.report import summarize

    cfg = GlueConfig(
        model="m",
        data=str(tmp_path),
        output=str(tmp_path / "out"),
        tasks="rte",
        seeds="1",
        learning_rates="1e-4",
    )
    results = run_folder(cfg, "rte", 1e-4, 1) / "eval_results.json"
    results.parent.mkdir(parents=True)
    metric = GLUE5["rte"][1]
    for damaged in ({"step": 2}, {metric: "high"}):  # was a KeyError, then a float() of the text
        results.write_text(json.dumps(damaged))
        with pytest.raises(InputError, match=rf"eval_results.json: {metric}: expected the run's dev score"):
            summarize(cfg, [("rte", 1e-4, 1)])
