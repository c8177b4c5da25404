"""`albert export --format web`: the exported page in headless chromium against albert-lm's Python outputs.

A tiny fine-tuned classifier, a tiny pretraining checkpoint (fill-mask) and a tiny distilled student
(feature extraction) are exported, each folder served on a free localhost port, and the page typed into
and clicked; every request that is not to that server fails the test (the page works offline). fp32:
logits and vectors within 1e-4 of PyTorch's; int8: cosine >= 0.999 and the same top-1.

Needs chromium on PATH, playwright for Python and the npm packages of `make web` (.web/node_modules, or
$ALBERT_WEB_MODULES); the browser tests skip, saying which, where one is absent.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import web_missing  # tests/ is on sys.path

from albert_lm.cli import main
from albert_lm.files import write_json

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

ROOT = Path(__file__).resolve().parents[1]
MODULES = Path(os.environ.get("ALBERT_WEB_MODULES") or ROOT / ".web" / "node_modules")
TEXT = "Punago bi be te vona zise."
FP32_TOLERANCE, INT8_COSINE = 1e-4, 0.999


# --------------------------------------------------------------------------- models
@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_config, tiny_corpus_and_tokenizer) -> dict[str, Path]:
    """Tiny folders of each kind the page runs, with weights spread wide enough (initializer_range
    0.1) that the top-1 label and token are clear of ties, and int8 stays close."""
    from albert_lm.model.heads import AlbertForPreTraining, AlbertForSequenceClassification

    root = tmp_path_factory.mktemp("web-models")
    spiece = tiny_corpus_and_tokenizer[1] / "spiece.model"
    config = tiny_config(vocab_size=200, initializer_range=0.1)
    folders = {}
    for name, cls in (("classifier", AlbertForSequenceClassification), ("pretrained", AlbertForPreTraining)):
        torch.manual_seed(0)
        cls(config).save_pretrained(root / name)
        shutil.copy(spiece, root / name / "spiece.model")
        folders[name] = root / name
    write_json(
        root / "classifier" / "finetune_config.json",
        {"task": "classification", "labels": ["sad", "happy"], "max_seq_length": 64},
    )
    shutil.copytree(root / "pretrained", root / "student")  # as `albert distill general` leaves it
    write_json(root / "student" / "distill_results.json", {"student_parameters": 0})
    folders["student"] = root / "student"
    return folders


def export(model: Path, out: Path, *extra: str) -> Path:
    args = ["export", "--format", "web", "--model", str(model), "--output", str(out)]
    assert main([*args, "--npm-modules", str(MODULES), *extra]) == 0
    return out


# --------------------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright import sync_api
    except ImportError:
        web_missing("playwright for Python is not installed")
    chromium = shutil.which("chromium")
    if chromium is None:
        web_missing("no chromium on PATH (Debian: apt-get install chromium)")
    if not (MODULES / "@huggingface" / "transformers" / "package.json").is_file():
        web_missing(f"no transformers.js under {MODULES}: run `make web`")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True)
        yield b
        b.close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Any]:
    """`serve(folder)`: the folder over HTTP on a free localhost port, in a thread; its base URL."""
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(Quiet, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class Page:
    """The export's page in a fresh browser context; requests anywhere but `base` are refused and kept.
    With `typed`, that text is typed and submitted while the model's files are held back (see
    `_type_while_loading`), and the page is left once it has predicted."""

    def __init__(self, browser: Any, base: str, dtype: str, typed: str | None = None) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.outside: list[str] = []
        self.held: list[Any] | None = None if typed is None else []  # the model's requests, held back
        self.page.route("**/*", self._route)
        self.page.goto(f"{base}index.html?dtype={dtype}", wait_until="commit" if typed else "load")
        if typed is not None:
            self._type_while_loading(typed)
        states = "['ready', 'error']" if typed is None else "['done', 'error']"
        self.page.wait_for_function(f"{states}.includes(document.body.dataset.state)", timeout=60_000)
        assert self.page.evaluate("window.albertError") is None

    def _route(self, route: Any) -> None:
        url = route.request.url
        if self.held is not None and url.startswith("http://127.0.0.1:") and "/onnx/" in url:
            self.held.append(route)
        elif url.startswith(("http://127.0.0.1:", "blob:", "data:")):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def _type_while_loading(self, text: str) -> None:
        """Once the page has asked for its model (held back, so it is still loading): `text` typed, the
        button clicked (disabled: nothing happens) and the form submitted, the text still there; then the
        model let through. The page keeps the text rather than putting its example there, and predicts
        it once the model has loaded."""
        deadline = time.monotonic() + 30
        while not self.held:
            assert time.monotonic() < deadline, "the page did not ask for its model"
            self.page.wait_for_timeout(20)
        self.page.fill("#text", text)
        self.page.click("#run", force=True)
        self.page.evaluate("document.getElementById('form').requestSubmit()")
        assert self.page.evaluate("document.body.dataset.state") == "loading"
        assert self.page.input_value("#text") == text
        held, self.held = self.held, None
        for route in held:
            route.continue_()

    def result(self) -> dict[str, Any]:
        return self.page.evaluate("window.albertResult")

    def predict(self, text: str, text2: str | None = None) -> dict[str, Any]:
        self.page.fill("#text", text)
        if text2 is not None:
            self.page.fill("#text2", text2)
        self.page.click("#run")
        self.page.wait_for_function("['done', 'error'].includes(document.body.dataset.state)", timeout=60_000)
        assert self.page.evaluate("window.albertError") is None
        result = self.page.evaluate("window.albertResult")
        assert json.loads(self.page.text_content("#result")) == json.loads(json.dumps(result))
        return result

    def close(self, screenshot: Path) -> None:
        self.page.screenshot(path=str(screenshot), full_page=True)
        self.context.close()
        assert not self.outside, f"the page asked for more than its own folder: {self.outside}"


def cosine(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def python_ids(folder: Path, text: str) -> list[int]:
    from albert_lm.data.tokenizer import AlbertTokenizer

    tok = AlbertTokenizer.from_pretrained(folder)
    return [tok.cls_token_id, *tok.encode_batch([text])[0], tok.sep_token_id]


# --------------------------------------------------------------------------- pages against Python
@pytest.mark.slow
def test_classifier_page_matches_predict(models, browser, serve, tmp_path):
    from albert_lm import Predictor
    from albert_lm.deploy.predict import load_task_model

    out = export(models["classifier"], tmp_path / "web")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["AlbertForSequenceClassification"]
    assert config["id2label"] == {"0": "sad", "1": "happy"} and config["label2id"] == {"sad": 0, "happy": 1}
    assert {"tokenizer.json", "tokenizer_config.json", "index.html", "app.js", "albert-web.json"} <= {
        p.name for p in out.iterdir()
    }
    assert sorted(p.name for p in (out / "onnx").iterdir()) == ["model.onnx", "model_quantized.onnx"]
    assert not (out / ".onnx").exists()

    expected = Predictor(models["classifier"], device="cpu", precision="fp32").predict([TEXT])[0]
    ids = python_ids(models["classifier"], TEXT)
    with torch.no_grad():
        logits = (
            load_task_model(models["classifier"], device="cpu", precision="fp32")
            .model.eval()(
                input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long)
            )
            .logits[0]
            .numpy()
        )
    assert_licences(out / "lib")
    base = serve(out)
    for dtype in ("fp32", "q8"):
        page = Page(browser, base, dtype)
        got = page.predict(TEXT)
        again = page.predict(TEXT)  # a later prediction: timed apart from the first
        page.close(tmp_path / f"classifier-{dtype}.png")
        assert got["input_ids"] == ids and got["dtype"] == dtype
        assert got["label"] == expected["label"]
        if dtype == "fp32":
            assert np.abs(np.array(got["logits"]) - logits).max() < FP32_TOLERANCE
            for name, p in expected["probabilities"].items():
                assert got["probabilities"][name] == pytest.approx(p, abs=FP32_TOLERANCE)
        else:
            assert cosine(got["logits"], logits) >= INT8_COSINE
        assert again["logits"] == got["logits"]
        timings = again["timings"]
        assert timings["load_ms"] > 0 and timings["first_ms"] > 0 and len(timings["later_ms"]) == 1
    assert (tmp_path / "classifier-q8.png").stat().st_size > 0

    # Typed (and submitted) while the model loads: that text is kept, not the example, and predicted.
    page = Page(browser, base, "q8", typed=TEXT)
    early, kept = page.result(), page.page.input_value("#text")
    page.close(tmp_path / "classifier-typed-early.png")
    assert kept == TEXT and early["input_ids"] == ids and early["logits"] == got["logits"]


@pytest.mark.slow
def test_pair_classifier_page_takes_two_texts(models, browser, serve, tmp_path):
    from albert_lm import Predictor

    folder = tmp_path / "mrpc"
    shutil.copytree(models["classifier"], folder)
    write_json(folder / "finetune_config.json", {"task": "mrpc", "max_seq_length": 16})  # truncates
    out = export(folder, tmp_path / "web")
    a, b = TEXT * 2, "Nonu gutire li nobiso be."
    expected = Predictor(folder, device="cpu", precision="fp32").predict([(a, b)])[0]
    page = Page(browser, serve(out), "fp32")
    got = page.predict(a, b)
    page.page.fill("#text2", "  ")  # the second box left empty: asked for, never scored on the first alone
    page.page.click("#run")
    page.page.wait_for_function("document.body.dataset.state === 'error'", timeout=60_000)
    assert "give the second text too" in page.page.evaluate("window.albertError")
    page.close(tmp_path / "pair.png")
    assert len(got["input_ids"]) == 16 and got["input_ids"].count(3) == 2
    assert got["label"] == expected["label"]
    for name, p in expected["probabilities"].items():
        assert got["probabilities"][name] == pytest.approx(p, abs=FP32_TOLERANCE)


@pytest.mark.slow
def test_bi_encoder_page_scores_a_pair_as_predict_does(models, tiny_config, browser, serve, tmp_path):
    """An STS-B bi-encoder (`albert finetune --bi-encoder`): the page feeds the pair as the classifier's
    two texts and shows the graph's score, the cosine of the two texts' vectors on STS-B's scale."""
    from albert_lm import Predictor
    from albert_lm.model.heads import AlbertForSentenceSimilarity

    folder = tmp_path / "stsb"
    torch.manual_seed(0)
    model = AlbertForSentenceSimilarity(tiny_config(vocab_size=200, initializer_range=0.1, num_labels=1))
    model.set_scale(0.0, 5.0)
    model.save_pretrained(folder)
    shutil.copy(models["classifier"] / "spiece.model", folder / "spiece.model")
    write_json(folder / "finetune_config.json", {"task": "stsb", "bi_encoder": True, "max_seq_length": 64})
    out = export(folder, tmp_path / "web")
    a, b = TEXT, "Nonu gutire li nobiso be."
    expected = Predictor(folder, device="cpu", precision="fp32").predict([(a, b)])[0]
    page = Page(browser, serve(out), "fp32")
    got = page.predict(a, b)
    page.close(tmp_path / "bi-encoder.png")
    assert got["input_ids"].count(3) == 2
    assert got["score"] == pytest.approx(expected["score"], abs=FP32_TOLERANCE)


