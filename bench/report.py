"""Report of a bench/run_all.sh results directory: report.md and PNG plots.

    /usr/bin/python3 bench/report.py RESULTS_DIR MODE   # report.md + *.png in RESULTS_DIR
    /usr/bin/python3 bench/report.py --peers peers.csv  # the peers table alone (bench/peers.sh)
    /usr/bin/python3 bench/report.py --servers servers.csv
    /usr/bin/python3 bench/report.py --compare malloc_compare.json  # bench/compare_malloc.sh

Medians of repeated runs with their min-max and ratios to mimalloc; it judges no timing, it only
states targets.
Without matplotlib (Debian's python3-matplotlib) the tables are still written, with a note.
"""
import csv
import json
import math
import os
import re
import statistics
import sys

PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
SECTIONS = ["Machine and settings", "Steps", "Headline", "malloc/free pairs (compare_malloc)",
            "Instruction counts (callgrind)", "First dataplane allocation", "MR misses",
            "Fragmentation",
            "Allocator peers", "Real servers", "Receive: copy against in place"]
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None


def read_csv(path):
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return list(csv.DictReader(fh))


def run_notes(skipped, rows):
    """The lines a suite report lists under its header: allocators not installed, failed runs."""
    lines = []
    if skipped.strip():
        lines.append("- skipped: %s not installed" % skipped.strip())
    fails = [r for r in rows if r["status"] != "ok"]
    if fails:
        lines.append("- FAILED runs: " + ", ".join("%s/%s rep %s" % (r["program"], r["allocator"],
                                                                     r["rep"]) for r in fails))
    return lines


def geomean(vals):
    """Geometric mean, None for no value. Callers pass one value per program of a set every
    allocator compared has a figure for (complete_keys): a mean that dropped the programs one
    allocator failed would be taken over other programs than the others'."""
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def complete_keys(values, allocs):
    """values {key: {allocator: figure or None}}: the keys where every one of allocs has a
    figure, and the others, each with the allocators that lack one."""
    keep, left = [], []
    for k, d in values.items():
        lacking = [a for a in allocs if not d.get(a)]
        if lacking:
            left.append((k, lacking))
        else:
            keep.append(k)
    return keep, left


def lacking_text(left):
    """'p1 (a, b), p2 (c)': the keys complete_keys left out and what they lack."""
    return ", ".join("%s (%s)" % (k, ", ".join(a)) for k, a in left)


def verdict(value, met, left):
    """A target's verdict: 'incomplete (...)' when programs lack a figure (a failed run), however
    the others went; else 'met' or 'missed' by met(value)."""
    if left:
        return "incomplete (%d program%s failed: %s)" % (len(left), "" if len(left) == 1 else "s",
                                                         lacking_text(left))
    return "met" if value is not None and met(value) else "missed"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def values(rows, key):
    return [float(r[key]) for r in rows if r["status"] == "ok" and r[key] not in ("", "-")]


def med(rows, key):
    vals = values(rows, key)
    return statistics.median(vals) if vals else None


def spread(rows, key, f="%.3f"):
    """'min-max' of the ok runs' key, '-' without one."""
    vals = values(rows, key)
    return "%s-%s" % (f % min(vals), f % max(vals)) if vals else "-"


def fmt(v, f="%.3f"):
    return "-" if v is None else f % v


def ratio(a, b):
    return a / b if a is not None and b else None


COMPARE = ["glibc", "mimalloc", "nic_control", "nic_dataplane"]
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def compare_rows(benchmarks):
    """{(pattern, threads, size): {allocator: median ns per pair}} and the same keys'
    {allocator: [ns per pair of each repetition]}, from malloc_compare's Google Benchmark JSON
    ("benchmarks": the median aggregate and the repetitions' own runs)."""
    rows, reps = {}, {}
    for b in benchmarks:
        if b.get("aggregate_name") != "median" and b.get("run_type") != "iteration":
            continue
        parts = b["run_name"].split("/")
        threads = next(int(p[8:]) for p in parts if p.startswith("threads:"))
        ns = b["real_time"] * UNIT_NS[b["time_unit"]] / b.get("batch", 1)
        key = (parts[0][3:], threads, int(parts[2]))
        if b.get("aggregate_name") == "median":
            rows.setdefault(key, {})[parts[1]] = ns
        elif not b.get("error_occurred"):
            reps.setdefault(key, {}).setdefault(parts[1], []).append(ns)
    return rows, reps


