#!/usr/bin/env python3
"""Writes the experiment files under experiments/<paper>/ (run from anywhere).

The TOML files are the source of truth and are committed; this script only keeps their
shared device catalogues consistent. Every number is taken from the paper named in the
comment next to it, or marked as an assumption (see docs/simulator.md)."""
import os

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

def w(paper, name, text):
    d = os.path.join(ROOT, paper)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".toml"), "w") as f:
        f.write(text.strip() + "\n")

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
queue_depth = 8          # §4: up to eight asynchronous stripe requests{sp}

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
queue_depth = 8{sp}

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
               [("small (4 GB)", 'kind = "datacube", dataset_bytes = 4.29e9, tuple_bytes = 32.0, cardinalities = [1342177.0, 134217.0, 13421.0, 1342.0]'),
                ("large (8 GB)", 'kind = "datacube", dataset_bytes = 8.58e9, tuple_bytes = 32.0, cardinalities = [2684354.0, 268434.0, 26842.0, 2684.0]')]),
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
    "group_by": 'kind = "group_by", dataset_bytes = 17.18e9, tuple_bytes = 64.0, groups = 13.5e6, entry_bytes = 16.0',
    "datacube": 'kind = "datacube", dataset_bytes = 17.15e9, tuple_bytes = 32.0, cardinalities = [5.36e6, 536000.0, 53600.0, 5360.0]',
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
"run.system" = ["active_disks", "ad_restricted", "ad_400mbps", "ad_1ghz_frontend", "ad_64mb", "ad_128mb", "cluster", "cluster_1gbps", "smp", "smp_400mbps"]
"run.disks" = [32, 128]

{variants(list(UYSAL_APPS.items()))}
[report]
x = "run.system"
y = "normalized"
baseline = {{ "run.system" = "active_disks" }}
{UYSAL_DEVICES}
{UYSAL_SYSTEMS.replace("SPLIT", "false")}
""")
