"""The JavaScript and the page of a web export: transformers.js's browser build and the ONNX Runtime Web
files it loads, copied from an installed npm package into lib/, and the page (index.html, app.js,
style.css, kept in albert_lm/deploy/web/) beside them.

Which files: transformers.js's `dist/transformers.min.js` bundles ONNX Runtime Web's JavaScript; it
loads the WebAssembly runtime (a .mjs loader and its .wasm) from `env.backends.onnx.wasm.wasmPaths`,
which the page points at lib/. Of onnxruntime-web's builds, the plain SIMD one (`ort-wasm-simd-threaded`,
CPU only, 14 MB) is copied rather than the one transformers.js picks by default (`.asyncify`, 27 MB,
which adds WebGPU): the page runs on the CPU (`device: "wasm"`), where both compute the same.

The packages are input like any other, checked before the export spends its time (`find_modules`), each
refusal naming the file: each package.json an object of that package's name with a version string, of
the major version of transformers.js the page is written for (albert_lm/deploy/web/package.json) and of
the onnxruntime-web that transformers.js declares (its bundle calls that build's loader); every file
copied present and not empty, the JavaScript text, the .wasm WebAssembly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from albert_lm.files import InputError, read_json_object

NPM_ENV = "ALBERT_WEB_MODULES"
DEFAULT_MODULES = ".web/node_modules"
TRANSFORMERS = "@huggingface/transformers"
ORT_WEB = "onnxruntime-web"
LIBRARY = "transformers.min.js"  # transformers.js's browser bundle (ONNX Runtime Web's JavaScript inside)
RUNTIME = "ort-wasm-simd-threaded"  # ONNX Runtime Web's CPU build: RUNTIME.mjs loads RUNTIME.wasm
PAGE_SOURCE = Path(__file__).with_name("web")  # the page, and the npm packages it is written for
PAGE_FILES = ("index.html", "app.js", "style.css")
HOW_TO_INSTALL = "run `make web` (npm ci in .web/ from albert_lm/deploy/web/package.json and its lock file)"
VERSION = re.compile(r"(\d+)\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?")  # npm's versions: semver
WASM_MAGIC = b"\0asm"


@dataclass
class Modules:
    """The installed npm packages a web export copies from."""

    folder: Path  # node_modules
    transformers_version: str
    ort_version: str
    given_as: str = "--npm-modules"  # what named the folder: the option, $ALBERT_WEB_MODULES or the default

    @property
    def library(self) -> Path:
        return self.folder / TRANSFORMERS / "dist" / LIBRARY

    @property
    def runtime(self) -> tuple[Path, Path]:
        dist = self.folder / ORT_WEB / "dist"
        return dist / f"{RUNTIME}.mjs", dist / f"{RUNTIME}.wasm"


def find_modules(given: str | os.PathLike | None = None) -> Modules:
    """The node_modules folder to copy from: `given` (--npm-modules), else $ALBERT_WEB_MODULES, else
    .web/node_modules here or in albert-lm's source tree, checked (see the module docstring): a
    FileNotFoundError naming it and how to install when a file is missing, an InputError naming the file
    that is empty, damaged or of another version."""
    option = "--npm-modules" if given is not None else NPM_ENV if os.environ.get(NPM_ENV) else None
    folder = Path(given if given is not None else os.environ.get(NPM_ENV) or DEFAULT_MODULES)
    source_tree = Path(__file__).resolve().parents[2] / DEFAULT_MODULES  # `make web` in a checkout
    if option is None and not folder.is_dir() and source_tree.is_dir():
        folder = source_tree
    where = f"{option} {folder}" if option else f"{folder} (the default; --npm-modules DIR or ${NPM_ENV})"
    if not folder.is_dir():
        raise FileNotFoundError(f"{where}: no such folder of npm packages: {HOW_TO_INSTALL}")
    manifests = {package: _package_json(folder, package, where) for package in (TRANSFORMERS, ORT_WEB)}
    _check_versions(folder, manifests)
    given_as = {None: "npm packages", NPM_ENV: f"${NPM_ENV}"}.get(option, "--npm-modules")
    versions = {package: str(m["version"]) for package, m in manifests.items()}
    modules = Modules(folder, versions[TRANSFORMERS], versions[ORT_WEB], given_as)
    for file in (modules.library, *modules.runtime):
        _check_file(file, where)
    return modules


def _package_json(folder: Path, package: str, where: str) -> dict[str, Any]:
    """`package`'s package.json under `folder`: an object of that name, with a version string."""
    manifest = folder / package / "package.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{where}: no {package} installed there (no {manifest}): {HOW_TO_INSTALL}")
    try:
        found = read_json_object(manifest, "an npm package")
    except InputError as e:  # names the file (and the line)
        raise ValueError(f"{e} (expected an npm package.json): {HOW_TO_INSTALL}") from None
    if found.get("name") != package:
        raise InputError(
            manifest,
            f"name: expected {json.dumps(package)}, got {_shown(found.get('name'))}: {HOW_TO_INSTALL}",
        )
    version = found.get("version")
    if not isinstance(version, str) or VERSION.fullmatch(version) is None:
        raise InputError(
            manifest,
            f'version: expected a version string such as "4.3.1", got {_shown(version)}: {HOW_TO_INSTALL}',
        )
    return found


