#!/usr/bin/env python3
"""Over what range of one assumed value does each stated conclusion keep its verdict (issue 38).

`adisk sim sensitivity-conclusions` scales an assumption by 1/F and F and lists the verdicts
that change; this script walks one assumption over a list of factors and prints, per factor,
each selected conclusion's verdict and the measured detail, so the range over which a verdict
holds can be read off. It copies the experiment files to a temporary directory, changes the
one value there (a processing cost is written as `[workload] cost_overrides` and into every
variant's inline `workload = { … }`, which replaces the table; a device key is
rewritten where the files define it) and runs `reproduce PAPER --experiments DIR`. The files
in the source tree are never touched.

    python3 experiments/holding_ranges.py --paper memik \
        --cost hash_group_cycles_per_tuple --default 200 \
        --factors 0.25,0.5,0.75,1,1.5,2,4 --conclusion memik-

    python3 experiments/holding_ranges.py --paper memik \
        --key media_mbps_outer=21.3 --key media_mbps_inner=14.5 \
        --factors 0.5,0.75,1,1.5,2 --conclusion memik-

`--key NAME=DEFAULT` rewrites every line `NAME = DEFAULT` of the paper's files to the scaled
value (integers rounded, at least 1, as `sim sensitivity` does); several `--key`s are scaled
together. The simulator is `$SIM` or target/release/examples/sim under `$CARGO_TARGET_DIR`.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERDICT = re.compile(r"^\[(?P<verdict>[A-Za-z ]+)\] (?P<id>[\w-]+) \([^)]*\): (?P<detail>.*)$")


def simulator() -> Path:
    if "SIM" in os.environ:
        return Path(os.environ["SIM"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", HERE.parent / "target"))
    return target / "release" / "examples" / "sim"


def scaled(default: str, factor: float) -> str:
    if re.fullmatch(r"-?\d+", default):
        return str(max(1, round(int(default) * factor)))
    return repr(float(default) * factor)


def prepare(dir_: Path, paper: str, cost: tuple | None, keys: list, factor: float) -> None:
    for f in sorted((dir_ / paper).glob("*.toml")):
        text = f.read_text()
        for name, default in keys:
            pattern = re.compile(rf"^{re.escape(name)} = {re.escape(default)}$", re.M)
            text, n = pattern.subn(f"{name} = {scaled(default, factor)}", text)
            if n == 0:
                sys.exit(f"{f}: no line `{name} = {default}`")
        if cost is not None:
            name, default = cost
            line = f"cost_overrides = {{ {name} = {float(default) * factor!r} }}"
            text, n = re.subn(r"^\[workload\]$", f"[workload]\n{line}", text, count=1, flags=re.M)
            if n == 0:
                sys.exit(f"{f}: no [workload] table")
            # a variant's `set = { workload = { … } }` replaces the whole table
            text = text.replace("workload = { ", f"workload = {{ {line}, ")
        f.write_text(text)


def verdicts(dir_: Path, paper: str, wanted: str) -> list:
    out = subprocess.run(
        [str(simulator()), "reproduce", paper, "--out", str(dir_ / "out"), "--experiments", str(dir_)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        m = VERDICT.match(line)
        if m and wanted in m["id"] and m["verdict"] != "not evaluated":
            verdict = "holds" if m["verdict"] == "holds" else "does not hold"
            rows.append((m["id"], verdict, m["detail"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", required=True)
    ap.add_argument("--cost", help="processing cost to scale (name in costs.rs)")
    ap.add_argument("--default", help="the cost's default value")
    ap.add_argument("--key", action="append", default=[], help="NAME=DEFAULT of a file key")
    ap.add_argument("--factors", required=True)
    ap.add_argument("--conclusion", default="", help="only conclusions whose id contains this")
    a = ap.parse_args()
    cost = (a.cost, a.default) if a.cost else None
    keys = [tuple(k.split("=", 1)) for k in a.key]
    label = a.cost or ", ".join(k for k, _ in keys)
    print(f"| factor | {label} | conclusion | verdict | detail |")
    print("|---|---|---|---|---|")
    for factor in [float(x) for x in a.factors.split(",")]:
        shown = [scaled(cost[1], factor)] if cost else [scaled(d, factor) for _, d in keys]
        value = ", ".join(f"{float(v):.6g}" for v in shown)
        with tempfile.TemporaryDirectory() as tmp:
            dir_ = Path(tmp)
            shutil.copytree(HERE / a.paper, dir_ / a.paper)
            prepare(dir_, a.paper, cost, keys, factor)
            for cid, verdict, detail in verdicts(dir_, a.paper, a.conclusion):
                print(f"| ×{factor:g} | {value} | `{cid}` | {verdict} | {detail} |", flush=True)


if __name__ == "__main__":
    main()
