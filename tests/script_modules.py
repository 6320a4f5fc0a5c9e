"""Import a recipe script (not a package module) by its path, for tests of its functions."""
import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
