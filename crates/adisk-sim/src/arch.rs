//! Assembly of architectures from configuration: turns a [`SystemConfig`] and the device
//! catalogue into a [`Topology`] of resources, drives, nodes, volumes and workers.
//! Model code lives in [`crate::model`]; this module only wires instances together.

use crate::config::{ArchKind, Communication, Devices, SystemConfig};
use crate::engine::{
    Drive, Hop, Net, Node, ResId, ResKind, Resource, Storage, Topology, Volume, Worker,
};
use crate::model::cpu::{CpuSpec, OsCosts};
use crate::model::disk::DiskModel;
use crate::model::link::{self, LinkSpec};
use crate::model::ssd::SsdModel;
use crate::rng::Rng;

/// Errors carry the dotted key and the reason; the caller adds the file.
pub type KeyError = (String, String);

struct Ctx<'a> {
    name: &'a str,
    sys: &'a SystemConfig,
    dev: &'a Devices,
}

impl Ctx<'_> {
    fn key(&self, k: &str) -> String {
        format!("systems.{}.{k}", self.name)
    }
    fn req<'b, T>(&self, v: &'b Option<T>, k: &str) -> Result<&'b T, KeyError> {
        v.as_ref().ok_or_else(|| {
            (
                self.key(k),
                format!("required for kind {:?}", self.sys.kind),
            )
        })
    }
    fn cpu(&self, k: &str, name: &Option<String>) -> Result<CpuSpec, KeyError> {
        let n = self.req(name, k)?;
        let c = self.dev.cpus.get(n).ok_or_else(|| {
            (
                self.key(k),
                format!("no processor `{n}` under [devices.cpus]"),
            )
        })?;
        if !(c.mhz.is_finite() && c.mhz > 0.0) {
            return Err((
                format!("devices.cpus.{n}.mhz"),
                format!("must be a positive number, got {}", c.mhz),
            ));
        }
        if c.count == 0 {
            return Err((
                format!("devices.cpus.{n}.count"),
                "must be at least 1".into(),
            ));
        }
        Ok(c.clone())
    }
    fn link(&self, k: &str, name: &Option<String>) -> Result<LinkSpec, KeyError> {
        let n = self.req(name, k)?;
        let l = match self.dev.links.get(n) {
            Some(l) => l.clone(),
            None => link::preset(n).ok_or_else(|| {
                (
                    self.key(k),
                    format!("no link `{n}` under [devices.links] and no preset of that name"),
                )
            })?,
        };
        l.validate()
            .map_err(|r| (format!("devices.links.{n}"), r))?;
        Ok(l)
    }
    /// `k`'s processor if the system sets one, else `default`.
    fn cpu_or(
        &self,
        k: &str,
        name: &Option<String>,
        default: &CpuSpec,
    ) -> Result<CpuSpec, KeyError> {
        if name.is_some() {
            self.cpu(k, name)
        } else {
            Ok(default.clone())
        }
    }
    /// `k`'s link if the system sets one, else `default`.
    fn link_or(
        &self,
        k: &str,
        name: &Option<String>,
        default: &LinkSpec,
    ) -> Result<LinkSpec, KeyError> {
        if name.is_some() {
            self.link(k, name)
        } else {
            Ok(default.clone())
        }
    }
    /// `k`'s memory if the system sets it, else `default` (bytes).
    fn mem_or(&self, k: &str, v: &Option<f64>, default: f64) -> Result<f64, KeyError> {
        if v.is_some() {
            self.mem(k, v)
        } else {
            Ok(default)
        }
    }
    fn mem(&self, k: &str, v: &Option<f64>) -> Result<f64, KeyError> {
        let mb = *self.req(v, k)?;
        if !(mb.is_finite() && mb > 0.0) {
            return Err((
                self.key(k),
                format!("must be a positive number of MB, got {mb}"),
            ));
        }
        Ok(mb * 1e6)
    }
    fn os(&self, k: &str, v: &Option<OsCosts>, default: OsCosts) -> Result<OsCosts, KeyError> {
        let o = v.clone().unwrap_or(default);
        o.validate().map_err(|r| {
            (
                self.key(&format!("{k}.{}", r.split(':').next().unwrap_or(""))),
                r,
            )
        })?;
        Ok(o)
    }
}

