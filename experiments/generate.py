#!/usr/bin/env python3
"""Writes the experiment files under experiments/<paper>/ (run from anywhere).

The TOML files are the source of truth and are committed; this script only keeps their
shared device catalogues consistent. Every number is taken from the paper named in the
comment next to it, or marked as an assumption (see docs/simulator.md)."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sources import lookup  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))

def lines(wl):
    """Inline-table body -> one key per line (commas inside [...] kept)."""
    out, depth, cur = [], 0, ""
    for ch in wl:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return "\n".join(out)

KEY_RE = re.compile(r'^\s*("[^"]*"|[A-Za-z0-9_-]+)\s*=')
PAPERS_DIR = os.environ.get("ADISK_PAPERS_DIR", os.path.join(ROOT, "..", "..", "shared", "papers"))
QUOTE_RE = re.compile(r'^# source: (\S+) .*? — "(.*)"$')


def normalize(text):
    return " ".join(text.replace("*", "").replace("`", "").split())


def check_quotes(comment):
    """Every quoted phrase must occur in its paper (when the papers are reachable)."""
    for line in comment.splitlines():
        m = QUOTE_RE.match(line)
        if line.startswith("# source:") and not m:
            raise SystemExit(f"malformed source line: {line}")
        if not m or not os.path.isdir(PAPERS_DIR):
            continue
        paper, quote = m.group(1), m.group(2)
        with open(os.path.join(PAPERS_DIR, paper), encoding="utf-8") as fh:
            if normalize(quote) not in normalize(fh.read()):
                raise SystemExit(f"quote not found in {paper}: {quote}")


def strip_inline_comment(line):
    """Drop a trailing '# …' that is outside double-quoted strings."""
    in_str = False
    for i, ch in enumerate(line):
        if ch == '"':
            in_str = not in_str
        elif ch == "#" and not in_str:
            return line[:i].rstrip()
    return line


def annotate(paper, name, text):
    """Put the source/assumption comment of every key directly above it."""
    out, table, label = [], "", None
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("["):
            table = s.strip("[]").strip()
            label = None
            out.append(line)
            continue
        m = KEY_RE.match(line)
        if not m:
            out.append(line)
            continue
        key = m.group(1).strip('"')
        if table == "variants" and key == "label":
            label = line.split("=", 1)[1].strip().strip('"')
        tpath = f"variants{{{label}}}" if table == "variants" and key != "label" else ("variants{*}" if table == "variants" else table)
        if table == "variants" and key == "label":
            tpath = f"variants{{{label}}}"
        path = f"{tpath}.{key}" if tpath else key
        comment = lookup(paper, name, path)
        if comment is None and table == "variants" and key == "label":
            comment = lookup(paper, name, f"variants{{*}}.label")
        if comment is None:
            raise SystemExit(f"{paper}/{name}.toml: no source or assumption for `{path}`")
        check_quotes(comment)
        out.extend(comment.split("\n"))
        out.append(strip_inline_comment(line))
    return "\n".join(out)


def w(paper, name, text):
    d = os.path.join(ROOT, paper)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".toml"), "w") as f:
        f.write(annotate(paper, name, text.strip()) + "\n")

# ---------------------------------------------------------------- acharya
ACHARYA_DEVICES = """
# acharya-… Table 1. Min seek, cylinders, heads, controller overhead and cache are not in the
# paper: assumptions (docs/simulator.md, "drive assumptions").
[devices.disks.today]
rpm = 10000
seek_ms_min = 1.0        # assumption
seek_ms_mean = 9.0       # Table 1
seek_ms_max = 18.0       # Table 1
media_mbps_outer = 15.0  # Table 1
media_mbps_inner = 15.0
zones = 1
cylinders = 6962         # assumption (Cheetah 9LP geometry)
heads = 12               # assumption
controller_overhead_us = 300.0  # assumption
cache_bytes = 1048576    # assumption

[devices.disks.future]
rpm = 12500              # Table 1
seek_ms_min = 1.0
seek_ms_mean = 9.0
seek_ms_max = 18.0
media_mbps_outer = 20.0  # Table 1
media_mbps_inner = 20.0
zones = 1
cylinders = 6962
heads = 12
controller_overhead_us = 300.0
cache_bytes = 1048576

[devices.cpus.host_today]
mhz = 350.0              # Table 1: Pentium II 350
[devices.cpus.host_future]
mhz = 500.0              # Table 1
[devices.cpus.disk_today]
mhz = 200.0              # Table 1: Cyrix/IBM 6x86
[devices.cpus.disk_future]
mhz = 300.0              # Table 1

[devices.links.loop_today]
bandwidth_mbps = 100.0   # Table 1: dual FC loops, 100 MB/s per loop
latency_us = 1.0         # assumption
[devices.links.loop_future]
bandwidth_mbps = 150.0   # Table 1: 150 MB/s per loop
latency_us = 1.0
"""

def acharya_systems(split=False):
    sp = "\nsplit_read_write = true  # acharya-… §4: sort reads from half the disks, writes to the other half" if split else ""
    return f"""
[systems.conventional_today]
kind = "single_host"
disks = 16
disk = "today"
host_cpu = "host_today"
host_memory_mb = 1024    # Table 1
io_link = "loop_today"
io_loops = 2
queue_depth = 8          # §4: up to eight asynchronous stripe requests
queue_depth_sort_phase_one = 2{sp}

[systems.active_today]
kind = "active_disks"
disks = 16
disk = "today"
disk_cpu = "disk_today"
disk_memory_mb = 16      # Table 1
host_cpu = "host_today"
host_memory_mb = 1024
io_link = "loop_today"
io_loops = 2
communication = "via_host"  # §6: disks communicate only through the host
buffers_per_stream = 2      # §5.1: two buffers per stream

[systems.conventional_future]
kind = "single_host"
disks = 16
disk = "future"
host_cpu = "host_future"
host_memory_mb = 1024
io_link = "loop_future"
io_loops = 2
queue_depth = 8
queue_depth_sort_phase_one = 2{sp}

