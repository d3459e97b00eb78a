"""Where every key of every experiment file comes from (used by generate.py).

Each key gets a comment line directly above it:
  # source: <paper file> <§/Table/Fig.> — "<phrase quoted from the paper>"
  # assumption: <why>; considered: <what else was considered>
A key may carry both (a paper sentence that frames it and a value the paper does not state);
`adisk sim sensitivity` halves and doubles every numeric key tagged `assumption`.
The quotes are checked against shared/papers/*.txt by generate.py and by the sim crate's
traceability test when that directory exists.

Lookup order for a key: "<file>:<path>", then "<path>", then the glob patterns in order.
Paths: "<table>.<key>" with [[variants]] as "variants{<label>]" and quoted keys unquoted.
"""
import fnmatch

A_ = "acharya-active-disks-programming-model.txt"
U_ = "uysal-active-disks-clusters-smps.txt"
M_ = "memik-smart-disk-cluster-dss.txt"
R_ = "riedel-active-disk-databases.txt"
C_ = "chiu-distributed-smart-disks.txt"


def S(paper, loc, quote):
    return f'# source: {paper} {loc} — "{quote}"'


def A(why, considered):
    return f"# assumption: {why}; considered: {considered}"


def both(*lines):
    return "\n".join(lines)


PRESENT = "presentation only, it selects what the figure and table show and enters no model"

CUBE_ATTRS = A("independent uniform attributes; the papers state each attribute's distinct values, not their joint distribution, and the dataset scales one of PipeHash's (uysal-… ref. 4, acharya-… ref. 3), not in our copies", "hierarchical, the fewest groups any distribution allows (docs/simulator.md, Derivations)")

# ------------------------------------------------------------------ drives shared by papers
CHEETAH9LP = {
    "rpm": S(U_, "§4", "These disks have a spindle speed of 10,025 rpm"),
    "seek_ms_min": both(S(U_, "§4", "disks similar to the Seagate 39102FC from the Cheetah 9LP disk family"),
                        A("0.6 ms track-to-track from the ST39102 product manual (uysal-… ref. 33, not in our copies)", "1.0 ms as for acharya-…'s drive")),
    "seek_ms_mean": S(U_, "§4", "an average seek time of 5.4 ms/6.2 ms (read/write)"),
    "seek_ms_max": S(U_, "§4", "a maximum seek time of 12.2 ms/13.2 ms (read/write)"),
    "media_mbps_outer": S(U_, "§4", "a formatted media transfer rate of 14.5-21.3 MB/s"),
    "media_mbps_inner": S(U_, "§4", "a formatted media transfer rate of 14.5-21.3 MB/s"),
    "zones": both(S(U_, "§3", "DiskSim has a detailed disk model that supports zoned disks"),
                  A("8 zones of equal cylinder count from the ST39102 product manual (not in our copies)", "1 zone at the mean rate")),
    "cylinders": A("6,962 cylinders from the ST39102 product manual (not in our copies)", "any geometry giving 9.1 GB; only seek distances depend on it"),
    "heads": A("12 heads from the ST39102 product manual (not in our copies)", "any geometry giving 9.1 GB"),
    "controller_overhead_us": A("300 us per new access, typical of late-1990s SCSI/FC controllers; no paper states it", "100 us to 1 ms"),
    "cache_bytes": A("1 MB track buffer for read-ahead; no paper states the ST39102's segment size", "512 KB to 4 MB (acharya-… §1: disk caches up to 4 MB)"),
}

CHEETAH9LP_CHIU = dict(CHEETAH9LP)
for k in list(CHEETAH9LP_CHIU):
    CHEETAH9LP_CHIU[k] = both(
        A("chiu-… gives no drive parameters, so its drive is taken to be uysal-…'s Cheetah 9LP (same generation)", "memik-…'s Table 3 drive"),
        S(C_, "§5", "DiskSim 2.0 simulator [23] was used to simulate the cost of accessing the disk drive"),
        CHEETAH9LP[k])

