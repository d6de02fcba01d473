"""The package's imports point down its layers, and no two modules import each other.

Every module of cxlbench is read with `ast` (nothing is imported): each import
statement — at module level, inside a function, under `if TYPE_CHECKING` — is
an edge from that module to the module it names. A module may import its own
layer and the layers below it (DESIGN.md, "Layers"); an import upward is named
with its file, line and text. A cycle of imports between modules is named
with the chain that closes it, lazy imports included: one side importing
inside a function only hides a cycle until both sides move to the top.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "cxlbench"

#: DESIGN.md's layers, the top first. A module belongs to the first entry its name is
#: or lies under ("cxlbench" itself, the package's `load` and `__version__`, only as
#: itself). The order is what the code needs, and what DESIGN.md says:
#:  - memory sits above gpu: the placement layer pins its host buffers for a GPU
#:    (cxlbench.memory.pinned registers them with a gpu device and views them with
#:    gpu.buffers.host_array);
#:  - fleet (many machines through Slurm or Kubernetes, and the fleet's report) sits
#:    under the commands and over the report it renders with; it starts runs only as
#:    jobs, never by importing the runner;
#:  - export (a run in pytest-benchmark's format) is an output beside the report;
#:  - _native is the C core (no Python imports of its own);
#:  - results, units, closing, version, tomlfile and settings (the environment
#:    variables the C core reads) are one layer, used by all;
#:  - the package's own __init__ is the public API (load, history): it reads the
#:    store and the analysis, so it sits on top, and its __version__ comes from
#:    cxlbench.version, which every layer may read.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("api", ("cxlbench",)),
    ("cli", ("cxlbench.cli",)),
    ("fleet", ("cxlbench.fleet",)),
    ("report", ("cxlbench.report", "cxlbench.export")),
    ("analysis", ("cxlbench.analysis",)),
    ("runner", ("cxlbench.runner",)),
    ("benchmarks", ("cxlbench.benchmarks",)),
    ("training", ("cxlbench.training",)),
    ("storage", ("cxlbench.storage",)),
    ("memory", ("cxlbench.memory",)),
    ("topology", ("cxlbench.topology",)),
    ("_native", ("cxlbench._native",)),
    ("gpu", ("cxlbench.gpu",)),
    ("results", ("cxlbench.results", "cxlbench.units", "cxlbench.closing", "cxlbench.version",
                 "cxlbench.tomlfile", "cxlbench.settings")),
]
#: compiled modules: imported by name, never read
EXTENSIONS = ("cxlbench._native",)


@dataclass(frozen=True)
class Import:
    importer: str          # dotted module name
    where: str             # its file, from the folder holding the package
    line: int
    text: str              # the statement as written (ast.unparse)
    target: str            # the module it names


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))
            if "__pycache__" not in p.parts}


def _resolve(name: str, known: set[str]) -> str:
    """The module `name` refers to: itself, or the nearest package or module above it
    (`from cxlbench import __version__` names the package cxlbench)."""
    while name not in known and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports(module: str, path: Path, known: set[str], package: Path = PACKAGE) -> list[Import]:
    """The imports of the package's own modules in one file, wherever they stand in it."""
    root, where = package.name, str(path.relative_to(package.parent))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from pkg import mod` names the module pkg.mod; `from mod import name`, mod
            names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                     for alias in node.names]
        else:
            continue
        for name in dict.fromkeys(names):
            if name == root or name.startswith(root + "."):
                target = _resolve(name, known)
                if target != module:
                    found.append(Import(module, where, node.lineno, ast.unparse(node), target))
    return found


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "cxlbench" and module.startswith(prefix + ".")):
                return rank
    return None


def all_imports(package: Path = PACKAGE) -> list[Import]:
    mods = modules(package)
    known = set(mods) | set(EXTENSIONS)
    return [imp for name, path in mods.items() for imp in imports(name, path, known, package)]


def upward(found: list[Import]) -> list[str]:
    """One line per import of a layer above the importer's own."""
    lines = []
    for imp in found:
        mine, theirs = layer_of(imp.importer), layer_of(imp.target)
        if mine is not None and theirs is not None and theirs < mine:
            lines.append(f"{imp.where}:{imp.line}: `{imp.text}` — "
                         f"{LAYERS[mine][0]} imports {imp.target}, of the {LAYERS[theirs][0]} "
                         f"layer above it")
    return lines


def cycles(found: list[Import]) -> list[list[Import]]:
    """One closed chain of imports for each group of modules that import each other."""
    graph: dict[str, dict[str, Import]] = {}
    for imp in found:
        graph.setdefault(imp.importer, {}).setdefault(imp.target, imp)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, {})))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    chains = []
    for group in groups:                 # the shortest way round from the group's first module
        members, first = set(group), group[0]
        paths = {first: []}
        queue = [first]
        closing = None
        while queue and closing is None:
            node = queue.pop(0)
            for nxt, imp in sorted(graph.get(node, {}).items()):
                if nxt == first:
                    closing = paths[node] + [imp]
                    break
                if nxt in members and nxt not in paths:
                    paths[nxt] = paths[node] + [imp]
                    queue.append(nxt)
        chains.append(closing)
    return chains


def describe(chain: list[Import]) -> str:
    names = " -> ".join([chain[0].importer] + [imp.target for imp in chain])
    where = "; ".join(f"{imp.where}:{imp.line} `{imp.text}`" for imp in chain)
    return f"{names} ({where})"


# ---- the package -------------------------------------------------------------------------

def test_every_module_belongs_to_a_layer():
    unplaced = [name for name in modules() if layer_of(name) is None]
    assert not unplaced, f"modules in no layer (add them to LAYERS as DESIGN.md places them): {unplaced}"


def test_no_module_imports_a_layer_above_its_own():
    found = upward(all_imports())
    assert not found, "imports that point up the layers:\n" + "\n".join(found)


def test_no_modules_import_each_other_in_a_cycle():
    found = cycles(all_imports())
    assert not found, "import cycles:\n" + "\n".join(describe(c) for c in found)


def test_the_modules_scripts_and_docs_run_with_python_m_exist():
    named = set()
    texts = [*REPO.glob("scripts/*"), REPO / "Makefile", REPO / "README.md", *REPO.glob("docs/*.md"),
             *PACKAGE.rglob("*.py")]
    for path in texts:
        if path.is_file():
            named |= set(re.findall(r"-m (cxlbench(?:\.\w+)*)", path.read_text(encoding="utf-8")))
    assert named, "no `python -m cxlbench...` found: the pattern no longer matches the scripts"
    missing = sorted(named - set(modules()) - set(EXTENSIONS))
    assert not missing, f"run with python -m but not a module: {missing}"


# ---- the checker itself ------------------------------------------------------------------

def _package(tmp_path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "cxlbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "cxlbench"


def test_the_walk_sees_imports_inside_functions_relative_ones_and_from_packages(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "gpu/__init__.py": "",
        "gpu/low.py": "def f():\n    from cxlbench.memory import host\n",
        "memory/__init__.py": "from .host import allocate\n",
        "memory/host.py": "import os\nfrom cxlbench import _native\nfrom ..gpu import low\n",
    })
    found = {(imp.importer, imp.target, imp.line) for imp in all_imports(pkg)}
    assert found == {("cxlbench.gpu.low", "cxlbench.memory.host", 2),
                     ("cxlbench.memory", "cxlbench.memory.host", 1),
                     ("cxlbench.memory.host", "cxlbench._native", 2),
                     ("cxlbench.memory.host", "cxlbench.gpu.low", 3)}


def test_an_upward_import_is_named_with_its_file_line_and_text(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "", "gpu/__init__.py": "",
                              "gpu/low.py": "\n\ndef f():\n    from cxlbench.memory import allocate\n",
                              "memory/__init__.py": ""})
    [line] = upward(all_imports(pkg))
    assert line.startswith("cxlbench/gpu/low.py:4: `from cxlbench.memory import allocate`")
    assert "gpu imports cxlbench.memory, of the memory layer above it" in line


def test_a_cycle_is_named_with_the_chain_that_closes_it(tmp_path):
    pkg = _package(tmp_path, {"__init__.py": "", "storage/__init__.py": "",
                              "storage/directory.py": "def f():\n    from cxlbench.storage.scratch import name\n",
                              "storage/scratch.py": "from cxlbench.storage.directory import Error\n",
                              "storage/other.py": "from cxlbench.storage import scratch\n"})
    [chain] = cycles(all_imports(pkg))
    assert describe(chain) == (
        "cxlbench.storage.directory -> cxlbench.storage.scratch -> cxlbench.storage.directory "
        "(cxlbench/storage/directory.py:2 `from cxlbench.storage.scratch import name`; "
        "cxlbench/storage/scratch.py:1 `from cxlbench.storage.directory import Error`)")