#[derive(Default)]
struct Builder {
    resources: Vec<Resource>,
    drives: Vec<Drive>,
    nodes: Vec<Node>,
}

impl Builder {
    fn res(
        &mut self,
        name: String,
        component: String,
        kind: ResKind,
        link: Option<LinkSpec>,
    ) -> ResId {
        self.resources
            .push(Resource::new(name, component, kind, link));
        self.resources.len() - 1
    }
    fn node(&mut self, name: &str, cpu: &CpuSpec, mem: f64, os: OsCosts) -> usize {
        let cpus = (0..cpu.count)
            .map(|i| {
                let n = if cpu.count == 1 {
                    format!("{name}.cpu")
                } else {
                    format!("{name}.cpu{i}")
                };
                self.res(n, name.to_string(), ResKind::Cpu, None)
            })
            .collect();
        self.nodes.push(Node {
            name: name.to_string(),
            cpus,
            mhz: cpu.mhz,
            mem_bytes: mem,
            os,
            io_hops: Vec::new(),
        });
        self.nodes.len() - 1
    }
    fn links(&mut self, prefix: &str, component: &str, spec: &LinkSpec, n: u32) -> Vec<ResId> {
        (0..n)
            .map(|i| {
                self.res(
                    format!("{prefix}{i}"),
                    component.to_string(),
                    ResKind::Link,
                    Some(spec.clone()),
                )
            })
            .collect()
    }
}

fn storage(ctx: &Ctx, rng: &mut Rng) -> Result<Storage, KeyError> {
    thread_local! {
        static FITTED: std::cell::RefCell<Vec<(crate::model::disk::DiskSpec, DiskModel)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    if let Some(s) = &ctx.sys.ssd {
        let spec = ctx
            .dev
            .ssds
            .get(s)
            .ok_or_else(|| (ctx.key("ssd"), format!("no SSD `{s}` under [devices.ssds]")))?;
        return SsdModel::new(spec)
            .map(Storage::Ssd)
            .map_err(|r| (format!("devices.ssds.{s}"), r));
    }
    let n = ctx.req(&ctx.sys.disk, "disk")?;
    let spec = ctx.dev.disks.get(n).ok_or_else(|| {
        (
            ctx.key("disk"),
            format!("no drive `{n}` under [devices.disks]"),
        )
    })?;
    let phase = rng.next_f64();
    let cyl = rng.below(spec.cylinders.max(1) as u64) as u32;
    // The seek-curve fit depends only on the spec: reuse it (per thread) across drives and runs.
    let cached = FITTED.with(|f| {
        f.borrow()
            .iter()
            .find(|(s, _)| s == spec)
            .map(|(_, d)| d.repositioned(phase, cyl))
    });
    if let Some(d) = cached {
        return Ok(Storage::Disk(Box::new(d)));
    }
    let built = DiskModel::new(spec, phase, cyl);
    if let Ok(d) = &built {
        FITTED.with(|f| {
            let mut v = f.borrow_mut();
            if v.len() > 64 {
                v.clear();
            }
            v.push((spec.clone(), d.clone()));
        });
    }
    built.map(|d| Storage::Disk(Box::new(d))).map_err(|r| {
        (
            format!("devices.disks.{n}.{}", r.split(':').next().unwrap_or("")),
            r,
        )
    })
}

/// Build the topology of system `name`. `seed` drives the per-drive random phase/head position.
pub fn build(
    name: &str,
    sys: &SystemConfig,
    dev: &Devices,
    seed: u64,
) -> Result<Topology, KeyError> {
    let ctx = Ctx { name, sys, dev };
    check_counts(&ctx)?;
    let mut rng = Rng::new(seed ^ 0x5EED_D15C);
    match sys.kind {
        ArchKind::SingleHost => single_host(&ctx, &mut rng),
        ArchKind::Smp => smp(&ctx, &mut rng),
        ArchKind::Cluster => cluster(&ctx, &mut rng),
        ArchKind::ActiveDisks => active_disks(&ctx, &mut rng),
        ArchKind::SmartDisks | ArchKind::SdGroups => smart_disks(&ctx, &mut rng),
    }
}

/// The counts every architecture needs at least one of: disks, stream buffers, queue depth, loops.
fn check_counts(ctx: &Ctx) -> Result<(), KeyError> {
    let sys = ctx.sys;
    if sys.disks == 0 {
        return Err((ctx.key("disks"), "must be at least 1".into()));
    }
    if sys.buffers_per_stream == 0 {
        return Err((ctx.key("buffers_per_stream"), "must be at least 1".into()));
    }
    if sys.queue_depth == 0 {
        return Err((ctx.key("queue_depth"), "must be at least 1".into()));
    }
    if sys.io_loops == 0 {
        return Err((ctx.key("io_loops"), "must be at least 1".into()));
    }
    Ok(())
}

/// A single host: its processors share every disk, reached over `io_loops` loops.
fn single_host(ctx: &Ctx, rng: &mut Rng) -> Result<Topology, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let cpu = ctx.cpu("host_cpu", &sys.host_cpu)?;
    let mem = ctx.mem("host_memory_mb", &sys.host_memory_mb)?;
    let os = ctx.os("host_os", &sys.host_os, OsCosts::host_default())?;
    let io = ctx.link("io_link", &sys.io_link)?;
    let mut b = Builder::default();
    let host = b.node("host", &cpu, mem, os);
    let loops = b.links("io-loop", "interconnect", &io, sys.io_loops);
    fabric_drives(&mut b, ctx, rng, &[Hop::AnyOf(loops)])?;
    let cpus = b.nodes[host].cpus.len();
    let (volumes, vols) = split_volumes(n, sys.split_read_write, cpus);
    let per_vol = volumes[0].drives.len() as u32;
    let workers = shared_workers(&b.nodes, vols);
    Ok(Topology {
        resources: b.resources,
        drives: b.drives,
        nodes: b.nodes,
        coord_vol: vols[1],
        volumes,
        workers,
        coordinator: host,
        net: Net::Local,
        via_host: false,
        buffers_per_worker: (sys.queue_depth * per_vol / cpus as u32).max(2),
        message_window: 16,
        groups: 1,
        description: format!(
            "single host {} MHz, {n} disks on {}×{} MB/s",
            cpu.mhz, sys.io_loops, io.bandwidth_mbps
        ),
    })
}

