"""Report of bench/suite_instructions.sh: instructions.md from one or more instructions.csv,
written to stdout.

    /usr/bin/python3 bench/suite_instructions_report.py instructions.csv [more.csv ...]
        [--scale S --skipped "ALLOCATORS"]

Several files are merged (one run per group of allocators, say). Per program and allocator the
median of the runs in millions of instructions, its ratio to mimalloc, geometric means, and the
control heap's ratio to the best of glibc, mimalloc, jemalloc and tcmalloc. A figure that cannot be
computed (no run of that program under that allocator succeeded) is written MISSING; geometric
means are taken over the programs every allocator compared has a figure for.
"""
import argparse
import os
import statistics
import sys

# report.py sits beside this script: importing it must not leave bytecode in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import complete_keys, geomean, lacking_text, read_csv, run_notes, table  # noqa: E402

PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
ORDER = PEERS + ["nicmalloc", "nicmalloc-dp4k"]
CTL = "nicmalloc"


def fmt(v, f):
    return "MISSING" if v is None else f % v


def ratio(a, b):
    return a / b if a and b else None


def summarise(rows):
    """{program: {allocator: {"ir": median, "min", "max", "runs", "bad"}}}, {program: threads}."""
    runs, threads = {}, {}
    for r in rows:
        runs.setdefault(r["program"], {}).setdefault(r["allocator"], []).append(r)
        threads[r["program"]] = r["threads"]
    out = {}
    for p, d in runs.items():
        out[p] = {}
        for a, rs in d.items():
            ir = [int(r["instructions"]) for r in rs if r["status"] == "ok"]
            out[p][a] = {"ir": statistics.median(ir) if ir else None,
                         "min": min(ir) if ir else None, "max": max(ir) if ir else None,
                         "runs": len(ir), "bad": len(rs) - len(ir)}
    return out, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--scale", default="")
    ap.add_argument("--skipped", default="")
    args = ap.parse_args()
    rows = []
    for path in args.csv:
        rows += read_csv(path) or []
    s, threads = summarise(rows)
    seen = list(dict.fromkeys(r["allocator"] for r in rows))
    allocs = [a for a in ORDER if a in seen] + [a for a in seen if a not in ORDER]
    progs = sorted(s)
    md = ["# Allocator suite: instructions (bench/suite_instructions.sh)", "",
          "Instructions executed by the whole process (every thread, every child), counted by "
          "valgrind (cachegrind or callgrind), at scale %s; millions, median of the runs, and "
          "the ratio to mimalloc in brackets. Valgrind runs one thread at a time, so a program "
          "that waits on another executes a count that depends on the scheduling: the spread "
          "of the programs that start threads and ran more than once is below." % args.scale,
          "",
          "- programs: %d (%s)" % (len(progs), ", ".join(progs)),
          "- allocators: %s" % ", ".join(allocs)]
    md += run_notes(args.skipped, rows)

    # Per program each allocator's ratio to mimalloc and the control heap's to the best peer;
    # the geometric means over the programs every allocator has a figure for.
    body, ratios = [], {}
    with_best = CTL in allocs and any(a in allocs for a in PEERS)
    for p in progs:
        d = s[p]
        mi = d.get("mimalloc", {}).get("ir")
        row = [p, "%s thread%s" % (("1", "") if threads[p] == "single" else ("2+", "s"))]
        ratios[p] = {}
        for a in allocs:
            v = d.get(a, {}).get("ir")
            ratios[p][a] = ratio(v, mi)
            row.append("MISSING" if v is None else "%.1f" % (v / 1e6) if a == "mimalloc" or
                       not mi else "%.1f (%.2f)" % (v / 1e6, ratios[p][a]))
        peers = [(d[a]["ir"], a) for a in PEERS if a in d and d[a]["ir"]]
        if with_best:
            best, name = min(peers) if peers else (None, "")
            ratios[p]["best"] = ratio(d.get(CTL, {}).get("ir"), best)
            row.append("%s %s" % (fmt(ratios[p]["best"], "%.2f"), name))
        body.append(row)
    keep, left = complete_keys(ratios, allocs)
    geo = ["**geometric mean**", ""] + [
        "" if a == "mimalloc" else "**%s**" % fmt(geomean([ratios[p][a] for p in keep]), "%.2f")
        for a in allocs]
    head = ["program", "threads"] + allocs
    if with_best:
        head.append("%s / best of %s" % (CTL, ", ".join(a for a in PEERS if a in allocs)))
        geo.append("**%s**" % fmt(geomean([ratios[p]["best"] for p in keep]), "%.2f"))
    md += ["", "## Instructions: millions (ratio to mimalloc)", ""] + table(head, body + [geo])
    if left:
        md += ["", "Geometric means over the %d of %d programs every allocator has a figure "
               "for; left out: %s." % (len(keep), len(progs), lacking_text(left))]

    body = []
    for p in progs:
        if threads[p] == "single" or max(x["runs"] for x in s[p].values()) < 2:
            continue
        row = [p]
        for a in allocs:
            x = s[p].get(a, {})
            row.append("MISSING" if x.get("ir") is None else "%d run%s, %.1f-%.1f M, %.2f%%" % (
                x["runs"], "" if x["runs"] == 1 else "s", x["min"] / 1e6, x["max"] / 1e6,
                100 * (x["max"] - x["min"]) / x["ir"]))
        body.append(row)
    if body:
        md += ["", "## Spread of the programs that start threads: runs, min-max, (max - min) / "
               "median", ""] + table(["program"] + allocs, body)

    md += ["", "## Reading these counts next to suite.sh's times", "",
           "Instructions are repeatable where times on a shared machine are not, but they leave "
           "out cache and TLB misses, contention between cores (valgrind runs the threads one "
           "at a time, so lock and cache-line sharing costs nothing here) and time in the kernel "
           "(system calls, page faults, pinning). Where an allocator's CPU-time ratio in "
           "suite.md is close to its instruction ratio here, the instructions explain the "
           "difference; where the CPU ratio is well above it, the rest is memory traffic, "
           "waiting on other threads or the kernel (read the peak RSS, pinned bytes and system "
           "time); where it is below, the allocator's extra instructions are cheap ones (hits "
           "in cache, predicted branches)."]
    print("\n".join(md))


if __name__ == "__main__":
    main()