# ------------------------------------------------------------------ acharya
ACH_TABLE1 = {
    "host_today": S(A_, "Table 1", "Host CPU | 350 MHz | 500 MHz"),
    "host_future": S(A_, "Table 1", "Host CPU | 350 MHz | 500 MHz"),
    "disk_today": S(A_, "Table 1", "Disk CPU | 200 MHz | 300 MHz"),
    "disk_future": S(A_, "Table 1", "Disk CPU | 200 MHz | 300 MHz"),
}
ACH_DISK = {
    "rpm": S(A_, "Table 1", "RPM | 10000 | 12500"),
    "seek_ms_min": both(S(A_, "§5.1 footnote 4", "The latency of initiating the disk-head moves dominates for short seeks"),
                        A("1.0 ms minimum seek, Table 1 gives only mean and max", "0.6 ms of the Cheetah 9LP")),
    "seek_ms_mean": S(A_, "Table 1", "Mean and Max seek time | 9 ms, 18 ms | 9 ms, 18 ms"),
    "seek_ms_max": S(A_, "Table 1", "Mean and Max seek time | 9 ms, 18 ms | 9 ms, 18 ms"),
    "media_mbps_outer": S(A_, "Table 1", "Media Rate | 15 MB/s | 20 MB/s"),
    "media_mbps_inner": both(S(A_, "Table 1", "Media Rate | 15 MB/s | 20 MB/s"),
                             A("one media rate for the whole drive, as Table 1 gives one", "zoned 21.3-14.5 MB/s scaled to this mean")),
    "zones": both(S(A_, "§5.1", "a model for disk-geometry that includes multiple zones"),
                  A("one zone, as Table 1 gives a single media rate", "8 zones as the Cheetah 9LP")),
    "cylinders": A("Cheetah 9LP geometry (6,962 cylinders), the drive generation of Table 1", "any geometry; only seek distances depend on it"),
    "heads": A("Cheetah 9LP geometry (12 heads)", "any geometry"),
    "controller_overhead_us": both(S(A_, "§5.1", "The disk model includes a fixed cost for the controller overhead"),
                                   A("300 us, the paper gives no value", "100 us to 1 ms")),
    "cache_bytes": both(S(A_, "§1", "disk caches are already up to 4 MB"),
                        A("1 MB read-ahead buffer", "4 MB")),
}
ACHARYA = {
    "experiment.name": S(A_, "§5", "To explore the scalability of the two architectures, we varied the number of disks in each configuration from 4 to 32"),
    "experiment.paper": S(A_, "§5", "we compared the performance of conventional-disk and active-disk versions of the algorithms in our suite"),
    "experiment.recreates": S(A_, "§5", "To explore the scalability of the two architectures, we varied the number of disks in each configuration from 4 to 32"),
    "experiment.description": S(A_, "§4", "We present six algorithms from three application domains"),
    "run.system": S(A_, "§5", "For the core set of experiments, we used two configurations"),
    "run.request_kb": S(A_, "§4", "stripe the data across all disks with 256 KB chunks per disk per stripe"),
    "sweep.run.system": S(A_, "§5", "For the core set of experiments, we used two configurations"),
    "sweep.run.disks": S(A_, "§5", "we varied the number of disks in each configuration from 4 to 32"),
    "sweep.devices.links.loop_today.bandwidth_mbps": S(A_, "§5", "interconnect bandwidth (40 MB-400 MB)"),
    "sweep.devices.cpus.host_today.mhz": S(A_, "§5", "host processor speed (350MHz-3 GHz)"),
    "report.*": A(PRESENT, "speed-up over the conventional system as y"),
    "devices.links.*.latency_us": both(S(A_, "§5.1", "the latency to initiate a transfer, the capacity of the interconnect and the transfer speed"),
                                       A("1 us, the paper gives no value", "10 us")),
    "devices.links.loop_today.bandwidth_mbps": S(A_, "Table 1", "dual FiberChannel loops with 100 MB/s per loop for Today and 150 MB/s per loop for Future"),
    "devices.links.loop_future.bandwidth_mbps": S(A_, "Table 1", "dual FiberChannel loops with 100 MB/s per loop for Today and 150 MB/s per loop for Future"),
    "systems.conventional_*.kind": S(A_, "§4", "The conventional-disk algorithms are optimized for I/O performance"),
    "systems.active_*.kind": S(A_, "§4", "In this section, we describe conventional-disk and active-disk versions of the algorithms in our suite"),
    "systems.*.disks": S(A_, "§5", "we varied the number of disks in each configuration from 4 to 32"),
    "systems.*_today.disk": S(A_, "Table 1", "Media Rate | 15 MB/s | 20 MB/s"),
    "systems.*_future.disk": S(A_, "Table 1", "Media Rate | 15 MB/s | 20 MB/s"),
    "systems.*.host_cpu": S(A_, "Table 1", "Host CPU | 350 MHz | 500 MHz"),
    "systems.*.disk_cpu": S(A_, "Table 1", "Disk CPU | 200 MHz | 300 MHz"),
    "systems.*.host_memory_mb": S(A_, "Table 1", "Host Memory | 1 GB | 1 GB"),
    "systems.*.disk_memory_mb": S(A_, "Table 1", "Disk Memory | 16 MB | 32 MB"),
    "systems.*.io_link": S(A_, "Table 1", "I/O Interconnect | 200 MB/s | 300 MB/s"),
    "systems.*.io_loops": S(A_, "Table 1", "The I/O interconnect is assumed to be dual FiberChannel loops"),
    "systems.*.queue_depth": S(A_, "§4", "all algorithms use aggressive prefetching issuing up to eight asynchronous I/O requests"),
    "systems.*.queue_depth_sort_phase_one": S(A_, "§4", "issuing up to eight asynchronous I/O requests (two for sort phase one)"),
    "systems.*.split_read_write": S(A_, "§4", "For external sort, the data is striped on half of the disks for reading and the other half for writing"),
    "systems.*.communication": S(A_, "§6", "all communication between the disks happens via the host"),
    "systems.*.buffers_per_stream": S(A_, "§5.1", "overlaps I/O and computation at the disk-processor by using two buffers per stream"),
    "workload.kind": S(A_, "§1", "SQL select, SQL group-by, external sort, the datacube operation for decision support [14], image convolution and generation of earth images"),
    "variants{*}.label": S(A_, "§5.2", "we used two datasets for these algorithms"),
    "*select:variants{small (4 GB)}.set": both(S(A_, "§5.2", "The smaller dataset was 4 GB (67 million tuples)"), S(A_, "§5.2", "For select, we assumed a selectivity of 1%")),
    "*select:variants{large (8 GB)}.set": both(S(A_, "§5.2", "the larger dataset was 8 GB (134 million tuples)"), S(A_, "§5.2", "For select, we assumed a selectivity of 1%")),
    "*group_by:variants{small (4 GB)}.set": both(S(A_, "§5.2", "the smaller dataset had 3.35 million distinct values"), A("16-byte hash entry (key and one sum)", "24 bytes with a chain pointer")),
    "*group_by:variants{large (8 GB)}.set": both(S(A_, "§5.2", "the larger dataset had 6.7 million distinct values"), A("16-byte hash entry (key and one sum)", "24 bytes with a chain pointer")),
    "*sort:variants{small (2 GB)}.set": S(A_, "§5.2", "The smaller dataset was 2 GB (21.5 million tuples)"),
    "*sort:variants{large (4 GB)}.set": S(A_, "§5.2", "the larger dataset was 4 GB (43 million tuples)"),
    "*datacube:variants{small (4 GB)}.set": both(S(A_, "§5.2", "1342177, 134217, 13421, and 1342 for the smaller dataset"), CUBE_ATTRS),
    "*datacube:variants{large (8 GB)}.set": both(S(A_, "§5.2", "2684354, 268434, 26842 and 2684 for the larger dataset"), CUBE_ATTRS),
    "*conv:variants{10,000 512x512 images}.set": both(S(A_, "§5.2", "10,000 512x512 images with one byte per pixel"), S(A_, "§5.2", "We used a 16x16 convolution kernel")),
    "*earth:variants{small (6 GB -> 228 MB)}.set": both(S(A_, "§5.2", "The output image for the smaller dataset was 228 MB"), A("each output pixel is covered 10 times (ten-day composite)", "5 or 20 overlapping passes")),
    "*earth:variants{large (12 GB -> 556 MB)}.set": both(S(A_, "§5.2", "the output image for the larger dataset was 556 MB"), A("each output pixel is covered 10 times (ten-day composite)", "5 or 20 overlapping passes")),
    "variants{select}.set": both(S(A_, "§5.2", "The smaller dataset was 4 GB (67 million tuples)"), S(A_, "§5.2", "For select, we assumed a selectivity of 1%")),
    "variants{group_by}.set": both(S(A_, "§5.2", "the smaller dataset had 3.35 million distinct values"), A("16-byte hash entry (key and one sum)", "24 bytes with a chain pointer")),
    "variants{sort}.set": S(A_, "§5.2", "The smaller dataset was 2 GB (21.5 million tuples)"),
    "variants{datacube}.set": both(S(A_, "§5.2", "1342177, 134217, 13421, and 1342 for the smaller dataset"), CUBE_ATTRS),
    "variants{conv}.set": both(S(A_, "§5.2", "10,000 512x512 images with one byte per pixel"), S(A_, "§5.2", "We used a 16x16 convolution kernel")),
    "variants{earth}.set": both(S(A_, "§5.2", "The output image for the smaller dataset was 228 MB"), A("each output pixel is covered 10 times (ten-day composite)", "5 or 20 overlapping passes")),
    "variants{*}.set": S(A_, "§5.2", "Select, Group-by: we used two datasets for these algorithms"),
    "workload.dataset_bytes": S(A_, "§5.2", "The smaller dataset was 4 GB (67 million tuples)"),
    "*sort:workload.dataset_bytes": S(A_, "§5.2", "The smaller dataset was 2 GB (21.5 million tuples)"),
    "*datacube:workload.dataset_bytes": S(A_, "§5.2", "The smaller dataset was 4 GB (134 million tuples)"),
    "*conv:workload.dataset_bytes": S(A_, "§5.2", "10,000 512x512 images with one byte per pixel"),
    "*earth:workload.dataset_bytes": S(A_, "§5.2", "The size of the smaller dataset was 6 GB"),
    "workload.tuple_bytes": S(A_, "§5.2", "The tuplesize for both datasets was 64-bytes"),
    "*sort:workload.tuple_bytes": S(A_, "§5.2", "we used two datasets with 100-byte tuples and 10-byte uniformly distributed keys"),
    "*datacube:workload.tuple_bytes": S(A_, "§5.2", "Datacube: we used two datasets with 32-byte tuples"),
    "workload.selectivity": S(A_, "§5.2", "For select, we assumed a selectivity of 1%"),
    "workload.groups": S(A_, "§5.2", "the smaller dataset had 3.35 million distinct values"),
    "workload.entry_bytes": A("16-byte hash entry (key and one sum)", "24 bytes with a chain pointer"),
    "workload.cardinalities": S(A_, "§5.2", "1342177, 134217, 13421, and 1342 for the smaller dataset"),
    "workload.attribute_distribution": both(S(A_, "§5.2", "The number of distinct values for each of the group-by attributes were"), CUBE_ATTRS),
    "workload.image_side": S(A_, "§5.2", "10,000 512x512 images with one byte per pixel"),
    "workload.kernel_side": S(A_, "§5.2", "We used a 16x16 convolution kernel"),
    "workload.output_bytes": S(A_, "§5.2", "The output image for the smaller dataset was 228 MB"),
    "workload.coverage": both(S(A_, "§5.2", "ten-day composites of low-resolution and high-resolution AVHRR images"),
                              A("each output pixel is covered 10 times (one pass a day)", "5 or 20 overlapping passes")),
}
for d in ["today", "future"]:
    for k, v in ACH_DISK.items():
        ACHARYA[f"devices.disks.{d}.{k}"] = v
