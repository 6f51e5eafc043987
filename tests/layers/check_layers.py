#!/usr/bin/env python3
"""The runtime's layers point one way: checked from the sources and the objects, not a hand list.

The build writes <build>/layers.txt: one line per layer (cmake/layers.cmake), with its folder,
its object directory and the layers it links. This script derives two graphs and checks both
against those declarations:
  - includes: every #include "x.h" of a layer's file must name a file of that layer or of one
    below it (transitively); and the folder graph the includes make must have no cycle;
  - symbols: every symbol a layer's objects take from another layer must come from one below it
    (C calls a function without including its header, so includes alone prove nothing).
Symbols libc also defines (malloc, mmap, close...) are calls to the C library that nicmalloc
happens to interpose, not calls up. Exit 1 with every violation listed; 0 with a summary.
"""
import collections
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')


def read_layers(build):
    layers = {}
    with open(os.path.join(build, "layers.txt")) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            name, folder, objdir, below = parts[0], parts[1], parts[2], parts[3]
            deps = [d for d in below[len("below:"):].split(";") if d]
            layers[name] = {"dir": folder, "obj": objdir, "below": deps}
    return layers


def closure(layers):
    out = {}
    for name in layers:
        seen, todo = set(), list(layers[name]["below"])
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            if d not in layers:
                sys.exit(f"layer {name} links unknown layer {d}")
            seen.add(d)
            todo.extend(layers[d]["below"])
        out[name] = seen
    return out


def source_files(src, folder):
    path = os.path.join(src, folder)
    return sorted(os.path.join(folder, f) for f in os.listdir(path) if f.endswith((".c", ".h")))


def check_includes(src, layers, below, problems):
    owner = {}  # file -> layer
    by_name = collections.defaultdict(list)
    for name, layer in layers.items():
        for f in source_files(src, layer["dir"]):
            owner[f] = name
            by_name[os.path.basename(f)].append(f)
    edges = collections.defaultdict(set)
    count = 0
    for f, layer in sorted(owner.items()):
        with open(os.path.join(src, f), errors="replace") as text:
            for number, line in enumerate(text, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                wanted = m.group(1)
                direct = os.path.normpath(os.path.join(os.path.dirname(f), wanted))
                hits = [direct] if direct in owner else by_name.get(os.path.basename(wanted), [])
                if not hits:
                    continue  # include/, a system or generated header
                if len(hits) > 1:
                    problems.append(f"{f}:{number}: \"{wanted}\" names {len(hits)} files: {hits}")
                    continue
                target = owner[hits[0]]
                count += 1
                if target != layer:
                    edges[layers[layer]["dir"]].add(layers[target]["dir"])
                if target != layer and target not in below[layer]:
                    problems.append(f"{f}:{number}: includes {hits[0]} of layer {target}, "
                                    f"which is not below layer {layer}")
    # A cycle between folders, whatever the declarations say.
    def reaches(a, b):
        seen, todo = set(), [a]
        while todo:
            n = todo.pop()
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(edges.get(n, ()))
        return False
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if a < b and reaches(b, a):
                problems.append(f"include cycle between folders {a} and {b}")
    return count, edges


def libc_symbols():
    path = subprocess.run(["cc", "-print-file-name=libc.so.6"], capture_output=True,
                          text=True).stdout.strip() or "/lib/x86_64-linux-gnu/libc.so.6"
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True)
    return {line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.split()}


def check_symbols(layers, below, problems):
    defined = collections.defaultdict(set)  # symbol -> layers (a plugin keeps copies of its own)
    wanted = collections.defaultdict(set)  # layer -> symbols it takes from elsewhere
    users = collections.defaultdict(set)  # (layer, symbol) -> objects
    objects = 0
    for name, layer in layers.items():
        for d, _, files in os.walk(layer["obj"]):
            for f in files:
                if not f.endswith(".o"):
                    continue
                objects += 1
                obj = os.path.join(d, f)
                nm = subprocess.run(["nm", obj], capture_output=True, text=True).stdout
                for line in nm.splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] in "Uw":
                        wanted[name].add(parts[1])
                        users[(name, parts[1])].add(os.path.relpath(obj, layer["obj"]))
                    elif len(parts) == 3 and parts[1] in "TDBRVWCG":
                        defined[parts[2]].add(name)
    if objects == 0:
        problems.append("no object files found: build the runtime before this check")
    libc = libc_symbols()
    refs = 0
    for name, symbols in sorted(wanted.items()):
        for s in sorted(symbols):
            owners = defined.get(s, set())
            if not owners or name in owners or s in libc:
                continue
            refs += 1
            if not owners & below[name]:
                who = ", ".join(sorted(users[(name, s)]))
                problems.append(f"layer {name} ({who}) uses {s} of layer "
                                f"{'/'.join(sorted(owners))}, which is not below it")
    return objects, refs


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: check_layers.py <source dir> <build dir>")
    src, build = sys.argv[1], sys.argv[2]
    layers = read_layers(build)
    below = closure(layers)
    problems = []
    includes, edges = check_includes(src, layers, below, problems)
    objects, refs = check_symbols(layers, below, problems)
    if problems:
        print(f"{len(problems)} upward or circular dependencies:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"{len(layers)} layers; {includes} includes and {refs} cross-layer symbol references "
          f"in {objects} objects all point down.")
    for name in layers:
        print(f"  {name:8} {layers[name]['dir']:16} links {' '.join(layers[name]['below']) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