[systems.active_future]
kind = "active_disks"
disks = 16
disk = "future"
disk_cpu = "disk_future"
disk_memory_mb = 32
host_cpu = "host_future"
host_memory_mb = 1024
io_link = "loop_future"
io_loops = 2
communication = "via_host"
buffers_per_stream = 2
"""

ACHARYA_APPS = {
    "select": ("SQL select, 1% selectivity (§4, §5.2)",
               [("small (4 GB)", 'kind = "select", dataset_bytes = 4.0e9, tuple_bytes = 64.0, selectivity = 0.01'),
                ("large (8 GB)", 'kind = "select", dataset_bytes = 8.0e9, tuple_bytes = 64.0, selectivity = 0.01')]),
    "group_by": ("SQL group-by, hash based (§4, §5.2)",
               [("small (4 GB)", 'kind = "group_by", dataset_bytes = 4.0e9, tuple_bytes = 64.0, groups = 3.35e6, entry_bytes = 16.0'),
                ("large (8 GB)", 'kind = "group_by", dataset_bytes = 8.0e9, tuple_bytes = 64.0, groups = 6.7e6, entry_bytes = 16.0')]),
    "sort": ("external sort, two-pass NOW-sort (§4, §5.2)",
               [("small (2 GB)", 'kind = "sort", dataset_bytes = 2.15e9, tuple_bytes = 100.0'),
                ("large (4 GB)", 'kind = "sort", dataset_bytes = 4.3e9, tuple_bytes = 100.0')]),
    "datacube": ("datacube, PipeHash (§4, §5.2)",
               [("small (4 GB)", 'kind = "datacube", dataset_bytes = 4.29e9, tuple_bytes = 32.0, cardinalities = [1342177.0, 134217.0, 13421.0, 1342.0], attribute_distribution = "independent"'),
                ("large (8 GB)", 'kind = "datacube", dataset_bytes = 8.58e9, tuple_bytes = 32.0, cardinalities = [2684354.0, 268434.0, 26842.0, 2684.0], attribute_distribution = "independent"')]),
    "conv": ("image convolution, 16x16 kernel (§4, §5.2)",
               [("10,000 512x512 images", 'kind = "conv", dataset_bytes = 2.62144e9, image_side = 512.0, kernel_side = 16.0')]),
    "earth": ("satellite composite (§4, §5.2)",
               [("small (6 GB -> 228 MB)", 'kind = "earth", dataset_bytes = 6.0e9, output_bytes = 228.0e6, coverage = 10.0'),
                ("large (12 GB -> 556 MB)", 'kind = "earth", dataset_bytes = 12.0e9, output_bytes = 556.0e6, coverage = 10.0')]),
}

def variants(vs):
    out = []
    for label, wl in vs:
        out.append(f'[[variants]]\nlabel = "{label}"\nset = {{ workload = {{ {wl} }} }}\n')
    return "\n".join(out)

for app, (desc, vs) in ACHARYA_APPS.items():
    first = vs[0][1]
    w("acharya", f"core-{app}", f"""
# acharya-… core experiment for {app}: conventional vs active disks, Today and Future
# configurations (Table 1), 4 to 32 disks, both dataset sizes.
[experiment]
name = "acharya-core-{app}"
paper = "acharya"
recreates = "acharya-… §5.3 core results for {app} (Table 1 configurations, 4-32 disks, both datasets)"
description = "{desc}"

[workload]
{lines(first)}

[run]
system = "active_today"
request_kb = 256.0       # §4: 256 KB per disk per stripe

[sweep]
"run.system" = ["conventional_today", "active_today", "conventional_future", "active_future"]
"run.disks" = [4, 8, 16, 32]

{variants(vs)}
[report]
x = "run.disks"
series = "run.system"
y = "total_s"
{ACHARYA_DEVICES}
{acharya_systems(app == "sort")}
""")

all_small = [(app, vs[0][1]) for app, (desc, vs) in ACHARYA_APPS.items()]
for key, axis, values, what in [
        ("interconnect", '"devices.links.loop_today.bandwidth_mbps"', "[20.0, 100.0, 200.0]", "I/O interconnect 40 / 200 / 400 MB/s (two loops)"),
        ("host-cpu", '"devices.cpus.host_today.mhz"', "[350.0, 1000.0, 3000.0]", "host processor 350 MHz / 1 GHz / 3 GHz")]:
    w("acharya", f"sensitivity-{key}", f"""
# acharya-… sensitivity: {what}, Today configuration, every algorithm (smaller datasets).
[experiment]
name = "acharya-sensitivity-{key}"
paper = "acharya"
recreates = "acharya-… §5 sensitivity to {what}"

[workload]
{lines(all_small[0][1])}

[run]
system = "active_today"
request_kb = 256.0

[sweep]
"run.system" = ["conventional_today", "active_today"]
"run.disks" = [8, 32]
{axis} = {values}

{variants([(a, wl) for a, wl in all_small])}
[report]
x = {axis}
y = "total_s"
log_y = true
{ACHARYA_DEVICES}
{acharya_systems(False)}
""")

# ---------------------------------------------------------------- uysal
UYSAL_DEVICES = """
# Seagate Cheetah 9LP ST39102 (uysal-… §4 and its product manual, ref. 33): 10,025 rpm,
# 14.5-21.3 MB/s, 5.4 ms mean / 12.2 ms max read seek. 0.6 ms track-to-track, 6,962
# cylinders, 12 heads and 8 zones from the manual; overhead and cache: assumptions.
[devices.disks.cheetah9lp]
rpm = 10025
seek_ms_min = 0.6
seek_ms_mean = 5.4
seek_ms_max = 12.2
media_mbps_outer = 21.3
media_mbps_inner = 14.5
zones = 8
cylinders = 6962
heads = 12
controller_overhead_us = 300.0
cache_bytes = 1048576