/// An SMP: boards of `cpus_per_board` processors, each board behind its own link, sharing
/// every disk over FC loops and XIO.
fn smp(ctx: &Ctx, rng: &mut Rng) -> Result<Topology, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let cpu = ctx.cpu("host_cpu", &sys.host_cpu)?;
    let mem = ctx.mem("host_memory_mb", &sys.host_memory_mb)?;
    let os = ctx.os("host_os", &sys.host_os, OsCosts::host_default())?;
    let io = ctx.link("io_link", &sys.io_link)?;
    let board_link = ctx.link("board_link", &sys.board_link)?;
    let bte_link = ctx.link("bte_link", &sys.bte_link)?;
    let xio_link = ctx.link("xio_link", &sys.xio_link)?;
    if sys.cpus_per_board == 0 || sys.xio_nodes == 0 {
        return Err((
            ctx.key("cpus_per_board"),
            "cpus_per_board and xio_nodes must be at least 1".into(),
        ));
    }
    let boards = n.div_ceil(sys.cpus_per_board as usize).max(1);
    let board_cpu = CpuSpec {
        mhz: cpu.mhz,
        count: sys.cpus_per_board,
    };
    let mut b = Builder::default();
    let mut bte = Vec::new();
    let mut link_in = Vec::new();
    for i in 0..boards {
        let node = b.node(&format!("board{i}"), &board_cpu, mem, os.clone());
        bte.push(b.res(
            format!("board{i}.bte"),
            format!("board{i}"),
            ResKind::Link,
            Some(bte_link.clone()),
        ));
        let li = b.res(
            format!("board{i}.link"),
            format!("board{i}"),
            ResKind::Link,
            Some(board_link.clone()),
        );
        link_in.push(li);
        b.nodes[node].io_hops = vec![Hop::One(li)];
    }
    let loops = b.links("fc-loop", "interconnect", &io, sys.io_loops);
    let xio = b.links("xio", "interconnect", &xio_link, sys.xio_nodes);
    fabric_drives(&mut b, ctx, rng, &[Hop::AnyOf(loops), Hop::AnyOf(xio)])?;
    let total_cpus: usize = b.nodes.iter().map(|x| x.cpus.len()).sum();
    let (volumes, vols) = split_volumes(n, sys.split_read_write, total_cpus);
    let workers = shared_workers(&b.nodes, vols);
    let per_vol = volumes[0].drives.len() as u32;
    Ok(Topology {
        resources: b.resources,
        drives: b.drives,
        nodes: b.nodes,
        coord_vol: vols[1],
        volumes,
        workers,
        coordinator: 0,
        net: Net::Smp { bte, link_in },
        via_host: false,
        buffers_per_worker: (sys.queue_depth * per_vol / total_cpus as u32).max(2),
        message_window: 16,
        groups: 1,
        description: format!(
            "SMP {boards} boards × {} CPUs at {} MHz, {n} disks",
            sys.cpus_per_board, cpu.mhz
        ),
    })
}

