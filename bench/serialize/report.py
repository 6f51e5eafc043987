"""Report of a bench/serialize/run.sh results directory: report.md and PNG plots.

    /usr/bin/python3 bench/serialize/report.py RESULTS_DIR MODE

Medians of repetitions with their spread; it judges no timing. A value that is missing, zero or
not a number is written MISSING and a row whose program said anything but ok is written FAILED,
which the ctest smoke run (tests/bench_serialize.cmake) looks for. Without matplotlib (Debian's
python3-matplotlib) the tables are still written, with a note.
"""
import csv
import json
import math
import os
import statistics
import sys

SECTIONS = ["Machine and settings", "Steps", "Table 1: per-step cost",
            "Figure 3: copy-out vs zero-copy", "Figure 2: echo server",
            "SG entries vs latency"]
# Table 1 of the paper: Protobuf and Cap'n Proto, one 1024-byte string field, 2.2 GHz Xeon
# Silver 4114; ns per step.
PAPER = {"protobuf": (34, 167, 351, 491, 1043), "capnp": (408, 80, 53, 78, 619)}
SERS = ["protobuf", "capnp", "flatbuffers", "sg", "sg-inline"]
STEPS = ["init", "copy", "encode", "decode"]
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return list(csv.DictReader(fh))


def text(path):
    return open(path).read().strip() if os.path.exists(path) else None


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def ok(v):
    return v is not None and not math.isnan(v) and v != 0


def fmt(v, f="%.1f"):
    return f % v if ok(v) else "MISSING"


def spread(vals, f="%.1f"):
    """median [min-max] of vals, or MISSING."""
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return "MISSING"
    return "%s [%s–%s]" % (fmt(statistics.median(vals), f), f % min(vals), f % max(vals))


def num(r, k):
    try:
        return float(r[k])
    except (KeyError, TypeError, ValueError):
        return None


# ---- Table 1 ----
def steps_runs(path):
    """({serializer: {rep: {prefix: (cpu ns, real ns)}}}, the backend the SG rows ran on) from a
    Google Benchmark JSON file."""
    if not os.path.exists(path):
        return {}, None
    with open(path) as fh:
        data = json.load(fh)
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        _, ser, prefix = b["run_name"].split("/")
        scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b.get("time_unit", "ns")]
        out.setdefault(ser, {}).setdefault(b.get("repetition_index", 0), {})[prefix] = (
            b["cpu_time"] * scale, b["real_time"] * scale)
    return out, data.get("context", {}).get("nicmalloc_backend")


def steps_of(reps):
    """Per repetition: (init, copy, encode, decode, total) from the cumulative prefixes."""
    rows = []
    for r in reps.values():
        if not all(k in r for k in ("1_init", "2_copy", "3_encode", "4_decode")):
            continue
        c = {k: v[0] for k, v in r.items()}
        real = {k: v[1] for k, v in r.items()}
        s = (c["1_init"], c["2_copy"] - c["1_init"], c["3_encode"] - c["2_copy"], c["4_decode"])
        rows.append(s + (c["3_encode"] + c["4_decode"], real["3_encode"] + real["4_decode"]))
    return rows


def table1(d):
    (sim, sim_be), (dpdk, dpdk_be) = (steps_runs(d + "/steps_sim.json"),
                                      steps_runs(d + "/steps_dpdk.json"))
    body = []
    totals = {}
    # The SG rows are labelled with the backend they ran on, as the program saw it: a run whose
    # settings did not take shows under another name, and the smoke test misses its row.
    for label, runs, ser in ([(s, sim, s) for s in SERS[:3]] +
                             [("%s (%s)" % (s, sim_be), sim, s) for s in SERS[3:]] +
                             [("%s (%s)" % (s, dpdk_be), dpdk, s) for s in SERS[3:]]):
        rows = steps_of(runs.get(ser, {}))
        cols = [spread([r[i] for r in rows]) if rows else "FAILED" for i in range(6)]
        # The SG path has no copy step: a difference of two equal prefixes, noise around zero.
        if ser.startswith("sg") and rows:
            cols[1] = "none (%s)" % ("%.1f" % statistics.median(r[1] for r in rows))
        if rows:
            totals[label] = statistics.median(r[4] for r in rows)
        p = PAPER.get(ser)
        paper = " / ".join(str(x) for x in p[:4]) + " = %d" % p[4] if p else "–"
        ratio = "%.2f" % (totals[label] / p[4]) if p and label in totals else "–"
        body.append([label] + cols + [paper, ratio])
    return body, totals