[devices.cpus.cyrix200]
mhz = 200.0              # §4: Cyrix 6x86 200MX in each active disk
[devices.cpus.p2_450]
mhz = 450.0              # §4: front-end Pentium II 450
[devices.cpus.p2_1000]
mhz = 1000.0             # §4 variation: 1 GHz front-end
[devices.cpus.p2_300]
mhz = 300.0              # §4: cluster node Pentium II 300
[devices.cpus.r10k_250]
mhz = 250.0              # §4: Origin boards, 250 MHz processors

[devices.links.fc_loop]
bandwidth_mbps = 100.0   # §4: dual loop 200 MB/s = 2 x 100
latency_us = 1.0         # assumption
[devices.links.fc_loop_200]
bandwidth_mbps = 200.0   # §4 variation: 400 MB/s aggregate
latency_us = 1.0
[devices.links.pci]
bandwidth_mbps = 133.0   # §4: 133 MB/s PCI per host
latency_us = 1.0
[devices.links.fast_ethernet]
bandwidth_mbps = 12.5    # §4: 100BaseT NIC / switch port
latency_us = 10.0        # assumption (3Com SuperStack II 3900 store-and-forward)
[devices.links.gigabit]
bandwidth_mbps = 125.0   # §4: gigabit uplinks / 1 Gbps variation
latency_us = 10.0
[devices.links.origin_link]
bandwidth_mbps = 780.0   # §4: inter-board interconnect, 1 us
latency_us = 1.0
[devices.links.origin_bte]
bandwidth_mbps = 521.0   # §4: block-transfer engine, 521 MB/s sustained
latency_us = 1.0
[devices.links.xio]
bandwidth_mbps = 700.0   # §4: two I/O nodes, 1.4 GB/s total
latency_us = 1.0
"""

UYSAL_SYSTEMS = """
[systems.active_disks]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 32      # §4
host_cpu = "p2_450"
host_memory_mb = 1024    # §4
io_link = "fc_loop"
io_loops = 2
communication = "direct" # §4: disks address each other directly
buffers_per_stream = 2

[systems.ad_restricted]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 32
host_cpu = "p2_450"
host_memory_mb = 1024
io_link = "fc_loop"
io_loops = 2
communication = "via_host"   # §4 variation: communication restricted to the front-end
buffers_per_stream = 2

[systems.ad_400mbps]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 32
host_cpu = "p2_450"
host_memory_mb = 1024
io_link = "fc_loop_200"
io_loops = 2
buffers_per_stream = 2

[systems.ad_1ghz_frontend]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 32
host_cpu = "p2_1000"
host_memory_mb = 1024
io_link = "fc_loop"
io_loops = 2
buffers_per_stream = 2

[systems.ad_64mb]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 64
base_disk_memory_mb = 32
base_buffers_per_stream = 2
host_cpu = "p2_450"
host_memory_mb = 1024
io_link = "fc_loop"
io_loops = 2
buffers_per_stream = 4       # §4: four buffers per stream with 64 MB

[systems.ad_128mb]
kind = "active_disks"
disks = 16
disk = "cheetah9lp"
disk_cpu = "cyrix200"
disk_memory_mb = 128
base_disk_memory_mb = 32
base_buffers_per_stream = 2
host_cpu = "p2_450"
host_memory_mb = 1024
io_link = "fc_loop"
io_loops = 2
buffers_per_stream = 8       # §4: eight buffers per stream with 128 MB

[systems.cluster]
kind = "cluster"
disks = 16
disks_per_host = 1           # §4: one disk per host
disk = "cheetah9lp"
host_cpu = "p2_300"
frontend_cpu = "p2_450"
frontend_memory_mb = 1024    # §7 pricing: the same front-end as the active-disk system
host_memory_mb = 128         # §4 (24 MB of it is the OS footprint)
host_bus = "pci"
net_link = "fast_ethernet"
nodes_per_switch = 24        # §4: 24-port switches
uplink = "gigabit"
uplinks_per_switch = 2       # §4: two gigabit uplinks per switch
frontend_link = "gigabit"    # assumption: front-end on a gigabit port of the core switch
queue_depth = 4              # §5: up to four asynchronous 256 KB requests

[systems.cluster_1gbps]
kind = "cluster"
disks = 16
disks_per_host = 1
disk = "cheetah9lp"
host_cpu = "p2_300"
frontend_cpu = "p2_450"
frontend_memory_mb = 1024
host_memory_mb = 128
host_bus = "pci"
net_link = "gigabit"         # §4 variation: 1 Gbps per host
nodes_per_switch = 24
uplink = "gigabit"
uplinks_per_switch = 2
frontend_link = "gigabit"
queue_depth = 4

[systems.smp]
kind = "smp"
disks = 16
disk = "cheetah9lp"
host_cpu = "r10k_250"
host_memory_mb = 128         # §4: 128 MB per two-processor board
cpus_per_board = 2
board_link = "origin_link"
bte_link = "origin_bte"
xio_link = "xio"
xio_nodes = 2
io_link = "fc_loop"
io_loops = 2                 # §4: dual-loop FC, 200 MB/s for all disks
queue_depth = 4              # §5: four 256 KB requests per processor
split_read_write = SPLIT