def compare_lines(benchmarks):
    """compare_malloc.sh's table: median ns per pair with the repetitions' min-max, ratios of
    the medians to mimalloc, and geometric means over the rows every allocator of the run has a
    result for."""
    rows, reps = compare_rows(benchmarks)

    def cell(v, f):
        return format(v, f) if v is not None else "-"

    def with_spread(key, a):
        ns = reps.get(key, {}).get(a)
        if a not in rows[key]:
            return "-"
        return "%.1f" % rows[key][a] + (" [%.1f-%.1f]" % (min(ns), max(ns)) if ns else "")

    out = ["median ns per malloc/free pair [min-max over the repetitions] (real time; with 2 "
           "threads: wall time / pairs of both)"]
    head = "%-6s %3s %6s | %18s %18s %18s %18s | %8s %8s %8s"
    out.append(head % ("test", "thr", "size", "glibc", "mimalloc", "nic_ctl", "nic_dp",
                       "glibc/mi", "ctl/mi", "dp/mi"))
    ratios = {}  # (pattern, threads, size) -> {allocator: ratio to mimalloc}
    for key in sorted(rows, key=lambda k: (k[0] != "pair", k[1], k[2])):
        r = rows[key]
        mi = r.get("mimalloc")
        ratios[key] = {a: r[a] / mi if mi and a in r else None for a in COMPARE}
        out.append(head % (key + tuple(with_spread(key, a) for a in COMPARE) + tuple(
            cell(ratios[key][a], ".3f") for a in ("glibc", "nic_control", "nic_dataplane"))))
    # The allocators this run has (a filter may leave some out); the means over the rows all of
    # them have, so that no allocator's mean is taken over other rows than another's.
    present = [a for a in COMPARE if any(a in r for r in rows.values())]
    keep, left = complete_keys(ratios, present)
    out += ["", "geometric mean ratio to mimalloc (targets: control <= 1.05, dataplane <= 1.15)"]
    if left:
        out.append("over the %d of %d rows every allocator has a result for; left out: %s" % (
            len(keep), len(ratios), lacking_text(("%s/%d/threads:%d" % (k[0], k[2], k[1]), a)
                                                 for k, a in left)))
    groups = sorted({k[:2] for k in keep}, key=lambda g: (g[0] != "pair", g[1]))
    out.append("%-16s %8s %8s %8s" % ("", "glibc", "control", "dataplane"))
    for label, sel in [("%s threads:%d" % g, [g]) for g in groups] + [("all", groups)]:
        vals = [geomean([ratios[k][a] for k in keep if k[:2] in sel]) if a in present else None
                for a in ("glibc", "nic_control", "nic_dataplane")]
        out.append("%-16s %8s %8s %8s" % ((label,) + tuple(cell(v, ".3f") for v in vals)))
    return out


# The status peers.sh and servers.sh write for an allocator whose library is not there: a row that
# says so, so that the report names it instead of leaving its columns out unsaid.
NOT_INSTALLED = "not installed"


def installed(rows):
    """rows without the not-installed ones, and the allocators those name."""
    return ([r for r in rows if r["status"] != NOT_INSTALLED],
            list(dict.fromkeys(r["allocator"] for r in rows if r["status"] == NOT_INSTALLED)))


def skipped_note(skipped):
    return ["- skipped: %s not installed (no figures)" % ", ".join(skipped), ""] if skipped else []


