"""Compiles RETURNN's native ops that the parity tests' RETURNN side runs (CTC's FSA and Viterbi for
ctc_best_path, EditDistanceOp for edit_distance), as set-up: RETURNN compiles each with the C++ compiler on
first use (~1 min each) and caches it per environment (its cache key holds the path of this .venv's torch), so
a fresh clone would otherwise pay them inside three tests. Two at a time (the set-up's 2 cores); an op in
RETURNN's cache loads in a moment. Does nothing without RETURNN (the tests then skip its side).

Usage: python scripts/build_returnn_native_ops.py  (scripts/test.sh runs it after setup_env.sh)
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from concurrent.futures import ProcessPoolExecutor

OPS = ("GetCtcFsaFastBwOp", "FastViterbiOp", "EditDistanceOp")


def build(name: str) -> float:
    from returnn import native_op
    from returnn.torch.util.native_op import OpDescription, OpMaker

    start = time.perf_counter()
    OpMaker(OpDescription.from_gen_base(getattr(native_op, name))).make_op()
    return time.perf_counter() - start


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    if importlib.util.find_spec("returnn") is None:
        print("build_returnn_native_ops: no returnn installed; nothing to build")
        return 0
    with ProcessPoolExecutor(max_workers=2) as pool:
        for name, seconds in zip(OPS, pool.map(build, OPS)):
            print(f"build_returnn_native_ops: {name} ready ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