@pytest.mark.slow
def test_fill_mask_page_matches_fill_mask(models, browser, serve, tmp_path):
    from albert_lm import Predictor
    from albert_lm.model.heads import AlbertForMaskedLM
    from albert_lm.model.hf_interop import load_model

    text = "Punago bi [MASK] te vona zise."
    out = export(models["pretrained"], tmp_path / "web")  # a pretraining checkpoint: fill-mask
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertForMaskedLM"]
    expected = Predictor(models["pretrained"], device="cpu", precision="fp32").fill_mask([text], top_k=5)[0]
    base = serve(out)
    for dtype in ("fp32", "q8"):
        page = Page(browser, base, dtype)
        got = page.predict(text)
        page.close(tmp_path / f"fill-mask-{dtype}.png")
        (mask,) = got["masks"]
        (wanted,) = expected["masks"]
        assert mask["top"][0]["id"] == wanted[0]["id"] and mask["top"][0]["token"] == wanted[0]["token"]
        with torch.no_grad():
            model = load_model(AlbertForMaskedLM, models["pretrained"]).eval()
            ids = torch.tensor([got["input_ids"]])
            logits = model(input_ids=ids).logits[0, got["input_ids"].index(4)].numpy()
        if dtype == "fp32":
            assert got["filled"] == expected["filled"]
            assert [c["id"] for c in mask["top"]] == [c["id"] for c in wanted]
            for c, w in zip(mask["top"], wanted, strict=True):
                assert c["probability"] == pytest.approx(w["probability"], abs=FP32_TOLERANCE)
            assert np.abs(np.array(mask["logits"]) - logits).max() < FP32_TOLERANCE
        else:
            assert cosine(mask["logits"], logits) >= INT8_COSINE