for c, v in ACH_TABLE1.items():
    ACHARYA[f"devices.cpus.{c}.mhz"] = v

# ------------------------------------------------------------------ uysal
UYSAL = {
    "experiment.*": S(U_, "§4", "For each architecture, we defined configurations with 16, 32, 64 and 128 disks (and processors)"),
    "*ssd-whatif*:experiment.*": A("extension beyond uysal-…: SSDs in place of the drives (not a paper figure)", "NVMe-class devices"),
    "*variations:experiment.*": S(U_, "§4", "we performed additional experiments by selectively scaling individual components"),
    "run.system": S(U_, "Abstract", "active disks, clusters, and shared memory multiprocessors (SMPs)"),
    "run.request_kb": S(U_, "§5", "We adapted all algorithms to use large (256 KB) I/O requests"),
    "sweep.run.system": S(U_, "Abstract", "active disks, clusters, and shared memory multiprocessors (SMPs)"),
    "*ssd-whatif*:sweep.run.system": A("active disks and clusters with drives or SSDs", "the SMP with SSDs"),
    "*variations:sweep.run.system": S(U_, "§4", "To identify the bottleneck resources for individual applications, we studied alternative configurations"),
    "sweep.run.disks": S(U_, "§4", "we defined configurations with 16, 32, 64 and 128 disks (and processors)"),
    "*variations:sweep.run.disks": A("two of the paper's sizes (32 and 128) keep the file under a few seconds", "all four sizes"),
    "report.*": A(PRESENT + "; normalized to active disks of the same size", "raw totals"),
    "variants{*}.label": S(U_, "§1", "we use a suite of nine applications"),
    "devices.cpus.cyrix200.mhz": S(U_, "§4", "a Cyrix 6x86 200MX processor (200 MHz) and 32 MB of 10ns SDRAM were integrated in the disk units"),
    "devices.cpus.p2_450.mhz": S(U_, "§4", "a front-end host with a 450 MHz Pentium II and 1 GB RAM"),
    "devices.cpus.p2_1000.mhz": S(U_, "§4", "the speed of the processor in the front-end host to 1 GHz"),
    "devices.cpus.p2_300.mhz": S(U_, "§4", "a 300 MHz Pentium II"),
    "devices.cpus.r10k_250.mhz": S(U_, "§4", "two-processor boards (with 250 MHz processors) that directly share 128 MB memory"),
    "devices.links.fc_loop.bandwidth_mbps": S(U_, "§4", "a dual-loop Fiber-channel interface with a bandwidth of 200 MB/s (100 MB/s per loop)"),
    "devices.links.fc_loop_200.bandwidth_mbps": S(U_, "§4", "the aggregate bandwidth of the serial interconnect to 400 MB/s"),
    "devices.links.pci.bandwidth_mbps": S(U_, "§4", "a 133 MB/s PCI bus"),
    "devices.links.fast_ethernet.bandwidth_mbps": S(U_, "§4", "a 100BaseT ethernet NIC"),
    "devices.links.gigabit.bandwidth_mbps": S(U_, "§4", "24-port 100BaseT ethernet switches with two gigabit ethernet uplinks"),
    "devices.links.origin_link.bandwidth_mbps": S(U_, "§4", "latency and 780 MB/s bandwidth"),
    "devices.links.origin_link.latency_us": S(U_, "§4", "a low-latency high-bandwidth interconnect between these boards (1μ s latency"),
    "devices.links.origin_bte.bandwidth_mbps": S(U_, "§4", "a high-performance block-transfer engine (521 MB/s sustained bandwidth [24])"),
    "devices.links.xio.bandwidth_mbps": S(U_, "§4", "two I/O nodes with a total of 1.4 GB/s bandwidth"),
    "devices.links.fast_ethernet.latency_us": A("10 us per store-and-forward hop of a 3Com SuperStack II switch; the paper gives no value", "5-50 us"),
    "devices.links.gigabit.latency_us": A("10 us per hop; the paper gives no value", "5-50 us"),
    "devices.links.*.latency_us": A("1 us to start a transfer on a loop, bus or I/O node; the paper gives no value", "10 us"),
    "devices.ssds.*": A("modern what-if: a typical SATA SSD of 8 channels x 4 dies, 16 KB pages, 50/500 us read/program, 400 MB/s channels, 550 MB/s interface", "NVMe at 3 GB/s"),
    "systems.active_disks.kind": S(U_, "§4", "Active Disk configurations were scaled by adding disk units (each with an embedded processor)"),
    "systems.ad_*.kind": S(U_, "§4", "Active Disk configurations were scaled by adding disk units (each with an embedded processor)"),
    "systems.active_ssds.kind": S(U_, "§4", "Active Disk configurations were scaled by adding disk units (each with an embedded processor)"),
    "systems.cluster*.kind": S(U_, "§4", "cluster configurations were scaled by adding new hosts, each with a single processor and a single disk"),
    "systems.smp*.kind": S(U_, "§4", "We assumed an SMP configuration similar to the SGI Origin 2000"),
    "systems.*.disks": S(U_, "§4", "we used configurations with equal number of disks (and processors)"),
    "systems.*.disk": S(U_, "§4", "For all configurations, we assumed disks similar to the Seagate 39102FC"),
    "systems.*.ssd": A("what-if: the SSD in place of the drive", "keeping the drive"),
    "systems.*.disk_cpu": S(U_, "§4", "a Cyrix 6x86 200MX processor (200 MHz) and 32 MB of 10ns SDRAM were integrated in the disk units"),
    "systems.ad_64mb.disk_memory_mb": S(U_, "§4", "the memory integrated into the disk unit to 64 MB and 128 MB"),
    "systems.ad_128mb.disk_memory_mb": S(U_, "§4", "the memory integrated into the disk unit to 64 MB and 128 MB"),
    "systems.*.disk_memory_mb": S(U_, "§4", "a Cyrix 6x86 200MX processor (200 MHz) and 32 MB of 10ns SDRAM were integrated in the disk units"),
    "systems.ad_1ghz_frontend.host_cpu": S(U_, "§4", "the speed of the processor in the front-end host to 1 GHz"),
    "systems.cluster*.host_cpu": S(U_, "§4", "a 300 MHz Pentium II"),
    "systems.smp*.host_cpu": S(U_, "§4", "two-processor boards (with 250 MHz processors) that directly share 128 MB memory"),
    "systems.*.host_cpu": S(U_, "§4", "communications with clients are handled by a front-end host with a 450 MHz Pentium II and 1 GB RAM"),
    "systems.cluster*.host_memory_mb": S(U_, "§4", "128 MB of 10ns SDRAM"),
    "systems.smp*.host_memory_mb": S(U_, "§4", "two-processor boards (with 250 MHz processors) that directly share 128 MB memory"),
    "systems.*.host_memory_mb": S(U_, "§4", "a front-end host with a 450 MHz Pentium II and 1 GB RAM"),
    "systems.smp*.io_link": S(U_, "§4", "a dual-loop Fiber Channel I/O interconnect (200 MB/s) for all disks"),
    "systems.smp_400mbps.io_link": S(U_, "§4", "individually scaled the bandwidth of the serial I/O interconnect to 400 MB/s"),
    "systems.ad_400mbps.io_link": S(U_, "§4", "the aggregate bandwidth of the serial interconnect to 400 MB/s"),
    "systems.*.io_link": S(U_, "§4", "all the disks were connected by a dual-loop Fiber-channel interface with a bandwidth of 200 MB/s (100 MB/s per loop)"),
    "systems.*.io_loops": S(U_, "§4", "a dual-loop Fiber-channel interface with a bandwidth of 200 MB/s (100 MB/s per loop)"),
    "systems.ad_restricted.communication": S(U_, "§4", "restrict disks to communicate only with the front-end host"),
    "systems.*.communication": S(U_, "§4", "the disks can directly address and communicate with each other using a SCSI-like interface"),
    "systems.ad_64mb.buffers_per_stream": S(U_, "§4", "the number of buffers allocated per stream by the DiskOS was increased from two to four and eight respectively"),
    "systems.ad_128mb.buffers_per_stream": S(U_, "§4", "the number of buffers allocated per stream by the DiskOS was increased from two to four and eight respectively"),
    "systems.*.buffers_per_stream": S(U_, "§4", "the number of buffers allocated per stream by the DiskOS was increased from two to four and eight respectively"),
    "systems.*.base_disk_memory_mb": S(U_, "§4", "a Cyrix 6x86 200MX processor (200 MHz) and 32 MB of 10ns SDRAM were integrated in the disk units"),
    "systems.*.base_buffers_per_stream": S(U_, "§4", "the number of buffers allocated per stream by the DiskOS was increased from two to four and eight respectively"),
    "systems.*.disks_per_host": S(U_, "§4", "adding new hosts, each with a single processor and a single disk"),
    "systems.*.frontend_cpu": S(U_, "§7", "We assumed the same front-end host as for clusters"),
    "systems.*.frontend_memory_mb": S(U_, "§7", "We assumed the same front-end host as for clusters"),
    "systems.*.host_bus": S(U_, "§4", "a 133 MB/s PCI bus"),
    "systems.cluster_1gbps.net_link": S(U_, "§4", "scaled the bandwidth of the network interconnect to 1 Gbps per host"),
    "systems.*.net_link": S(U_, "§4", "a 100BaseT ethernet NIC"),
    "systems.*.nodes_per_switch": S(U_, "§4", "the hosts were connected to 24-port 100BaseT ethernet switches"),
    "systems.*.uplink": S(U_, "§4", "larger configurations being connected to an array of switches with the uplinks connecting to a gigabit ethernet switch"),
    "systems.*.uplinks_per_switch": S(U_, "§4", "24-port 100BaseT ethernet switches with two gigabit ethernet uplinks"),
    "systems.*.frontend_link": both(S(U_, "§7", "the Dell Poweredge 4300 as the front-end host"),
                                    A("the front-end sits on a gigabit port of the core switch; the paper does not say how it is attached", "a 100BaseT port of the first switch like every host")),
    "systems.cluster*.queue_depth": S(U_, "§5", "deep request queues (up to four asynchronous requests)"),
    "systems.*.queue_depth": S(U_, "§5", "each processor issues up to four 256 KB asynchronous requests"),
    "systems.*.cpus_per_board": S(U_, "§4", "two-processor boards (with 250 MHz processors)"),
    "systems.*.board_link": S(U_, "§4", "latency and 780 MB/s bandwidth"),
    "systems.*.bte_link": S(U_, "§4", "a high-performance block-transfer engine (521 MB/s sustained bandwidth [24])"),
    "systems.*.xio_link": S(U_, "§4", "a high-bandwidth I/O subsystem (two I/O nodes with a total of 1.4 GB/s bandwidth), similar to XIO"),
    "systems.*.xio_nodes": S(U_, "§4", "two I/O nodes with a total of 1.4 GB/s bandwidth"),
    "systems.*.split_read_write": S(U_, "§5", "we partitioned the disks into separate read and write groups"),
    "workload.kind": S(U_, "§1", "we use a suite of nine applications"),
    "workload.dataset_bytes": S(U_, "§6", "we used a dataset with about 268 million tuples, each tuple being 64 bytes"),
    "*datacube:workload.dataset_bytes": S(U_, "§6", "we used a dataset with 536 million tuples"),
    "*sort:workload.dataset_bytes": S(U_, "§6", "The total number of tuples was about 170 million"),
    "*join:workload.dataset_bytes": S(U_, "§6", "Each relation was 16 GB and contained 268 million tuples"),
    "*dmine:workload.dataset_bytes": S(U_, "§6", "We used 16 GB datasets for all the applications except"),
    "*conv:workload.dataset_bytes": S(U_, "§6", "65536 512x512 grayscale images with one byte per pixel"),
    "*earth:workload.dataset_bytes": S(U_, "§6", "We used 16 GB datasets for all the applications except"),
    "workload.tuple_bytes": S(U_, "§6", "we used a dataset with about 268 million tuples, each tuple being 64 bytes"),
    "*datacube:workload.tuple_bytes": S(U_, "§6", "Each tuple had eight 4-byte attributes"),
    "*sort:workload.tuple_bytes": S(U_, "§6", "we used a dataset with 100-byte tuples and 10-byte uniformly distributed keys"),
    "*join:workload.tuple_bytes": S(U_, "§6", "we used a dataset with 64-byte tuples and 4-byte uniformly distributed keys"),
    "workload.selectivity": S(U_, "§6", "we test a single 4-byte field with a selectivity of 1%"),
    "workload.groups": S(U_, "§6", "a 4-byte field with 13.5 million distinct values as the grouping attribute"),
    "workload.entry_bytes": A("16-byte hash entry (4-byte key, sum, bookkeeping)", "24 bytes"),
    "workload.memory_parametrised": S(U_, "§3", "For applications that use the amount of memory available as an explicit parameter (Sort, Join and Datacube), we generated traces for multiple memory sizes"),
    "workload.cardinalities": S(U_, "§6", "5.36 million, 536,000, 53,600 and 5,360"),
    "workload.attribute_distribution": both(S(U_, "§6", "We created this dataset by scaling one of the datasets used in the paper that described the"), CUBE_ATTRS),
    "workload.projected_bytes": S(U_, "§6", "The projection operation extracted eight 4-byte fields from each tuple"),
    "workload.output_bytes": S(U_, "§6", "The output for join was about 108 MB"),
    "*earth:workload.output_bytes": S(U_, "§6", "The output image for this dataset was 556 MB"),
    "workload.transactions": S(U_, "§6", "we used a dataset with 300 million transactions"),
    "workload.items_per_transaction": S(U_, "§6", "the average length of the transactions was 4 items"),
    "workload.repartition_fraction": both(S(U_, "§5", "this application repartitions only a fraction of its input dataset"),
                                          A("25% of the input is repartitioned by eclat's third pass", "10% to 50%")),
    "workload.candidates_per_pass": both(S(U_, "§6", "The total number of items was 1 million"),
                                         A("1 M single-item counters, 500 K (sparse) pair counters", "the full triangular array")),
    "workload.image_side": S(U_, "§6", "65536 512x512 grayscale images with one byte per pixel"),
    "workload.kernel_side": S(U_, "§6", "We used a 5x5 convolution kernel"),
    "workload.coverage": A("each output pixel is covered 10 times", "5 or 20"),
}
for k, v in CHEETAH9LP.items():
    UYSAL[f"devices.disks.cheetah9lp.{k}"] = v