/// A cluster: hosts with their own disks behind each host's bus, and a front-end, on a
/// switched network.
fn cluster(ctx: &Ctx, rng: &mut Rng) -> Result<Topology, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let hosts = cluster_hosts(ctx)?;
    let per_host = n / hosts;
    let cpu = ctx.cpu("host_cpu", &sys.host_cpu)?;
    let fe_cpu = ctx.cpu_or("frontend_cpu", &sys.frontend_cpu, &cpu)?;
    let mem = ctx.mem("host_memory_mb", &sys.host_memory_mb)?;
    let os = ctx.os("host_os", &sys.host_os, OsCosts::host_default())?;
    let bus = ctx.link("host_bus", &sys.host_bus)?;
    let net = ctx.link("net_link", &sys.net_link)?;
    let fe_link = ctx.link_or("frontend_link", &sys.frontend_link, &net)?;
    let mut b = Builder::default();
    let mut buses = Vec::new();
    for h in 0..hosts {
        let node = b.node(&format!("host{h}"), &cpu, mem, os.clone());
        let pci = b.res(
            format!("host{h}.bus"),
            format!("host{h}"),
            ResKind::Link,
            Some(bus.clone()),
        );
        buses.push(Some(pci));
        for _ in 0..per_host {
            let st = storage(ctx, rng)?;
            let i = b.drives.len();
            let r = b.res(format!("disk{i}"), format!("host{h}"), ResKind::Disk, None);
            b.drives
                .push(Drive::new(r, st, Some(node), vec![Hop::One(pci)]));
        }
    }
    let fe_mem = ctx.mem_or("frontend_memory_mb", &sys.frontend_memory_mb, mem)?;
    let fe = b.node("frontend", &fe_cpu, fe_mem, os.clone());
    buses.push(None);
    let net = switched(&mut b, ctx, hosts, &net, &fe_link, buses)?;
    let mut volumes: Vec<Volume> = (0..hosts)
        .map(|h| Volume {
            drives: (h * per_host..(h + 1) * per_host).collect(),
            sharers: cpu.count as usize,
        })
        .collect();
    volumes.push(Volume {
        drives: Vec::new(),
        sharers: 0,
    });
    let workers = (0..hosts)
        .flat_map(|h| {
            b.nodes[h].cpus.iter().map(move |c| Worker {
                node: h,
                cpu: *c,
                vols: [h, h],
            })
        })
        .collect();
    Ok(Topology {
        resources: b.resources,
        drives: b.drives,
        nodes: b.nodes,
        coord_vol: hosts,
        volumes,
        workers,
        coordinator: fe,
        net,
        via_host: false,
        buffers_per_worker: (sys.queue_depth * per_host as u32 / cpu.count).max(2),
        message_window: 16,
        groups: 1,
        description: format!(
            "cluster of {hosts} hosts at {} MHz with {per_host} disk(s) each",
            cpu.mhz
        ),
    })
}

