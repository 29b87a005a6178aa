#!/usr/bin/env python3
"""code_sizes.py - the longest C files and functions under a folder (default
harness/), for the layout rule of issue 25: no C file over about 600 lines,
no function over 150. Functions are found by matching braces outside
comments, strings and character literals; a top-level brace whose header
ends in `name(...)` opens a function (an initialiser `= {` does not).

    scripts/code_sizes.py [DIR] [--files N] [--functions N]

Prints the longest of each and the count over the limits; exit 0 always
(the count is the figure, not a gate: data tables may run long)."""
import argparse
import pathlib
import re


def strip(src):
    """src with comments, strings and char literals emptied, newlines kept."""
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", out)


def functions(src):
    """(lines, first line, name) of each top-level function body in src."""
    lines = strip(src).split("\n")
    found, depth, start, name = [], 0, 0, None
    for i, line in enumerate(lines):
        for j, ch in enumerate(line):
            if ch == "{":
                if depth == 0:
                    head = "\n".join(lines[max(0, i - 6):i]) + "\n" + line[:j]
                    m = re.search(r"(\w+)\s*\([^;{}]*\)\s*$", head, flags=re.S)
                    ok = m and not re.search(r"=\s*$", head) and m.group(1) not in (
                        "if", "for", "while", "switch")
                    name, start = (m.group(1) if ok else None), i
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and name:
                    found.append((i - start + 1, start + 1, name))
                    name = None
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", default="harness")
    ap.add_argument("--files", type=int, default=600, help="file limit in lines")
    ap.add_argument("--functions", type=int, default=150, help="function limit in lines")
    a = ap.parse_args()
    paths = sorted(p for p in pathlib.Path(a.dir).rglob("*") if p.suffix in (".c", ".cc"))
    files, funcs = [], []
    for p in paths:
        src = p.read_text()
        files.append((src.count("\n"), str(p)))
        funcs += [(n, f"{p}:{line}", name) for n, line, name in functions(src)]
    files.sort(reverse=True)
    funcs.sort(reverse=True)
    print("longest files:")
    for n, p in files[:8]:
        print(f"  {n:5d} {p}{'  OVER' if n > a.files else ''}")
    print("longest functions:")
    for n, loc, name in funcs[:10]:
        print(f"  {n:5d} {name} ({loc}){'  OVER' if n > a.functions else ''}")
    over = sum(n > a.files for n, _ in files) + sum(n > a.functions for n, _, _ in funcs)
    print(f"over the limits ({a.files}-line files, {a.functions}-line functions): {over}")


if __name__ == "__main__":
    main()