UYSAL_SETS = {
    "select": both(S(U_, "§6", "we used a dataset with about 268 million tuples, each tuple being 64 bytes"), S(U_, "§6", "we test a single 4-byte field with a selectivity of 1%")),
    "aggregate": S(U_, "§6", "For aggr and group-by, we used the sum operation on a 4-byte field"),
    "group_by": both(S(U_, "§6", "a 4-byte field with 13.5 million distinct values as the grouping attribute"), S(U_, "§3", "For applications that use the amount of memory available as an explicit parameter (Sort, Join and Datacube), we generated traces for multiple memory sizes"), A("16-byte hash entry", "24 bytes")),
    "datacube": both(S(U_, "§6", "5.36 million, 536,000, 53,600 and 5,360"), CUBE_ATTRS),
    "sort": S(U_, "§6", "The total number of tuples was about 170 million"),
    "join": both(S(U_, "§6", "Each relation was 16 GB and contained 268 million tuples"), S(U_, "§6", "The output for join was about 108 MB")),
    "dmine": both(S(U_, "§6", "we used a dataset with 300 million transactions"), A("25% repartitioned, 1 M and 500 K counters", "10-50%")),
    "conv": both(S(U_, "§6", "65536 512x512 grayscale images with one byte per pixel"), S(U_, "§6", "We used a 5x5 convolution kernel")),
    "earth": both(S(U_, "§6", "The output image for this dataset was 556 MB"), A("coverage 10", "5 or 20")),
}
for app, v in UYSAL_SETS.items():
    UYSAL[f"variants{{{app}}}.set"] = v

