"""Independent oracle: run SQL with DuckDB over the Parquet partitions of a local ActiveDisk
cluster and print the rows as JSON (a list of lists; decimals as floats, dates as ISO text).

usage: duckdb_query.py CLUSTER_DIR "SQL"
Every table the disks' manifests (CLUSTER_DIR/disk-*/manifest.json) list is a view of the same name.
"""
import datetime
import decimal
import glob
import json
import os
import sys

import duckdb


def table_files(cluster_dir):
    """The Parquet files of every table, as the disks' manifests list them (committed loads only)."""
    files = {}
    for manifest in sorted(glob.glob(f"{cluster_dir}/disk-*/manifest.json")):
        with open(manifest) as f:
            for name, table in json.load(f)["tables"].items():
                files.setdefault(name, []).extend(os.path.join(os.path.dirname(manifest), p["file"]) for p in table["partitions"])
    return files


def norm(v):
    """A cell as JSON: decimals as floats, dates as ISO text."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return v


def main() -> None:
    cluster_dir, sql = sys.argv[1], sys.argv[2]
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
    con.execute("SET threads TO 1")
    for t, files in sorted(table_files(cluster_dir).items()):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(files)})")
    rows = con.execute(sql).fetchall()
    print(json.dumps([[norm(v) for v in r] for r in rows]))


if __name__ == "__main__":
    main()
