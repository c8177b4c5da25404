"""The JavaScript and the page of a web export: transformers.js's browser build and the ONNX Runtime Web
files it loads, copied from an installed npm package into lib/, and the page (index.html, app.js,
style.css, kept in albert_lm/deploy/web/) beside them.

Which files: transformers.js's `dist/transformers.min.js` bundles ONNX Runtime Web's JavaScript; it
loads the WebAssembly runtime (a .mjs loader and its .wasm) from `env.backends.onnx.wasm.wasmPaths`,
which the page points at lib/. Of onnxruntime-web's builds, the plain SIMD one (`ort-wasm-simd-threaded`,
CPU only, 14 MB) is copied rather than the one transformers.js picks by default (`.asyncify`, 27 MB,
which adds WebGPU): the page runs on the CPU (`device: "wasm"`), where both compute the same.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

NPM_ENV = "ALBERT_WEB_MODULES"
DEFAULT_MODULES = ".web/node_modules"
TRANSFORMERS = "@huggingface/transformers"
ORT_WEB = "onnxruntime-web"
LIBRARY = "transformers.min.js"  # transformers.js's browser bundle (ONNX Runtime Web's JavaScript inside)
RUNTIME = "ort-wasm-simd-threaded"  # ONNX Runtime Web's CPU build: RUNTIME.mjs loads RUNTIME.wasm
PAGE_FILES = ("index.html", "app.js", "style.css")
HOW_TO_INSTALL = "run `make web` (npm ci in .web/ from albert_lm/deploy/web/package.json and its lock file)"


@dataclass
class Modules:
    """The installed npm packages a web export copies from."""

    folder: Path  # node_modules
    transformers_version: str
    ort_version: str

    @property
    def library(self) -> Path:
        return self.folder / TRANSFORMERS / "dist" / LIBRARY

    @property
    def runtime(self) -> tuple[Path, Path]:
        dist = self.folder / ORT_WEB / "dist"
        return dist / f"{RUNTIME}.mjs", dist / f"{RUNTIME}.wasm"


def find_modules(given: str | os.PathLike | None = None) -> Modules:
    """The node_modules folder to copy from: `given` (--npm-modules), else $ALBERT_WEB_MODULES, else
    .web/node_modules here or in albert-lm's source tree; a FileNotFoundError naming it and how to
    install when a file is missing."""
    option = "--npm-modules" if given is not None else NPM_ENV if os.environ.get(NPM_ENV) else None
    folder = Path(given if given is not None else os.environ.get(NPM_ENV) or DEFAULT_MODULES)
    source_tree = Path(__file__).resolve().parents[2] / DEFAULT_MODULES  # `make web` in a checkout
    if option is None and not folder.is_dir() and source_tree.is_dir():
        folder = source_tree
    where = f"{option} {folder}" if option else f"{folder} (the default; --npm-modules DIR or ${NPM_ENV})"
    if not folder.is_dir():
        raise FileNotFoundError(f"{where}: no such folder of npm packages: {HOW_TO_INSTALL}")
    versions = {}
    for package in (TRANSFORMERS, ORT_WEB):
        manifest = folder / package / "package.json"
        if not manifest.is_file():
            raise FileNotFoundError(f"{where}: no {package} installed there: {HOW_TO_INSTALL}")
        try:
            versions[package] = str(json.loads(manifest.read_text(encoding="utf-8"))["version"])
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise ValueError(f"{manifest}: not an npm package.json ({e}): {HOW_TO_INSTALL}") from None
    modules = Modules(folder, versions[TRANSFORMERS], versions[ORT_WEB])
    for file in (modules.library, *modules.runtime):
        if not file.is_file():
            raise FileNotFoundError(f"{where}: {file} is missing (an incomplete install?): {HOW_TO_INSTALL}")
    return modules


def copy_javascript(modules: Modules, folder: Path) -> dict[str, str]:
    """lib/ under `folder` with the library, the runtime and both packages' licences; the page's paths
    to them (albert-web.json's "library" and "wasm")."""
    lib = folder / "lib"
    lib.mkdir()
    shutil.copyfile(modules.library, lib / LIBRARY)
    mjs, wasm = modules.runtime
    shutil.copyfile(mjs, lib / mjs.name)
    shutil.copyfile(wasm, lib / wasm.name)
    for package, name in ((TRANSFORMERS, "transformers.js"), (ORT_WEB, "onnxruntime-web")):
        licence = modules.folder / package / "LICENSE"
        if licence.is_file():
            shutil.copyfile(licence, lib / f"LICENSE.{name}.txt")
    return {"library": f"lib/{LIBRARY}", "mjs": f"lib/{mjs.name}", "wasm": f"lib/{wasm.name}"}


def copy_page(folder: Path) -> None:
    """index.html, app.js and style.css (albert_lm/deploy/web/) into `folder`."""
    source = Path(__file__).with_name("web")
    for name in PAGE_FILES:
        shutil.copyfile(source / name, folder / name)


__all__ = ["Modules", "copy_javascript", "copy_page", "find_modules"]
