"""The benchmark reports' arithmetic on synthetic results (bench/report.py, suite_report.py,
suite_instructions_report.py): what a failed run, a missing allocator or a spread does to the
tables and to the targets' verdicts. Run by ctest bench_reports: python3 test_reports.py ROOT."""
import csv
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import report  # noqa: E402


def write_csv(path, head, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        w.writerows(rows)


def run_script(name, *args):
    return subprocess.run([sys.executable, os.path.join(BENCH, name), *args], check=True,
                          capture_output=True, text=True).stdout


class TempDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()


SUITE_HEAD = ["rep", "program", "allocator", "seconds", "cpu_seconds", "max_rss_kib", "status",
              "live_peak_kib", "pinned_peak_kib"]


def suite_rows(times):
    """times {program: {allocator: (seconds, status)}}: one run each, RSS and CPU alike."""
    return [[1, p, a, t, t, int(1000 * t), st, "-", "-"] for p, d in times.items()
            for a, (t, st) in d.items()]


class SuiteGeomeans(TempDir):
    # c's dataplane run failed at 9x mimalloc's time; glibc is 4x on c alone.
    TIMES = {p: {"glibc": (4.0 if p == "c" else 1.0, "ok"), "mimalloc": (1.0, "ok"),
                 "nicmalloc": (1.0, "ok"),
                 "nicmalloc-dp4k": (9.0, "FAILED") if p == "c" else (1.0, "ok")}
             for p in "abc"}

    def report(self, times):
        path = os.path.join(self.dir, "suite.csv")
        write_csv(path, SUITE_HEAD, suite_rows(times))
        return run_script("suite_report.py", path, "--skipped", "jemalloc tcmalloc")

    def test_a_failed_program_makes_the_target_incomplete(self):
        md = self.report(self.TIMES)
        self.assertIn("nicmalloc-dp4k geometric mean time / mimalloc: 1.00 over 2 of 3 programs "
                      "(target <= 1.15: incomplete (1 program failed: c (nicmalloc-dp4k)))", md)
        self.assertNotIn("target <= 1.15: met", md)
        self.assertIn("(target: none): none; incomplete (1 program failed: c (nicmalloc-dp4k))",
                      md)

    def test_every_mean_is_over_the_same_programs(self):
        md = self.report(self.TIMES)
        time = md.split("## Time")[1].split("## Peak RSS")[0]
        # glibc's 4x on c is left out with c, as the dataplane's failure is.
        self.assertIn("| **geometric mean** |  | **1.00** | **1.00** | **1.00** | **1.00** |", time)
        self.assertIn("Geometric means over the 2 of 3 programs every allocator has a figure for; "
                      "left out: c (nicmalloc-dp4k).", time)

    def test_no_failure_gives_a_verdict(self):
        times = {p: {a: (1.0, "ok") for a in d} for p, d in self.TIMES.items()}
        times["c"]["nicmalloc-dp4k"] = (2.0, "ok")
        md = self.report(times)
        self.assertIn("time / mimalloc: 1.26 (target <= 1.15: missed)", md)
        self.assertIn("over 1.5x mimalloc's time (target: none): c 2.00x\n", md + "\n")
        self.assertNotIn("incomplete", md)
        self.assertNotIn("Geometric means over the", md)


class InstructionGeomeans(TempDir):
    def test_every_mean_is_over_the_same_programs(self):
        path = os.path.join(self.dir, "instructions.csv")
        rows = []
        for p in "abc":
            rows += [[1, p, "glibc", "single", 4000000 if p == "c" else 1000000, "ok"],
                     [1, p, "mimalloc", "single", 1000000, "ok"],
                     [1, p, "nicmalloc", "single", 1000000, "FAILED" if p == "c" else "ok"]]
        write_csv(path, ["rep", "program", "allocator", "threads", "instructions", "status"], rows)
        md = run_script("suite_instructions_report.py", path)
        self.assertIn("| **geometric mean** |  | **1.00** |  | **1.00** | **1.00** |", md)
        self.assertIn("left out: c (nicmalloc)", md)


def gbench(rows):
    """Google Benchmark JSON 'benchmarks' with median, min and max aggregates of each run."""
    out = []
    for name, ns in rows:
        for agg, v in (("median", ns), ("min", ns * 0.9), ("max", ns * 1.2)):
            out.append({"run_name": name, "aggregate_name": agg, "real_time": v,
                        "time_unit": "ns"})
    return out


class CompareGeomeans(unittest.TestCase):
    def test_a_row_one_allocator_lacks_is_left_out_of_every_mean(self):
        rows = []
        for size in (64, 4096):
            for a, ns in (("glibc", 20), ("mimalloc", 10), ("nic_control", 10),
                          ("nic_dataplane", 10)):
                if not (size == 4096 and a == "nic_dataplane"):
                    rows.append(("BM_pair/%s/%d/threads:1" % (a, size),
                                 ns * (4 if size == 4096 and a == "glibc" else 1)))
        text = "\n".join(report.compare_lines(gbench(rows)))
        self.assertIn("left out: pair/4096/threads:1 (nic_dataplane)", text)
        all_line = [ln for ln in text.splitlines() if ln.startswith("all ")][0]
        self.assertEqual(all_line.split(), ["all", "2.000", "1.000", "1.000"])


class Spread(unittest.TestCase):
    def test_compare_gives_each_median_its_min_max(self):
        rows = [("BM_pair/%s/64/threads:1" % a, 10.0) for a in report.COMPARE]
        bench = gbench(rows) + [{"run_name": "BM_pair/glibc/64/threads:1", "run_type": "iteration",
                                 "real_time": v, "time_unit": "ns"} for v in (9.0, 10.0, 12.0)]
        text = "\n".join(report.compare_lines(bench))
        self.assertIn("10.0 [9.0-12.0]", text)

    def test_peers_give_each_median_its_min_max(self):
        rows = [{"rep": str(i), "workload": "churn", "allocator": a, "seconds": str(t),
                 "max_rss_kib": "2048", "status": "ok"}
                for i, t in enumerate((1.0, 1.5, 3.0)) for a in ("mimalloc", "nicmalloc")]
        text = "\n".join(report.peers_table(rows))
        self.assertIn("min-max s", text)
        self.assertIn("| churn | nicmalloc | ok | 1.500 | 1.000-3.000 | 1.000 |", text)

    def test_servers_give_each_median_its_min_max(self):
        rows = [{"rep": str(i), "server": "redis", "allocator": a, "test": "SET",
                 "ops_per_sec": str(ops), "vmhwm_kib": "4096", "live_peak_kib": "",
                 "pinned_peak_kib": "", "status": "ok"}
                for i, ops in enumerate((900, 1000, 1300)) for a in ("mimalloc", "glibc")]
        text = "\n".join(report.servers_table(rows))
        self.assertIn("min-max ops/s", text)
        self.assertIn("| redis | SET | glibc | 1000 | 900-1300 | 1.000 |", text)


def peer_rows(times):
    """times {allocator: seconds or a status}: one run of workload churn each."""
    return [{"rep": "1", "workload": "churn", "allocator": a, "seconds": str(t),
             "max_rss_kib": "2048", "status": "ok"} if isinstance(t, float) else
            {"rep": "-", "workload": "-", "allocator": a, "seconds": "", "max_rss_kib": "",
             "status": t} for a, t in times.items()]


class MissingAllocators(unittest.TestCase):
    def test_peers_name_an_allocator_not_installed_and_the_peers_of_the_best(self):
        text = "\n".join(report.peers_table(peer_rows(
            {"glibc": 2.0, "mimalloc": 1.0, "jemalloc": "not installed", "tcmalloc": 1.0,
             "nicmalloc": 1.05})))
        self.assertIn("- skipped: jemalloc not installed (no figures)", text)
        self.assertIn("- best peer: the fastest of glibc, mimalloc, tcmalloc (jemalloc not "
                      "installed)", text)
        self.assertNotIn("| churn | jemalloc |", text)
        self.assertIn("| yes / yes |", text)

    def test_a_failed_peer_makes_the_best_peer_goal_incomplete(self):
        rows = peer_rows({"glibc": 2.0, "mimalloc": 1.0, "jemalloc": 1.0, "tcmalloc": 0.5,
                          "nicmalloc": 1.0})
        rows[3]["status"] = "FAILED"  # tcmalloc, the fastest, failed
        text = "\n".join(report.peers_table(rows))
        self.assertIn("| yes / incomplete (tcmalloc failed) |", text)

    def test_servers_name_an_allocator_not_installed(self):
        rows = [{"rep": "1", "server": "redis", "allocator": "glibc", "test": "SET",
                 "ops_per_sec": "1000", "vmhwm_kib": "4096", "live_peak_kib": "",
                 "pinned_peak_kib": "", "status": "ok"},
                {"rep": "-", "server": "redis", "allocator": "mimalloc", "test": "-",
                 "ops_per_sec": "", "vmhwm_kib": "", "live_peak_kib": "", "pinned_peak_kib": "",
                 "status": "not installed"}]
        text = "\n".join(report.servers_table(rows))
        self.assertIn("- skipped: mimalloc not installed (no figures)", text)
        self.assertNotIn("FAILED", text)


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class EchoSweep(TempDir):
    def test_each_point_is_the_median_and_min_max_of_the_repetitions(self):
        ser = load("serialize_report", os.path.join(BENCH, "serialize", "report.py"))
        head = ["rep", "serializer", "size", "clients", "requests", "seconds", "req_per_s",
                "p50_us", "p99_us", "p999_us", "mismatches", "recv_stalls", "status"]
        rows = [[r, s, 1024, 1, 100, 0.1, k * 1000, k, 2 * k, 3 * k, 0, 0, "ok"]
                for r, k in ((1, 30), (2, 10), (3, 20)) for s in ("sg", "capnp")]
        rows.append([3, "capnp", 1024, 2, 0, 0.1, 0, 0, 0, 0, 1, 0, "mismatch"])
        write_csv(os.path.join(self.dir, "echo.csv"), head, rows)
        write_csv(os.path.join(self.dir, "steps.csv"), ["step", "status", "seconds"], [])
        ser.plt = None
        ser.report(self.dir, "quick")
        with open(os.path.join(self.dir, "report.md")) as fh:
            md = fh.read()
        self.assertIn("| sg | 1024 | 1 | 3 | 20.0 [10.0–30.0] | 20.0 [10.0–30.0] | "
                      "40.0 [20.0–60.0] | 60.0 [30.0–90.0] | 0 [0–0] | ok |", md)
        self.assertIn("| capnp | 1024 | 2 | 0 | MISSING | MISSING | MISSING | MISSING | MISSING "
                      "| FAILED 1: mismatch |", md)


FIRST_ALLOC = """15 fresh processes, 64-byte request, pin step 4096 KiB
  control first alloc ms           median      0.000   min      0.000   max      0.001
  dataplane first alloc ms         median      %s   min      0.280   max      9.400
  control first alloc RSS KiB      median      0.000   min      0.000   max      0.000
  dataplane first alloc RSS KiB    median    %s   min    212.000   max   9000.000
  dataplane first alloc VmLck KiB  median   4096.000   min   4096.000   max   4096.000
  dataplane pinned KiB             median     52.000   min     52.000   max     52.000
  dataplane first alloc CPU ms     median      0.283   min      0.274   max      0.395
"""


class FirstAlloc(unittest.TestCase):
    def test_the_target_is_stated_on_the_medians(self):
        lines = report.first_alloc_lines(FIRST_ALLOC % ("0.288", "212.000"))
        self.assertIn("- time, median of the runs: 0.29 ms (max 9.40; CPU 0.28, max 0.40) "
                      "(target <= 5 ms: met)", lines)
        self.assertIn("- resident memory added, median: 212 KiB (max 9000) (target <= one pin "
                      "step, 4096 KiB, + 4 MiB = 8192 KiB: met)", lines)
        lines = report.first_alloc_lines(FIRST_ALLOC % ("5.100", "8200.000"))
        self.assertTrue(lines[0].endswith("(target <= 5 ms: missed)"), lines)
        self.assertTrue(lines[1].endswith("= 8192 KiB: missed)"), lines)

    def test_no_figures_is_missing_not_met(self):
        self.assertEqual(report.first_alloc_lines("the child failed"), [
            "- first dataplane allocation: MISSING (no figures in first_alloc's output)"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