# ---- Figure 3 ----
def figure3(rows):
    """{transport: {size: {mode: [msgs/s per rep]}}}, and FAILED rows."""
    out, bad = {}, []
    for r in rows:
        if r["status"] != "ok":
            bad.append(r)
        out.setdefault(r["transport"], {}).setdefault(int(r["size"]), {}).setdefault(
            r["mode"], []).append(num(r, "msgs_per_s") if r["status"] == "ok" else None)
    return out, bad


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def separated(by_size, s):
    """'zero-copy' or 'copy-out' when that mode's slowest repetition beat the other's fastest at
    size s, else None: a difference within the run-to-run spread is not one."""
    zc = [v for v in by_size[s].get("zero-copy", []) if v]
    co = [v for v in by_size[s].get("copy-out", []) if v]
    if not zc or not co:
        return None
    if min(zc) > max(co):
        return "zero-copy"
    if min(co) > max(zc):
        return "copy-out"
    return None


def crossover(by_size):
    """Smallest size from which zero-copy's median is at least copy-out's at every larger size."""
    sizes = sorted(by_size)
    wins = [(med(by_size[s].get("zero-copy", [])) or 0) >= (med(by_size[s].get("copy-out", []))
                                                            or float("inf")) for s in sizes]
    for i, s in enumerate(sizes):
        if all(wins[i:]):
            return s
    return None


def proposal(by_size):
    x = crossover(by_size)
    beyond = {s: separated(by_size, s) for s in sorted(by_size)}
    clear = ", ".join("%d B: %s" % (s, w) for s, w in beyond.items() if w)
    if not clear:
        return ("no size separates the modes beyond the run-to-run spread (min–max): no "
                "evidence here to move the default")
    if x is None:
        return "zero-copy's median never stays ahead up to 8 KiB (separated: %s)" % clear
    return "medians suggest %d instead of 512 (separated: %s)" % (x, clear)


def plot_figure3(f3, path):
    ts = [t for t in ("sim", "uring", "dpdk") if t in f3]
    fig, axes = plt.subplots(1, len(ts), figsize=(4.2 * len(ts), 3.6), squeeze=False)
    for ax, t in zip(axes[0], ts):
        sizes = sorted(f3[t])
        for m, style in (("zero-copy", "o-"), ("copy-out", "s--")):
            ys = [med(f3[t][s].get(m, [])) for s in sizes]
            ax.plot(sizes, [(y or 0) / 1e3 for y in ys], style, label=m)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("payload bytes")
        ax.set_ylabel("k messages / s")
        ax.set_title(t)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- Figure 2 ----
ECHO = ("req_per_s", "p50_us", "p99_us", "p999_us", "recv_stalls")


def figure2(rows):
    """{(serializer, size, clients): {"vals": {figure: [value of each ok repetition]}, "bad":
    [status of each failed one]}} in first-seen order."""
    out = {}
    for r in rows:
        e = out.setdefault((r["serializer"], r["size"], r["clients"]),
                           {"vals": {k: [] for k in ECHO}, "bad": []})
        if r["status"] != "ok":
            e["bad"].append(r["status"])
            continue
        for k in ECHO:
            if num(r, k) is not None:
                e["vals"][k].append(num(r, k))
    return out