[systems.smp_400mbps]
kind = "smp"
disks = 16
disk = "cheetah9lp"
host_cpu = "r10k_250"
host_memory_mb = 128
cpus_per_board = 2
board_link = "origin_link"
bte_link = "origin_bte"
xio_link = "xio"
xio_nodes = 2
io_link = "fc_loop_200"      # §4 variation: 400 MB/s serial I/O interconnect
io_loops = 2
queue_depth = 4
split_read_write = SPLIT
"""

UYSAL_APPS = {
    "select": 'kind = "select", dataset_bytes = 17.18e9, tuple_bytes = 64.0, selectivity = 0.01',
    "aggregate": 'kind = "aggregate", dataset_bytes = 17.18e9, tuple_bytes = 64.0',
    "group_by": 'kind = "group_by", dataset_bytes = 17.18e9, tuple_bytes = 64.0, groups = 13.5e6, entry_bytes = 16.0, memory_parametrised = false',
    "datacube": 'kind = "datacube", dataset_bytes = 17.15e9, tuple_bytes = 32.0, cardinalities = [5.36e6, 536000.0, 53600.0, 5360.0], attribute_distribution = "independent"',
    "sort": 'kind = "sort", dataset_bytes = 17.0e9, tuple_bytes = 100.0',
    "join": 'kind = "join", dataset_bytes = 34.36e9, tuple_bytes = 64.0, projected_bytes = 32.0, output_bytes = 108.0e6',
    "dmine": 'kind = "dmine", dataset_bytes = 17.18e9, transactions = 300.0e6, items_per_transaction = 4.0, repartition_fraction = 0.25, candidates_per_pass = [1.0e6, 5.0e5]',
    "conv": 'kind = "conv", dataset_bytes = 17.18e9, image_side = 512.0, kernel_side = 5.0',
    "earth": 'kind = "earth", dataset_bytes = 17.18e9, output_bytes = 556.0e6, coverage = 10.0',
}
SHUFFLERS = {"sort", "join"}

for app, wl in UYSAL_APPS.items():
    w("uysal", app, f"""
# uysal-… {app}: active disks, clusters and SMPs with 16/32/64/128 disks (and processors),
# normalized to active disks of the same size.
[experiment]
name = "uysal-{app}"
paper = "uysal"
recreates = "uysal-… §7: {app} on the three architectures, 16-128 disks, normalized to active disks"

[workload]
{lines(wl)}

[run]
system = "active_disks"
request_kb = 256.0           # §5: 256 KB requests

[sweep]
"run.system" = ["active_disks", "cluster", "smp"]
"run.disks" = [16, 32, 64, 128]

[report]
x = "run.disks"
series = "run.system"
y = "normalized"
baseline = {{ "run.system" = "active_disks" }}
{UYSAL_DEVICES}
{UYSAL_SYSTEMS.replace("SPLIT", "true" if app in SHUFFLERS else "false")}
""")

w("uysal", "variations", f"""
# uysal-… bottleneck variations: active disks with communication restricted to the front-end,
# a 400 MB/s interconnect, a 1 GHz front-end, 64/128 MB per disk (4/8 buffers per stream);
# clusters with 1 Gbps per host; SMPs with a 400 MB/s I/O interconnect. Every application.
# (The unmodified cluster and SMP at the same sizes are in the per-application files.)
[experiment]
name = "uysal-variations"
paper = "uysal"
recreates = "uysal-… §4/§7 alternative configurations that scale one component"

[workload]
{lines(UYSAL_APPS["select"])}

[run]
system = "active_disks"
request_kb = 256.0

[sweep]
"run.system" = ["active_disks", "ad_restricted", "ad_400mbps", "ad_1ghz_frontend", "ad_64mb", "ad_128mb", "cluster_1gbps", "smp_400mbps"]
"run.disks" = [32, 128]

{variants(list(UYSAL_APPS.items()))}
[report]
x = "run.system"
y = "normalized"
baseline = {{ "run.system" = "active_disks" }}
{UYSAL_DEVICES}
{UYSAL_SYSTEMS.replace("SPLIT", "false")}
""")

SSD = """
# Modern what-if (assumption, typical SATA SSD): 8 channels x 4 dies, 16 KB pages,
# 50 us page read, 500 us program, 400 MB/s per channel, 550 MB/s SATA interface.
[devices.ssds.sata_ssd]
channels = 8
dies_per_channel = 4
page_bytes = 16384
page_read_us = 50.0
page_program_us = 500.0
channel_mbps = 400.0
interface_mbps = 550.0
overhead_us = 20.0
capacity_bytes = 512000000000
"""
for app in ["select", "sort"]:
    systems = UYSAL_SYSTEMS.replace("SPLIT", "true" if app in SHUFFLERS else "false")
    ssd_systems = systems.replace('[systems.active_disks]\nkind = "active_disks"\ndisks = 16\ndisk = "cheetah9lp"', '[systems.active_disks]\nkind = "active_disks"\ndisks = 16\ndisk = "cheetah9lp"') + """
[systems.active_ssds]
kind = "active_disks"
disks = 16
ssd = "sata_ssd"
disk_cpu = "cyrix200"
disk_memory_mb = 32
host_cpu = "p2_450"
host_memory_mb = 1024
io_link = "fc_loop"
io_loops = 2
buffers_per_stream = 2

[systems.cluster_ssds]
kind = "cluster"
disks = 16
disks_per_host = 1
ssd = "sata_ssd"
host_cpu = "p2_300"
frontend_cpu = "p2_450"
frontend_memory_mb = 1024
host_memory_mb = 128
host_bus = "pci"
net_link = "fast_ethernet"
nodes_per_switch = 24
uplink = "gigabit"
uplinks_per_switch = 2
frontend_link = "gigabit"
queue_depth = 4
"""
    w("uysal", f"ssd-whatif-{app}", f"""
# What-if beyond uysal-… (not a paper figure): the same active disks and clusters with SSDs
# in place of the Cheetah drives.
[experiment]
name = "uysal-ssd-whatif-{app}"
paper = "uysal"
recreates = "extension: uysal-… {app} with SSDs instead of drives (modern what-if)"

[workload]
{lines(UYSAL_APPS[app])}

[run]
system = "active_disks"
request_kb = 256.0

[sweep]
"run.system" = ["active_disks", "active_ssds", "cluster", "cluster_ssds"]
"run.disks" = [16, 32, 64, 128]

[report]
x = "run.disks"
series = "run.system"
y = "normalized"
baseline = {{ "run.system" = "active_disks" }}
{UYSAL_DEVICES}
{SSD}
{ssd_systems}
""")

# ---------------------------------------------------------------- memik
MEMIK_DEVICES = """
# memik-… Table 3. Media rate, cylinders, heads, overhead and cache are not given: the drive
# geometry and zoned media rate are assumed equal to the Cheetah 9LP of uysal-… (same
# 10,000 rpm generation); the seek times are the paper's.
[devices.disks.memik]
rpm = 10000              # Table 3
seek_ms_min = 1.62       # Table 3
seek_ms_mean = 8.46      # Table 3
seek_ms_max = 21.77      # Table 3
media_mbps_outer = 21.3  # assumption
media_mbps_inner = 14.5  # assumption
zones = 8
cylinders = 6962
heads = 12
controller_overhead_us = 300.0
cache_bytes = 1048576

