"""A real Flight SQL client against `adisk serve`: the ADBC Flight SQL driver (adbc-driver-flightsql)
logs in, lists the catalog, runs queries and a prepared statement with a bound parameter, and
every answer is compared with DuckDB on the cluster's own Parquet files. Prints one JSON report.

A result made entirely at the disks (PARTS_SQL) is read with `execute_partitions`: one partition
per disk, each read from its disk's endpoint. A partition read twice, the user's bearer token
presented to a disk, and a cluster job sent to a disk without the cluster's key are refused.

usage: adbc_client.py URI CLUSTER_DIR PASSWORD QUERIES_JSON PARTS_SQL
QUERIES_JSON is a file holding {"name": "SQL", ...}. For a `grpc+tls://` URI, $ADISK_TLS_CA names
the service's CA certificate (PEM).
"""
import json
import math
import os
import sys

import adbc_driver_flightsql.dbapi as flightsql
import duckdb
import pyarrow.flight as flight

sys.path.insert(0, os.path.dirname(__file__))
from duckdb_query import norm, table_files  # noqa: E402


def same(a, b):
    """Rows equal; floats to a relative 1e-9 (sums in another order) or an absolute 1e-6 (a
    decimal AVG has 6 places in DataFusion, DuckDB's is a double)."""
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        if len(ra) != len(rb):
            return False
        for x, y in zip(ra, rb):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or not math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-6):
                    return False
            elif x != y:
                return False
    return True


def tls_ca():
    """The CA certificate in $ADISK_TLS_CA (PEM bytes), or None."""
    path = os.environ.get("ADISK_TLS_CA")
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def connect(uri, user, password):
    """An ADBC connection, trusting $ADISK_TLS_CA for `grpc+tls://`."""
    kwargs = {"username": user, "password": password}
    ca = tls_ca()
    if ca is not None:
        kwargs["adbc.flight.sql.client_option.tls_root_certs"] = ca.decode()
    return flightsql.connect(uri, db_kwargs=kwargs)


def flight_client(uri):
    """A pyarrow Flight client, trusting $ADISK_TLS_CA for `grpc+tls://`."""
    ca = tls_ca()
    return flight.FlightClient(uri, tls_root_certs=ca) if ca is not None else flight.FlightClient(uri)


def rows(table):
    cols = [c.to_pylist() for c in table.columns]
    return [[norm(c[i]) for c in cols] for i in range(table.num_rows)]


def refused(call):
    """The error `call` raises, or "accepted"."""
    try:
        call()
        return "accepted"
    except Exception as e:  # the driver raises its own error types
        return str(e)


def partitions(cur, duck, sql):
    """`execute_partitions`: every partition read from its own location, all rows against DuckDB."""
    parts, _schema = cur.adbc_execute_partitions(sql)
    # The driver's partition is a FlightInfo with one endpoint.
    endpoints = [e for p in parts for e in flight.FlightInfo.deserialize(p).endpoints]
    locations = [[loc.uri.decode() for loc in e.locations] for e in endpoints]
    got = []
    for p in parts:
        cur.adbc_read_partition(p)
        got += rows(cur.fetch_arrow_table())
    want = [[norm(v) for v in r] for r in duck.execute(sql).fetchall()]
    key = lambda r: json.dumps(r, default=str)  # noqa: E731
    def read_again():
        cur.adbc_read_partition(parts[0])
        cur.fetch_arrow_table()
    return {"count": len(parts), "endpoints": len(endpoints), "locations": locations, "rows": len(got),
            "equal": same(sorted(got, key=key), sorted(want, key=key)),
            "read_twice": refused(read_again)}


def disk_refusals(uri, password, disk_locations):
    """The user's bearer token (from the service's handshake) presented to a disk."""
    token = flight_client(uri).authenticate_basic_token("admin", password)
    options = flight.FlightCallOptions(headers=[token])
    disk = flight_client(disk_locations[0])
    return {
        "status_with_user_token": refused(
            lambda: list(disk.do_action(flight.Action("status", b""), options=options))),
        "job_with_user_token": refused(
            lambda: disk.do_get(flight.Ticket(b'{"job_id":"x"}'), options=options).read_all()),
        "job_without_token": refused(
            lambda: disk.do_get(flight.Ticket(b'{"job_id":"x"}')).read_all()),
    }


def main():
    uri, cluster_dir, password, queries_file, parts_sql = sys.argv[1:6]
    with open(queries_file) as f:
        queries = json.load(f)
    duck = duckdb.connect()
    duck.execute("SET threads TO 1")
    for t, files in sorted(table_files(cluster_dir).items()):
        duck.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(files)})")
    report = {}

    # A wrong password is refused with a clear error.
    try:
        connect(uri, "admin", "wrong").close()
        report["wrong_password"] = "accepted"
    except Exception as e:  # the driver raises its own error types
        report["wrong_password"] = str(e)

    conn = connect(uri, "admin", password)
    objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    tables = {}
    for catalog in objects:
        for schema in catalog["catalog_db_schemas"] or []:
            for t in schema["db_schema_tables"] or []:
                tables[t["table_name"]] = [c["column_name"] for c in t["table_columns"] or []]
    report["tables"] = tables
    report["catalogs"] = [c["catalog_name"] for c in objects]

    cur = conn.cursor()
    report["queries"] = {}
    for name, sql in queries.items():
        cur.execute(sql)
        got = rows(cur.fetch_arrow_table())
        want = [[norm(v) for v in r] for r in duck.execute(sql).fetchall()]
        report["queries"][name] = {"rows": len(got), "equal": same(got, want),
                                   "got": got[:3], "want": want[:3]}

    # A prepared statement: the parameter is bound as a value, not spliced into the text.
    prepared = {}
    for bound in [1000, 250000]:
        cur.execute("SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE o_orderkey < $1", parameters=(bound,))
        got = rows(cur.fetch_arrow_table())
        want = [[norm(v) for v in r] for r in duck.execute(
            "SELECT count(*) AS n, sum(o_totalprice) AS s FROM orders WHERE o_orderkey < ?", [bound]).fetchall()]
        prepared[str(bound)] = {"equal": same(got, want), "got": got, "want": want}
    report["prepared"] = prepared

    report["partitions"] = partitions(cur, duck, parts_sql)
    report["disk_refusals"] = disk_refusals(uri, password, report["partitions"]["locations"][0])

    # A result straight into pandas.
    cur.execute("SELECT n_nationkey, n_name FROM nation ORDER BY n_nationkey")
    frame = cur.fetch_df()
    report["pandas"] = {"type": type(frame).__module__ + "." + type(frame).__name__,
                        "shape": list(frame.shape), "first": str(frame.iloc[0]["n_name"])}

    # Errors come back as errors, and the connection stays usable.
    try:
        cur.execute("SELECT * FROM no_such_table")
        cur.fetch_arrow_table()
        report["unknown_table"] = "accepted"
    except Exception as e:
        report["unknown_table"] = str(e)
    cur.execute("SELECT 1 AS one")
    report["after_error"] = rows(cur.fetch_arrow_table())
    cur.close()
    conn.close()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
