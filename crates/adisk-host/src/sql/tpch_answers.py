# Prints DuckDB's official TPC-H answers for one scale factor as JSON {"1": "...", ...}.
# Needs: pip install duckdb==1.5.5 duckdb-extension-tpch==1.5.5 (no network at run time).
import glob, json, os, sys

try:
    import duckdb
    import duckdb_extension_tpch
except ImportError as e:
    sys.exit(f"the TPC-H oracle needs `pip install duckdb==1.5.5 duckdb-extension-tpch==1.5.5` ({e})")
sf = float(sys.argv[1])
files = glob.glob(os.path.join(os.path.dirname(duckdb_extension_tpch.__file__), "extensions", "*", "tpch.duckdb_extension"))
if not files:
    sys.exit("duckdb-extension-tpch ships no tpch.duckdb_extension file")
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.execute("SET enable_progress_bar = false")  # past 2 s it writes a bar to our pipes
con.execute(f"LOAD '{files[0]}'")
rows = con.execute("SELECT query_nr, answer FROM tpch_answers() WHERE scale_factor = ?", [sf]).fetchall()
if not rows:
    sys.exit(f"no official answers for scale factor {sf} (there are answers for 0.01, 0.1 and 1)")
print(json.dumps({str(q): a for q, a in rows}))
