"""The package's layers: each part of ctxnmt (a subpackage or a top-level module)
imports only parts on lower layers, no modules import one another in a circle, and an
import inside a function is left only for an optional heavy dependency.  Read from the
source with `ast`: nothing is imported, so a hidden cycle cannot hide from it."""
from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ctxnmt"

# From the bottom up.  A part may import its own modules and those of the parts on the
# layers below it; parts on one layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "__init__"),
    ("utils",),  # files, checkpoints, signals, processes, messages, the options of a config section
    ("length_options",),
    ("settings",),  # each part's config section (ctxnmt/*/settings.py), torch-free
    ("config",),
    ("data",),
    ("models", "evaluation", "judge"),
    ("decoding",),
    ("training",),
    ("analysis",),  # reads what training writes (its train.log)
    ("lm",),  # the language model: its config, data, network and scoring
    ("tasks",),  # translation and the language model, each whole: config, training, validation, inference, runs
    ("experiments", "serve"),
    ("cli", "examples"),
    ("__main__",),
)

# The only imports that may wait inside a function: heavy to load, and needed by one
# command or one optional feature alone.
OPTIONAL = {
    "matplotlib": "the plots",
    "eflomal": "silver alignments (analyze alignment --silver)",
    "torch.utils.tensorboard": "TensorBoard logs, when tensorboard is installed",
    "torch.utils.cpp_extension": "building the fused CPU kernels, once per machine",
    "uvicorn": "a running server (ctxnmt serve)",
    "ctxnmt.serve.app": "the web app of ctxnmt serve, on fastapi, which a machine that only trains may lack",
}


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def part(module: str) -> str:
    """The layer unit a module belongs to: `ctxnmt.training.trainer` → training, `ctxnmt.cli` → cli,
    `ctxnmt.training.settings` → settings; a package's `__init__` → __init__."""
    pieces = module.split(".")
    if len(pieces) == 1 or MODULES[module].name == "__init__.py":
        return "__init__"
    return "settings" if pieces[-1] == "settings" and len(pieces) == 3 else pieces[1]


def imports(path: Path) -> Iterator[tuple[ast.stmt, str, bool]]:
    """(statement, imported module, inside a function) for each import of a file; `from A import b`
    names A.b where that is a module of the package, else A."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.stmt, str, bool]]:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield child, alias.name, in_function
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0, f"{path}:{child.lineno}: a relative import"
                for alias in child.names:
                    name = f"{child.module}.{alias.name}"
                    yield child, name if name in MODULES or not child.module.startswith("ctxnmt") else child.module, \
                        in_function
            yield from visit(child, inside)

    yield from visit(tree, False)


def layer_of(name: str) -> int:
    for number, layer in enumerate(LAYERS):
        if name in layer:
            return number
    raise AssertionError(f"{name} is on no layer: add it to LAYERS in {__file__}")


def test_every_part_of_the_package_is_on_a_layer():
    for module in MODULES:
        layer_of(part(module))


def test_imports_run_down_the_layers():
    wrong = []
    for module, path in MODULES.items():
        here = part(module)
        for node, target, _ in imports(path):
            if not target.startswith("ctxnmt.") or part(target) == here:
                continue
            there = part(target)
            if layer_of(there) >= layer_of(here):
                wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {target}: {here} (layer "
                             f"{layer_of(here)}) may not use {there} (layer {layer_of(there)})")
    assert not wrong, "\n".join(dict.fromkeys(wrong))


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_modules_import_each_other_in_a_circle():
    """Counting the imports inside functions too: hiding one there hides the circle, not removes it."""
    graph = {module: {target for _, target, _ in imports(path) if target in MODULES and target != module}
             for module, path in MODULES.items()}
    assert not circles(graph), circles(graph)


def test_only_optional_heavy_dependencies_are_imported_inside_functions():
    wrong = []
    for module, path in MODULES.items():
        where = str(path.relative_to(PACKAGE))
        for node, target, in_function in imports(path):
            optional = any(target == name or target.startswith(name + ".") for name in OPTIONAL)
            if in_function and not optional:
                wrong.append(f"{where}:{node.lineno} imports {target} inside a function")
    assert not wrong, "move these to the top of their modules:\n" + "\n".join(dict.fromkeys(wrong))


def test_the_check_sees_a_circle_and_a_wrong_way_import(tmp_path):
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from ctxnmt.training import trainer\n", encoding="utf-8")
    assert [(target, inside) for _, target, inside in imports(source)] == [("os", False),
                                                                           ("ctxnmt.training.trainer", True)]


def _printed_by(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("module, load, path", [("ctxnmt.config", "load_config", "configs/doc-gated-aux.yaml"),
                                               ("ctxnmt.lm.config", "load_lm_config", "configs/lm-mean.yaml")])
def test_reading_a_config_loads_no_model_code_and_no_torch(module, load, path):
    """The settings are declared torch-free; the components register only where a model is built
    (a translation model's names are checked by nmt.check_names, a language model's summary by
    lm.model.check_summary)."""
    assert _printed_by(f"import sys, {module} as c; c.{load}('{path}'); "
                       "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('ctxnmt.models.')))"
                       ) == ["['ctxnmt.models.settings']"]


def test_reading_an_experiment_file_loads_no_torch():
    """An experiment names its task; the check needs the tasks' names, not the tasks."""
    assert _printed_by("import sys, ctxnmt.experiments.spec as s; "
                       "s.load_experiment('experiments/document-models.yaml'); print('torch' in sys.modules)"
                       ) == ["False"]
