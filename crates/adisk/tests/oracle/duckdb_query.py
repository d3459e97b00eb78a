"""Independent oracle: run SQL with DuckDB over the Parquet partitions of a local ActiveDisk
cluster and print the rows as JSON (a list of lists; decimals as floats, dates as ISO text).

usage: duckdb_query.py CLUSTER_DIR "SQL"
Every table found under CLUSTER_DIR/disk-*/tables/<table>/ is a view of the same name.
"""
import datetime
import decimal
import glob
import json
import os
import sys

import duckdb


def main() -> None:
    cluster_dir, sql = sys.argv[1], sys.argv[2]
    con = duckdb.connect()
    con.execute("SET threads TO 1")
    tables = sorted({os.path.basename(os.path.dirname(p)) for p in glob.glob(f"{cluster_dir}/disk-*/tables/*/*.parquet")})
    for t in tables:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{cluster_dir}/disk-*/tables/{t}/*.parquet')")
    rows = con.execute(sql).fetchall()

    def norm(v):
        if isinstance(v, decimal.Decimal):
            return float(v)
        if isinstance(v, (datetime.date, datetime.datetime)):
            return v.isoformat()
        return v

    print(json.dumps([[norm(v) for v in r] for r in rows]))


if __name__ == "__main__":
    main()