def plot_figure2(f2, path):
    sizes = sorted({int(size) for _, size, _ in f2})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 3.8), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for ser in dict.fromkeys(s for s, _, _ in f2):
            pts = [(c, e["vals"]) for (s, z, c), e in f2.items() if s == ser and int(z) == size]
            xy = [((med(v["req_per_s"]) or 0) / 1e3, med(v["p99_us"]) or 0) for _, v in pts]
            ax.plot([x for x, _ in xy], [y for _, y in xy], "o-", label=ser)
            for (c, _), p in zip(pts, xy):
                ax.annotate(c, p, fontsize=6)
        ax.set_yscale("log")
        ax.set_xlabel("k requests / s")
        ax.set_ylabel("p99 latency (us)")
        ax.set_title("echo, %d B payload, medians (labels: clients)" % size)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_entries(rows, path):
    ts = list(dict.fromkeys(r["transport"] for r in rows))
    fig, axes = plt.subplots(1, len(ts), figsize=(4.5 * len(ts), 3.6), squeeze=False)
    for ax, t in zip(axes[0], ts):
        for m, style in (("zero-copy", "o-"), ("copy-out", "s--")):
            pts = [r for r in rows if r["transport"] == t and r["mode"] == m]
            ax.plot([int(r["entries"]) for r in pts], [num(r, "rtt_us_p50") or 0 for r in pts],
                    style, label=m + " p50")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("entries of the 1 KiB message")
        ax.set_ylabel("round trip p50 (us)")
        ax.set_title(t)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(d, mode):
    notes = [] if plt else ["(no plots: /usr/bin/python3 has no matplotlib; install "
                            "python3-matplotlib)", ""]
    steps = read_csv(d + "/steps.csv")
    md = ["# Zero-copy serialization experiments (%s mode)" % mode, ""] + notes
    md += ["## Machine and settings", "", "```", text(d + "/machine.txt") or "?", "```", ""]
    md += ["## Steps", ""] + table(["step", "status", "seconds"], [
        [s["step"], s["status"], s["seconds"]] for s in steps]) + [""]

    body, totals = table1(d)
    md += ["## Table 1: per-step cost", "",
           "ns of CPU time per message (Google Benchmark's cpu_time: on a shared machine wall "
           "time also counts the time other programs held the core), median [min–max] over "
           "repetitions; steps are differences of cumulative prefixes within one repetition "
           "(definitions in bench/serialize/README.md). `total real` is the wall-time total. "
           "Paper: 2.2 GHz Xeon Silver 4114.", ""]
    md += table(["serializer", "init", "copy", "encode", "decode", "total", "total real",
                 "paper init / copy / encode / decode = total", "total / paper"], body)
    if "protobuf" in totals and "capnp" in totals:
        md += ["", "Protobuf / Cap'n Proto total: %.2f here, %.2f in the paper." % (
            totals["protobuf"] / totals["capnp"], PAPER["protobuf"][4] / PAPER["capnp"][4])]
    md += [""]

    f3, bad = figure3(read_csv(d + "/throughput.csv"))
    md += ["## Figure 3: copy-out vs zero-copy", "",
           "One dataplane buffer per message, 32 in flight; messages per second at the receiver, "
           "median [min–max] over repetitions. zero-copy: NICMALLOC_COPY_THRESHOLD=0, the buffer "
           "is posted as its own SG entry; copy-out: NICMALLOC_COPY_THRESHOLD=16K, nicmalloc "
           "copies it into a pinned bounce buffer first. sim: the sim NIC with no DMA delay (its "
           "delays are per post, the same in both modes); uring: TCP over loopback, where the "
           "kernel copies the bytes into the receiver's socket in both modes (SEND_ZC only "
           "spares the sender's copy into the socket buffer); dpdk: net_ring0, the receiver is "
           "handed the sender's very mbufs (true zero-copy).", ""]
    rows = []
    for t, by_size in f3.items():
        for s in sorted(by_size):
            zc, co = by_size[s].get("zero-copy", []), by_size[s].get("copy-out", [])
            rz, rc = med(zc), med(co)
            rows.append([t, s, spread([v / 1e3 if v else v for v in zc]),
                         spread([v / 1e3 if v else v for v in co]),
                         fmt(rz / rc if rz and rc else None, "%.2f"),
                         separated(by_size, s) or "within spread"])
    md += table(["transport", "bytes", "zero-copy k msg/s", "copy-out k msg/s", "zc / copy",
                 "faster beyond spread"], rows)
    md += ["", "Crossover (smallest size from which zero-copy's median is at least copy-out's "
           "at every larger size) and what it suggests for NICMALLOC_COPY_THRESHOLD (default "
           "512; a proposal, the default is unchanged). A mode is 'faster beyond spread' at a "
           "size when its slowest repetition beat the other's fastest.", ""]
    md += table(["transport", "crossover (medians)", "suggests"],
                [[t, "%s B" % crossover(b) if crossover(b) else "none ≤ 8 KiB", proposal(b)]
                 for t, b in f3.items()])
    for r in bad:
        md += ["", "FAILED row: %s" % ",".join(r.values())]
    if plt and f3:
        plot_figure3(f3, d + "/figure3.png")
        md += ["", "![copy-out vs zero-copy](figure3.png)"]
    md += [""]

    echo = read_csv(d + "/echo.csv")
    f2 = figure2(echo)
    reps = len({r.get("rep") for r in echo})
    md += ["## Figure 2: echo server", "",
           "io_uring loopback TCP, one nicmalloc endpoint per connection receiving with "
           "nic_endpoint_receive; the server decodes the request where it landed, encodes the "
           "reply with the same payload into dataplane memory and posts it. Clients are "
           "closed-loop threads on plain sockets (one request out each) that check every reply "
           "byte; server and clients share the 2 cores. Latency is the client's, from send to "
           "the whole reply. Receive stalls: times an endpoint had every receive buffer held "
           "(nicmalloc's recv_stalls) and stopped receiving until one was released. Each "
           "figure is the median [min–max] over %d repetitions, the serializers run one after "
           "another in an order that rotates from one repetition to the next." % reps, ""]

    def stalls(v):  # none is a figure here, not a missing one
        return "%.0f [%.0f–%.0f]" % (statistics.median(v), min(v), max(v)) if v else "MISSING"

    md += table(["serializer", "bytes", "clients", "runs", "k req/s", "p50 us", "p99 us",
                 "p99.9 us", "receive stalls", "status"],
                [[s, z, c, len(e["vals"]["req_per_s"]),
                  spread([v / 1e3 for v in e["vals"]["req_per_s"]]), spread(e["vals"]["p50_us"]),
                  spread(e["vals"]["p99_us"]), spread(e["vals"]["p999_us"]),
                  stalls(e["vals"]["recv_stalls"]),
                  "FAILED %d: %s" % (len(e["bad"]), ", ".join(e["bad"])) if e["bad"] else "ok"]
                 for (s, z, c), e in f2.items()])
    if plt and echo:
        plot_figure2(f2, d + "/figure2.png")
        md += ["", "![echo: throughput vs p99](figure2.png)"]
    md += [""]

    ent = read_csv(d + "/entries.csv")
    md += ["## SG entries vs latency", "",
           "1 KiB in N entries (pieces 4 KiB apart in one dataplane block, so never coalesced), "
           "one message at a time: post = nic_sga_init + N adds + post (CPU, ns); round trip = "
           "post to received and completed (us). zero-copy: NICMALLOC_COPY_THRESHOLD=0; "
           "copy-out: every piece copied into one bounce entry. sim: no DMA delay; its cost "
           "model charges translation-cache misses per entry (modeled misses per message), not "
           "time per entry. dpdk net_ring0: a chain of scattered segments is gathered into one "
           "receive buffer at the receiver.", ""]
    md += table(["transport", "mode", "entries", "posted as", "post ns p50", "rtt us p50",
                 "rtt us p99", "rtt us p99.9", "copied B/msg", "modeled misses/msg", "status"],
                [[r["transport"], r["mode"], r["entries"], r["entries_posted"],
                  fmt(num(r, "post_ns_p50"), "%.0f"), fmt(num(r, "rtt_us_p50"), "%.2f"),
                  fmt(num(r, "rtt_us_p99"), "%.2f"), fmt(num(r, "rtt_us_p999"), "%.2f"),
                  r["copied_per_msg"], r["modeled_misses_per_msg"],
                  "ok" if r["status"] == "ok" else "FAILED " + r["status"]] for r in ent])
    if plt and ent:
        plot_entries(ent, d + "/entries.png")
        md += ["", "![SG entries vs round trip](entries.png)"]
    for name, rows in (("Table 1", body), ("Figure 3", f3), ("Figure 2", echo), ("entries", ent)):
        if not rows:
            md += ["", "%s: no results (MISSING)" % name]
    with open(os.path.join(d, "report.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    report(sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    main()