/// Hosts of a cluster: `hosts`, else disks / `disks_per_host`, else one per disk; they must
/// divide the disks evenly.
fn cluster_hosts(ctx: &Ctx) -> Result<usize, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let hosts = match (sys.hosts, sys.disks_per_host) {
        (Some(h), _) => h as usize,
        (None, Some(0)) => {
            return Err((ctx.key("disks_per_host"), "must be at least 1".into()));
        }
        (None, Some(d)) => (sys.disks / d) as usize,
        (None, None) => sys.disks as usize,
    };
    if hosts == 0 || !n.is_multiple_of(hosts) {
        return Err((
            ctx.key("hosts"),
            format!("must divide disks ({n}) evenly, got {hosts}"),
        ));
    }
    Ok(hosts)
}

/// Active disks: every drive with its own processor, on FC loops with a host that
/// coordinates.
fn active_disks(ctx: &Ctx, rng: &mut Rng) -> Result<Topology, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let via_host = sys.communication == Communication::ViaHost;
    let dcpu = ctx.cpu("disk_cpu", &sys.disk_cpu)?;
    let dmem = ctx.mem("disk_memory_mb", &sys.disk_memory_mb)?;
    let dos = ctx.os("disk_os", &sys.disk_os, OsCosts::diskos_default())?;
    let hcpu = ctx.cpu("host_cpu", &sys.host_cpu)?;
    let hmem = ctx.mem("host_memory_mb", &sys.host_memory_mb)?;
    let hos = ctx.os("host_os", &sys.host_os, OsCosts::host_default())?;
    let io = ctx.link("io_link", &sys.io_link)?;
    let mut b = Builder::default();
    disk_nodes(&mut b, ctx, rng, "disk", &dcpu, dmem, &dos)?;
    let host = b.node("host", &hcpu, hmem, hos);
    let loops = b.links("fc-loop", "interconnect", &io, sys.io_loops);
    let volumes = own_volumes(n, (0..n).collect());
    let workers = disk_workers(&b.nodes, 0..n);
    Ok(Topology {
        resources: b.resources,
        drives: b.drives,
        nodes: b.nodes,
        coord_vol: n,
        volumes,
        workers,
        coordinator: host,
        net: Net::Loops { loops },
        via_host,
        buffers_per_worker: sys.buffers_per_stream,
        message_window: sys.buffers_per_stream,
        groups: 1,
        description: format!(
            "{n} active disks ({} MHz, {} MB) on {}×{} MB/s loops, {} communication",
            dcpu.mhz,
            dmem / 1e6,
            sys.io_loops,
            io.bandwidth_mbps,
            if via_host { "via-host" } else { "direct" }
        ),
    })
}