@pytest.mark.slow
def test_embedding_page_matches_embed(models, browser, serve, tmp_path):
    from albert_lm import Predictor

    a, b = TEXT, "Nonu gutire li nobiso be."
    out = export(models["student"], tmp_path / "web")  # a distilled student: feature extraction
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertModel"]
    vectors = Predictor(models["student"], device="cpu", precision="fp32").embed([a, b])
    base = serve(out)
    for dtype in ("fp32", "q8"):
        page = Page(browser, base, dtype)
        got = page.predict(a, b)
        page.close(tmp_path / f"embedding-{dtype}.png")
        assert got["input_ids"][0] == python_ids(models["student"], a)
        if dtype == "fp32":
            assert np.abs(np.array(got["vectors"]) - vectors).max() < FP32_TOLERANCE
            assert got["norms"] == pytest.approx(np.linalg.norm(vectors, axis=1), abs=FP32_TOLERANCE)
            assert got["cosine"] == pytest.approx(cosine(*vectors), abs=FP32_TOLERANCE)
        else:
            for v, w in zip(got["vectors"], vectors, strict=True):
                assert cosine(v, w) >= INT8_COSINE
    # the drop-down loads the page again with the other model: both texts typed come back
    page = Page(browser, base, "fp32")
    typed = ["Typed before the switch.", "And a second one."]
    page.page.fill("#text", typed[0])
    page.page.fill("#text2", typed[1])
    with page.page.expect_navigation():
        page.page.select_option("#dtype", "q8")
    page.page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
    assert "dtype=q8" in page.page.url
    assert [page.page.input_value("#text"), page.page.input_value("#text2")] == typed
    page.close(tmp_path / "embedding-switched.png")


