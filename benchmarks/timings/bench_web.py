"""`albert export --format web` measured: the export's sizes (fp32 and int8 models, the JavaScript, the
whole folder, and gzip'ed as a compressing server sends it) and the page's timings in headless chromium
(load: from opening the page to the model ready; the first prediction; the median of the later ones),
one sentence at a time, for each model's int8 and fp32 graphs.

    python benchmarks/timings/bench_web.py --json docs/web_timings.json --screenshot docs/web_page.png
    python benchmarks/timings/bench_web.py --model runs/sst2/best --screenshot docs/web_page.png

Models: `student` (the default student of `albert distill general`: H 256, 4 layers, E 128, no sharing,
an 8000-piece tokenizer trained here on albert_lm/demo_corpus; 4.3M parameters) and `albert-base` (the
released 30k tokenizer, ../shared/data/tokenizer/albert-30k), both as SST-2 classifiers with random
weights: the timings and sizes depend on the shape only. --model adds a fine-tuned folder of your own,
whose page (with its real prediction) is the screenshot. Needs chromium, playwright and `make web`.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "A gripping, funny and moving film that never lets its cast down."


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models", default="student,albert-base", help="of student, albert-base (comma-separated)"
    )
    p.add_argument("--model", type=Path, help="also a fine-tuned classifier folder of your own")
    p.add_argument("--repeats", type=int, default=20, help="predictions after the first (default 20)")
    p.add_argument("--albert-30k", type=Path, default=ROOT.parent / "shared/data/tokenizer/albert-30k")
    p.add_argument("--npm-modules", default=None, help="as albert export's (default .web/node_modules)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--screenshot", type=Path, help="the page after a prediction (the last model's, int8)")
    a = p.parse_args()
    from playwright.sync_api import sync_playwright

    from albert_lm.deploy.web import model_name

    with tempfile.TemporaryDirectory() as tmp:
        folders = [_random_model(name, Path(tmp), a.albert_30k) for name in a.models.split(",") if name]
        folders += [a.model] if a.model else []
        figures: dict[str, Any] = {"machine": _machine(), "sentence": SENTENCE, "models": {}}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium"), headless=True)
            figures["browser"] = f"chromium {browser.version} (headless)"
            for folder in folders:
                shot = a.screenshot if folder == folders[-1] else None
                out = Path(tmp) / f"web-{folder.name}"
                figures["models"][model_name(folder)] = _measure(browser, folder, out, a, shot)
            browser.close()
    text = json.dumps(figures, indent=1) + "\n"
    print(text)
    if a.json:
        a.json.write_text(text)


def _random_model(name: str, tmp: Path, albert_30k: Path) -> Path:
    """An SST-2 classifier of the named shape with random weights, and its tokenizer."""
    import torch

    from albert_lm.data.tokenizer_training import train_tokenizer
    from albert_lm.distill.config import DEFAULT_STUDENT
    from albert_lm.files import write_json
    from albert_lm.model.config import AlbertConfig
    from albert_lm.model.heads import AlbertForSequenceClassification

    folder = tmp / name
    if name == "student":
        books = sorted((ROOT / "albert_lm" / "demo_corpus").glob("*.txt"))
        train_tokenizer(books, tmp / "tok-8000", vocab_size=8000, num_threads=1)
        spiece, config = tmp / "tok-8000" / "spiece.model", AlbertConfig(vocab_size=8000, **DEFAULT_STUDENT)
    elif name == "albert-base":
        spiece, config = albert_30k / "spiece.model", AlbertConfig.from_preset("albert-base")
    else:
        raise SystemExit(f"--models: {name!r} is not one of student, albert-base")
    torch.manual_seed(0)
    config.num_labels = 2
    model = AlbertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    shutil.copy(spiece, folder / "spiece.model")
    write_json(folder / "finetune_config.json", {"task": "sst2", "max_seq_length": 128})
    return folder


def _measure(browser: Any, folder: Path, out: Path, a: argparse.Namespace, shot: Path | None) -> dict:
    from albert_lm.deploy.web import export_web

    result = export_web(folder, out, npm_modules=a.npm_modules)
    parameters = _parameters(folder)
    row: dict[str, Any] = {
        "parameters": parameters,
        "sizes_bytes": result.sizes,
        "int8_page_bytes": _gzip_sizes(out),
        "int8_cosine": result.int8_cosine,
        "pages": {},
    }
    with _served(out) as base:
        for dtype in ("q8", "fp32"):
            row["pages"][dtype] = _page(browser, base, dtype, a.repeats, shot if dtype == "q8" else None)
    print(f"{folder}: {json.dumps(row)}", file=sys.stderr)
    return row


def _parameters(folder: Path) -> int:
    from albert_lm.deploy.predict import load_task_model

    return sum(p.numel() for p in load_task_model(folder, device="cpu").model.parameters())


def _gzip_sizes(out: Path) -> dict[str, int]:
    """Bytes of what the int8 page loads (every file but the fp32 model), as they are and as a server that
    compresses (gzip -6) sends them; the int8 model and the JavaScript each, compressed."""

    def packed(p: Path) -> int:
        return len(gzip.compress(p.read_bytes(), 6))

    files = [p for p in out.rglob("*") if p.is_file() and p.name != "model.onnx"]
    return {
        "int8_page": sum(p.stat().st_size for p in files),
        "int8_page_gzip": sum(packed(p) for p in files),
        "int8_gzip": packed(out / "onnx" / "model_quantized.onnx"),
        "javascript_gzip": sum(packed(p) for p in files if out / "lib" in p.parents),
    }


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _served:
    """The folder over HTTP on a free localhost port (as `python -m http.server` serves it)."""

    def __init__(self, folder: Path) -> None:
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def _page(browser: Any, base: str, dtype: str, repeats: int, shot: Path | None) -> dict[str, Any]:
    """A fresh browser context (nothing cached): open, predict 1 + `repeats` times; the page's timings."""
    context = browser.new_context(viewport={"width": 1000, "height": 760})
    page = context.new_page()
    outside: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith((base, "blob:", "data:")):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(f"{base}index.html?dtype={dtype}")
    page.wait_for_function("['ready', 'error'].includes(document.body.dataset.state)", timeout=300_000)
    page.fill("#text", SENTENCE)
    for _ in range(repeats + 1):
        page.click("#run")
        page.wait_for_function("['done', 'error'].includes(document.body.dataset.state)", timeout=300_000)
    error, result = page.evaluate("[window.albertError, window.albertResult]")
    if error or outside:
        raise SystemExit(f"the page failed: {error or 'requests outside the folder: ' + ', '.join(outside)}")
    if shot is not None:
        page.evaluate("document.querySelector('details').open = false")
        page.screenshot(path=str(shot), full_page=True)
    context.close()
    t = result["timings"]
    return {
        "load_ms": round(t["load_ms"], 1),
        "first_prediction_ms": round(t["first_ms"], 1),
        "later_median_ms": round(statistics.median(t["later_ms"]), 2),
        "tokens": len(result["input_ids"]),
        "label": result.get("label"),
    }


def _machine() -> dict[str, Any]:
    from albert_lm.kernels.hardware import cpu_info

    cpu = cpu_info()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    name = next((ln.split(":", 1)[1].strip() for ln in lscpu if ln.startswith("Model name")), cpu.model)
    hypervisor = next((ln.split(":", 1)[1].strip() for ln in lscpu if ln.startswith("Hypervisor")), None)
    return {
        "cpu": f"{name} ({cpu.generation}, isa {cpu.isa})",
        "cores": os.cpu_count(),
        "hypervisor": hypervisor,
        "threads_in_page": 1,
        "load_average_at_start": os.getloadavg()[0],
        "system": platform.platform(),
    }


if __name__ == "__main__":
    main()