def peers_summary(rows):
    """{workload: {allocator: (median s, median RSS MiB, failures, min-max s)}} in first-seen
    order."""
    out = {}
    for r in rows:
        out.setdefault(r["workload"], {}).setdefault(r["allocator"], []).append(r)
    return {w: {a: (med(rs, "seconds"), ratio(med(rs, "max_rss_kib"), 1024),
                    sum(r["status"] != "ok" for r in rs), spread(rs, "seconds"))
                for a, rs in d.items()}
            for w, d in out.items()}


def peers_table(rows):
    """The peers table, after a line naming the allocators not installed and the peers the best
    is taken over; a goal that lacks a figure (mimalloc's or a peer's run failed) reads
    "incomplete", not yes or no."""
    rows, skipped = installed(rows)
    s = peers_summary(rows)
    allocs = list(dict.fromkeys(r["allocator"] for r in rows))
    peers = [a for a in PEERS if a in allocs]
    notes = skipped_note(skipped) + [
        "- best peer: the fastest of %s%s" % (", ".join(peers) or "none", " (%s not installed)"
                                               % ", ".join(a for a in PEERS if a not in peers)
                                               if len(peers) < len(PEERS) else ""), ""]
    body = []
    for w, d in s.items():
        mi = d.get("mimalloc", (None, None, 0, "-"))
        lacking = [a for a in peers if d.get(a, (None,))[0] is None]
        best = min((d[a][0] for a in peers if a not in lacking), default=None)
        for a in allocs:
            t, rss, bad, t_range = d.get(a, (None, None, 0, "-"))
            goal = ""
            if a.startswith("nicmalloc") and t is not None:
                to_mi = ratio(t, mi[0])  # None when mimalloc has no median (failed, missing)
                goal = "%s / %s" % (
                    "incomplete" if to_mi is None else "yes" if to_mi <= 1.05 else "no",
                    "incomplete (%s failed)" % ", ".join(lacking) if lacking or not best
                    else "yes" if t <= 1.10 * best else "no")
            body.append([w, a, "FAILED %d" % bad if bad else "ok", fmt(t), t_range,
                         fmt(ratio(t, mi[0])), fmt(ratio(t, best)), fmt(rss, "%.1f"),
                         fmt(ratio(rss, mi[1]), "%.2f"), goal])
    return notes + table(["workload", "allocator", "runs", "median s", "min-max s",
                          "time / mimalloc", "time / best peer", "median peak RSS MiB",
                          "RSS / mimalloc", "goal ≤1.05× mi / ≤1.10× best"], body)


def servers_summary(rows):
    out = {}
    for r in rows:
        out.setdefault((r["server"], r["test"]), {}).setdefault(r["allocator"], []).append(r)
    return out


def servers_table(rows):
    rows, skipped = installed(rows)
    body = []
    allocs = list(dict.fromkeys(r["allocator"] for r in rows))
    fails = [r for r in rows if r["status"] != "ok"]
    for (server, test), d in servers_summary(rows).items():
        if test == "-":
            continue
        mi = d.get("mimalloc", [])
        mops, mrss = med(mi, "ops_per_sec"), med(mi, "vmhwm_kib")
        for a in allocs:
            rs = d.get(a, [])
            ops, rss = med(rs, "ops_per_sec"), med(rs, "vmhwm_kib")
            live, pinned = med(rs, "live_peak_kib"), med(rs, "pinned_peak_kib")
            body.append([server, test, a, fmt(ops, "%.0f"), spread(rs, "ops_per_sec", "%.0f"),
                         fmt(ratio(ops, mops)),
                         fmt(ratio(rss, 1024), "%.1f"), fmt(ratio(rss, mrss), "%.2f"),
                         fmt(ratio(live, 1024), "%.1f"), fmt(ratio(pinned, 1024), "%.1f"),
                         fmt(pinned_over_live(rs), "%.2f")])
    for r in fails:
        body.append([r["server"], "-", r["allocator"], "FAILED (rep %s)" % r["rep"]] + [""] * 7)
    return skipped_note(skipped) + table(
        ["server", "test", "allocator", "median ops/s", "min-max ops/s",
         "ops/s / mimalloc (target ≥0.97)", "median peak RSS MiB", "RSS / mimalloc",
         "peak dataplane live MiB", "peak pinned MiB", "pinned / live (target ≤1.3)"], body)


