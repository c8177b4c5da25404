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
copied present and not empty, the JavaScript text, the .wasm WebAssembly; and the licence of every
package whose code lib/ carries (`BUNDLED`), copied into lib/LICENSE.<name>.txt.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
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
# The npm packages whose code the page ships in lib/, each with its lib/LICENSE.<name>.txt, and the
# package that installs it (npm puts a dependency in that package's own node_modules where the top-level
# one is of another version). transformers.min.js bundles transformers.js, its tokenizers and chat
# templates (jinja) and ONNX Runtime Web's JavaScript (onnxruntime-web, with onnxruntime-common);
# ort-wasm-simd-threaded.mjs and .wasm are onnxruntime-web's. transformers.js's Node-only dependencies
# (onnxruntime-node, sharp) are not in the browser build.
BUNDLED = {  # package -> (name in LICENSE.<name>.txt, the package that depends on it)
    "@huggingface/transformers": ("transformers.js", None),
    "@huggingface/tokenizers": ("huggingface-tokenizers", "@huggingface/transformers"),
    "@huggingface/jinja": ("huggingface-jinja", "@huggingface/transformers"),
    "onnxruntime-web": ("onnxruntime-web", "@huggingface/transformers"),
    "onnxruntime-common": ("onnxruntime-common", "onnxruntime-web"),
}
LICENCE_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "license", "license.md")
# onnxruntime-web and onnxruntime-common are published to npm without a licence file, so theirs is
# written rather than copied: the MIT licence their package.json declares ("license": "MIT"), in its
# standard text, with ONNX Runtime's copyright line (github.com/microsoft/onnxruntime's LICENSE, and the
# header of every source file in the packages' lib/). Written only while package.json says MIT.
MIT_COPYRIGHT = {
    "onnxruntime-web": "Copyright (c) Microsoft Corporation.",
    "onnxruntime-common": "Copyright (c) Microsoft Corporation.",
}
MIT_LICENSE = """MIT License

{copyright}

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


@dataclass
class Modules:
    """The installed npm packages a web export copies from."""

    folder: Path  # node_modules
    transformers_version: str
    ort_version: str
    given_as: str = "--npm-modules"  # what named the folder: the option, $ALBERT_WEB_MODULES or the default
    licences: dict[str, bytes] = field(default_factory=dict)  # lib/LICENSE.<name>.txt's text by name

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
    modules.licences = bundled_licences(modules)
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


def bundled_licences(modules: Modules) -> dict[str, bytes]:
    """The licence of each package the page ships (`BUNDLED`), by its name in lib/LICENSE.<name>.txt:
    the package's own licence file, else one written from its package.json (`MIT_COPYRIGHT`). Read
    before the export, as the other npm files are checked: a FileNotFoundError when a package is not
    installed, an InputError when it has no licence to copy or write."""
    where = f"{modules.given_as} {modules.folder}"
    licences = {}
    for package, (name, parent) in BUNDLED.items():
        folder = installed_package(modules.folder, package, parent)
        if folder is None:
            missing = modules.folder / package / "package.json"
            raise FileNotFoundError(
                f"{where}: no {package} installed there (no {missing}; the page ships its code): "
                f"{HOW_TO_INSTALL}"
            )
        licences[name] = _licence(folder, package)
    return licences


def installed_package(node_modules: Path, package: str, parent: str | None) -> Path | None:
    """`package`'s folder as Node resolves it for `parent`: in the parent's own node_modules, else at
    the top; None where neither holds its package.json."""
    nested = [node_modules / parent / "node_modules" / package] if parent else []
    for folder in (*nested, node_modules / package):
        if (folder / "package.json").is_file():
            return folder
    return None


def _licence(folder: Path, package: str) -> bytes:
    """The text of `package`'s licence (installed in `folder`): see `bundled_licences`."""
    for name in LICENCE_FILES:
        if (folder / name).is_file():
            return (folder / name).read_bytes()
    manifest = folder / "package.json"
    declared = read_json_object(manifest, "an npm package").get("license")
    if package in MIT_COPYRIGHT and declared == "MIT":
        return MIT_LICENSE.format(copyright=MIT_COPYRIGHT[package]).encode("utf-8")
    raise InputError(
        manifest,
        f"license {json.dumps(declared)} and no licence file beside it: the page ships {package}'s "
        f"code, and its licence with it: {HOW_TO_INSTALL}",
    )


def copy_javascript(modules: Modules, folder: Path) -> dict[str, str]:
    """lib/ under `folder` with the library, the runtime and every bundled package's licence; the page's paths
    to them (albert-web.json's "library" and "wasm")."""
    lib = folder / "lib"
    lib.mkdir()
    shutil.copyfile(modules.library, lib / LIBRARY)
    mjs, wasm = modules.runtime
    shutil.copyfile(mjs, lib / mjs.name)
    shutil.copyfile(wasm, lib / wasm.name)
    for name, text in modules.licences.items():
        (lib / f"LICENSE.{name}.txt").write_bytes(text)
    return {"library": f"lib/{LIBRARY}", "mjs": f"lib/{mjs.name}", "wasm": f"lib/{wasm.name}"}


def copy_page(folder: Path) -> None:
    """index.html, app.js and style.css (albert_lm/deploy/web/) into `folder`."""
    for name in PAGE_FILES:
        shutil.copyfile(PAGE_SOURCE / name, folder / name)


__all__ = ["PAGE_SOURCE", "Modules", "copy_javascript", "copy_page", "find_modules"]
