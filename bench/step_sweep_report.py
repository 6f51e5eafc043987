#!/usr/bin/env python3
"""The table of bench/step_sweep.sh: one row per pin step, from its raw runs.

    step_sweep_report.py RESULTS_DIR STEP...

Writes RESULTS_DIR/step_sweep.md and step_sweep.csv. Exits 1 when a step lacks a figure (the
quick ctest relies on it); never judges a figure."""
import csv
import statistics
import sys


def median_spread(values):
    values = sorted(values)
    return statistics.median(values), values[0], values[-1]


def mr_rows(path):
    """pool -> (misses per 1M entries, step registrations reached, entries per send, pages the
    model took: the arena's page kind, which decides its misses as much as the step does)."""
    rows = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 9 and cells[1] == "arena":
                pages = cells[9] if len(cells) >= 10 else "?"
                rows[cells[0]] = (float(cells[3]), int(cells[6]), float(cells[8]), pages)
    return rows


def main():
    out, steps = sys.argv[1], sys.argv[2:]
    first = {}
    with open(out + "/first_alloc.csv") as f:
        for r in csv.DictReader(f):
            first.setdefault(r["step"], []).append(r)
    frag = {}
    with open(out + "/frag_summary.csv") as f:
        for r in csv.DictReader(f):
            frag[(r["allocator"].removeprefix("step-"), r["pool"])] = r
    pools = sorted({p for _, p in frag}, key=["wildcard", "app", "replicated", "regional"].index)
    mr = {s: mr_rows(f"{out}/mr/{s}.md") for s in steps}
    mr_pools = sorted({p for s in steps for p in mr[s]},
                      key=["wildcard", "app", "replicated", "regional"].index)

    missing = []
    head = ["step", "first alloc ms median (min-max)", "CPU ms median (min-max)", "RSS KiB",
            "VmLck KiB"]
    head += [f"pinned/live {p}" for p in pools] + [f"returned % {p}" for p in pools]
    head += [f"misses/1M {p}" for p in mr_pools] + [f"regions {p}" for p in mr_pools]
    head += ["entries/send (max over pools)", "pages modeled"]
    rows = []
    for s in steps:
        runs = first.get(s, [])
        if not runs:
            missing.append(f"{s}: first allocation")
            continue
        ms = median_spread([float(r["dp_ms"]) for r in runs])
        cpu = median_spread([float(r["dp_cpu_ms"]) for r in runs])
        rss = statistics.median(float(r["dp_rss_kib"]) for r in runs)
        lck = statistics.median(float(r["dp_vmlck_kib"]) for r in runs)
        row = [s, f"{ms[0]:.2f} ({ms[1]:.2f}-{ms[2]:.2f})",
               f"{cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f})", f"{rss:.0f}", f"{lck:.0f}"]
        for key in ("peak_mem_ratio", "returned_pct"):
            for p in pools:
                r = frag.get((s, p))
                if r is None and key == "returned_pct":
                    missing.append(f"{s}: frag {p}")
                row.append(r[key] if r else "")
        for i in (0, 1):
            for p in mr_pools:
                v = mr[s].get(p)
                if v is None and i == 0:
                    missing.append(f"{s}: mr_miss {p}")
                row.append(f"{v[i]:.0f}" if v else "")
        entries = [v[2] for v in mr[s].values()]
        row.append(f"{max(entries):.4f}" if entries else "")
        row.append("/".join(sorted({v[3] for v in mr[s].values()})))
        rows.append(row)

    with open(out + "/step_sweep.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)
    with open(out + "/settings.txt") as f:
        settings = f.read().strip().splitlines()
    md = ["Pin step sweep (bench/step_sweep.sh):", ""] + [f"- {l}" for l in settings] + [""]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    with open(out + "/step_sweep.md", "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    if missing:
        print("step_sweep: missing figures: " + ", ".join(missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