def pinned_over_live(rows):
    """Median over runs of each run's peak pinned / peak live dataplane bytes (nicmalloc runs
    that put something on the dataplane), None otherwise."""
    vals = [float(r["pinned_peak_kib"]) / float(r["live_peak_kib"]) for r in rows
            if r["status"] == "ok" and r.get("live_peak_kib") not in (None, "", "-", "0")
            and r.get("pinned_peak_kib") not in (None, "", "-")]
    return statistics.median(vals) if vals else None


def plot_peers(rows, path):
    rows = installed(rows)[0]
    s = peers_summary(rows)
    allocs = [a for a in dict.fromkeys(r["allocator"] for r in rows)]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(allocs)
    for i, a in enumerate(allocs):
        ys = [ratio(s[w].get(a, (None,))[0], s[w].get("mimalloc", (None,))[0]) or 0 for w in s]
        ax.bar([x + i * width for x in range(len(s))], ys, width, label=a)
    ax.axhline(1.05, color="k", ls="--", lw=0.8, label="1.05× mimalloc")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(s))], list(s))
    ax.set_ylabel("median wall time / mimalloc")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_mr(rows, path):
    pools = list(dict.fromkeys(r["pool"] for r in rows))
    fig, axes = plt.subplots(1, len(pools), figsize=(4 * len(pools), 3.6), squeeze=False)
    for ax, pool in zip(axes[0], pools):
        for scheme in dict.fromkeys(r["scheme"] for r in rows):
            pts = [(int(r["capacity"]), float(r["misses_per_million"])) for r in rows
                   if r["pool"] == pool and r["scheme"] == scheme]
            ax.plot(*zip(*sorted(pts)), marker="o", label=scheme)
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=1)  # the arena scheme may reach 0 misses
        ax.set_ylim(bottom=0)
        ax.set_title(pool)
        ax.set_xlabel("NIC translation-cache entries")
    axes[0][0].set_ylabel("modeled misses per 1M entries")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def text(path):
    return open(path).read().rstrip() if os.path.exists(path) else None


def frag_table(rows):
    body = [[r["pool"], r["allocator"], r["shrink"], fmt(float(r["peak_mem_ratio"])),
             fmt(float(r["returned_pct"]), "%.1f%%")] for r in rows if r.get("api") != "slab"]
    return table(["pool", "allocator", "shrink", "peak held/live", "returned after release"], body)


# Issue #20's target for the first dataplane allocation of a process: 5 ms, and at most one pin
# step and 4 MiB more of resident memory.
FIRST_ALLOC_MS, FIRST_ALLOC_EXTRA_KIB = 5.0, 4096


def first_alloc_lines(txt):
    """The target lines for first_alloc's output (bench/first_alloc.c): its medians, with the
    maxima beside them, against #20's target; MISSING where a figure is not in the output."""
    step = re.search(r"pin step (\d+) KiB", txt or "")
    figs = {m.group(1): (float(m.group(2)), float(m.group(4))) for m in re.finditer(
        r"^\s+(\S.*?)\s+median\s+([\d.]+)\s+min\s+([\d.]+)\s+max\s+([\d.]+)\s*$",
        txt or "", re.M)}
    ms, rss = figs.get("dataplane first alloc ms"), figs.get("dataplane first alloc RSS KiB")
    cpu = figs.get("dataplane first alloc CPU ms")
    if not (step and ms and rss and cpu):
        return ["- first dataplane allocation: MISSING (no figures in first_alloc's output)"]
    limit = int(step.group(1)) + FIRST_ALLOC_EXTRA_KIB
    return ["- time, median of the runs: %.2f ms (max %.2f; CPU %.2f, max %.2f) (target <= %g ms: "
            "%s)" % (ms[0], ms[1], cpu[0], cpu[1], FIRST_ALLOC_MS,
                     "met" if ms[0] <= FIRST_ALLOC_MS else "missed"),
            "- resident memory added, median: %.0f KiB (max %.0f) (target <= one pin step, %s "
            "KiB, + 4 MiB = %d KiB: %s)" % (rss[0], rss[1], step.group(1), limit,
                                            "met" if rss[0] <= limit else "missed")]


