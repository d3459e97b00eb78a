# Times queries with DuckDB over the Parquet partitions of an ActiveDisk cluster directory.
# usage: python3 -c "$(cat duckdb_tpch_time.py)" CLUSTER_DIR THREADS
# A small server, so that `adisk bench tpch` can interleave DuckDB's runs with its own: it reads
# one SQL text per line (JSON-encoded) from stdin, runs it once and answers with one line, the
# wall time in seconds (or "error: ..." if the query failed).
import glob, json, os, sys, time
import duckdb
cluster_dir, threads = sys.argv[1], int(sys.argv[2])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
con.execute(f"SET threads TO {threads}")
files = {}
for manifest in sorted(glob.glob(f"{cluster_dir}/disk-*/manifest.json")):  # committed loads only
    for name, table in json.load(open(manifest))["tables"].items():
        files.setdefault(name, []).extend(os.path.join(os.path.dirname(manifest), p["file"]) for p in table["partitions"])
for t, fs in sorted(files.items()):
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(fs)})")
print("ready", flush=True)
for line in sys.stdin:
    q = json.loads(line)
    try:
        start = time.perf_counter()
        con.execute(q).fetchall()
        print(time.perf_counter() - start, flush=True)
    except Exception as e:
        print("error: " + str(e).replace("\n", " "), flush=True)