[devices.cpus.host500]
mhz = 500.0              # Table 3: single host
[devices.cpus.host400]
mhz = 400.0              # Table 3: cluster hosts
[devices.cpus.sd200]
mhz = 200.0              # Table 3: smart disk
[devices.cpus.host1000]
mhz = 1000.0             # Table 4 variation
[devices.cpus.host800]
mhz = 800.0              # Table 4 variation
[devices.cpus.sd350]
mhz = 350.0              # Table 4 variation

[devices.links.io200]
bandwidth_mbps = 200.0   # Table 3: I/O interconnect
latency_us = 1.0
[devices.links.io400]
bandwidth_mbps = 400.0   # Table 4 variation
latency_us = 1.0
[devices.links.atm155]
bandwidth_mbps = 19.375  # §6.1: 155 Mbps ATM
latency_us = 20.0        # assumption
[devices.links.oc12]
bandwidth_mbps = 77.75   # assumption: OC-12 uplinks between the per-4-host ATM switches
latency_us = 20.0
[devices.links.tb3]
bandwidth_mbps = 50.9    # §6.1: SP-2 TrailBlazer3 switch, 50.9 MB/s peak
latency_us = 40.0        # assumption
"""

MEMIK_SYSTEMS = """
[systems.single_host]
kind = "single_host"
disks = 8
disk = "memik"
host_cpu = "host500"
host_memory_mb = 256
io_link = "io200"
queue_depth = 8

[systems.cluster2]
kind = "cluster"
disks = 8
hosts = 2                # Table 3 / §6.1: 2 hosts with 4 disks each
disk = "memik"
host_cpu = "host400"
host_memory_mb = 128
host_bus = "io200"
net_link = "atm155"
nodes_per_switch = 4     # §6.5: an ATM switch per 4 machines
uplink = "oc12"
queue_depth = 8

[systems.cluster4]
kind = "cluster"
disks = 8
hosts = 4                # 4 hosts with 2 disks each
disk = "memik"
host_cpu = "host400"
host_memory_mb = 128
host_bus = "io200"
net_link = "atm155"
nodes_per_switch = 4
uplink = "oc12"
queue_depth = 8

[systems.smart_disks]
kind = "smart_disks"
disks = 8                # one of them is the central unit
disk = "memik"
disk_cpu = "sd200"
disk_memory_mb = 32
net_link = "tb3"
buffers_per_stream = 2
"""

MEMIK_QUERIES = '["Q1", "Q3", "Q6", "Q12", "Q13", "Q16"]'

def memik_file(name, recreates, sweep, extra, report, systems=MEMIK_SYSTEMS):
    w("memik", name, f"""
[experiment]
name = "memik-{name}"
paper = "memik"
recreates = "{recreates}"

[workload]
kind = "tpc"
query = "Q1"
size_class = "medium"          # Table 5
selectivity_class = "medium"   # Table 6
bundling = "paper"             # §4.2.1 relation
page_kb = 8.0                  # Table 3: 8 KB pages (the I/O request size)

[run]
system = "smart_disks"