def headline(d, peers, servers, mr):
    out = []
    peers, servers = installed(peers or [])[0], installed(servers or [])[0]
    if peers:
        s = peers_summary(peers)
        out += ["Peers, median wall time ratio to mimalloc (full table below):", ""]
        allocs = [a for a in dict.fromkeys(r["allocator"] for r in peers) if a != "mimalloc"]
        out += table(["workload"] + allocs, [
            [w] + [fmt(ratio(s[w].get(a, (None,))[0], s[w].get("mimalloc", (None,))[0]), "%.2f")
                   for a in allocs] for w in s]) + [""]
    if servers:
        out += ["Servers, median ops/s ratio to mimalloc:", ""]
        body = []
        for (server, test), dd in servers_summary(servers).items():
            if test == "-":
                continue
            mops = med(dd.get("mimalloc", []), "ops_per_sec")
            body.append([server + " " + test] + [fmt(ratio(med(dd.get(a, []), "ops_per_sec"),
                                                               mops), "%.3f")
                                                 for a in ("glibc", "nicmalloc", "nicmalloc-dp1k")])
        out += table(["load", "glibc", "nicmalloc", "nicmalloc-dp1k"], body) + [""]
    if mr:
        out += ["MR misses per 1M entries at 16384 NIC cache entries:", ""]
        pts = {(r["pool"], r["scheme"]): r["misses_per_million"] for r in mr
               if r["capacity"] == "16384"}
        schemes = list(dict.fromkeys(r["scheme"] for r in mr))
        out += table(["pool"] + schemes, [[p] + ["%.0f" % float(pts.get((p, s), "nan"))
                                                 for s in schemes]
                                          for p in dict.fromkeys(r["pool"] for r in mr)]) + [""]
    return out or ["(no results)"]