def test_a_page_opened_as_a_file_says_how_to_serve_it(models, browser, serve, tmp_path):
    """Double-clicked (file://), the browser blocks the page's module script: the page says so and gives
    the command that serves it, on 127.0.0.1, instead of waiting at "Loading the model..." for ever.
    Served, it asks its folder for nothing it lacks (no favicon request)."""
    out = export(models["student"], tmp_path / "web")
    context = browser.new_context()
    page = context.new_page()
    page.goto((out / "index.html").as_uri())
    page.wait_for_function("document.body.dataset.state === 'error'", timeout=30_000)
    said = page.text_content("#error")
    assert "opened as a file" in said and f"python3 -m http.server --bind 127.0.0.1 -d '{out}' 8000" in said
    assert page.text_content("#about") == "The model did not load." and page.is_disabled("#run")
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    page.goto(f"{serve(out)}index.html")
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
    context.close()
    assert not missing, missing


# --------------------------------------------------------------------------- licences
LICENCE_TEXTS = {"MIT": "MIT License", "Apache-2.0": "Apache License"}  # package.json's -> its text's title


def assert_licences(lib: Path) -> None:
    """Every npm package whose code is in `lib` (`BUNDLED`, which holds every dependency of
    transformers.js but its Node-only ones) has its licence there, the one its package.json declares."""
    from albert_lm.deploy.web_files import BUNDLED, installed_package

    transformers = json.loads((MODULES / "@huggingface/transformers/package.json").read_text())
    assert set(transformers["dependencies"]) - {"onnxruntime-node", "sharp"} <= set(BUNDLED)
    for package, (name, parent) in BUNDLED.items():
        folder = installed_package(MODULES, package, parent)
        assert folder is not None, package
        declared = json.loads((folder / "package.json").read_text())["license"]
        text = (lib / f"LICENSE.{name}.txt").read_text(encoding="utf-8")
        assert LICENCE_TEXTS[declared] in text, (package, declared)
        if package.startswith("onnxruntime-"):  # written: npm's package has no licence file
            assert "Copyright (c) Microsoft Corporation." in text


def test_every_package_in_lib_has_its_licence(tmp_path):
    """The licences an export writes into lib/ beside the JavaScript, from `make web`'s packages: ONNX
    Runtime Web's is written (its npm package has no licence file), the others' copied."""
    from albert_lm.deploy.web_files import copy_javascript, find_modules

    if not (MODULES / "@huggingface" / "transformers" / "package.json").is_file():
        web_missing(f"no transformers.js under {MODULES}: run `make web`")
    copy_javascript(find_modules(MODULES), tmp_path)
    assert_licences(tmp_path / "lib")


# --------------------------------------------------------------------------- refusals (no browser)
def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_missing_npm_modules_say_how_to_install(models, tmp_path, capsys, monkeypatch):
    out = tmp_path / "web"
    args = ["export", "--format", "web", "--model", str(models["classifier"]), "--output", str(out)]
    assert main([*args, "--npm-modules", str(tmp_path / "nowhere")]) != 0
    line = one_error(capsys)
    assert "--npm-modules" in line and "make web" in line
    monkeypatch.setenv("ALBERT_WEB_MODULES", str(tmp_path))  # a folder without the packages
    assert main(args) != 0
    line = one_error(capsys)
    assert "ALBERT_WEB_MODULES" in line and "@huggingface/transformers" in line and "make web" in line
    assert not out.exists()