[sweep]
{sweep}
{extra}
[report]
{report}
{MEMIK_DEVICES}
{systems}
""")

memik_file("base", "memik-… Fig. 6: six TPC-D queries, base configuration (Table 3), normalized to the single host",
           f'"workload.query" = {MEMIK_QUERIES}\n"run.system" = ["single_host", "cluster2", "cluster4", "smart_disks"]',
           "", 'x = "workload.query"\nseries = "run.system"\ny = "normalized"\nstyle = "stacked"\nbaseline = { "run.system" = "single_host" }')

var = [
    ("base", "{}"),
    ("faster CPU", '{ "systems.single_host.host_cpu" = "host1000", "systems.cluster2.host_cpu" = "host800", "systems.cluster4.host_cpu" = "host800", "systems.smart_disks.disk_cpu" = "sd350" }'),
    ("page 4K", '{ "workload.page_kb" = 4.0 }'),
    ("page 16K", '{ "workload.page_kb" = 16.0 }'),
    ("more memory", '{ "systems.single_host.host_memory_mb" = 512.0, "systems.cluster2.host_memory_mb" = 256.0, "systems.cluster4.host_memory_mb" = 256.0, "systems.smart_disks.disk_memory_mb" = 64.0 }'),
    ("faster I/O interconnect", '{ "systems.single_host.io_link" = "io400", "systems.cluster2.host_bus" = "io400", "systems.cluster4.host_bus" = "io400" }'),
    ("4 disks", '{ "systems.single_host.disks" = 4, "systems.cluster2.disks" = 4, "systems.cluster4.disks" = 4, "systems.smart_disks.disks" = 4 }'),
    ("16 disks", '{ "systems.single_host.disks" = 16, "systems.cluster2.disks" = 16, "systems.cluster4.disks" = 16, "systems.smart_disks.disks" = 16 }'),
    ("small database", '{ "workload.size_class" = "small" }'),
    ("large database", '{ "workload.size_class" = "large" }'),
    ("low selectivity", '{ "workload.selectivity_class" = "small" }'),
    ("high selectivity", '{ "workload.selectivity_class" = "large" }'),
]
vtext = "\n".join(f'[[variants]]\nlabel = "{l}"\nset = {s}\n' for l, s in var)
memik_file("variations", "memik-… Table 4 variations (Figs. 7-17) with Tables 5-7 sizes, summary averaged over queries (Table 8)",
           f'"workload.query" = {MEMIK_QUERIES}\n"run.system" = ["single_host", "cluster2", "cluster4", "smart_disks"]',
           vtext, 'x = "variant"\nseries = "run.system"\ny = "normalized"\nstyle = "stacked"\nbaseline = { "run.system" = "single_host", "variant" = "base" }\naverage_over = "workload.query"')

SCAL_SYSTEMS = MEMIK_SYSTEMS.replace('hosts = 2                # Table 3 / §6.1: 2 hosts with 4 disks each', 'disks_per_host = 4       # §6.5: hosts with 4 disks').replace('hosts = 4                # 4 hosts with 2 disks each', 'disks_per_host = 2       # §6.5: hosts with 2 disks')
memik_file("scalability", "memik-… §6.5 Figs. 18-20: speed-up from 4 to 8/16/32 disks (hosts with 4 or 2 disks; smart disks)",
           f'"workload.query" = {MEMIK_QUERIES}\n"run.system" = ["cluster2", "cluster4", "smart_disks"]\n"run.disks" = [4, 8, 16, 32]',
           "", 'x = "run.disks"\ny = "speedup"\nbaseline = { "run.disks" = 4 }', SCAL_SYSTEMS)

memik_file("bundling", "memik-… §6.2 Figs. 4-5: no bundling / paper relation / excessive bundling at 4 and 8 disks, with distinct bundles and operations per bundle",
           f'"workload.query" = {MEMIK_QUERIES}\n"workload.bundling" = ["none", "paper", "excessive"]\n"run.disks" = [4, 8]',
           "", 'x = "workload.query"\ny = "normalized"\nbaseline = { "workload.bundling" = "none" }')

memik_file("more-queries", "extension beyond memik-… (issue 4 workload list): TPC-D Q5, Q9, Q10, Q17 as plan trees at SF 10 (≈ memik's medium size) on the four base architectures, normalized to the single host",
           '"workload.query" = ["Q5", "Q9", "Q10", "Q17"]\n"run.system" = ["single_host", "cluster2", "cluster4", "smart_disks"]',
           "", 'x = "workload.query"\nseries = "run.system"\ny = "normalized"\nstyle = "stacked"\nbaseline = { "run.system" = "single_host" }')

# ---------------------------------------------------------------- riedel
RIEDEL_DEVICES = """
# riedel-… §5: server AlphaStation 500/500 (500 MHz, 256 MB) with Seagate Cheetah 4.5 GB disks
# (11 MB/s each) on two Ultra-Wide SCSI buses; Active Disks are AXP 3000/400 (133 MHz, 64 MB)
# whose two Medalist disks deliver 6.5 MB/s together, on a 155 Mb/s ATM switch (10.5 MB/s
# measured, Table 8). Seek times, rpm of the Medalist, geometry: assumptions.
[devices.disks.cheetah_4gb]
rpm = 10033
seek_ms_min = 0.98       # assumption
seek_ms_mean = 7.7       # assumption
seek_ms_max = 18.0       # assumption
media_mbps_outer = 11.0  # §5 footnote: 11 MB/s per server disk
media_mbps_inner = 11.0
zones = 1
cylinders = 6526         # assumption
heads = 8                # assumption
controller_overhead_us = 300.0
cache_bytes = 524288

[devices.disks.medalist_pair]
rpm = 5400               # assumption (Seagate Medalist ST52160)
seek_ms_min = 1.5        # assumption
seek_ms_mean = 10.0      # assumption
seek_ms_max = 20.0       # assumption
media_mbps_outer = 6.5   # §5 footnote / Table 8: 6.5 MB/s from the two disks on narrow SCSI
media_mbps_inner = 6.5
zones = 1
cylinders = 4000         # assumption
heads = 8                # assumption
controller_overhead_us = 300.0
cache_bytes = 262144

[devices.disks.viking]
rpm = 7200               # assumption (Quantum Viking)
seek_ms_min = 1.0        # assumption
seek_ms_mean = 8.0       # assumption
seek_ms_max = 18.0       # assumption
media_mbps_outer = 11.0  # Table 8: 'beta' disk bandwidth 11 MB/s
media_mbps_inner = 11.0
zones = 1
cylinders = 8000         # assumption
heads = 8                # assumption
controller_overhead_us = 300.0
cache_bytes = 524288

[devices.cpus.strongarm200]
mhz = 200.0              # Table 8: 'beta' prototype, 200 MHz StrongARM

[devices.links.beta_net]
bandwidth_mbps = 9.5     # Table 8: 'beta' network bandwidth
latency_us = 20.0        # assumption

[devices.cpus.alpha500]
mhz = 500.0              # §5: AlphaStation 500/500
[devices.cpus.alpha133]
mhz = 133.0              # §5: AXP 3000/400

[devices.links.uw_scsi]
bandwidth_mbps = 40.0    # §5: Ultra-Wide SCSI bus
latency_us = 1.0
[devices.links.atm_measured]
bandwidth_mbps = 10.5    # Table 8: network bandwidth of the 'alpha' prototype
latency_us = 20.0        # assumption
[devices.links.atm155]
bandwidth_mbps = 19.375  # 155 Mb/s OC-3 at the server (assumption: full line rate)
latency_us = 20.0
"""

RIEDEL_SYSTEMS = """
[systems.server]
kind = "single_host"
disks = 4
disk = "cheetah_4gb"
host_cpu = "alpha500"
host_memory_mb = 256
io_link = "uw_scsi"
io_loops = 2             # two Ultra-Wide SCSI buses
queue_depth = 4

[systems.active_disks]
kind = "sd_groups"
groups = 1
disks = 4
disk = "medalist_pair"
disk_cpu = "alpha133"
disk_memory_mb = 64
host_cpu = "alpha500"
host_memory_mb = 256
net_link = "atm_measured"
frontend_link = "atm155"
communication = "direct"
buffers_per_stream = 2

[systems.active_disks_beta]
kind = "sd_groups"
groups = 1
disks = 4
disk = "viking"
disk_cpu = "strongarm200"
disk_memory_mb = 32          # Table 8
host_cpu = "alpha500"
host_memory_mb = 256
net_link = "beta_net"
frontend_link = "atm155"
communication = "direct"
buffers_per_stream = 2
# Table 8: cycles/byte measured on the 'beta' prototype, for the work done at its drives.
worker_cost_overrides = { select_cycles_per_byte = 12.6, sort_aggregate_cycles_per_byte = 52.0, bloom_probe_cycles_per_byte = 11.0 }
"""

def riedel_file(name, recreates, wl, sweep, report):
    w("riedel", name, f"""