def report(d, mode):
    peers, servers = read_csv(d + "/peers.csv"), read_csv(d + "/servers.csv")
    mr, frag = read_csv(d + "/mr/mr_miss_sweep.csv"), read_csv(d + "/frag/summary.csv")
    steps = read_csv(d + "/steps.csv") or []
    pngs, notes = {}, []
    if plt is None:
        notes.append("**Note: matplotlib is missing (apt-get install python3-matplotlib); "
                     "tables only, no plots.**")
    else:
        for name, rows, fn in [("mr_misses.png", mr, plot_mr), ("peers_ratio.png", peers,
                                                                 plot_peers)]:
            if rows:
                fn(rows, os.path.join(d, name))
                pngs[name] = True
    md = ["# nicmalloc benchmarks (%s mode)" % mode, ""] + notes
    md += ["## Machine and settings", "", "```", text(d + "/machine.txt") or "?", "```", ""]
    md += ["## Steps", ""] + table(["step", "status", "seconds", "output"], [
        [s["step"], s["status"], s["seconds"], s["output"]] for s in steps]) + [""]
    md += ["## Headline", ""] + headline(d, peers, servers, mr)
    md += ["## malloc/free pairs (compare_malloc)", "",
           "Google Benchmark in one process, allocators interleaved; median ns per pair and the "
           "min-max of the repetitions.", "",
           "```", text(d + "/compare/malloc_compare.txt") or "not run", "```", ""]
    md += ["## Instruction counts (callgrind)", "",
           "Instructions inside each driver loop (valgrind --tool=callgrind): the repeatable "
           "numbers to track from change to change.", "",
           "```", text(d + "/callgrind/callgrind.txt") or "not run", "",
           text(d + "/callgrind/callgrind_nic.txt") or "nic paths: not run", "```", ""]
    fa = text(d + "/first_alloc/first_alloc.txt")
    md += ["## First dataplane allocation", "",
           "build/bench/first_alloc: the first dataplane allocation (64 bytes) of each of a "
           "number of fresh processes, default settings, against the first control allocation; "
           "wall and CPU time, resident and locked memory it adds. Issue #20's target: <= %g ms "
           "and <= one pin step + 4 MiB of resident memory." % FIRST_ALLOC_MS, ""]
    md += (first_alloc_lines(fa) + ["", "```", fa, "```", ""]) if fa else ["not run", ""]
    md += ["## MR misses", "",
           "One send stream per pool through arenas, per-buffer registration and the "
           "registration cache, replayed through the sim NIC's translation-cache model (cx5 "
           "miss penalty). Per-send modeled latency at 16384 entries from mr_miss: percentiles, "
           "mean, standard deviation and variance.", ""]
    md += [text(d + "/mr/mr_miss.md") or "not run", ""]
    if "mr_misses.png" in pngs:
        md += ["![MR misses vs NIC cache capacity](mr_misses.png)", ""]
    md += ["## Fragmentation", "", "bench/frag/run_frag.sh; its own report: "
           "[frag/summary.md](frag/summary.md).", ""]
    md += frag_table(frag) if frag else ["not run"]
    md += [""] + ["![%s](frag/%s)" % (f, f) for f in sorted(os.listdir(d + "/frag"))
                  if f.endswith(".png")] if os.path.isdir(d + "/frag") else []
    md += ["", "## Allocator peers", "",
           "bench/workloads under LD_PRELOAD, wall time and peak RSS (GNU time), allocators "
           "interleaved in each repetition; medians and min-max of the repetitions; 'best peer' = "
           "fastest of glibc, mimalloc, jemalloc, tcmalloc (those installed).", ""]
    md += peers_table(peers) if peers else ["not run"]
    if "peers_ratio.png" in pngs:
        md += ["", "![peers: time ratio to mimalloc](peers_ratio.png)"]
    md += ["", "## Real servers", "", "memcached + memcaslap, redis-server + redis-benchmark on "
           "127.0.0.1; peak RSS is the server's VmHWM before shutdown; medians and min-max of the "
           "repetitions.", ""]
    md += servers_table(servers) if servers else ["not run"]
    md += ["", "## Receive: copy against in place", "",
           "bench/recv_bench.sh: per message size, recv() into malloc'd memory (sockets), "
           "nic_endpoint_receive with a copy into malloc'd memory, and nic_endpoint_receive "
           "read in place, interleaved; medians of the repetitions. On loopback the kernel "
           "copies every byte into the receive buffer either way (the in-place gain is the "
           "user-space copy only); net_ring hands the receiver the sender's very mbufs. Wall "
           "times on a shared machine move with its load; the CPU columns do much less.", ""]
    md += [text(d + "/recv.md") or "not run"]
    md += ["", "## Pin step", "",
           "bench/step_sweep.sh: per NICMALLOC_PIN_STEP, the first dataplane allocation of a "
           "fresh process (medians, steps interleaved), peak pinned/live and returned after a "
           "random 90% shrink (frag_churn), modeled misses per million entries on the cx5 preset "
           "at 16384 entries and entries per send (mr_miss, arena). The trade-off is discussed "
           "in bench/README.md, \"Pin step\".", ""]
    md += [text(d + "/step_sweep/step_sweep.md") or "not run"]
    with open(os.path.join(d, "report.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--peers":
        print("\n".join(peers_table(read_csv(sys.argv[2]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--servers":
        print("\n".join(servers_table(read_csv(sys.argv[2]))))
    elif len(sys.argv) == 3 and sys.argv[1] == "--compare":
        with open(sys.argv[2]) as fh:
            print("\n".join(compare_lines(json.load(fh)["benchmarks"])))
    elif len(sys.argv) == 3:
        report(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