def test_a_page_of_a_model_with_exit_heads_says_it_runs_every_layer(
    tiny_exit_run, fake_modules, tmp_path, capsys
):
    """The page has no early exit: the summary says the model's exit heads are left out, not silently."""
    out = tmp_path / "web"
    best = tiny_exit_run / "run" / "best"
    argv = ["export", "--format", "web", "--model", str(best), "--output", str(out), "--npm-modules"]
    assert main([*argv, str(fake_modules), "-q"]) == 0
    assert "exit heads are not in the page: it runs every layer" in capsys.readouterr().out


@pytest.mark.parametrize(
    "model, task, words",
    [
        ("pretrained", "text-classification", "not a fine-tuned classifier"),
        ("classifier", "fill-mask", "no masked-LM head"),
    ],
)
def test_a_task_the_folder_cannot_do_is_refused(models, fake_modules, tmp_path, capsys, model, task, words):
    out = tmp_path / "web"
    args = ["export", "--format", "web", "--model", str(models[model]), "--output", str(out)]
    assert main([*args, "--task", task, "--npm-modules", str(fake_modules)]) != 0
    line = one_error(capsys)
    assert words in line and "--task" in line
    assert not out.exists()


@pytest.mark.slow
def test_a_failed_export_leaves_nothing(models, fake_modules, tmp_path, capsys, monkeypatch):
    import albert_lm.deploy.web as web

    def fail(folder: Path) -> None:
        raise OSError(28, "No space left on device", str(folder / "index.html"))

    monkeypatch.setattr(web, "copy_page", fail)  # the last files, after the models and the JavaScript
    out = tmp_path / "web"
    args = ["export", "--format", "web", "--model", str(models["classifier"]), "--output", str(out)]
    assert main([*args, "--npm-modules", str(fake_modules)]) != 0
    assert "No space left on device" in one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node_modules"]  # no web/, no .web.tmp/


def test_web_options_are_refused_for_onnx(models, tmp_path, capsys):
    args = ["export", "--model", str(models["pretrained"]), "--output", str(tmp_path / "onnx")]
    assert main([*args, "--task", "fill-mask"]) != 0
    assert "--task: only for --format web" in one_error(capsys)


def test_default_tasks(models, monkeypatch):
    import albert_lm.deploy.web as web
    from albert_lm.deploy.web import choose_task

    assert choose_task(models["classifier"], None) == "text-classification"
    assert choose_task(models["pretrained"], None) == "fill-mask"
    assert choose_task(models["student"], None) == "feature-extraction"
    assert choose_task(models["classifier"], "feature-extraction") == "feature-extraction"
    # the way forward offered is one the folder can take: fill-mask only with a masked-LM head
    with pytest.raises(ValueError, match="give --task fill-mask or feature-extraction$"):
        choose_task(models["pretrained"], "text-classification")
    monkeypatch.setattr(web, "weight_names", lambda folder: {"albert.embeddings.word_embeddings.weight"})
    with pytest.raises(ValueError, match="give --task feature-extraction$"):
        choose_task(models["pretrained"], "text-classification")


def test_wordpiece_student_page_matches_embed(
    tiny_config, tiny_corpus_and_tokenizer, browser, serve, tmp_path
):
    """A student that reads its BERT teacher's tokens (`albert distill general --tokenizer teacher`):
    the page tokenizes with the teacher's own tokenizer.json to albert-lm's ids and embeds alike."""
    transformers = pytest.importorskip("transformers")
    from albert_lm import Predictor
    from albert_lm.data.tokenizer import AlbertTokenizer
    from albert_lm.model.heads import AlbertForPreTraining

    corpus = tiny_corpus_and_tokenizer[0]
    words = sorted({w.strip(".").lower() for w in corpus.read_text().split()})
    (tmp_path / "vocab").mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words, "##s"]
    (tmp_path / "vocab" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(str(tmp_path / "vocab" / "vocab.txt")).save_pretrained(tmp_path / "bert")
    student = tmp_path / "student"
    torch.manual_seed(0)
    AlbertForPreTraining(tiny_config(vocab_size=len(vocab), initializer_range=0.1)).save_pretrained(student)
    AlbertTokenizer.from_pretrained(tmp_path / "bert").save_pretrained(student)
    write_json(student / "distill_results.json", {"student_parameters": 0})
    a, b = TEXT, "Nonu gutire li nobiso be."
    out = export(student, tmp_path / "web")
    vectors = Predictor(student, device="cpu", precision="fp32").embed([a, b])
    page = Page(browser, serve(out), "fp32")
    got = page.predict(a, b)
    page.close(tmp_path / "wordpiece.png")
    assert got["input_ids"][0] == python_ids(student, a)
    assert np.abs(np.array(got["vectors"]) - vectors).max() < FP32_TOLERANCE