def _check_versions(folder: Path, manifests: dict[str, dict[str, Any]]) -> None:
    """transformers.js of the major version the page is written for (the pin in
    albert_lm/deploy/web/package.json), and the onnxruntime-web it declares where it pins one."""
    pinned = str(read_json_object(PAGE_SOURCE / "package.json")["dependencies"][TRANSFORMERS])
    have = str(manifests[TRANSFORMERS]["version"])
    if _major(have) != _major(pinned):
        raise InputError(
            folder / TRANSFORMERS / "package.json",
            f"version {have}: the page is written for transformers.js {_major(pinned)}.x (albert_lm/deploy/web/"
            f"package.json pins {pinned}): {HOW_TO_INSTALL}",
        )
    needs = manifests[TRANSFORMERS].get("dependencies")
    wanted = needs.get(ORT_WEB) if isinstance(needs, dict) else None
    ort = str(manifests[ORT_WEB]["version"])
    if isinstance(wanted, str) and VERSION.fullmatch(wanted) and wanted != ort:
        raise InputError(
            folder / ORT_WEB / "package.json",
            f"version {ort}: transformers.js {have} runs onnxruntime-web {wanted} (its bundle calls that "
            f"build's {RUNTIME}.mjs): {HOW_TO_INSTALL}",
        )


def _check_file(file: Path, where: str) -> None:
    """A file the page loads: present, not empty, JavaScript text or WebAssembly."""
    if not file.is_file():
        raise FileNotFoundError(f"{where}: {file} is missing (an incomplete install?): {HOW_TO_INSTALL}")
    with open(file, "rb") as f:
        data = f.read(4) if file.suffix == ".wasm" else f.read()
    if not data:
        raise InputError(
            file, f"empty file (an interrupted install?); the page cannot load it: {HOW_TO_INSTALL}"
        )
    if file.suffix == ".wasm" and data != WASM_MAGIC:
        raise InputError(file, f"not WebAssembly (no \\0asm at its start): {HOW_TO_INSTALL}")
    if file.suffix != ".wasm":
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(
                file, f"not JavaScript text (byte {e.start} is not UTF-8): {HOW_TO_INSTALL}"
            ) from None
        if "\0" in text:
            raise InputError(file, f"not JavaScript text (it holds NUL bytes): {HOW_TO_INSTALL}")


def _major(version: str) -> str:
    found = VERSION.fullmatch(version)
    return found.group(1) if found else version


def _shown(value: Any) -> str:
    """A JSON value for a message, cut short."""
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    for name in PAGE_FILES:
        shutil.copyfile(PAGE_SOURCE / name, folder / name)


__all__ = ["PAGE_SOURCE", "Modules", "copy_javascript", "copy_page", "find_modules"]
