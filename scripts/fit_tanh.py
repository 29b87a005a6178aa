#!/usr/bin/env python3
"""fit_tanh.py - the rational fits behind the kernels' logit softcap.

tanh(x) ~ x P(x^2) / Q(x^2) on [0, X] (the kernels clamp |x| at X), P and
Q of degree D in x^2, Q(0) = 1, fitted for the least maximum relative
error by iteratively reweighted linear least squares (Lawson's method) on
22,000 points against mpmath's tanh. Prints the coefficients, the error in
exact arithmetic and 1 - tanh X (the error the clamp adds beyond X).

- kernels/ukernels.h's vsoftcap_log2 (fp32 kernels): the defaults, D = 4,
  X = 9 (tanh 9 rounds to 1 in fp32): 2.1e-8;
- kernels/vec_avx512bf16.h's vsoftcap_log2_bf16 (P rounded to bf16 next):
  --deg 3 --clamp 7.2, where the fit's error and the clamp's meet: 1.30e-6
  and 1.1e-6.

A developer's tool: it needs numpy and mpmath (pip), neither is a build or
test dependency; tests/test_vec.c checks the fp32 results.

    python3 -m venv /tmp/fit && /tmp/fit/bin/pip install numpy mpmath
    /tmp/fit/bin/python scripts/fit_tanh.py [--deg D] [--clamp X]
"""
import argparse

import mpmath as mp
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deg", type=int, default=4, help="degree of P and Q in x^2 (default 4)")
    ap.add_argument("--clamp", type=float, default=9.0, help="the clamp X (default 9)")
    args = ap.parse_args()
    DEG_P = DEG_Q = args.deg
    X = args.clamp
    mp.mp.dps = 40
    xs = np.sort(np.concatenate([np.linspace(1e-4, X, 20000), np.geomspace(1e-6, 1, 2000)]))
    f = np.array([float(mp.tanh(mp.mpf(x)) / x) for x in xs])  # tanh(x) / x
    u = xs * xs
    w = np.ones_like(xs)
    # P(u) - f Q(u) = 0 with Q(0) = 1: unknowns p0..p4, q1..q4, relative weights
    a = np.hstack([u[:, None] ** np.arange(DEG_P + 1),
                   -f[:, None] * u[:, None] ** np.arange(1, DEG_Q + 1)])
    for _ in range(60):
        sw = np.sqrt(w) / f
        c, *_ = np.linalg.lstsq(a * sw[:, None], f * sw, rcond=None)
        p, q = c[:DEG_P + 1], np.concatenate([[1.0], c[DEG_P + 1:]])
        err = np.abs(np.polyval(p[::-1], u) / np.polyval(q[::-1], u) / f - 1)
        w = w * (err / err.max()) ** 0.3 + 1e-12
        w /= w.mean()
    print("max relative error %.2e on [0, %g]; beyond it 1 - tanh X = %.2e"
          % (err.max(), X, 1 - float(mp.tanh(X))))
    print("P (u^0 .. u^%d):" % DEG_P, ", ".join("%.17g" % v for v in p))
    print("Q (u^0 .. u^%d):" % DEG_Q, ", ".join("%.17g" % v for v in q))


if __name__ == "__main__":
    main()