# ------------------------------------------------------------------ memik
M_T3 = "Table 3"
MEMIK = {
    "experiment.*": S(M_, "§6", "First, we explain the base configuration used in the experiments"),
    "*more-queries:experiment.*": A("extension beyond memik-…'s six queries (not a paper figure)", "leaving them out"),
    "workload.kind": S(M_, "§3", "We have used six queries from the TPC-D benchmark"),
    "workload.query": S(M_, "§3", "We have used six queries from the TPC-D benchmark"),
    "workload.size_class": S(M_, M_T3, "Size/relation medium"),
    "workload.selectivity_class": S(M_, M_T3, "Selectivity medium"),
    "workload.bundling": S(M_, "§4.2.1", "In this study, we have used a relation with the following tuples"),
    "workload.page_kb": S(M_, M_T3, "Data page size 8 KB"),
    "run.system": S(M_, "§6.1", "One of the smart disks in the system is employed as the central unit"),
    "sweep.workload.query": S(M_, "§3", "We have used six queries from the TPC-D benchmark"),
    "*more-queries:sweep.workload.query": A("TPC-D Q5, Q9, Q10, Q17 as plan trees (extension)", "other multi-join queries"),
    "sweep.run.system": S(M_, "§6.3", "we compare four different architectures"),
    "*scalability:sweep.run.system": S(M_, "§6.5", "i.e., hosts with 2 disks and 4 disks each"),
    "sweep.run.disks": S(M_, "§6.5", "we conducted experiments with 4, 8, 16, and 32 disks"),
    "*bundling:sweep.run.disks": S(M_, "§6.2", "We have experimented with a smart disk system having 4 disks, and also with a smart disk system having 8 disks"),
    "sweep.workload.bundling": S(M_, "§6.2", "We have conducted experiments using three different bundling schemes"),
    "report.baseline": S(M_, "§6.3", "execution times normalized with respect to the execution times of the single host-based system in base configuration"),
    "*scalability:report.baseline": S(M_, "§6.5", "we take the response time of each architecture with 4 disks as the base"),
    "*bundling:report.baseline": A("normalized to no bundling", "normalized to the paper's relation"),
    "report.style": S(M_, "§6.3", "each bar for the clusters and the smart disk system is divided into three parts"),
    "report.average_over": S(M_, "§6", "The results for all the variations are summarized in Table 8"),
    "report.*": A(PRESENT, "other axes"),
    "variants{*}.label": S(M_, "§6.4", "Table 4 shows all the variations with which we have experimented"),
    "variants{base}.set": S(M_, "§6.4", "all the parameters except the relevant parameter remain the same as in the base configurations (Table 3)"),
    "variants{faster CPU}.set": both(S(M_, "Table 4", "Single Host 1 GHz"), S(M_, "Table 4", "Clusters 800 MHz"), S(M_, "Table 4", "Smart Disk 350 MHz")),
    "variants{page 4K}.set": S(M_, "Table 4", "Single Host 1 GHz {4K, 16K}"),
    "variants{page 16K}.set": S(M_, "Table 4", "Single Host 1 GHz {4K, 16K}"),
    "variants{more memory}.set": S(M_, "Table 4", "Smart Disk 350 MHz {4K, 16K} 64 MB"),
    "variants{faster I/O interconnect}.set": S(M_, "Table 4", "Clusters 800 MHz {4K, 16K} 256 MB 400 MB/s"),
    "variants{4 disks}.set": S(M_, "§6.4.1", "we changed the number of disks in all the systems, without changing the number of machines in cluster systems"),
    "variants{16 disks}.set": S(M_, "§6.4.1", "we changed the number of disks in all the systems, without changing the number of machines in cluster systems"),
    "variants{small database}.set": S(M_, "Table 5", "small 2.4GB 3GB 2.4GB 3GB 0.75GB 0.6GB"),
    "variants{large database}.set": S(M_, "Table 5", "large 24GB 30GB 24GB 30GB 7.5GB 6GB"),
    "variants{low selectivity}.set": S(M_, "Table 6", "small 83 44 2 0.4 100 12"),
    "variants{high selectivity}.set": S(M_, "Table 6", "large 93 63 4 1.6 100 18"),
    "devices.disks.memik.rpm": S(M_, M_T3, "Rotation speed (rpms) 10000"),
    "devices.disks.memik.seek_ms_min": S(M_, M_T3, "Min. seek time 1.62 ms"),
    "devices.disks.memik.seek_ms_mean": S(M_, M_T3, "Mean seek time 8.46 ms"),
    "devices.disks.memik.seek_ms_max": S(M_, M_T3, "Max. seek time 21.77 ms"),
    "devices.disks.memik.media_mbps_outer": A("Table 3 gives only rpm and seek times, slower than the Cheetah 9LP's (mean 8.46 against 5.4 ms), so the drive is not a 9LP; the media rate is the 9LP's 21.3-14.5 MB/s (uysal-… §4), the fastest 10,000 rpm rate the papers quote (riedel-…'s Cheetah 11 MB/s, acharya-…'s Cheetah 9 16 MB/s, Cheetah 18 21 MB/s); no source found, holding ranges in docs/simulator.md (Robustness)", "acharya-…'s 15 MB/s single-zone drive"),
    "devices.disks.memik.media_mbps_inner": A("Table 3 gives only rpm and seek times, slower than the Cheetah 9LP's (mean 8.46 against 5.4 ms), so the drive is not a 9LP; the media rate is the 9LP's 21.3-14.5 MB/s (uysal-… §4), the fastest 10,000 rpm rate the papers quote (riedel-…'s Cheetah 11 MB/s, acharya-…'s Cheetah 9 16 MB/s, Cheetah 18 21 MB/s); no source found, holding ranges in docs/simulator.md (Robustness)", "acharya-…'s 15 MB/s single-zone drive"),
    "devices.disks.memik.*": A("Table 3 gives only rpm and seek times; media rate, zones, geometry, overhead and buffer are the Cheetah 9LP's (uysal-…, same 10,000 rpm generation)", "acharya-…'s 15 MB/s single-zone drive"),
    "devices.cpus.host500.mhz": S(M_, "§6.1", "single host contains a 500 MHz CPU, 256 MB of RAM, and 8 disks connected through a 200 MB/s interconnection network"),
    "devices.cpus.host400.mhz": S(M_, "§6.1", "The hosts in both the clusters have a 400 MHz CPU with 128 MB RAM"),
    "devices.cpus.sd200.mhz": S(M_, "§6.1", "each having a 200 MHz CPU and 32 MB main memory"),
    "devices.cpus.host1000.mhz": S(M_, "Table 4", "Single Host 1 GHz"),
    "devices.cpus.host800.mhz": S(M_, "Table 4", "Clusters 800 MHz"),
    "devices.cpus.sd350.mhz": S(M_, "Table 4", "Smart Disk 350 MHz"),
    "devices.links.io200.bandwidth_mbps": S(M_, M_T3, "I/O interconnect 200 MB/s"),
    "devices.links.io400.bandwidth_mbps": S(M_, "Table 4", "Single Host 1 GHz {4K, 16K} 512 MB 400 MB/s"),
    "devices.links.atm155.bandwidth_mbps": S(M_, "§6.1", "connected through an ATM network with 155 Mbps peak bandwidth"),
    "devices.links.oc12.bandwidth_mbps": both(S(M_, "§6.5", "with an ATM switch for each 4 cluster machine simulated"),
                                             A("the ATM switches are joined by OC-12 (622 Mb/s) links; the paper does not say how", "155 Mb/s links between switches")),
    "devices.links.tb3.bandwidth_mbps": S(M_, "§6.1", "fully connected TrailBlazer3 (TB3) switches between them with a 50.9 MBps peak bandwidth"),
    "devices.links.tb3.latency_us": A("40 us per message through the SP-2 switch; the paper gives no value", "10-100 us"),
    "devices.links.atm*.latency_us": A("20 us per ATM hop; the paper gives no value", "10-100 us"),
    "devices.links.oc12.latency_us": A("20 us per ATM hop; the paper gives no value", "10-100 us"),
    "devices.links.*.latency_us": A("1 us to start an I/O interconnect transfer; the paper gives no value", "10 us"),
    "systems.single_host.kind": S(M_, "§6.3", "a traditional architecture with a conventional disk subsystem"),
    "systems.cluster*.kind": S(M_, "§6.3", "a cluster consisting of 2 host machines, a cluster consisting of 4 host machines"),
    "systems.smart_disks.kind": S(M_, "§6.1", "One of the smart disks in the system is employed as the central unit"),
    "systems.*.disks": S(M_, M_T3, "Number of disks 8"),
    "systems.*.disk": S(M_, "§6.1", "The disks employed by all the systems are of the same type"),
    "systems.single_host.host_cpu": S(M_, M_T3, "Host CPU 500 MHz"),
    "systems.single_host.host_memory_mb": S(M_, M_T3, "Host memory 256 MB"),
    "systems.*.host_cpu": S(M_, "§6.1", "The hosts in both the clusters have a 400 MHz CPU with 128 MB RAM"),
    "systems.*.host_memory_mb": S(M_, "§6.1", "The hosts in both the clusters have a 400 MHz CPU with 128 MB RAM"),
    "systems.*.io_link": S(M_, M_T3, "I/O interconnect 200 MB/s"),
    "systems.*.host_bus": S(M_, M_T3, "I/O interconnect 200 MB/s"),
    "systems.*.queue_depth": A("eight outstanding page requests per host, as acharya-…'s conventional algorithms; memik-… does not say", "one request at a time"),
    "systems.*.hosts": S(M_, "§6.1", "the hosts in the cluster with 2 machines have 4 disks each and the hosts in the cluster with 4 machines have 2 disks each"),
    "systems.*.disks_per_host": S(M_, "§6.5", "i.e., hosts with 2 disks and 4 disks each"),
    "systems.*.net_link": S(M_, "§6.1", "connected through an ATM network with 155 Mbps peak bandwidth"),
    "systems.smart_disks.net_link": S(M_, "§6.1", "fully connected TrailBlazer3 (TB3) switches between them with a 50.9 MBps peak bandwidth"),
    "systems.*.nodes_per_switch": S(M_, "§6.5", "with an ATM switch for each 4 cluster machine simulated"),
    "systems.*.uplink": A("OC-12 links join the per-four-host ATM switches; the paper does not say how", "155 Mb/s links"),
    "systems.*.disk_cpu": S(M_, M_T3, "Disk CPU 200 MHz"),
    "systems.*.disk_memory_mb": S(M_, M_T3, "Disk memory 32 MB"),
    "systems.*.buffers_per_stream": A("two buffers per stream as in acharya-…'s DiskOS; memik-… does not say; every value from 2 to 8 gives the same verdicts, only 1 changes one (docs/simulator.md, Robustness)", "four"),
}

