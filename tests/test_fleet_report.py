#!/usr/bin/python3
"""test_fleet_report.py - scripts/fleet_report.py on synthetic files: the
cross-CPU decision (a clear winner, a tie by overlapping intervals, a shape
only one CPU ran) and the merge of tuning tables of one CPU key (agreement,
a winner beyond the intervals, a tie kept at the default). Standard library
only (the picture is not checked: it needs matplotlib)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "fleet_report.py")


def result(path, key, rows):
    bench = []
    for name, samples in rows.items():
        for i, g in enumerate(samples):
            bench.append({"name": name, "run_type": "iteration", "repetition_index": i,
                          "real_time": 1.0, "time_unit": "ms", "GFLOPS": g})
    with open(path, "w") as f:
        json.dump({"context": {"mha_cpu_key": key, "mha_isa_active": "avx512",
                               "mha_cpu_model": "test"}, "benchmarks": bench}, f)


def table(path, key, classes):
    with open(path, "w") as f:
        json.dump({"fingerprint": {"cpu_key": key}, "classes": classes}, f)


def cls(name, kernel, bq, g, iv, default_kernel="flash.avx512"):
    return {"class": name, "winner": {"kernel": kernel, "block_q": bq, "block_kv": 64, "split": 0,
                                      "gflops": g, "gflops_interval": iv},
            "default": {"kernel": default_kernel, "block_q": 64, "block_kv": 64, "split": 0,
                        "gflops": g}}


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"fleet_report {args[0]} failed:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        s = "/B:1/H:8/KV:8/Nq:512/Nkv:512/d:64/causal:0/threads:1"
        t = "/B:1/H:32/KV:32/Nq:1/Nkv:4096/d:128/causal:0/threads:1"
        u = "/B:1/H:8/KV:8/Nq:4096/Nkv:4096/d:64/causal:0/threads:1"
        result(os.path.join(d, "a.json"), "cpu-a", {
            "flash.avx512" + s: [100, 101, 102, 99, 100, 101, 100],
            "tiled.avx512" + s: [90, 91, 89, 90, 92, 90, 91],
            "decode.avx512" + t: [20, 21, 19, 20, 22, 20, 21],
            "decode.avx2" + t: [20.5, 19, 21, 20, 20, 22, 19.5],
            "auto" + s: [500] * 7,  # auto rows never decide
            "flash.avx512" + u: [200] * 3})
        result(os.path.join(d, "b.json"), "cpu-b", {
            "flash.avx512" + s: [80, 81, 79, 80, 82, 80, 81],
            "tiled.avx512" + s: [95, 96, 94, 95, 97, 95, 96],
            "decode.avx512" + t: [30, 31, 29, 30, 32, 30, 31],
            "decode.avx2" + t: [10, 11, 9, 10, 12, 10, 11]})
        run("report", os.path.join(d, "a.json"), os.path.join(d, "b.json"), "-o", d,
            "--name", "r")
        md = open(os.path.join(d, "r.md")).read()
        line = lambda shape: next(l for l in md.splitlines() if f"`{shape[1:]}`" in l)
        check("| flash.avx512 100 | tiled.avx512 95 |" in line(s), "prefill row: " + line(s))
        check("decode.avx2" in line(t).split("|")[2] and "=" in line(t).split("|")[2],
              "decode tie on cpu-a: " + line(t))
        check(line(t).split("|")[3].strip() == "decode.avx512 30", "decode on cpu-b: " + line(t))
        check(line(u).split("|")[3].strip() == "-", "shape only cpu-a ran: " + line(u))
        check("500" not in md, "auto rows must not decide")

        table(os.path.join(d, "t1.json"), "cpu-a", [
            cls("agree", "flash.avx512", 64, 100, [98, 102]),
            cls("clear", "flash.avx512", 128, 120, [118, 122]),
            cls("tie", "tiled.avx512", 32, 100, [97, 103])])
        table(os.path.join(d, "t2.json"), "cpu-a", [
            cls("agree", "flash.avx512", 64, 104, [102, 106]),
            cls("clear", "flash.avx512", 64, 100, [98, 102]),
            cls("tie", "flash.avx512", 96, 101, [99, 104])])
        run("tuning", os.path.join(d, "t1.json"), os.path.join(d, "t2.json"),
            "--out-dir", os.path.join(d, "tuning"))
        merged = json.load(open(os.path.join(d, "tuning", "cpu-a.json")))
        by = {c["class"]: c for c in merged["classes"]}
        check(by["agree"]["winner"]["gflops"] == 102 and by["agree"]["hosts"] == 2,
              "agreeing hosts: median gflops")
        check(by["clear"]["winner"]["block_q"] == 128 and not by["clear"].get("tie"),
              "a winner beyond the intervals")
        check(by["tie"].get("tie") and by["tie"]["winner"]["kernel"] == "flash.avx512"
              and by["tie"]["winner"]["block_q"] == 64, "overlapping: the default stays")
    for f in failures:
        print("FAIL:", f)
    print("fleet_report: %d checks failed" % len(failures) if failures else "fleet_report: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
