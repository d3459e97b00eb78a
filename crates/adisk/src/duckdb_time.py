# Times one SQL query with DuckDB (1 thread) over the Parquet partitions of an ActiveDisk
# cluster directory; prints the median wall time in seconds over REPEATS runs.
# usage: python3 -c "$(cat duckdb_time.py)" CLUSTER_DIR REPEATS SQL
import json, glob, os, statistics, sys, time
import duckdb
cluster_dir, repeats, sql = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
con.execute("SET threads TO 1")
files = {}
for manifest in sorted(glob.glob(f"{cluster_dir}/disk-*/manifest.json")):  # committed loads only
    for name, table in json.load(open(manifest))["tables"].items():
        files.setdefault(name, []).extend(os.path.join(os.path.dirname(manifest), p["file"]) for p in table["partitions"])
for t, fs in sorted(files.items()):
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({json.dumps(fs)})")
times = []
for _ in range(repeats):
    start = time.perf_counter()
    con.execute(sql).fetchall()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