/// Smart disks on a switched network: a cluster of them whose first (`sd0`) is the central
/// unit (`smart_disks`), or groups of them under a client (`sd_groups`).
fn smart_disks(ctx: &Ctx, rng: &mut Rng) -> Result<Topology, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let via_host = sys.communication == Communication::ViaHost;
    let dcpu = ctx.cpu("disk_cpu", &sys.disk_cpu)?;
    let dmem = ctx.mem("disk_memory_mb", &sys.disk_memory_mb)?;
    let dos = ctx.os("disk_os", &sys.disk_os, OsCosts::diskos_default())?;
    let port = ctx.link("net_link", &sys.net_link)?;
    let port_mbps = port.bandwidth_mbps;
    let smart = sys.kind == ArchKind::SmartDisks;
    if smart && n < 2 {
        return Err((
            ctx.key("disks"),
            "a smart-disk cluster needs a central unit and at least one worker disk".into(),
        ));
    }
    let mut b = Builder::default();
    disk_nodes(&mut b, ctx, rng, "sd", &dcpu, dmem, &dos)?;
    let (coordinator, worker_ids) = if smart {
        (0, 1..n)
    } else {
        let ccpu = ctx.cpu("host_cpu", &sys.host_cpu)?;
        let cmem = ctx.mem("host_memory_mb", &sys.host_memory_mb)?;
        let cos = ctx.os("host_os", &sys.host_os, OsCosts::host_default())?;
        (b.node("client", &ccpu, cmem, cos), 0..n)
    };
    let net = smart_disk_net(&mut b, ctx, &port)?;
    let volumes = own_volumes(n, Vec::new());
    let workers = disk_workers(&b.nodes, worker_ids);
    Ok(Topology {
        resources: b.resources,
        drives: b.drives,
        nodes: b.nodes,
        coord_vol: n,
        volumes,
        workers,
        coordinator,
        net,
        via_host,
        buffers_per_worker: sys.buffers_per_stream,
        message_window: sys.buffers_per_stream,
        groups: if smart { 1 } else { sys.groups },
        description: if smart {
            format!(
                "{n} smart disks ({} MHz, {} MB), sd0 central unit, {port_mbps} MB/s ports",
                dcpu.mhz,
                dmem / 1e6
            )
        } else {
            format!(
                "{n} smart disks ({} MHz, {} MB) in {} group(s), {port_mbps} MB/s ports, {} distributed",
                dcpu.mhz,
                dmem / 1e6,
                sys.groups,
                if via_host { "partially" } else { "fully" }
            )
        },
    })
}

/// The smart disks' network: one switch holding every disk, `sd0` the central unit among
/// them (`smart_disks`), or one switch per group with the client on the core (`sd_groups`).
fn smart_disk_net(b: &mut Builder, ctx: &Ctx, port: &LinkSpec) -> Result<Net, KeyError> {
    let sys = ctx.sys;
    let n = sys.disks as usize;
    let smart = sys.kind == ArchKind::SmartDisks;
    let buses = vec![None; b.nodes.len()];
    let mut grouped = sys.clone();
    if !smart {
        if sys.groups == 0 || !n.is_multiple_of(sys.groups as usize) {
            return Err((
                ctx.key("groups"),
                format!("must divide disks ({n}) evenly, got {}", sys.groups),
            ));
        }
        grouped.nodes_per_switch = (n / sys.groups as usize) as u32;
    }
    let grouped_ctx = Ctx {
        name: ctx.name,
        sys: &grouped,
        dev: ctx.dev,
    };
    let fe_link = ctx.link_or("frontend_link", &sys.frontend_link, port)?;
    if smart {
        // The central unit is sd0 itself: every node on one switch.
        let mut s = switched(b, &grouped_ctx, n - 1, port, port, vec![None; n])?;
        if let Net::Switched { switch_of, .. } = &mut s {
            for x in switch_of.iter_mut() {
                *x = 0;
            }
        }
        Ok(s)
    } else {
        switched(b, &grouped_ctx, n, port, &fe_link, buses)
    }
}

/// The drives of a shared fabric: `disk0`… with no processor of their own, each reached
/// through `hops`.
fn fabric_drives(b: &mut Builder, ctx: &Ctx, rng: &mut Rng, hops: &[Hop]) -> Result<(), KeyError> {
    for i in 0..ctx.sys.disks as usize {
        let st = storage(ctx, rng)?;
        let r = b.res(format!("disk{i}"), format!("disk{i}"), ResKind::Disk, None);
        b.drives.push(Drive::new(r, st, None, hops.to_vec()));
    }
    Ok(())
}

/// Drives with a processor each (active and smart disks): node `{prefix}{i}` owns the
/// medium `{prefix}{i}.media`.
fn disk_nodes(
    b: &mut Builder,
    ctx: &Ctx,
    rng: &mut Rng,
    prefix: &str,
    cpu: &CpuSpec,
    mem: f64,
    os: &OsCosts,
) -> Result<(), KeyError> {
    for i in 0..ctx.sys.disks as usize {
        let node = b.node(&format!("{prefix}{i}"), cpu, mem, os.clone());
        let st = storage(ctx, rng)?;
        let r = b.res(
            format!("{prefix}{i}.media"),
            format!("{prefix}{i}"),
            ResKind::Disk,
            None,
        );
        b.drives.push(Drive::new(r, st, Some(node), Vec::new()));
    }
    Ok(())
}

