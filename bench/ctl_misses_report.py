#!/usr/bin/env python3
"""bench/ctl_misses.sh's report: reads callgrind files (--cache-sim=yes --dump-instr=yes) given as
name=file, prints the per-run totals per allocator and, from each allocator's first file, the
misses by library and nicmalloc's own lines with their source text."""
import argparse, collections, os, re, statistics

EVENTS = ["Ir", "D1mr", "D1mw", "DLmr", "DLmw"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(path):
    """{(object, file, line): [costs in EVENTS order]}, self cost only (calls' inclusive lines
    skipped), and the summary."""
    names, cost, events, positions = {}, collections.defaultdict(lambda: [0] * len(EVENTS)), [], []
    ob = fi = ""
    last, skip, summary = [], False, None

    def name(kind, s):
        m = re.match(r"\((\d+)\)(?: (.*))?$", s)
        if not m:
            return s
        if m.group(2) is not None:
            names[(kind, m.group(1))] = m.group(2)
        return names[(kind, m.group(1))]

    kinds = {"fl": "f", "fi": "f", "fe": "f", "cfi": "f", "cfl": "f", "fn": "n", "cfn": "n",
             "ob": "o", "cob": "o"}
    for raw in open(path):
        line = raw.rstrip("\n")
        if line.startswith("events:"):
            events = line.split()[1:]
            continue
        if line.startswith("positions:"):
            positions = line.split()[1:]
            continue
        if line.startswith("summary:"):
            summary = dict(zip(events, map(int, line.split()[1:])))
            continue
        m = re.match(r"^(fl|fi|fe|fn|cfi|cfl|cfn|ob|cob)=(.*)", line)
        if m:
            k, v = m.groups()
            n = name(kinds[k], v)
            if k == "ob":
                ob = n
            elif k in ("fl", "fi", "fe"):
                fi = n
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if not line or not (line[0].isdigit() or line[0] in "+-*"):
            continue
        parts = line.split()
        pos = []
        for i, p in enumerate(parts[:len(positions)]):
            prev = last[i] if i < len(last) else 0
            pos.append(prev if p == "*" else prev + int(p, 0) if p[0] in "+-" else int(p, 0))
        last = pos
        if skip:
            skip = False
            continue
        c = cost[(ob, fi, pos[-1])]
        vals = dict(zip(events, map(int, parts[len(positions):])))
        for i, e in enumerate(EVENTS):
            c[i] += vals.get(e, 0)
    return cost, summary


def short_file(f):
    """The path inside the repository (objects may come from another checkout's compile)."""
    m = re.search(r"/((?:alloc|regcache|safety|bench)/.*)$", f.replace("/../", "/"))
    return m.group(1) if m else f


def source(f, line):
    p = os.path.join(ROOT, f)
    try:
        return open(p).read().splitlines()[line - 1].strip()[:70].replace("|", "\\|")
    except (OSError, IndexError):
        return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="")
    ap.add_argument("--load", nargs=2, default=["?", "?"])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    runs = collections.OrderedDict()
    for nf in a.files:
        n, f = nf.split("=", 1)
        runs.setdefault(n, []).append(f)
    print(f"wl_ctl_threads {a.run}; load average before {a.load[0]}, after {a.load[1]}\n")
    print("Per run (median [min-max] of %d runs each; LL = last level)\n" % len(next(iter(runs.values()))))
    print("| allocator | instructions | LL read misses | LL write misses | LL misses |")
    print("|---|---|---|---|---|")
    parsed = {}
    for n, fs in runs.items():
        sums = []
        for i, f in enumerate(fs):
            cost, s = parse(f)
            if i == 0:
                parsed[n] = cost
            sums.append(s)
        cells = []
        for key in ("Ir", "DLmr", "DLmw", None):
            v = [(s["DLmr"] + s["DLmw"]) if key is None else s[key] for s in sums]
            cells.append(f"{statistics.median(v):,.0f} [{min(v):,}-{max(v):,}]")
        print(f"| {n} | " + " | ".join(cells) + " |")
    for n, cost in parsed.items():
        print(f"\n{n}, first run: by library (self cost)\n")
        print("| library | " + " | ".join(EVENTS) + " |")
        print("|---" * (len(EVENTS) + 1) + "|")
        by = collections.defaultdict(lambda: [0] * len(EVENTS))
        for (ob, _, _), c in cost.items():
            b = by[os.path.basename(ob) or "?"]
            for i, v in enumerate(c):
                b[i] += v
        for ob, c in sorted(by.items(), key=lambda kv: -(kv[1][3] + kv[1][4]))[:6]:
            print(f"| {ob} | " + " | ".join(f"{v:,}" for v in c) + " |")
        own = [(k, c) for k, c in cost.items() if "libnicmalloc" in k[0] and (c[3] or c[4] or c[1] > 1000)]
        if not own:
            continue
        print(f"\n{n}, first run: nicmalloc's own lines with LL misses or over 1,000 D1 read misses\n")
        print("| line | source | " + " | ".join(EVENTS) + " |")
        print("|---" * (len(EVENTS) + 2) + "|")
        for (ob, f, line), c in sorted(own, key=lambda kc: -(kc[1][3] + kc[1][4] + kc[1][1] / 1000))[:15]:
            sf = short_file(f)
            print(f"| {sf}:{line} | `{source(sf, line)}` | " + " | ".join(f"{v:,}" for v in c) + " |")


if __name__ == "__main__":
    main()
