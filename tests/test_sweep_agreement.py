#!/usr/bin/env python3
"""scripts/sweep_agreement.py on synthetic sweep files: two runs whose
fastest kernels swap places by 2% (no interval overlap) agree under the
default 3% tie rule (issue 29: "a tie within 3% counts as agreement") and
differ with --tie-pct 0; a swap by 10% differs either way. Standard library
only."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "scripts", "sweep_agreement.py")
SHAPE = "B:1/H:8/KV:8/Nq:512/Nkv:512/d:64/causal:0/threads:1"


def write(path, k1, k2):
    rows = []
    for kernel, center in (("flash.avx512", k1), ("tiled.avx512", k2)):
        for i in range(5):
            rows.append({"name": f"{kernel}/{SHAPE}", "run_type": "iteration",
                         "GFLOPS": center * (1 + 0.001 * i), "disturbed": 0})
    with open(path, "w") as f:
        json.dump({"context": {}, "benchmarks": rows}, f)


def agree_line(a, b, *extra):
    out = subprocess.run([sys.executable, SCRIPT, a, b, *extra], capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("decisions agree")][0]


def main():
    with tempfile.TemporaryDirectory() as d:
        a, b, c = (os.path.join(d, n) for n in ("a.json", "b.json", "c.json"))
        write(a, 100, 98)
        write(b, 98, 100)
        write(c, 90, 100)
        checks = [
            (agree_line(a, b), "1 of 1"),
            (agree_line(a, b, "--tie-pct", "0"), "0 of 1"),
            (agree_line(a, c), "0 of 1"),
        ]
        for got, want in checks:
            if want not in got:
                print(f"FAIL: {got!r}, expected {want}")
                return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
