#!/usr/bin/env python3
"""Show that a refactoring moved code without changing it.

Compares the multiset of code lines of a source tree at a base commit with the working tree.
Ignored: `use` statements (single- and multi-line), `mod NAME;` declarations and blank lines;
comment lines (`//`, `//!`, `///`) are counted apart. Lines are compared with leading and
trailing whitespace stripped, so a moved function may change its indentation. A second
comparison also strips a leading visibility (`pub`, `pub(crate)`, `pub(super)`), so that what
is left is the code that is not a move: new `impl` headers and their braces, for instance.

Run from the repository's root: `python3 scripts/check-verbatim-move.py BASE crates/engine/src`
(`-v` also lists the comment lines that differ).
"""
import collections
import pathlib
import re
import subprocess
import sys

USE = re.compile(r"^(pub(\([a-z]+\))? )?use ")
MOD = re.compile(r"^(pub(\([a-z]+\))? )?mod [a-z_0-9]+;$")
VISIBILITY = re.compile(r"^pub(\([a-z]+\))? ")


def files_at(commit, root):
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", commit, root],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    return [
        subprocess.run(["git", "show", f"{commit}:{name}"],
                       capture_output=True, text=True, check=True).stdout
        for name in names if name.endswith(".rs")
    ]


def files_now(root):
    return [path.read_text() for path in pathlib.Path(root).rglob("*.rs")]


def count(texts):
    code, comments = collections.Counter(), collections.Counter()
    for text in texts:
        in_use = False
        for raw in text.splitlines():
            line = raw.strip()
            if in_use:
                in_use = not line.endswith(";")
                continue
            if not line or MOD.match(line):
                continue
            if USE.match(line):
                in_use = not line.endswith(";")
                continue
            (comments if line.startswith("//") else code)[line] += 1
    return code, comments


def without_visibility(counter):
    out = collections.Counter()
    for line, n in counter.items():
        out[VISIBILITY.sub("", line)] += n
    return out


def show(sign, counter):
    for line, n in sorted(counter.items()):
        print(f"  {sign} {n}x {line}")


def main():
    base, root = sys.argv[1], sys.argv[2]
    code_before, comments_before = count(files_at(base, root))
    code_after, comments_after = count(files_now(root))
    print(f"code lines: before {sum(code_before.values())}, after {sum(code_after.values())}")
    gone, new = code_before - code_after, code_after - code_before
    print(f"code lines only before: {sum(gone.values())}; only after: {sum(new.values())}")
    show("-", gone)
    show("+", new)
    gone_v = without_visibility(code_before) - without_visibility(code_after)
    new_v = without_visibility(code_after) - without_visibility(code_before)
    print(f"ignoring visibility: only before {sum(gone_v.values())}; "
          f"only after {sum(new_v.values())}")
    show("-", gone_v)
    show("+", new_v)
    comments_gone = comments_before - comments_after
    comments_new = comments_after - comments_before
    print(f"comment lines: only before {sum(comments_gone.values())}; "
          f"only after {sum(comments_new.values())}")
    if "-v" in sys.argv:
        show("-", comments_gone)
        show("+", comments_new)


if __name__ == "__main__":
    main()