# ------------------------------------------------------------------ riedel
RIEDEL = {
    "experiment.*": S(R_, "§5", "All of our experiments compare the performance of the single server machine with directly-attached SCSI disks against the same machine with network-attached Active Disks"),
    "workload.kind": S(R_, "§5", "All of our experiments compare the performance of the single server machine"),
    "workload.query": S(R_, "Table 5", "Details of selected TPC-D queries"),
    "workload.scale_factor": A("TPC-D scale factor 1 (lineitem about 750 MB): the paper names the 'validation data set' but not its size", "SF 0.1 or 10"),
    "workload.bloom_bytes": S(R_, "Table 5", "a semi-join with a 1-megabyte Bloom filter is used at the drives"),
    "run.system": S(R_, "§5", "network-attached Active Disks"),
    "run.request_kb": A("64 KB requests, the paper does not state PostgreSQL's read size on its striped storage layer", "8 KB pages or 256 KB"),
    "sweep.run.system": S(R_, "§5.7", "Table 8 compares the prototype discussed so far based on 6-year-old workstations with a new engineering prototype"),
    "sweep.run.disks": S(R_, "§5", "The testbed used for all of our experiments consists of ten prototype Active Disks"),
    "sweep.workload.query": S(R_, "Table 5", "The queries listed cover all query types"),
    "report.*": A(PRESENT, "total time"),
    "devices.disks.cheetah_4gb.media_mbps_*": S(R_, "§5 footnote 1", "the server disks are each capable of a much higher 11 MB/s"),
    "devices.disks.cheetah_4gb.*": both(S(R_, "§5", "four 4.5 GB Seagate Cheetah disks"),
                                       A("seek times, rpm and geometry of a Cheetah 4LP; the paper gives only the rate", "the Cheetah 9LP's")),
    "devices.disks.medalist_pair.media_mbps_*": S(R_, "§5 footnote 1", "limits sequential throughput to a total of 6.5 MB/s when two are used in combination"),
    "devices.disks.medalist_pair.*": both(S(R_, "§5", "with two 2.0 GB Seagate ST52160 Medalist disks"),
                                         A("the two Medalists as one drive at their combined rate; seek, rpm and geometry of a 5,400 rpm desktop drive", "two separate drives")),
    "devices.disks.viking.media_mbps_*": S(R_, "Table 8", "disk bandwidth 6.5 MB/s 11 MB/s"),
    "devices.disks.viking.*": both(S(R_, "Table 8", "a single Quantum Viking disk drive"),
                                  A("seek, rpm and geometry of a 7,200 rpm drive; the paper gives only the rate", "the Cheetah 9LP's")),
    "devices.cpus.strongarm200.mhz": S(R_, "Table 8", "processor 133 MHz Alpha 200 MHz StrongARM"),
    "devices.cpus.alpha500.mhz": S(R_, "§5", "A single Digital AlphaStation 500/500 (500 MHz, 256 MB, Digital UNIX 3.2g)"),
    "devices.cpus.alpha133.mhz": S(R_, "§5", "a six-year-old Digital Alpha 3000/400 (133 MHz, 64 MB, Digital UNIX 3.2g)"),
    "devices.links.beta_net.bandwidth_mbps": S(R_, "Table 8", "network bandwidth 10.5 MB/s 9.5 MB/s"),
    "devices.links.atm_measured.bandwidth_mbps": S(R_, "Table 8", "network bandwidth 10.5 MB/s 9.5 MB/s"),
    "devices.links.atm155.bandwidth_mbps": both(S(R_, "§5", "a 155 Mb/s OC-3 ATM switch"),
                                               A("the server's port runs at the full OC-3 line rate", "the measured 10.5 MB/s")),
    "devices.links.uw_scsi.bandwidth_mbps": both(S(R_, "§5", "on two Ultra-Wide SCSI busses"),
                                                A("40 MB/s, the Ultra-Wide SCSI rate (Table 2 lists 40 MB/s SCSI-3 for a comparable drive)", "20 MB/s Wide SCSI")),
    "devices.links.*.latency_us": A("20 us per network message and 1 us per SCSI transfer; the paper gives none", "100 us per message"),
    "systems.server.kind": S(R_, "§5", "the single server machine with directly-attached SCSI disks"),
    "systems.server.disks": S(R_, "§5", "with four 4.5 GB Seagate Cheetah disks on two Ultra-Wide SCSI busses"),
    "systems.server.disk": S(R_, "§5", "with four 4.5 GB Seagate Cheetah disks on two Ultra-Wide SCSI busses"),
    "systems.server.host_cpu": S(R_, "§5", "A single Digital AlphaStation 500/500 (500 MHz, 256 MB, Digital UNIX 3.2g)"),
    "systems.server.host_memory_mb": S(R_, "§5", "A single Digital AlphaStation 500/500 (500 MHz, 256 MB, Digital UNIX 3.2g)"),
    "systems.server.io_link": S(R_, "§5", "on two Ultra-Wide SCSI busses"),
    "systems.server.io_loops": S(R_, "§5", "on two Ultra-Wide SCSI busses"),
    "systems.server.queue_depth": A("four outstanding requests at the server; PostgreSQL 6.5 issues one read at a time per scan, the striping layer more", "one or eight"),
    "systems.*.kind": S(R_, "§5", "All these machines are connected by an Ethernet switch and a 155 Mb/s OC-3 ATM switch"),
    "systems.*.groups": S(R_, "§5", "All these machines are connected by an Ethernet switch and a 155 Mb/s OC-3 ATM switch"),
    "systems.*.disks": S(R_, "§5", "The testbed used for all of our experiments consists of ten prototype Active Disks"),
    "systems.active_disks.disk": S(R_, "§5", "with two 2.0 GB Seagate ST52160 Medalist disks"),
    "systems.active_disks.disk_cpu": S(R_, "§5", "a six-year-old Digital Alpha 3000/400 (133 MHz, 64 MB, Digital UNIX 3.2g)"),
    "systems.active_disks.disk_memory_mb": S(R_, "§5", "a six-year-old Digital Alpha 3000/400 (133 MHz, 64 MB, Digital UNIX 3.2g)"),
    "systems.active_disks.net_link": S(R_, "Table 8", "network bandwidth 10.5 MB/s 9.5 MB/s"),
    "systems.active_disks_beta.disk": S(R_, "Table 8", "a single Quantum Viking disk drive"),
    "systems.active_disks_beta.disk_cpu": S(R_, "Table 8", "processor 133 MHz Alpha 200 MHz StrongARM"),
    "systems.active_disks_beta.disk_memory_mb": S(R_, "Table 8", "memory 64 MB 32 MB"),
    "systems.active_disks_beta.net_link": S(R_, "Table 8", "network bandwidth 10.5 MB/s 9.5 MB/s"),
    "systems.active_disks_beta.worker_cost_overrides": S(R_, "Table 8", "select 5.5 MB/s 6.8 MB/s (cycles/byte) 6.5 12.6 aggregation 1.8 MB/s 1.6 MB/s (cycles/byte) 31.1 52.0 join 4.3 MB/s 7.3 MB/s (cycles/byte) 6.2 11.0"),
    "systems.*.host_cpu": S(R_, "§5", "the same machine with network-attached Active Disks"),
    "systems.*.host_memory_mb": S(R_, "§5", "the same machine with network-attached Active Disks"),
    "systems.*.frontend_link": S(R_, "§5", "a 155 Mb/s OC-3 ATM switch"),
    "systems.*.communication": A("drives send only to the host; 'direct' names the switched network, no disk-to-disk traffic arises in riedel-…'s plans", "via_host"),
    "systems.*.buffers_per_stream": A("two outstanding network buffers per drive; the paper does not say", "four"),
}

