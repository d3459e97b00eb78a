"""Independent oracle of `adisk app fft`: numpy's fft2 of the input matrix, compared with the
output the disks wrote, both read from the cluster's Parquet partitions (DuckDB reads them).

usage: numpy_fft2.py CLUSTER_DIR INPUT_TABLE OUTPUT_TABLE
Both tables hold one element per row: row, col (integers), re, im (doubles); the input is x,
the output X = fft2(x). Prints JSON: rows, cols, elements of each, max relative error
max|X - fft2(x)| / max|fft2(x)|, and the disk holding each output column block.
"""
import json
import os
import sys

import duckdb
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from duckdb_query import table_files  # noqa: E402


def matrix(con, files):
    """The elements of `files` as a dense complex matrix (every cell exactly once)."""
    cols = con.execute(
        f"SELECT row, col, re, im FROM read_parquet({json.dumps(files)})"
    ).fetchnumpy()
    rows, colsn = int(cols["row"].max()) + 1, int(cols["col"].max()) + 1
    if len(cols["row"]) != rows * colsn:
        raise SystemExit(f"{len(cols['row'])} elements for a {rows} x {colsn} matrix")
    m = np.zeros((rows, colsn), dtype=np.complex128)
    seen = np.zeros((rows, colsn), dtype=bool)
    r, c = cols["row"].astype(np.int64), cols["col"].astype(np.int64)
    m[r, c] = cols["re"] + 1j * cols["im"]
    seen[r, c] = True
    if not seen.all():
        raise SystemExit("some cells are missing or repeated")
    return m


def column_blocks(con, cluster_dir, table):
    """Per disk, the smallest and largest output column it holds."""
    blocks = {}
    for disk in sorted(os.listdir(cluster_dir)):
        manifest = os.path.join(cluster_dir, disk, "manifest.json")
        if not disk.startswith("disk-") or not os.path.exists(manifest):
            continue
        with open(manifest) as f:
            t = json.load(f)["tables"].get(table)
        if not t or not t["partitions"]:
            continue
        files = [os.path.join(cluster_dir, disk, p["file"]) for p in t["partitions"]]
        lo, hi = con.execute(f"SELECT min(col), max(col) FROM read_parquet({json.dumps(files)})").fetchone()
        blocks[disk] = [int(lo), int(hi)]
    return blocks


def main() -> None:
    cluster_dir, input_table, output_table = sys.argv[1], sys.argv[2], sys.argv[3]
    files = table_files(cluster_dir)
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    x = matrix(con, files[input_table])
    got = matrix(con, files[output_table])
    want = np.fft.fft2(x)
    if got.shape != want.shape:
        raise SystemExit(f"output shape {got.shape}, expected {want.shape}")
    error = float(np.abs(got - want).max() / np.abs(want).max())
    print(json.dumps({
        "rows": x.shape[0],
        "cols": x.shape[1],
        "max_relative_error": error,
        "numpy": np.__version__,
        "column_blocks": column_blocks(con, cluster_dir, output_table),
    }))


if __name__ == "__main__":
    main()
