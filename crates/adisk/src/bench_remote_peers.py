# The Python engines of `adisk bench remote`, one per child process:
#
#   python3 -c "$(cat bench_remote_peers.py)" adbc URI CA_FILE|- USER PASSWORD_FILE|-
#       ActiveDisk through its Flight SQL service, with the ADBC Flight SQL driver
#   python3 -c "$(cat bench_remote_peers.py)" duckdb THREADS TABLES_JSON
#       DuckDB with httpfs over the files TABLES_JSON names (table -> list of http:// URLs),
#       its external file cache off, so that every run reads over the network again; or
#       over local paths (no httpfs then)
#
# A small server, so that the benchmark can interleave the engines' runs query by query: it
# reads one SQL text per line (JSON-encoded) from stdin, runs it once and answers with one
# JSON line: {"secs": wall time, "rows": N, "sums": [per column]} (the result fetched to
# the client inside the timed part; the fingerprint computed after it), or {"error": "..."}.
# The fingerprint, compared across engines by the benchmark: per column the sum of a number
# column (as float), of a string column's lengths, of a date column's days; else null.
import glob, json, os, sys, time, warnings

warnings.filterwarnings("ignore")  # ADBC's autocommit notice; DuckDB's deprecations

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError as e:
    sys.exit(f"adisk bench remote needs pyarrow (pip install pyarrow; ./x setup installs it): {e}")


def fingerprint(table):
    sums = []
    for col in table.columns:
        t = col.type
        try:
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
                s = pc.sum(col.cast(pa.float64())).as_py()
            elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
                s = pc.sum(pc.utf8_length(col.cast(pa.large_string()))).as_py()
            elif pa.types.is_date32(t):
                s = pc.sum(col.cast(pa.int32())).as_py()
            else:
                s = None
        except Exception:
            s = None
        sums.append(None if s is None else float(s))
    return {"rows": table.num_rows, "sums": sums}


def adbc_engine(uri, ca_file, user, password_file):
    try:
        from adbc_driver_flightsql import dbapi as flightsql
    except ImportError as e:
        sys.exit(f"adisk bench remote needs the ADBC Flight SQL driver (pip install adbc-driver-flightsql==1.13.0): {e}")
    kwargs = {}
    if ca_file != "-":
        kwargs["adbc.flight.sql.client_option.tls_root_certs"] = open(ca_file).read()
    if password_file != "-":
        kwargs["username"] = user
        kwargs["password"] = open(password_file).read().strip()
    conn = flightsql.connect(uri, db_kwargs=kwargs)

    def run(sql):
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetch_arrow_table()

    return run


def load_httpfs(con):
    try:
        import duckdb_extension_httpfs
    except ImportError as e:
        sys.exit(f"adisk bench remote needs DuckDB with httpfs (pip install duckdb==1.5.5 duckdb-extension-httpfs==1.5.5): {e}")
    ext = glob.glob(os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions", "*", "httpfs.duckdb_extension"))
    if not ext:
        sys.exit("duckdb-extension-httpfs ships no httpfs.duckdb_extension file")
    con.execute(f"LOAD '{ext[0]}'")


def duckdb_engine(threads, tables_json):
    try:
        import duckdb
    except ImportError as e:
        sys.exit(f"adisk bench remote needs DuckDB (pip install duckdb==1.5.5): {e}")
    tables = json.load(open(tables_json))
    con = duckdb.connect()
    if any(f.startswith("http") for files in tables.values() for f in files):
        load_httpfs(con)
    con.execute(f"SET threads TO {int(threads)}")
    con.execute("SET enable_external_file_cache = false")
    con.execute("SET enable_progress_bar = false")  # it writes to stdout, this server's replies
    for t, urls in sorted(tables.items()):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(urls)})")

    def run(sql):
        return con.execute(sql).to_arrow_table()

    return run


def main():
    kind = sys.argv[1]
    if kind == "adbc":
        run = adbc_engine(*sys.argv[2:6])
    elif kind == "duckdb":
        run = duckdb_engine(*sys.argv[2:4])
    else:
        sys.exit(f"unknown engine {kind}")
    print("ready", flush=True)
    for line in sys.stdin:
        sql = json.loads(line)
        try:
            start = time.perf_counter()
            table = run(sql)
            secs = time.perf_counter() - start
            print(json.dumps({"secs": secs, **fingerprint(table)}), flush=True)
        except Exception as e:
            print(json.dumps({"error": str(e).replace("\n", " ")[:2000]}), flush=True)


main()
