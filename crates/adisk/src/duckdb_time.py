# Times one SQL query with DuckDB (1 thread) over the Parquet partitions of an ActiveDisk
# cluster directory; prints the median wall time in seconds over REPEATS runs.
# usage: python3 -c "$(cat duckdb_time.py)" CLUSTER_DIR REPEATS SQL
import glob, os, statistics, sys, time
import duckdb
cluster_dir, repeats, sql = sys.argv[1], int(sys.argv[2]), sys.argv[3]
con = duckdb.connect()
con.execute("SET threads TO 1")
tables = sorted({os.path.basename(os.path.dirname(p)) for p in glob.glob(f"{cluster_dir}/disk-*/tables/*/*.parquet")})
for t in tables:
    con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{cluster_dir}/disk-*/tables/{t}/*.parquet')")
times = []
for _ in range(repeats):
    start = time.perf_counter()
    con.execute(sql).fetchall()
    times.append(time.perf_counter() - start)
print(statistics.median(times))
