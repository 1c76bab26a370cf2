"""The import graph of a tree of Python modules (every import statement, those inside functions
included), for the layer and import-circle checks of tests/test_layers.py."""
from __future__ import annotations

import ast
import pathlib


def module_name(path: pathlib.Path, root: pathlib.Path, prefix: str) -> str:
    """Dotted name of a module file under root ('dimtorch.ops.pad', 'dimtorch.audio')."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([prefix] + parts) if prefix else ".".join(parts)


def imports_of(path: pathlib.Path, name: str, known: set) -> set:
    """The known modules that the module `name` (file `path`) imports. `from X import y` counts as an
    import of X.y when that is a module, else of X."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base_parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def graph(root: pathlib.Path, prefix: str) -> dict:
    """{module: set of modules it imports} for every .py file under root."""
    files = {module_name(p, root, prefix): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}
    known = set(files) | {f"{prefix}._C"} if prefix else set(files)
    return {name: imports_of(path, name, known) for name, path in files.items()}


def cycles(g: dict) -> list:
    """The import circles of a graph: its strongly connected components of more than one module
    (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out
