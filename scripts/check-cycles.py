#!/usr/bin/env python3
"""Fail on an import cycle between modules of any crate in crates/.

The module graph is read from the source, not from the compiler: every `crate::a::b` and
`super::...` path outside comments and `#[cfg(test)]` modules is an edge from the file's module
to the module the path names (the longest prefix of it that is a module file). A cycle is
reported between siblings: an edge from crate::a::x to crate::a::y::z counts as x -> y, the two
children of their nearest common ancestor. An edge between a module and its own ancestor (a
submodule using `super::Helper`, a parent calling into its child) is not a cycle here: a parent
and its children are one unit by construction.

The cycles that predate the check are listed in KNOWN below; each is reported as known and does
not fail the check, so that only a new cycle fails. When a known cycle is removed, delete its
line: the check then fails if it comes back. Run from the repository's root:
`python3 scripts/check-cycles.py` (exit 0: no new cycle; 1: a new cycle, printed).
"""

import os
import re
import sys

# Cycles that existed when the check was added (crate, the sibling modules of one strongly
# connected component, sorted). All have since been removed, so every cycle fails now; the
# set stays for the rare cycle that must be tolerated for a while, with a comment saying why.
KNOWN: set = set()

# Crates vendored from elsewhere keep their upstream module structure, so that the fork can be
# rebased: fuser (crates/fuser, see its TARN-PATCHES.md) has cycles of its own.
VENDORED = {"fuser"}

PATH = re.compile(r"\b(crate|super)((?:::\w+)+|::\{)")


def crate_name(crate_dir):
    with open(os.path.join(crate_dir, "Cargo.toml")) as manifest:
        match = re.search(r'^name\s*=\s*"([^"]+)"', manifest.read(), re.M)
    return match.group(1) if match else os.path.basename(crate_dir)


def module_files(src):
    """Map each module path (a tuple of names; () for the crate root) to its file."""
    modules = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, name), src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]) or (len(rel) == 1 and rel[0] in ("lib", "main")):
                rel = []
            modules[tuple(rel)] = os.path.join(root, name)
    return modules


def code_of(path):
    """The file's code without comment lines and without its `#[cfg(test)]` modules (test code
    may use whatever it tests). Braces inside strings could end a test module early; none do."""
    text = open(path).read()
    while True:
        start = re.search(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod \w+\s*\{", text)
        if not start:
            break
        depth, end = 0, start.end() - 1
        while end < len(text):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
            end += 1
        text = text[: start.start()] + text[end + 1 :]
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("//"):
            continue
        lines.append(line.split(" //")[0])
    return "\n".join(lines)


def group_names(text, start):
    """The first names inside the `{...}` group that begins at text[start] ('{')."""
    depth, names, word, i = 0, [], "", start
    while i < len(text):
        char = text[i]
        if char == "{":
            depth += 1
            if depth > 1:
                word = None
        elif char == "}":
            depth -= 1
            if depth == 0:
                break
            if depth == 1:
                word = ""
        elif depth == 1 and char == ",":
            if word:
                names.append(word)
            word = ""
        elif depth == 1 and word is not None:
            if char.isalnum() or char == "_":
                word += char
            elif word:
                names.append(word)
                word = None
        i += 1
    if word:
        names.append(word)
    return [[name] for name in names if name != "self"]


def resolve(modules, segments):
    """The longest prefix of `segments` that is a module."""
    for length in range(len(segments), -1, -1):
        if tuple(segments[:length]) in modules:
            return tuple(segments[:length])
    return ()


def edges_of(modules):
    edges = set()
    for module, path in modules.items():
        text = code_of(path)
        for match in PATH.finditer(text):
            base = [] if match.group(1) == "crate" else list(module[:-1])
            rest = match.group(2)
            tails = []
            if rest == "::{":
                tails = group_names(text, match.end() - 1)
            else:
                names = rest.strip(":").split("::")
                if names and names[-1] == "":
                    names = names[:-1]
                # `super::super::x`: climb once more per extra `super`.
                while match.group(1) == "super" and names and names[0] == "super":
                    base = base[:-1]
                    names = names[1:]
                if names and names[-1] == "" or rest.endswith("::"):
                    names = names[:-1]
                tails = [names]
                end = match.end()
                if text[end : end + 3] == "::{":
                    tails = [names + tail for tail in group_names(text, end + 2)]
            for tail in tails:
                target = resolve(modules, base + tail)
                if target != module:
                    edges.add((module, target))
    return edges


def sibling_edges(edges):
    """Each edge between two modules, as the edge between the children of their nearest
    common ancestor; edges between a module and its ancestor are dropped."""
    result = set()
    for source, target in edges:
        common = 0
        while common < min(len(source), len(target)) and source[common] == target[common]:
            common += 1
        if common == len(source) or common == len(target):
            continue
        result.add((source[: common + 1], target[: common + 1]))
    return result


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
    new = 0
    seen = set()
    for crate in sorted(os.listdir(root)):
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        name = crate_name(os.path.join(root, crate))
        if name in VENDORED:
            continue
        modules = module_files(src)
        for component in cycles(sibling_edges(edges_of(modules))):
            names = tuple("/".join(module) for module in component)
            known = (name, names) in KNOWN
            seen.add((name, names))
            print(f"{'known' if known else 'NEW'} cycle in {name}: {' <-> '.join(names)}")
            new += 0 if known else 1
    for name, names in sorted(KNOWN - seen):
        print(f"no longer a cycle in {name}: {' <-> '.join(names)} (delete it from KNOWN)")
    if new:
        print(f"{new} new module cycle(s): move the shared items to a module both can import")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
