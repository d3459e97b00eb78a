"""`?` parameters through the ADBC Flight SQL driver (adbc-driver-flightsql) against `adisk serve`:
prepared statements with one and two `?` of integer and string type, each answer compared with
DuckDB running the same statement with the same values; the parameter schema the server
reports for `?`; a wrong count of bound values and a mix of `?` and `$n` refused. Prints one
JSON report.

usage: adbc_placeholders.py URI CLUSTER_DIR PASSWORD
"""
import json
import os
import sys

import duckdb

sys.path.insert(0, os.path.dirname(__file__))
from adbc_client import connect, rows, same  # noqa: E402
from duckdb_query import norm, table_files  # noqa: E402

ORDERS = "SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE "

# name: (SQL, parameters). DuckDB takes `?` as well: the same text is its oracle.
CASES = {
    "one_integer": (ORDERS + "o_custkey = ?", (370,)),
    "one_string": (ORDERS + "o_orderstatus = ?", ("F",)),
    "two_integer_and_string": (ORDERS + "o_custkey < ? AND o_orderpriority = ?", (500, "1-URGENT")),
    # Swapped values give nothing: the first `?` written is the first value.
    "two_in_order": (ORDERS + "o_orderkey >= ? AND o_orderkey < ?", (100, 2000)),
    # A `?` in a string literal or a quoted identifier is not a parameter.
    "question_mark_in_literal": ("SELECT count(*) AS \"n?\", 'why?' AS q FROM orders WHERE o_orderkey < ?", (1000,)),
}

# name: (SQL, parameters), each refused.
REFUSED = {
    "too_many": (ORDERS + "o_custkey = ?", (370, 371)),
    "too_few": (ORDERS + "o_custkey = ? AND o_orderstatus = ?", (370,)),
    "numbered_too_many": (ORDERS + "o_custkey = $1", (370, 371)),
    "numbered_too_few": (ORDERS + "o_custkey = $1 AND o_orderstatus = $2", (370,)),
    "mixed": (ORDERS + "o_custkey = ? AND o_orderstatus = $2", (370, "F")),
}


def main():
    uri, cluster_dir, password = sys.argv[1:4]
    duck = duckdb.connect()
    duck.execute("SET threads TO 1")
    for t, files in sorted(table_files(cluster_dir).items()):
        duck.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(files)})")
    conn = connect(uri, "admin", password)
    cur = conn.cursor()
    report = {"cases": {}, "refused": {}}
    for name, (sql, params) in CASES.items():
        cur.execute(sql, parameters=params)
        got = rows(cur.fetch_arrow_table())
        want = [[norm(v) for v in r] for r in duck.execute(sql, list(params)).fetchall()]
        report["cases"][name] = {"equal": same(got, want), "got": got, "want": want}
    schema = cur.adbc_prepare(REFUSED["too_few"][0])
    report["parameter_schema"] = [[f.name, str(f.type)] for f in schema]
    for name, (sql, params) in REFUSED.items():
        try:
            cur.execute(sql, parameters=params)
            cur.fetch_arrow_table()
            report["refused"][name] = "accepted"
        except Exception as e:  # the driver raises its own error types
            report["refused"][name] = str(e)
    cur.execute("SELECT 1 AS one")
    report["after_error"] = rows(cur.fetch_arrow_table())
    cur.close()
    conn.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
