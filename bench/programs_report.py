#!/usr/bin/python3
"""The table of bench/programs.sh: per program and mode, median wall time and peak RSS over the
repetitions (min-max beside them), their ratios to the run without nicmalloc, and whether every
output was the same.  Usage: programs_report.py programs.csv"""
import csv
import statistics
import sys

MODES = ["none", "nicmalloc", "dp1k"]


def fmt(values, unit):
    if not values:
        return "MISSING"
    med = statistics.median(values)
    if unit == "s":
        return "%.2f (%.2f-%.2f)" % (med, min(values), max(values))
    return "%.0f (%.0f-%.0f)" % (med / 1024, min(values) / 1024, max(values) / 1024)


def ratio(values, base):
    if not values or not base or statistics.median(base) <= 0:
        return "MISSING"
    return "%.2f" % (statistics.median(values) / statistics.median(base))


def main(path):
    rows = list(csv.DictReader(open(path)))
    programs = list(dict.fromkeys(r["program"] for r in rows))
    reps = len(set(r["rep"] for r in rows))
    print("Wall time and CPU time (user + system, every process of the session) in s, peak RSS "
          "(the session's largest process) in MiB: median (min-max) of %d repetitions, modes "
          "interleaved; ratios are medians over the run without nicmalloc." % reps)
    print()
    print("| program | none s | nicmalloc s | dp1k s | nicmalloc / none | dp1k / none "
          "| CPU none s | CPU nicmalloc / none | CPU dp1k / none | none MiB | nicmalloc MiB | dp1k MiB | RSS nicmalloc / none | RSS dp1k / none "
          "| outputs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    for p in programs:
        sec, cpu, rss, bad = {}, {}, {}, []
        for m in MODES:
            ok = [r for r in rows if r["program"] == p and r["mode"] == m and r["status"] == "ok"]
            sec[m] = [float(r["seconds"]) for r in ok]
            cpu[m] = [float(r["cpu_seconds"]) for r in ok]
            rss[m] = [float(r["max_rss_kib"]) for r in ok]
            bad += ["%s %s rep %s" % (m, r["status"], r["rep"]) for r in rows
                    if r["program"] == p and r["mode"] == m and r["status"] != "ok"]
        failed |= bool(bad)
        outputs = "same" if not bad else "; ".join(bad)
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            p, fmt(sec["none"], "s"), fmt(sec["nicmalloc"], "s"), fmt(sec["dp1k"], "s"),
            ratio(sec["nicmalloc"], sec["none"]), ratio(sec["dp1k"], sec["none"]),
            fmt(cpu["none"], "s"), ratio(cpu["nicmalloc"], cpu["none"]),
            ratio(cpu["dp1k"], cpu["none"]),
            fmt(rss["none"], "k"), fmt(rss["nicmalloc"], "k"), fmt(rss["dp1k"], "k"),
            ratio(rss["nicmalloc"], rss["none"]), ratio(rss["dp1k"], rss["none"]), outputs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