# ------------------------------------------------------------------ chiu
CHIU = {
    "experiment.*": S(C_, "§5", "We first compared the performance of the fully distributed SD architecture with that of the partially distributed SD architecture"),
    "*fsc:experiment.*": S(C_, "§5.2", "Figures 6 and 7 present the results for our ARM FSC primitive"),
    "*clustering:experiment.*": S(C_, "§5.3", "The data-clustering primitive discussed in Section 4.3 was executed over a data set of 2,234,961 records"),
    "*fft:experiment.*": S(C_, "§5.4", "We evaluated the performance of the 2-D FFT primitive with 1, 2, 4, 8, 16 and 32 SDs"),
    "*tpch-two-groups:experiment.*": S(C_, "§4.1.2", "Assume that the two tables to be joined, R and S, reside in SDG 1 and 2, respectively"),
    "workload.kind": S(C_, "§4", "Workloads: TPC-H, ARM, Data Clustering, and 2-D FFT"),
    "workload.query": S(C_, "§4.1", "We used full queries Q1, Q6 and Q12 from the TPC-H benchmark suite"),
    "workload.scale_factor": S(C_, "§5", "with scale factors (SF) of 0.1 and 1.0"),
    "workload.page_kb": S(C_, "§5.1", "page size of 8 KB"),
    "*fsc:workload.page_kb": S(C_, "§5.2", "using data page sizes of 4K, 8K, 16K, 32K and 64K bytes"),
    "*fft:workload.page_kb": S(C_, "§5.4", "the base case where 1 SD with a data page size of 4 KB are used"),
    "workload.tables_in_separate_groups": S(C_, "§4.1.2", "Assume that the two tables to be joined, R and S, reside in SDG 1 and 2, respectively"),
    "workload.transactions_per_disk": S(C_, "§5.2", "100K transactions were generated for each SD"),
    "workload.items_per_transaction": S(C_, "§5.2", "The database had an average transaction size of 20"),
    "workload.distribution": S(C_, "§5.2", "Figure 6 shows the results when the primitive uses the CD method"),
    "workload.records": S(C_, "§5.3", "over a data set of 2,234,961 records"),
    "workload.dimensions": S(C_, "§5.3", "which contains 20-dimensional data with 5 clusters"),
    "workload.fft_n": S(C_, "§4.4", "We evaluated the out-of-core 2-D FFT over a 2048×2048 complex matrix"),
    "workload.element_bytes": A("a complex element is two 8-byte doubles", "two 4-byte floats"),
    "run.system": S(C_, "§3", "We propose a fully distributed SD architecture"),
    "sweep.workload.query": S(C_, "§5.1", "We measured the execution times of TPC-H Q1, Q6 and Q12"),
    "sweep.workload.scale_factor": S(C_, "§5.1", "on-disk memory size of 32 MB, and SF of 0.1 and 1.0"),
    "sweep.run.system": S(C_, "§5", "We first compared the performance of the fully distributed SD architecture with that of the partially distributed SD architecture"),
    "*tpch-two-groups:sweep.run.system": S(C_, "§3", "inter-SDG communication would occur when databases reside on separate SDGs"),
    "sweep.run.disks": S(C_, "§5.1", "We simulated with 4, 8, 16, and 32 SDs"),
    "*tpch-two-groups:sweep.run.disks": A("8-32 disks, the paper's sizes where each group still holds four or more disks", "4 disks"),
    "*fsc:sweep.run.disks": S(C_, "§5.2", "executed on SD systems with 2, 4, 8, 16 and 32 disks"),
    "*clustering:sweep.run.disks": S(C_, "§5.3", "We also executed the primitive on a system with only 1 SD"),
    "*fft:sweep.run.disks": S(C_, "§5.4", "We evaluated the performance of the 2-D FFT primitive with 1, 2, 4, 8, 16 and 32 SDs"),
    "sweep.workload.distribution": S(C_, "§5.2", "Figure 6 shows the results when the primitive uses the CD method; Figure 7 shows when the primitive uses the HD method"),
    "*fsc:sweep.workload.page_kb": S(C_, "§5.2", "using data page sizes of 4K, 8K, 16K, 32K and 64K bytes"),
    "*clustering:sweep.workload.page_kb": S(C_, "§5.3", "using data page sizes of 8K, 16K, 32K and 64K bytes with 64 MB on-disk memory"),
    "*fft:sweep.workload.page_kb": both(S(C_, "§5.4", "for various data page sizes and 64 MB on-disk memory"),
                                        A("the same 4-64 KB page sizes as the frequent-set runs", "8-64 KB")),
    "*fft:report.baseline": S(C_, "§5.4", "normalized all execution times with respect to the base case where 1 SD with a data page size of 4 KB are used"),
    "report.*": A(PRESENT, "normalized times"),
    "devices.cpus.sd500.mhz": both(S(C_, "§2", "The embedded processor would have a speed of 300 – 500 MHz"), S(C_, "§5", "32 Pentium III Linux PCs running at 500 MHz, each with 64 MB of RAM")),
    "devices.cpus.client500.mhz": A("the remote client is one more 500 MHz PC of the platform; the paper does not describe it", "a faster server"),
    "devices.links.ib1x.bandwidth_mbps": both(S(C_, "§3.1", "We use the InfiniBand Architecture (IBA) [10] to represent the storage interconnect"),
                                             A("1x links at 250 MB/s data rate (2.5 Gb/s signalling, IBA 1.0a); the paper names no link width", "4x links at 1 GB/s")),
    "devices.links.ib4x.bandwidth_mbps": both(S(C_, "§3", "connected to a common router"),
                                             A("4x uplinks (1 GB/s) from each group switch to the router", "1x uplinks")),
    "devices.links.*.latency_us": A("5 us per switch hop; the paper gives none", "1-20 us"),
    "systems.*.kind": S(C_, "§3", "a SD group consists of SDs interconnected by a switched network"),
    "systems.*_2g.groups": S(C_, "§4.1.2", "Assume that the two tables to be joined, R and S, reside in SDG 1 and 2, respectively"),
    "systems.*.groups": S(C_, "§3", "Figure 1 illustrates this single SD group (SDG) architecture"),
    "systems.*.disks": S(C_, "§5.1", "We simulated with 4, 8, 16, and 32 SDs"),
    "systems.*.disk": A("chiu-… gives no drive parameters; uysal-…'s Cheetah 9LP", "memik-…'s Table 3 drive"),
    "systems.*.disk_cpu": S(C_, "§5", "32 Pentium III Linux PCs running at 500 MHz, each with 64 MB of RAM"),
    "*tpch*:systems.*.disk_memory_mb": S(C_, "§5.1", "on-disk memory size of 32 MB"),
    "systems.*.disk_memory_mb": S(C_, "§5.2", "and 64MB on-disk memory"),
    "systems.*.host_cpu": A("the remote client is one more 500 MHz PC of the platform", "a faster server"),
    "systems.*.host_memory_mb": A("the remote client has 64 MB like the platform's PCs", "1 GB"),
    "systems.*.net_link": S(C_, "§3.1", "We use the InfiniBand Architecture (IBA) [10] to represent the storage interconnect"),
    "systems.*.uplink": S(C_, "§3", "which may belong to different storage area networks that are connected to a common router"),
    "systems.sd_partial*.communication": S(C_, "§2.2", "While data transfer between disks was through the central unit"),
    "systems.*.communication": S(C_, "§3", "data is communicated between the involved SDs without being routed through the client"),
    "systems.*.buffers_per_stream": A("two buffers per stream as in acharya-…'s DiskOS; the paper does not say", "four"),
}
for k, v in CHEETAH9LP_CHIU.items():
    CHIU[f"devices.disks.cheetah9lp.{k}"] = v

PAPERS = {"acharya": ACHARYA, "uysal": UYSAL, "memik": MEMIK, "riedel": RIEDEL, "chiu": CHIU}


def lookup(paper, fname, path):
    table = PAPERS[paper]
    if f"{fname}:{path}" in table:
        return table[f"{fname}:{path}"]
    for pat, v in table.items():
        if ":" in pat:
            fpat, ppat = pat.split(":", 1)
            if fnmatch.fnmatchcase(fname, fpat) and fnmatch.fnmatchcase(path, ppat):
                return v
    if path in table:
        return table[path]
    for pat, v in table.items():
        if ":" not in pat and fnmatch.fnmatchcase(path, pat):
            return v
    return None
