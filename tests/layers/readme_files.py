#!/usr/bin/env python3
"""Every source file of the runtime is named in its folder's README, and no README names a file
that is not there.

alloc/README.md, regcache/README.md and safety/README.md each cover their folder at any depth.
A README's file tables say which file is where by the heading above them: a heading with a
backticked folder path from the repository root (## `alloc/heap/` ...) makes the rows below it
name files of that folder, until the next heading (a heading without one ends the file tables).
A row names its files in its first cell, backticked: `log.c`, `uring.[ch]` (both .c and .h), or
a path under the heading's folder (`cache/backend.c`). Prose is not checked: only table rows.
Exit 1 with every difference listed; 0 with a count.
"""
import os
import re
import sys

TOPS = ("alloc", "regcache", "safety")
SOURCE = re.compile(r".*\.(c|h|cc)$")
FOLDER = re.compile(r"`([\w./-]+/)`")
NAME = re.compile(r"`([\w./-]+\.(?:c|h|cc|\[ch\]))`")


def files_on_disk(root, top):
    found = set()
    for d, _, names in os.walk(os.path.join(root, top)):
        for n in names:
            if SOURCE.match(n):
                found.add(os.path.relpath(os.path.join(d, n), root))
    return found


def files_named(root, top):
    """(named files, problems) of top/README.md."""
    readme = os.path.join(root, top, "README.md")
    named, problems = {}, []
    if not os.path.exists(readme):
        return named, [f"{top}/README.md: missing"]
    folder = None
    in_code = False
    with open(readme) as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            if line.startswith("#"):
                m = FOLDER.search(line)
                folder = m.group(1) if m else None
                if folder and not folder.startswith(top + "/"):
                    problems.append(f"{top}/README.md:{lineno}: heading names {folder}, "
                                    f"not a folder of {top}/")
                    folder = None
                continue
            if folder is None or not line.startswith("|"):
                continue
            first = line.split("|")[1]
            for token in NAME.findall(first):
                expanded = ([token[:-5] + ".c", token[:-5] + ".h"]
                            if token.endswith(".[ch]") else [token])
                for e in expanded:
                    named.setdefault(os.path.normpath(os.path.join(folder, e)), lineno)
    return named, problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    errors, total = [], 0
    for top in TOPS:
        disk = files_on_disk(root, top)
        named, problems = files_named(root, top)
        errors += problems
        for path in sorted(disk - named.keys()):
            errors.append(f"{path}: not named in a file table of {top}/README.md")
        for path in sorted(named.keys() - disk):
            errors.append(f"{top}/README.md:{named[path]}: names {path}, which does not exist")
        total += len(disk)
    if errors:
        print("\n".join(errors))
        print(f"{len(errors)} difference(s) between the READMEs' file tables and the sources")
        return 1
    print(f"{total} source files, each named in its folder's README")
    return 0


if __name__ == "__main__":
    sys.exit(main())