/// A worker per processor of every node, each reading and writing the shared volumes `vols`.
fn shared_workers(nodes: &[Node], vols: [usize; 2]) -> Vec<Worker> {
    let mut workers = Vec::new();
    for (ni, node) in nodes.iter().enumerate() {
        for c in &node.cpus {
            workers.push(Worker {
                node: ni,
                cpu: *c,
                vols,
            });
        }
    }
    workers
}

/// One volume per drive (each used by its own processor), then the coordinator's volume
/// over `coordinator_drives`.
fn own_volumes(n: usize, coordinator_drives: Vec<usize>) -> Vec<Volume> {
    let mut volumes: Vec<Volume> = (0..n)
        .map(|i| Volume {
            drives: vec![i],
            sharers: 1,
        })
        .collect();
    volumes.push(Volume {
        drives: coordinator_drives,
        sharers: 0,
    });
    volumes
}

/// A worker on the first processor of each disk node in `ids`, reading its own volume.
fn disk_workers(nodes: &[Node], ids: std::ops::Range<usize>) -> Vec<Worker> {
    ids.map(|i| Worker {
        node: i,
        cpu: nodes[i].cpus[0],
        vols: [i, i],
    })
    .collect()
}

/// Volumes for shared-fabric architectures: one, or a read group and a write group.
fn split_volumes(n: usize, split: bool, sharers: usize) -> (Vec<Volume>, [usize; 2]) {
    if split && n >= 2 {
        let half = n / 2;
        (
            vec![
                Volume {
                    drives: (0..half).collect(),
                    sharers,
                },
                Volume {
                    drives: (half..n).collect(),
                    sharers,
                },
            ],
            [0, 1],
        )
    } else {
        (
            vec![Volume {
                drives: (0..n).collect(),
                sharers,
            }],
            [0, 0],
        )
    }
}

/// A switched network over `members` nodes (indices 0..members) plus the last node (front-end
/// / client), which sits on the core when there are several switches.
fn switched(
    b: &mut Builder,
    ctx: &Ctx,
    members: usize,
    port: &LinkSpec,
    fe_port: &LinkSpec,
    bus: Vec<Option<ResId>>,
) -> Result<Net, KeyError> {
    let total = b.nodes.len();
    let per = if ctx.sys.nodes_per_switch == 0 {
        members.max(1)
    } else {
        ctx.sys.nodes_per_switch as usize
    };
    let switches = members.div_ceil(per).max(1);
    // Balance members over switches.
    let per_balanced = members.div_ceil(switches).max(1);
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    let mut switch_of = Vec::new();
    for i in 0..total {
        let spec = if i < members { port } else { fe_port };
        let name = b.nodes[i].name.clone();
        tx.push(b.res(
            format!("{name}.port-tx"),
            "network".into(),
            ResKind::Link,
            Some(spec.clone()),
        ));
        rx.push(b.res(
            format!("{name}.port-rx"),
            "network".into(),
            ResKind::Link,
            Some(spec.clone()),
        ));
        switch_of.push(if i < members {
            i / per_balanced
        } else if switches == 1 {
            0
        } else {
            usize::MAX
        });
    }
    let mut up = Vec::new();
    let mut down = Vec::new();
    if switches > 1 {
        let mut u = ctx.link("uplink", &ctx.sys.uplink)?;
        u.bandwidth_mbps *= ctx.sys.uplinks_per_switch.max(1) as f64;
        for s in 0..switches {
            up.push(b.res(
                format!("switch{s}.uplink-up"),
                "network".into(),
                ResKind::Link,
                Some(u.clone()),
            ));
            down.push(b.res(
                format!("switch{s}.uplink-down"),
                "network".into(),
                ResKind::Link,
                Some(u.clone()),
            ));
        }
    }
    let mut bus = bus;
    bus.resize(total, None);
    Ok(Net::Switched {
        tx,
        rx,
        switch_of,
        up,
        down,
        bus,
    })
}
