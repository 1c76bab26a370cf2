"""Instructions per call of ops_bench rows (dimtorch and hand-written PyTorch), counted by callgrind and split
by where they run: the Python interpreter, dimtorch's C++ core, torch's libraries, libc and the rest.

Wall-clock ratios on tiny shapes say *that* a call costs more; this says *where*: e.g. an op whose extra
instructions are all in the interpreter is paying for its Python definition, one whose extra is in
dimtorch._C for argument parsing and the result Tensor. Counts are exact and repeatable (no timing noise),
so a change to a hot path can be checked on a busy machine too.

    python bench/callgrind_overhead.py --filter '^(merge_dims|slice_time|pool_max)$'

Needs valgrind with its headers (Debian: `apt install valgrind`) and a C compiler: a small library making
callgrind's client requests is built once, so that only the timed calls are counted (not the import of
torch). Each row's calls run in one process under `valgrind --tool=callgrind --instr-atstart=no`
(~20 s per process start, then ~1 s per row).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENT_SOURCE = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
"""
PARTS = ("python", "dimtorch._C", "torch", "libc & system", "other")
SIDES = ("torch", "dimtorch")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--filter", default="^(merge_dims|slice_time|stack|reverse_sequence|pack_padded|"
                                            "scatter_add|cumsum_masked|one_hot|pool_max)$",
                        help="regex searched in the ops_bench row names")
    parser.add_argument("--shapes", default="tiny", help="one ops_bench shape set (default tiny)")
    parser.add_argument("--calls", type=int, default=200, help="counted calls per row and side")
    parser.add_argument("--out", default=None, help="also write the table as JSON here")
    parser.add_argument("--keep", default=None, help="copy the callgrind dumps here (for callgrind_annotate)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build_client(directory: Path) -> Path:
    """The client-request library (compiled into `directory`)."""
    source, lib = directory / "cgreq.c", directory / "libcgreq.so"
    source.write_text(CLIENT_SOURCE)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


def run_child(args) -> None:
    """Under callgrind: warm every row up, then count `calls` calls of each side, one dump per (row, side)."""
    sys.path.insert(0, str(HERE))
    import torch

    from opsbench.cases import make_sides
    from opsbench.frameworks import ReturnnSetup
    from opsbench.rows import ROWS
    from opsbench.shapes import SHAPE_SETS

    torch.set_num_threads(1)
    client = ctypes.CDLL(args.child)
    shapes = SHAPE_SETS[args.shapes]
    sides = make_sides(shapes, ReturnnSetup(None, None, "n/a", False, "left out"))
    regex = re.compile(args.filter, re.IGNORECASE)
    for row in ROWS:
        if not regex.search(row.name):
            continue
        fns = {side: getattr(row, side)(sides.dimtorch if side == "torch" and row.reference == "dimtorch"
                                        else getattr(sides, side))
               for side in SIDES if getattr(row, side) is not None}  # (rows without a PyTorch counterpart: dimtorch only)
        for fn in fns.values():
            for _ in range(20):
                fn()
        for side, fn in fns.items():
            client.cg_zero()
            client.cg_start()
            for _ in range(args.calls):
                fn()
            client.cg_stop()
            client.cg_dump(f"{row.name}|{side}".encode())


def part_of(obj: str) -> str:
    name = obj.rsplit("/", 1)[-1]
    if name.startswith("libpython") or re.fullmatch(r"python3(\.\d+)?", name):
        return "python"
    if "dimtorch" in obj and name.startswith("_C"):
        return "dimtorch._C"
    if name.startswith(("libtorch", "libc10", "libgomp", "libmkl", "libiomp", "libshm")) or "/torch/" in obj:
        return "torch"
    if name.startswith(("libc.", "libm.", "ld-linux", "libstdc++", "libgcc", "libpthread", "libdl")):
        return "libc & system"
    return "other"


def exclusive_by_part(path: Path, names: dict) -> tuple[str, dict]:
    """(the dump's trigger, self instructions per part) of one callgrind output file. `names`: the
    object names by compressed id (defined by the first ob= or cob= line naming them, in this file or
    an earlier dump of the process)."""
    totals = defaultdict(int)
    trigger, obj, after_call = "", "???", False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("desc: Trigger: Client Request: "):
            trigger = line.split(": ", 2)[2].replace("Client Request: ", "")
        elif line.startswith(("ob=", "cob=")):
            m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line)
            if m.group(2) is not None:
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                obj = names.get(m.group(1), "???")
        elif line.startswith("calls="):
            after_call = True  # the next cost line is the callee's inclusive cost: not this object's own
        elif line and (line[0].isdigit() or line[0] in "+-*"):
            fields = line.split()
            if after_call:
                after_call = False
            elif len(fields) > 1:
                totals[part_of(obj)] += int(fields[1])
    return trigger, dict(totals)


def run_parent(args) -> int:
    with tempfile.TemporaryDirectory(prefix="callgrind_overhead_") as tmp:
        tmp = Path(tmp)
        client = build_client(tmp)
        out = tmp / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
               sys.executable, __file__, "--child", str(client), "--filter", args.filter, "--shapes", args.shapes,
               "--calls", str(args.calls)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-4000:], file=sys.stderr)
            return proc.returncode
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
            for dump in tmp.glob("callgrind.out*"):
                (Path(args.keep) / dump.name).write_bytes(dump.read_bytes())
        per, names = defaultdict(dict), {}
        for dump in sorted(tmp.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:])):
            trigger, parts = exclusive_by_part(dump, names)
            if "|" in trigger:
                row, side = trigger.split("|")
                per[row][side] = {k: v / args.calls for k, v in parts.items()}
    print(table(per, args))
    if args.out:
        Path(args.out).write_text(json.dumps(per, indent=1))
    return 0


def table(per: dict, args) -> str:
    lines = [f"Instructions per call ({args.shapes} shapes, {args.calls} counted calls; callgrind Ir). "
             "extra = dimtorch - torch, split by where the instructions run.", "",
             "| row | torch | dimtorch | ratio | extra | " + " | ".join(f"extra in {p}" for p in PARTS) + " |",
             "|---|---:|---:|---:|---:|" + "---:|" * len(PARTS)]
    for row, sides in per.items():
        t, d = sides.get("torch", {}), sides.get("dimtorch", {})
        tt, dd = sum(t.values()), sum(d.values())
        extra = [d.get(p, 0) - t.get(p, 0) for p in PARTS]
        ratio = f"{dd / tt:.2f}" if tt else "n/a"
        lines.append(f"| {row} | {tt:,.0f} | {dd:,.0f} | {ratio} | {dd - tt:+,.0f} | "
                     + " | ".join(f"{e:+,.0f}" for e in extra) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        run_child(args)
        return 0
    return run_parent(args)


if __name__ == "__main__":
    sys.exit(main())
