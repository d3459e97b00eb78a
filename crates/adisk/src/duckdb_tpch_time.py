# Times queries with DuckDB over the Parquet partitions of an ActiveDisk cluster directory.
# usage: python3 -c "$(cat duckdb_tpch_time.py)" CLUSTER_DIR THREADS REPEATS QUERIES_JSON
# Prints a JSON list: the median wall time in seconds of each query (after one warm-up run).
import glob, json, os, statistics, sys, time
import duckdb
cluster_dir, threads, repeats, queries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
con = duckdb.connect()
con.execute(f"SET threads TO {threads}")
tables = sorted({os.path.basename(os.path.dirname(p)) for p in glob.glob(f"{cluster_dir}/disk-*/tables/*/*.parquet")})
for t in tables:
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{cluster_dir}/disk-*/tables/{t}/*.parquet')")
out = []
for q in queries:
    con.execute(q).fetchall()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        con.execute(q).fetchall()
        times.append(time.perf_counter() - start)
    out.append(statistics.median(times))
print(json.dumps(out))
