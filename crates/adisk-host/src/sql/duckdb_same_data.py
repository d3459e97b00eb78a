# Runs queries in DuckDB over the Parquet partitions the disks hold, printing each result in
# the format of the official TPC-H answers ('|'-separated, header first, NULL as empty).
# argv[1]: JSON {table: [parquet files]}, argv[2]: JSON [query texts]. Prints JSON [texts].
import json, sys

try:
    import duckdb
except ImportError as e:
    sys.exit(f"the DuckDB oracle needs `pip install duckdb==1.5.5` ({e})")
tables = json.loads(sys.argv[1])
queries = json.loads(sys.argv[2])
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
con.execute("SET threads TO 2")
for t, files in tables.items():
    con.execute(f"CREATE VIEW \"{t}\" AS SELECT * FROM read_parquet({json.dumps(files)})")


def cell(v):
    return "" if v is None else str(v)


out = []
for q in queries:
    try:
        cur = con.execute(q)
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
        out.append("\n".join(["|".join(names)] + ["|".join(cell(v) for v in r) for r in rows]) + "\n")
    except Exception as e:  # report per query
        out.append({"error": str(e)})
print(json.dumps(out))