[experiment]
name = "riedel-{name}"
paper = "riedel"
recreates = "{recreates}"

[workload]
{wl}

[run]
system = "active_disks"
request_kb = 64.0        # assumption: 64 KB requests

[sweep]
{sweep}

[report]
{report}
{RIEDEL_DEVICES}
{RIEDEL_SYSTEMS}
""")

for name, wl, rec in [
        ("select", 'kind = "riedel_select"\nscale_factor = 1.0', "riedel-… §5.1 Fig. 6: select (Q6-like), server vs Active Disks, 1-10 disks"),
        ("aggregate", 'kind = "riedel_aggregate"\nscale_factor = 1.0', "riedel-… §5.2 Fig. 7: aggregation (Q1-like), 1-10 disks"),
        ("join", 'kind = "riedel_join"\nscale_factor = 1.0\nbloom_bytes = 1.0e6', "riedel-… §5.3 Fig. 8: 2-way join with a Bloom-filter semi-join, 1-10 disks"),
        ("join5", 'kind = "riedel_join5"\nscale_factor = 1.0\nbloom_bytes = 1.0e6', "riedel-… §5.3 Fig. 9: the 5-way join of Q9, 1-10 disks")]:
    riedel_file(name, rec + " (plus the Table 8 'beta' prototype)", wl, '"run.system" = ["server", "active_disks", "active_disks_beta"]\n"run.disks" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]',
                'x = "run.disks"\nseries = "run.system"\ny = "throughput_mbps"')

riedel_file("summary", "riedel-… §5.4 query summary (Table 5 queries), 10 disks, normalized to the server",
            'kind = "riedel_query"\nquery = "Q1"\nscale_factor = 1.0\nbloom_bytes = 1.0e6',
            '"workload.query" = ["Q1", "Q3", "Q4", "Q5", "Q6", "Q9", "Q10", "Q13", "Q17"]\n"run.system" = ["server", "active_disks", "active_disks_beta"]\n"run.disks" = [10]',
            'x = "workload.query"\nseries = "run.system"\ny = "normalized"\nbaseline = { "run.system" = "server" }')

# ---------------------------------------------------------------- chiu
CHIU_DEVICES = """
# chiu-… §5: 500 MHz Pentium III nodes emulate the smart disks; DiskSim 2.0 drive parameters
# are not given, so the drive is assumed to be the Cheetah 9LP of uysal-…; InfiniBand 1x
# links (2.5 Gb/s signalling, 250 MB/s data) to the group switch; 4x uplinks to the router.
[devices.disks.cheetah9lp]
rpm = 10025
seek_ms_min = 0.6
seek_ms_mean = 5.4
seek_ms_max = 12.2
media_mbps_outer = 21.3
media_mbps_inner = 14.5
zones = 8
cylinders = 6962
heads = 12
controller_overhead_us = 300.0
cache_bytes = 1048576

[devices.cpus.sd500]
mhz = 500.0              # §2.2 / §5: 300-500 MHz embedded processor; 500 MHz platform
[devices.cpus.client500]
mhz = 500.0

[devices.links.ib1x]
bandwidth_mbps = 250.0   # InfiniBand 1x data rate (IBA spec 1.0a)
latency_us = 5.0         # assumption
[devices.links.ib4x]
bandwidth_mbps = 1000.0  # assumption: 4x uplinks between group switches and the router
latency_us = 5.0
"""

def chiu_systems(mem):
    two = "".join(
        f"""
[systems.{name}_2g]
kind = "sd_groups"
groups = 2                   # two groups behind the router
disks = 8
disk = "cheetah9lp"
disk_cpu = "sd500"
disk_memory_mb = {mem}
host_cpu = "client500"
host_memory_mb = 64
net_link = "ib1x"
uplink = "ib4x"
communication = "{comm}"
buffers_per_stream = 2
""" for name, comm in [("sd_full", "direct"), ("sd_partial", "via_host")])
    return two + f"""
[systems.sd_full]
kind = "sd_groups"
groups = 1
disks = 8
disk = "cheetah9lp"
disk_cpu = "sd500"
disk_memory_mb = {mem}
host_cpu = "client500"
host_memory_mb = 64
net_link = "ib1x"
uplink = "ib4x"
communication = "direct"     # fully distributed: disk-to-disk
buffers_per_stream = 2

[systems.sd_partial]
kind = "sd_groups"
groups = 1
disks = 8
disk = "cheetah9lp"
disk_cpu = "sd500"
disk_memory_mb = {mem}
host_cpu = "client500"
host_memory_mb = 64
net_link = "ib1x"
uplink = "ib4x"
communication = "via_host"   # partially distributed: data between disks goes through the client
buffers_per_stream = 2
"""

def chiu_file(name, recreates, wl, sweep, report, mem, system="sd_full"):
    w("chiu", name, f"""
[experiment]
name = "chiu-{name}"
paper = "chiu"
recreates = "{recreates}"

[workload]
{wl}

[run]
system = "{system}"

[sweep]
{sweep}

