#!/usr/bin/env python3
"""tune_agreement.py - do two tuning tables (`mhabench tune` outputs of one
CPU) decide the same? Per class in both: the same winner (kernel and knobs),
a tie declared in both runs, or different. Prints each run's time against its
budget, the classes that differ, and the counts; standard library only.

    /usr/bin/python3 scripts/tune_agreement.py A.json B.json

A class agrees when its winners are equal or both runs declare a tie ("tie":
true: the winner's and the runner-up's 95% median intervals overlap). The
looser count also accepts a class where one run's winner is the other's
runner-up in a tie (the two are the pair that run could not separate)."""
import json
import sys


def choice(c):
    if not c:
        return None
    return (c["kernel"], c.get("block_q", 0), c.get("block_kv", 0), c.get("split", 0))


def show(c):
    return "none" if c is None else f"{c[0]} bq {c[1]} bk {c[2]} split {c[3]}"


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    tables = []
    for path in argv:
        with open(path) as f:
            t = json.load(f)
        if not isinstance(t.get("classes"), list):
            sys.exit(f"tune_agreement: {path}: not a mhabench tuning table")
        tables.append(t)
        print(f"{path}: {len(t['classes'])} classes, {t.get('elapsed_s')} s "
              f"(budget {t.get('budget_s')} s)")
    a, b = ({c["class"]: c for c in t["classes"]} for t in tables)
    common = [n for n in a if n in b]
    same = ties = loose = 0
    for n in common:
        ea, eb = a[n], b[n]
        wa, wb = choice(ea["winner"]), choice(eb["winner"])
        ta, tb = bool(ea.get("tie")), bool(eb.get("tie"))
        if wa == wb:
            same += 1
        elif ta and tb:
            ties += 1
        elif (ta and choice(ea.get("runner_up")) == wb) or (tb and choice(eb.get("runner_up")) == wa):
            loose += 1
            print(f"  {n}: {show(wa)}{' (tie)' if ta else ''} vs {show(wb)}{' (tie)' if tb else ''}"
                  " - a tie in one run")
        else:
            print(f"  {n}: {show(wa)}{' (tie)' if ta else ''} vs {show(wb)}{' (tie)' if tb else ''}")
    n = len(common)
    if not n:
        sys.exit("tune_agreement: no class in both tables")
    agree = same + ties
    print(f"{n} classes in both: {same} same winner, {ties} tie in both, "
          f"{n - agree} differ -> {agree}/{n} = {100 * agree / n:.1f}% agree "
          f"({agree + loose}/{n} = {100 * (agree + loose) / n:.1f}% counting a tie in one run)")
    only = sorted(set(a) ^ set(b))
    if only:
        print(f"in one table only: {', '.join(only)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
