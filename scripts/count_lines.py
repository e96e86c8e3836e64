#!/usr/bin/env python3
"""Production lines per crate, as the layers redesign counts them: non-blank
lines of `.rs` files under each crate's `src/` (and the gateway's own `src/`),
leaving out test files (`tests.rs`, `*_tests.rs`, `scripted.rs`,
`test_states.rs`, anything under a `tests/` folder, and any module a
`#[cfg(test)] mod NAME;` line declares), fuzz-gated files (`fuzz.rs` and
`fuzz/` folders) and `#[cfg(test)] mod ... { }` blocks. Comments count.

Run from the repository's top level: `python3 scripts/count_lines.py`.
"""

import os
import re
import sys

TEST_FILES = {"tests.rs", "scripted.rs", "test_states.rs", "fuzz.rs"}


def skipped(rel_parts):
    name = rel_parts[-1]
    folders = rel_parts[:-1]
    return (
        name in TEST_FILES
        or name.endswith("_tests.rs")
        or "tests" in folders
        or "fuzz" in folders
    )


def count_file(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    count, i = 0, 0
    while i < len(lines):
        line = lines[i]
        if (
            line.strip() == "#[cfg(test)]"
            and i + 1 < len(lines)
            and re.match(r"\s*mod \w+ \{", lines[i + 1])
        ):
            depth, j = 0, i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                if depth <= 0:
                    break
                j += 1
            i = j + 1
            continue
        if line.strip():
            count += 1
        i += 1
    return count


TEST_MOD = re.compile(r"\s*(?:pub(?:\([\w:]+\))?\s+)?mod (\w+);")


def test_modules(path):
    """The files and folders of the modules `path` declares under
    `#[cfg(test)]` as `mod NAME;`: test code wherever it lives."""
    lines = open(path, encoding="utf-8").read().split("\n")
    folder, name = os.path.split(path)
    if name not in ("lib.rs", "main.rs", "mod.rs"):
        folder = os.path.join(folder, name[: -len(".rs")])
    found = []
    for line, after in zip(lines, lines[1:]):
        declared = TEST_MOD.match(after)
        if line.strip() == "#[cfg(test)]" and declared:
            module = os.path.join(folder, declared.group(1))
            found += [module + ".rs", module]
    return found


def count_tree(root):
    paths = []
    for folder, _, files in os.walk(root):
        paths += [os.path.join(folder, n) for n in files if n.endswith(".rs")]
    test_only = [m for path in paths for m in test_modules(path)]
    total = 0
    for path in paths:
        if skipped(os.path.relpath(path, root).split(os.sep)):
            continue
        if any(path == m or path.startswith(m + os.sep) for m in test_only):
            continue
        total += count_file(path)
    return total


def main():
    roots = [("the gateway (src/)", "src")]
    crates = sorted(os.listdir("crates")) if os.path.isdir("crates") else []
    roots += [(name, os.path.join("crates", name, "src")) for name in crates]
    total = 0
    for label, root in roots:
        if os.path.isdir(root):
            n = count_tree(root)
            total += n
            print(f"{n:>7}  {label}")
    print(f"{total:>7}  total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