[report]
{report}
{CHIU_DEVICES}
{chiu_systems(mem)}
""")

chiu_file("tpch", "chiu-… §5.1 Fig. 5: Q1, Q6, Q12 partially vs fully distributed, 4-32 smart disks, SF 0.1 and 1",
          'kind = "tpch_sd"\nquery = "Q1"\nscale_factor = 1.0\npage_kb = 8.0',
          '"workload.query" = ["Q1", "Q6", "Q12"]\n"workload.scale_factor" = [0.1, 1.0]\n"run.system" = ["sd_partial", "sd_full"]\n"run.disks" = [4, 8, 16, 32]',
          'x = "run.disks"\ny = "total_s"\nlog_y = true', 32)
chiu_file("tpch-two-groups", "chiu-… §3/§4.1.2 Fig. 3: Q12 with lineitem and orders in different smart-disk groups behind a router (cross-group join) vs one group",
          'kind = "tpch_sd"\nquery = "Q12"\nscale_factor = 1.0\npage_kb = 8.0\ntables_in_separate_groups = true   # §4.1.2: R in SDG 1, S in SDG 2',
          '"run.system" = ["sd_partial", "sd_full", "sd_partial_2g", "sd_full_2g"]\n"run.disks" = [8, 16, 32]',
          'x = "run.disks"\ny = "total_s"', 32)
chiu_file("fsc", "chiu-… §5.2 Figs. 6-7: frequent-set counting, count vs hybrid distribution, 2-32 disks, 4-64 KB pages",
          'kind = "fsc"\ntransactions_per_disk = 100000.0\nitems_per_transaction = 20.0\ndistribution = "count"\npage_kb = 8.0',
          '"workload.distribution" = ["count", "hybrid"]\n"run.disks" = [2, 4, 8, 16, 32]\n"workload.page_kb" = [4.0, 8.0, 16.0, 32.0, 64.0]',
          'x = "run.disks"\ny = "total_s"', 64)
chiu_file("clustering", "chiu-… §5.3: subspace clustering of 2,234,961 20-dimensional records, 1-32 disks, 8-64 KB pages",
          'kind = "clustering"\nrecords = 2234961.0\ndimensions = 20.0\npage_kb = 8.0',
          '"run.disks" = [1, 2, 4, 8, 16, 32]\n"workload.page_kb" = [8.0, 16.0, 32.0, 64.0]',
          'x = "run.disks"\ny = "total_s"', 64)
chiu_file("fft", "chiu-… §5.4: out-of-core 2-D FFT of a 2048x2048 complex matrix, 1-32 disks, 4-64 KB pages, normalized to 1 disk with 4 KB pages",
          'kind = "fft"\nfft_n = 2048.0\nelement_bytes = 16.0\npage_kb = 4.0',
          '"run.disks" = [1, 2, 4, 8, 16, 32]\n"workload.page_kb" = [4.0, 8.0, 16.0, 32.0, 64.0]',
          'x = "run.disks"\ny = "normalized"\nbaseline = { "run.disks" = 1, "workload.page_kb" = 4.0 }', 64)

# ---------------------------------------------------------------- embedded copies
def write_embedded():
    entries = []
    for paper in ["acharya", "uysal", "memik", "riedel", "chiu"]:
        d = os.path.join(ROOT, paper)
        for f in sorted(os.listdir(d)):
            if f.endswith(".toml"):
                entries.append(f'    (\n        "{paper}/{f}",\n        include_str!("../../../experiments/{paper}/{f}"),\n    ),')
    out = os.path.join(ROOT, "..", "crates", "adisk-sim", "src", "embedded.rs")
    with open(out, "w") as fh:
        fh.write("//! Built-in copies of the experiment files, so `adisk sim reproduce` works from any directory.\n")
        fh.write("//! Generated by `experiments/generate.py`; a test checks it matches `experiments/`.\n\n")
        fh.write("/// (path under experiments/, text).\n")
        fh.write("pub const EXPERIMENTS: &[(&str, &str)] = &[\n")
        fh.write("\n".join(entries) + "\n];\n")

write_embedded()


# ---------------------------------------------------------------- assumption tables in docs
def assumption_tables():
    """Markdown: per paper, every assumption of its experiment files with its justification."""
    out = []
    for paper in ["acharya", "uysal", "memik", "riedel", "chiu"]:
        rows = {}
        d = os.path.join(ROOT, paper)
        for f in sorted(os.listdir(d)):
            if not f.endswith(".toml"):
                continue
            table, block = "", []
            for line in open(os.path.join(d, f), encoding="utf-8"):
                s = line.strip()
                if s.startswith("#"):
                    block.append(s)
                    continue
                if s.startswith("["):
                    table, block = s.strip("[]"), []
                    continue
                m = KEY_RE.match(line)
                if m:
                    key = m.group(1).strip('"')
                    value = line.split("=", 1)[1].strip()
                    for c in block:
                        if c.startswith("# assumption:"):
                            body = c[len("# assumption:"):].strip()
                            why, considered = body.split("; considered:", 1)
                            path = f"{table}.{key}" if table != "variants" else f"variants.{key}"
                            r = rows.setdefault((why.strip(), considered.strip()), {"keys": set(), "values": set(), "files": set()})
                            r["keys"].add(path)
                            r["values"].add(value if len(value) < 40 else value[:37] + "…")
                            r["files"].add(f[:-5])
                block = []
        out.append(f"\n#### {paper}-… ({len(rows)} assumptions)\n")
        out.append("| keys | value(s) | why | also considered | files |")
        out.append("|---|---|---|---|---|")
        for (why, considered), r in sorted(rows.items(), key=lambda kv: sorted(kv[1]["keys"])[0]):
            keys = ", ".join(f"`{k}`" for k in sorted(r["keys"])[:4]) + (f" (+{len(r['keys']) - 4})" if len(r["keys"]) > 4 else "")
            vals = ", ".join(sorted(r["values"])[:3]).replace("|", "\\|") + (" …" if len(r["values"]) > 3 else "")
            files = "all" if len(r["files"]) == len([x for x in os.listdir(d) if x.endswith(".toml")]) else ", ".join(sorted(r["files"]))
            out.append(f"| {keys} | {vals} | {why.replace('|', '/')} | {considered.replace('|', '/')} | {files} |")
    return "\n".join(out) + "\n"


def write_docs_tables():
    doc = os.path.join(ROOT, "..", "docs", "simulator.md")
    text = open(doc, encoding="utf-8").read()
    begin, end = "<!-- assumptions:begin (generated by experiments/generate.py) -->", "<!-- assumptions:end -->"
    if begin not in text:
        return
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(doc, "w", encoding="utf-8") as fh:
        fh.write(head + begin + "\n" + assumption_tables() + end + tail)


write_docs_tables()
