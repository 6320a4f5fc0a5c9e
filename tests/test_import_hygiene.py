"""Importing lit_bayes has no side effects of its own, and its modules import each other without a cycle."""
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"lit_bayes": ROOT / "lit_bayes", "lit_bayes.callbacks": ROOT / "callbacks"}


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (``lit_bayes.callbacks`` lives in ``callbacks/``)."""
    modules = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its text: at the top, inside
    functions or under ``TYPE_CHECKING`` (a deferred import is still a dependency)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # a submodule by name, else a name defined in (or re-exported by) base
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycle_among_the_library_modules():
    """A package's ``__init__`` counts as a module (``from lit_bayes.samplers import HMC`` depends
    on everything ``lit_bayes/samplers/__init__.py`` imports); the implicit import of a module's
    parent packages does not."""
    modules = module_files()
    graph = {name: imported_modules(path, name, modules) for name, path in modules.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


PROBE = """
import atexit, importlib, json, os, pkgutil, sys
{preload}
environ, handlers = dict(os.environ), atexit._ncallbacks()
import lit_bayes, lit_bayes.cli
for info in pkgutil.walk_packages(lit_bayes.__path__, "lit_bayes."):
    importlib.import_module(info.name)
third_party = sorted(m for m in sys.modules if m.split(".")[0] not in ("lit_bayes", "__main__"))
changed = sorted(k for k in set(environ) | set(os.environ) if environ.get(k) != os.environ.get(k))
print(json.dumps({{"changed": changed, "handlers": atexit._ncallbacks() - handlers, "modules": third_party}}))
"""


def run_probe(preload: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE.format(preload=preload)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_lit_bayes_leaves_the_environment_and_exit_handlers_alone():
    """Every other module that importing lit_bayes loads is imported first (Lightning itself sets
    two environment variables when imported); then importing every lit_bayes module, the CLI included, changes
    no environment variable and registers no atexit handler."""
    loaded = run_probe("")["modules"]
    preload = f"for name in {loaded!r}:\n    try:\n        importlib.import_module(name)\n    except Exception:\n        pass"
    probe = run_probe(preload)
    assert probe["changed"] == [], probe["changed"]
    assert probe["handlers"] == 0
