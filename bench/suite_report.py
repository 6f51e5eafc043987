"""Report of a bench/suite.sh run: suite.md from suite.csv, written to stdout.

    /usr/bin/python3 bench/suite_report.py suite.csv [--mode M --scale S --reps N
        --load-before UPTIME --load-after UPTIME --skipped "ALLOCATORS"]

Medians of the repetitions, their spread, ratios to mimalloc and geometric means; it judges no
timing, it states the issue's targets (#20) and which programs miss them. A figure that cannot
be computed (every run of that program under that allocator failed) is written MISSING. A
geometric mean is taken over the programs every allocator compared has a figure for, and a
target whose programs lack one (a run failed) reads "incomplete", never met or missed.
"""
import argparse
import os
import statistics
import sys

# report.py sits beside this script: importing it must not leave bytecode in the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import (complete_keys, geomean, lacking_text, read_csv, run_notes, table,  # noqa: E402
                    verdict)

PEERS = ["glibc", "mimalloc", "jemalloc", "tcmalloc"]
ORDER = PEERS + ["nicmalloc", "nicmalloc-dp4k"]
DP, CTL = "nicmalloc-dp4k", "nicmalloc"
MIN_LIVE_MIB = 4  # one default pin step: pinned / live of programs below it is one step's ratio


def fmt(v, f="%.3f"):
    return "MISSING" if v is None or v != v or v == 0 else f % v


def ratio(a, b):
    return a / b if a and b else None


# GNU time reports CPU seconds in hundredths: a short run under a fast allocator can read 0.00,
# which is a measurement (under 10 ms), not a missing one. Shown as such, and left out of the
# CPU ratios and their geometric means.
CPU_RESOLUTION = 0.01


def fmt_cpu(v, f="%.2f"):
    return "<%.2f" % CPU_RESOLUTION if v == 0 else fmt(v, f)


def summarise(rows):
    """{program: {allocator: stats}}: median, min, max seconds, median RSS MiB, runs, failures."""
    runs = {}
    for r in rows:
        runs.setdefault(r["program"], {}).setdefault(r["allocator"], []).append(r)
    out = {}
    for p, d in runs.items():
        out[p] = {}
        for a, rs in d.items():
            ok = [r for r in rs if r["status"] == "ok"]
            secs = [float(r["seconds"]) for r in ok]
            rss = [float(r["max_rss_kib"]) / 1024 for r in ok if r["max_rss_kib"] not in ("", "-")]
            cpu = [float(r["cpu_seconds"]) for r in ok if r.get("cpu_seconds") not in (None, "")]
            live = [float(r["live_peak_kib"]) / 1024 for r in ok
                    if r.get("live_peak_kib") not in (None, "", "-")]
            pinned = [float(r["pinned_peak_kib"]) / 1024 for r in ok
                      if r.get("pinned_peak_kib") not in (None, "", "-")]
            out[p][a] = {"t": statistics.median(secs) if secs else None,
                         "tmin": min(secs) if secs else None, "tmax": max(secs) if secs else None,
                         "rss": statistics.median(rss) if rss else None,
                         "cpu": statistics.median(cpu) if cpu else None,
                         "live": statistics.median(live) if live else None,
                         "pinned": statistics.median(pinned) if pinned else None, "ok": len(ok),
                         "bad": len(rs) - len(ok)}
    return out


def judged(s, progs, key, names):
    """{program: {allocator: figure}} for the allocators a target compares, None where a run of
    the program under one of them failed or has no figure: a target is judged on programs whose
    every run succeeded, and is incomplete otherwise (report.verdict)."""
    return {p: {a: (s[p][a][key] if a in s[p] and not s[p][a]["bad"] else None) for a in names}
            for p in progs}


def incomplete(left):
    """What a list-valued target line adds when programs lack a figure."""
    return "; " + verdict(None, None, left) if left else ""


