"""A Griffe extension for packages that setuptools maps from another folder (``package-dir``).

Griffe finds ``lit_bayes`` on disk, but ``lit_bayes.callbacks`` lives in the top-level
``callbacks/`` folder (``[tool.setuptools.package-dir]`` in ``pyproject.toml``), so a static
scan of ``lit_bayes/`` misses it. This extension visits each mapped folder when its parent
package has been loaded and attaches it under its installed name, so the API pages document
``lit_bayes.callbacks.RunHealth`` where users import it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[1]


class PackageDir(griffe.Extension):
    """Attach folders as subpackages: ``mapping`` is ``{"pkg.sub": "folder"}``, each folder
    relative to the repository root (the parent of ``docs/``)."""

    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.mapping = {name: ROOT / folder for name, folder in mapping.items()}
        for name, folder in self.mapping.items():
            if "." not in name or not (folder / "__init__.py").is_file():
                raise ValueError(f"mapping[{name!r}] must name a subpackage and a folder with __init__.py, "
                                 f"got {folder}")

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for name, folder in self.mapping.items():
            parent_name, _, sub_name = name.rpartition(".")
            if parent_name == pkg.path:
                package = self._visit(sub_name, folder / "__init__.py", pkg, loader)
                for path in sorted(folder.glob("*.py")):
                    if path.name != "__init__.py":
                        self._visit(path.stem, path, package, loader)
                loader.expand_exports(package)

    @staticmethod
    def _visit(name: str, path: Path, parent: griffe.Module, loader: griffe.GriffeLoader) -> griffe.Module:
        code = path.read_text(encoding="utf-8")
        loader.lines_collection[path] = code.splitlines()
        module = griffe.visit(
            name, filepath=path, code=code, extensions=loader.extensions, parent=parent,
            docstring_parser=loader.docstring_parser, docstring_options=loader.docstring_options,
            lines_collection=loader.lines_collection, modules_collection=loader.modules_collection,
        )
        parent.set_member(name, module)
        return module
