#!/usr/bin/env python3
"""File-level dependency check for a crate's `src/`: no import cycles between files, and the
layer rules below (a layer never uses a layer above it).

    scripts/check-layers.py node/src            # check; exit 1 on a cycle or a broken rule
    scripts/check-layers.py node/src --graph    # also print every file's dependencies

A file depends on another when its code (unit-test modules aside) names an item defined there (`crate::a::b::C`,
`super::C`, `use` lists). Re-exports (`pub use`) and `mod` lines are not dependencies: a
reference to a re-exported name is followed to the file that defines it.
"""

import re
import sys
from pathlib import Path

# Layer of each top-level module, bottom (0) up; a module may use only its own or lower layers.
LAYERS = {
    "node/src": {
        "allocator": 0, "clock": 0, "id128": 0, "tasks": 0, "protocol": 0,
        "mailbox": 1, "mcp_tasks": 1, "session": 1, "metrics": 1,
        "peer": 2,
        "raft": 3,
        "server": 3,
        "transport": 4, "tools": 4,
        "cluster": 5,
        "cli": 6, "dev": 6, "lib": 7, "main": 7, "prelude": 7,
    },
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_strings(text):
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def strip_tests(text):
    """Unit-test modules (by convention the end of a file) may use anything in the crate."""
    at = re.search(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text)
    return text[: at.start()] if at else text


class Crate:
    def __init__(self, root):
        self.root = Path(root)
        self.files = {}  # module path tuple -> file
        for f in sorted(self.root.rglob("*.rs")):
            rel = f.relative_to(self.root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"],):
                parts = []
            self.files[tuple(parts)] = f
        self.text = {m: strip_tests(strip_strings(strip_comments(f.read_text()))) for m, f in self.files.items()}
        self.reexports = {m: self._reexports(t) for m, t in self.text.items()}
        self.inline = {m: set(re.findall(r"\bmod\s+(" + IDENT + r")\s*\{", t)) for m, t in self.text.items()}

    def _reexports(self, text):
        """name -> path list of `pub use a::b::{X, Y as Z}` in a file."""
        out = {}
        for body in re.findall(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for path in expand(body):
                name = path[-1]
                if " as " in name:
                    orig, name = [s.strip() for s in name.split(" as ")]
                    path = path[:-1] + [orig]
                out[name] = path
        return out

    def resolve(self, current, path, depth=0):
        """The file module an item path lands in, or None (external or unknown)."""
        if depth > 10 or not path:
            return None
        head, rest = path[0], path[1:]
        if head == "crate":
            module = ()
        elif head == "super":
            module = current[:-1]
            while rest and rest[0] == "super":
                module, rest = module[:-1], rest[1:]
        elif head == "self":
            module = current
        else:
            return None
        while rest:
            name = rest[0]
            if module + (name,) in self.files:
                module, rest = module + (name,), rest[1:]
                continue
            if name in self.reexports.get(module, {}):
                target = self.reexports[module][name]
                if target[0] not in ("crate", "super", "self"):
                    # `pub use child::X` inside module: relative to module.
                    target = ["self"] + target
                resolved = self.resolve(module, target + rest[1:], depth + 1)
                return resolved or module
            return module
        return module

    def deps(self, module):
        text = self.text[module]
        # Drop re-export and mod lines: they name, they do not use.
        code = re.sub(r"pub(?:\([^)]*\))?\s+use\s+[^;]+;", "", text)
        found = set()
        for body in re.findall(r"\buse\s+([^;]+);", code):
            for path in expand(body):
                if path and path[0] in ("crate", "super", "self"):
                    found.add(tuple(p.split(" as ")[0].strip() for p in path))
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)", code):
            found.add(tuple(m.group(1).split("::")))
        out = set()
        for path in found:
            target = self.resolve(module, list(path))
            if target is not None and target != module and target in self.files:
                out.add(target)
        return out


def expand(body):
    """`a::b::{C, d::{E, F}}` -> [[a,b,C], [a,b,d,E], [a,b,d,F]]."""
    body = re.sub(r"\s+", " ", body.strip())
    out = []

    def walk(prefix, text):
        text = text.strip()
        if not text:
            return
        brace = text.find("{")
        if brace == -1:
            out.append(prefix + [p.strip() for p in text.split("::") if p.strip()])
            return
        head = [p for p in text[:brace].split("::") if p.strip()]
        inner = text[brace + 1 : text.rfind("}")]
        depth, start = 0, 0
        for i, c in enumerate(inner + ","):
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == "," and depth == 0:
                part = inner[start:i].strip()
                if part and part != "self":
                    walk(prefix + [h.strip() for h in head], part)
                elif part == "self":
                    out.append(prefix + [h.strip() for h in head])
                start = i + 1

    walk([], body)
    return out


def cycles(graph):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return sccs


def name(module):
    return "::".join(module) or "lib"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "node/src"
    crate = Crate(root)
    graph = {m: crate.deps(m) for m in crate.files}
    failures = 0
    if "--graph" in sys.argv:
        for m in sorted(graph):
            print(f"{name(m)} -> {', '.join(sorted(name(d) for d in graph[m])) or '-'}")
    for scc in cycles(graph):
        failures += 1
        print(f"import cycle: {' <-> '.join(name(m) for m in scc)}")
    layers = next((v for k, v in LAYERS.items() if Path(root).as_posix().endswith(k)), None)
    if layers:
        for m, ds in sorted(graph.items()):
            top = m[0] if m else "lib"
            for d in sorted(ds):
                dtop = d[0] if d else "lib"
                if top in layers and dtop in layers and layers[dtop] > layers[top]:
                    failures += 1
                    print(f"layer rule broken: {name(m)} ({top}) uses {name(d)} ({dtop}, a higher layer)")
    edges = sum(len(d) for d in graph.values())
    print(f"{root}: {len(graph)} files, {edges} file dependencies, {failures} problems")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