def best_peer(d):
    ts = [(d[a]["t"], a) for a in PEERS if a in d and d[a]["t"]]
    return min(ts) if ts else (None, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    for opt in ("mode", "scale", "reps", "load-before", "load-after", "skipped"):
        ap.add_argument("--" + opt, default="")
    args = ap.parse_args()
    rows = read_csv(args.csv) or []
    s = summarise(rows)
    seen = list(dict.fromkeys(r["allocator"] for r in rows))
    allocs = [a for a in ORDER if a in seen] + [a for a in seen if a not in ORDER]
    progs = list(s)
    md = ["# Allocator suite (bench/suite.sh %s)" % args.mode, "",
          "Programs written for this repository after the published descriptions of the classic "
          "allocator benchmarks (bench/suite/*.c); not the original programs. Wall seconds and "
          "peak RSS from GNU time, medians of %s repetition(s) at scale %s, allocators "
          "interleaved within each repetition. Spread: (max - min) / median of the repetitions."
          % (args.reps, args.scale), "",
          "- load before: `%s`" % args.load_before.strip(),
          "- load after: `%s`" % args.load_after.strip(),
          "- programs: %d (%s)" % (len(progs), ", ".join(progs)),
          "- allocators: %s" % ", ".join(allocs)]
    md += run_notes(args.skipped, rows)

    # Wide tables: one row per program, one column per allocator; the geometric means over the
    # programs every allocator has a figure for, so that each is taken over the same programs.
    def wide(key, title, unit_fmt, below_resolution=False):
        body, ratios = [], {}
        for p in progs:
            d = s[p]
            mi = d.get("mimalloc", {}).get(key)
            row = [p, fmt_cpu(mi, unit_fmt) if below_resolution else fmt(mi, unit_fmt)]
            ratios[p] = {}
            for a in allocs:
                v = d.get(a, {}).get(key)
                if below_resolution and 0 in (v, mi):
                    row.append("under %.2f s" % CPU_RESOLUTION)
                    continue
                ratios[p][a] = ratio(v, mi)
                row.append(fmt(ratios[p][a], "%.2f"))
            body.append(row)
        keep, left = complete_keys(ratios, allocs)
        body.append(["**geometric mean**", ""] + [
            "**%s**" % fmt(geomean([ratios[p][a] for p in keep]), "%.2f") for a in allocs])
        note = ["", "Geometric means over the %d of %d programs every allocator has a figure for; "
                "left out: %s." % (len(keep), len(progs), lacking_text(left))] if left else []
        return ["", "## " + title, ""] + table(["program", "mimalloc median"] + allocs,
                                               body) + note

    t_md = wide("t", "Time: median wall seconds of mimalloc, ratio of each allocator to it",
                "%.3f s")
    r_md = wide("rss", "Peak RSS: median MiB of mimalloc, ratio of each allocator to it",
                "%.1f MiB")
    c_md = wide("cpu", "CPU time (user + system): median seconds of mimalloc, ratio of each "
                   "allocator to it (less sensitive to other load than wall time; the targets "
                   "use wall time; a run under GNU time's 0.01 s is left out of the ratios)",
                "%.2f s", below_resolution=True)
    md += t_md + r_md + c_md

    # Pinned dataplane memory is what is in memory and locked: the touched pages of a step no
    # backend registered yet (NICMALLOC_DP_POPULATE=register), the whole step once one did or
    # under =commit (the NIC may DMA it at any time).
    pl_cols = []
    if DP in allocs:
        body = []
        for p in progs:
            x, mi = s[p].get(DP, {}), s[p].get("mimalloc", {})
            pl = ratio(x.get("pinned"), x.get("live")) if x.get("live") else None
            if pl and x["live"] >= MIN_LIVE_MIB:
                pl_cols.append(pl)
            body.append([p, fmt(x.get("rss"), "%.1f"), fmt(ratio(x.get("rss"), mi.get("rss")),
                                                            "%.2f"),
                         fmt(x.get("live"), "%.3f"), fmt(x.get("pinned"), "%.1f"),
                         fmt(pl, "%.2f") if x.get("live")
                         else "no live sample" if x.get("pinned") else "no dataplane"])
        body.append(["**geometric mean** (peak live >= %g MiB)" % MIN_LIVE_MIB, "", "", "", "",
                     "**%s**" % fmt(geomean(pl_cols), "%.2f")])
        md += ["", "## Dataplane pinned / live (%s)" % DP, "",
               "Pinned dataplane memory is what is in memory and locked: the pages a program "
               "touched in a step no backend registered yet (NICMALLOC_DP_POPULATE=register, the "
               "default; these programs register nothing), the whole step once it is registered "
               "or under NICMALLOC_DP_POPULATE=commit (the NIC may DMA it at any time); RSS counts "
               "no hugetlb page, which steps get while the machine's pool has some. Both "
               "peaks from the stats at exit (NICMALLOC_STATS=json), medians of the repetitions; "
               "the live peak is sampled by the reaper (every 10 ms to 1 s), so in a short "
               "program it is a lower bound and the ratio an upper bound. A program with less "
               "live dataplane memory than one pin step (4 MiB by default) has mimalloc's "
               "headers as much as its blocks, so its ratio says little: the geometric mean "
               "leaves it out.", ""] + table(
            ["program", "peak RSS MiB", "RSS / mimalloc", "peak live MiB", "peak pinned MiB",
             "pinned / live"], body)

    # Targets of the issue.
    md += ["", "## Targets (#20)", ""]
    def to_mimalloc(key, a):
        """Geometric mean of a's ratios to mimalloc over the programs both ran without a
        failure, those programs' ratios, and the programs left out."""
        f = judged(s, progs, key, [a, "mimalloc"])
        keep, left = complete_keys(f, [a, "mimalloc"])
        r = {p: f[p][a] / f[p]["mimalloc"] for p in keep}
        return geomean(list(r.values())), r, left

    def over(r, line):
        return ", ".join("%s %.2fx" % (p, x) for p, x in r.items() if x > line) or "none"

    def over_n(left):
        return " over %d of %d programs" % (len(progs) - len(left), len(progs)) if left else ""

    if DP in allocs:
        gt, rt, lt = to_mimalloc("t", DP)
        gr, rr, lr = to_mimalloc("rss", DP)
        md += ["- %s geometric mean time / mimalloc: %s%s (target <= 1.15: %s)" % (
                   DP, fmt(gt, "%.2f"), over_n(lt), verdict(gt, lambda g: g <= 1.15, lt)),
               "- %s geometric mean peak RSS / mimalloc: %s%s (target <= 1.5: %s)" % (
                   DP, fmt(gr, "%.2f"), over_n(lr), verdict(gr, lambda g: g <= 1.5, lr)),
               "- %s programs over 1.5x mimalloc's time (target: none): %s%s" % (
                   DP, over(rt, 1.5), incomplete(lt)),
               "- %s programs over 1.5x mimalloc's peak RSS: %s%s" % (DP, over(rr, 1.5),
                                                                      incomplete(lr)),
               "- %s geometric mean peak pinned / peak live (programs with a peak live of at "
               "least %g MiB): %s" % (DP, MIN_LIVE_MIB, fmt(geomean(pl_cols), "%.2f"))]
    if CTL in allocs:
        gt, _, lt = to_mimalloc("t", CTL)
        # The best peer is the best of those installed (the others are named, not passed over).
        peers = [a for a in PEERS if a in allocs]
        absent = [a for a in PEERS if a not in allocs]
        f = judged(s, progs, "t", [CTL] + peers)
        keep, left = complete_keys(f, [CTL] + peers)
        over_best = []
        for p in keep:
            bt, ba = min((f[p][a], a) for a in peers)
            if f[p][CTL] / bt > 1.10:
                over_best.append("%s %.2fx %s" % (p, f[p][CTL] / bt, ba))
        # The control heap is a wrapper over mimalloc: where mimalloc itself is over the line,
        # no wrapper over it can be under it. Said beside the verdict so that it can be read so.
        mi_over = []
        for p in progs:
            others = {a: x for a, x in s[p].items() if a in PEERS and a != "mimalloc"}
            bt, ba = best_peer(others)
            r = ratio(s[p].get("mimalloc", {}).get("t"), bt)
            if r and r > 1.10:
                mi_over.append("%s %.2fx %s" % (p, r, ba))
        md += ["- %s geometric mean time / mimalloc: %s%s (target <= 1.00: %s)" % (
                   CTL, fmt(gt, "%.2f"), over_n(lt), verdict(gt, lambda g: g <= 1.00, lt)),
               "- %s programs over 1.10x the best of %s%s (target: none): %s%s" % (
                   CTL, ", ".join(peers) or "no peer",
                   " (not installed: %s)" % ", ".join(absent) if absent else "",
                   ", ".join(over_best) or "none", incomplete(left)),
               "- for reading the line above: mimalloc itself over 1.10x the best of glibc, "
               "jemalloc, tcmalloc: %s" % (", ".join(mi_over) or "none")]

    # Every figure per program and allocator.
    body = []
    for p in progs:
        d = s[p]
        mi = d.get("mimalloc", {})
        bt, _ = best_peer(d)
        for a in allocs:
            x = d.get(a)
            if x is None:
                body.append([p, a, "MISSING"] + [""] * 8)
                continue
            spread = (x["tmax"] - x["tmin"]) / x["t"] if x["t"] else None
            body.append([p, a, "%d ok" % x["ok"] + (", FAILED %d" % x["bad"] if x["bad"] else ""),
                         fmt(x["t"]), "%s-%s" % (fmt(x["tmin"]), fmt(x["tmax"])),
                         "%.1f%%" % (100 * spread) if spread is not None else "MISSING",
                         fmt(ratio(x["t"], mi.get("t")), "%.2f"), fmt(ratio(x["t"], bt), "%.2f"),
                         fmt(x["rss"], "%.1f"), fmt(ratio(x["rss"], mi.get("rss")), "%.2f"),
                         fmt_cpu(x["cpu"])])
    md += ["", "## Every program and allocator", ""] + table(
        ["program", "allocator", "runs", "median s", "min-max s", "spread", "time / mimalloc",
         "time / best peer", "median peak RSS MiB", "RSS / mimalloc", "median CPU s"], body)
    print("\n".join(md))


if __name__ == "__main__":
    main()
