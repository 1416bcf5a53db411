#!/usr/bin/env python3
"""Import cycles among the top-level modules of a Rust crate.

Usage: module_cycles.py SRC_DIR [SRC_DIR ...]. Exits 1, printing each cycle with the files whose
paths make it, when the `use`s and paths of a crate's top-level modules (`src/x.rs`, `src/x/`)
form a cycle; 0 otherwise. What the crate root (`lib.rs`) defines is no module: a path to it
counts for nothing, and a path to what it re-exports (`pub use x::Item`) counts as one to `x`.
Tests (`#[cfg(test)] mod … {` to the end of the file, files marked `#![cfg(test)]` and
`*tests.rs`) are left out: a test may reach anywhere.

It reads paths as text (`crate::x`, `super::x` from a top-level file, `use crate::{x, y}`),
which is what this codebase writes; a macro that builds a path is not seen.
"""

import os
import re
import sys
from collections import defaultdict


def source_files(src):
    for directory, _, names in os.walk(src):
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(directory, name)


def top_module(src, path):
    """The top-level module a file belongs to, or None for the crate root and binaries."""
    rel = os.path.relpath(path, src).split(os.sep)
    if rel[0] in ("lib.rs", "main.rs", "bin"):
        return None
    return rel[0][:-3] if rel[0].endswith(".rs") else rel[0]


def depth(src, path):
    """How many `super::` lead from this file to the crate root."""
    rel = os.path.relpath(path, src).split(os.sep)
    if rel[-1] == "mod.rs":
        return len(rel) - 1
    return len(rel)


def non_test_text(path):
    text = open(path, encoding="utf-8").read()
    if path.endswith("tests.rs") or re.search(r"^\s*#!\[cfg\(test\)\]", text, re.M):
        return ""
    held = re.search(r"^\s*#\[cfg\(test\)\]\s*\n\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text, re.M)
    text = text[: held.start()] if held else text
    # Comments name modules without depending on them.
    return re.sub(r"//[^\n]*", "", text)


def group_heads(text, start):
    """The first name of each path in the `{…}` group opening at `start`: `a`, `b` and `c` of
    `{a::{X, Y}, b, c::Z}` (a nested group belongs to the name before it)."""
    heads, depth, word, at_head = [], 0, "", True
    for char in text[start:]:
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            if word:
                heads.append(word)
            word, at_head = "", True
            continue
        if depth == 0 and at_head:
            if char.isalnum() or char == "_":
                word += char
                continue
            if word:
                heads.append(word)
                word, at_head = "", False
    if word:
        heads.append(word)
    return heads


def root_reexports(src):
    """Items the crate root re-exports from a module: name -> module."""
    lib = os.path.join(src, "lib.rs")
    if not os.path.exists(lib):
        return {}
    found = {}
    for module, rest in re.findall(r"pub(?:\([a-z]+\))?\s+use\s+([a-z_0-9]+)::([^;]+);", non_test_text(lib)):
        for name in re.findall(r"(\w+)(?:\s+as\s+(\w+))?", rest.replace("{", ",").replace("}", ",")):
            found[name[1] or name[0]] = module
    return found


def graph(src):
    modules = {top_module(src, p) for p in source_files(src)} - {None}
    reexports = root_reexports(src)
    edges = defaultdict(lambda: defaultdict(set))
    for path in source_files(src):
        here = top_module(src, path)
        if here is None:
            continue
        text = non_test_text(path)
        to_root = r"(?:crate|" + r"::".join(["super"] * depth(src, path)) + r")::"
        names = re.findall(to_root + r"([A-Za-z_0-9]+)", text)
        for opening in re.finditer(to_root + r"\{", text):
            names += group_heads(text, opening.end())
        for name in names:
            target = name if name in modules else reexports.get(name)
            if target and target != here:
                edges[here][target].add(os.path.relpath(path, src))
    return modules, edges


def cycles(modules, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


def main(dirs):
    failed = False
    for src in dirs:
        modules, edges = graph(src)
        for component in cycles(modules, edges):
            failed = True
            print(f"{src}: import cycle among {', '.join(component)}:")
            for a in component:
                for b in sorted(edges[a]):
                    if b in component:
                        print(f"  {a} -> {b} ({', '.join(sorted(edges[a][b])[:3])})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
