//! Several machines on one: a Linux bridge with the host's address in this network namespace,
//! and one namespace per disk joined to it by a veth pair, each with its own address
//! (`10.S.0.1` for the host, `10.S.0.(11 + d)` for disk `d`). A disk's link can be cut
//! (`ip link set … down` inside its namespace), mended, and shaped by the kernel (`tc tbf`).
//! Everything is removed when the [`Net`] is dropped.
//!
//! Used by `adisk chaos --netns` and by `crates/adisk/tests/netns.rs` (which includes this
//! file), so it depends on the standard library only. Needs root and iproute2.
use std::process::{Command, Stdio};

/// Runs `ip args`; true when it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A bridge and `disks` namespaces on it, removed when dropped.
pub struct Net {
    tag: String,
    subnet: u8,
    disks: usize,
    /// Whether the host has a namespace of its own ([`Net::add_host`]).
    host_ns: bool,
}

impl Net {
    /// Makes the bridge (network `10.subnet.0.0/24`) and the namespaces; on failure removes
    /// what it made and says what could not be made.
    pub fn make(disks: usize, subnet: u8) -> Result<Net, String> {
        // Unique per process and per net made in it (tests make several at once).
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 10;
        let tag = format!("{:x}{n}", std::process::id() % 0xfffff);
        let mut net = Net {
            tag,
            subnet,
            disks: 0,
            host_ns: false,
        };
        let bridge = net.bridge();
        if !ip(&["link", "add", &bridge, "type", "bridge"]) {
            return Err(format!(
                "cannot make bridge {bridge} (needs root and iproute2)"
            ));
        }
        if !(ip(&["addr", "add", &format!("{}/24", net.host()), "dev", &bridge])
            && ip(&["link", "set", &bridge, "up"]))
        {
            return Err(format!(
                "cannot give bridge {bridge} the address {}",
                net.host()
            ));
        }
        for d in 0..disks {
            net.disks = d + 1;
            net.add_disk(d)?;
        }
        Ok(net)
    }

    fn add_disk(&self, d: usize) -> Result<(), String> {
        let (ns, veth, peer) = self.names(d);
        self.add_namespace(&ns, &veth, &peer, &self.disk(d))
    }

    /// Namespace `ns` joined to the bridge by veth `veth` (its end inside named `peer`, with
    /// `address`).
    fn add_namespace(&self, ns: &str, veth: &str, peer: &str, address: &str) -> Result<(), String> {
        let address = format!("{address}/24");
        let made = ip(&["netns", "add", ns])
            && ip(&["link", "add", veth, "type", "veth", "peer", "name", peer])
            && ip(&["link", "set", peer, "netns", ns])
            && ip(&["link", "set", veth, "master", &self.bridge()])
            && ip(&["link", "set", veth, "up"])
            && ip(&["-n", ns, "addr", "add", &address, "dev", peer])
            && ip(&["-n", ns, "link", "set", peer, "up"])
            && ip(&["-n", ns, "link", "set", "lo", "up"]);
        if made {
            Ok(())
        } else {
            Err(format!("cannot make network namespace {ns}"))
        }
    }

    /// Gives the host a namespace of its own on the bridge, at [`Net::host_in_namespace`]'s
    /// address, so that its link can be shaped like a machine's ([`Net::shape_host`]).
    pub fn add_host(&mut self) -> Result<(), String> {
        let (ns, veth, peer) = self.host_names();
        self.host_ns = true;
        self.add_namespace(&ns, &veth, &peer, &self.host_in_namespace())
    }

    /// The host's namespace, its veth's end on the bridge and its end inside the namespace.
    pub fn host_names(&self) -> (String, String, String) {
        (
            format!("adns{}-h", self.tag),
            format!("adv{}h", self.tag),
            format!("adp{}h", self.tag),
        )
    }

    /// The host's address inside its own namespace.
    pub fn host_in_namespace(&self) -> String {
        format!("10.{}.0.2", self.subnet)
    }

    /// Shapes the host's link (both directions) to `rate` (a `tc` rate such as `100mbit`)
    /// with token buckets: what reaches the host on the bridge's end of its veth, what it
    /// sends on its own end.
    pub fn shape_host(&self, rate: &str) -> Result<(), String> {
        let (ns, veth, peer) = self.host_names();
        let burst = tbf_burst(rate);
        let tbf = ["tbf", "rate", rate, "burst", &burst, "latency", "100ms"];
        let inbound = [&["tc", "qdisc", "replace", "dev", &veth, "root"][..], &tbf].concat();
        let outbound = [
            &[
                "ip", "netns", "exec", &ns, "tc", "qdisc", "replace", "dev", &peer, "root",
            ][..],
            &tbf,
        ]
        .concat();
        let run = |argv: &[&str]| {
            std::process::Command::new(argv[0])
                .args(&argv[1..])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if run(&inbound) && run(&outbound) {
            Ok(())
        } else {
            Err(format!(
                "tc on the host's link {veth}/{peer} failed (is `tc` installed?)"
            ))
        }
    }

    /// Removes the host link's shaping (nothing to remove is fine).
    pub fn unshape_host(&self) {
        let (ns, veth, peer) = self.host_names();
        ip(&[
            "netns", "exec", &ns, "tc", "qdisc", "del", "dev", &peer, "root",
        ]);
        let _ = std::process::Command::new("tc")
            .args(["qdisc", "del", "dev", &veth, "root"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    fn bridge(&self) -> String {
        format!("adbr{}", self.tag)
    }

    /// Disk `d`'s namespace, its veth's end on the bridge and its end inside the namespace.
    pub fn names(&self, d: usize) -> (String, String, String) {
        (
            format!("adns{}-{d}", self.tag),
            format!("adv{}{d}", self.tag),
            format!("adp{}{d}", self.tag),
        )
    }

    /// Disk `d`'s namespace.
    pub fn namespace(&self, d: usize) -> String {
        self.names(d).0
    }

    /// The host's address on the bridge.
    pub fn host(&self) -> String {
        format!("10.{}.0.1", self.subnet)
    }

    /// Disk `d`'s address.
    pub fn disk(&self, d: usize) -> String {
        format!("10.{}.0.{}", self.subnet, 11 + d)
    }

    /// Cuts disk `d`'s link (its end of the veth down: nothing in or out, no reset sent).
    pub fn cut(&self, d: usize) -> Result<(), String> {
        self.link(d, "down")
    }

    /// Mends disk `d`'s link.
    pub fn mend(&self, d: usize) -> Result<(), String> {
        self.link(d, "up")
    }

    fn link(&self, d: usize, state: &str) -> Result<(), String> {
        let (ns, _, peer) = self.names(d);
        if ip(&["-n", &ns, "link", "set", &peer, state]) {
            Ok(())
        } else {
            Err(format!("ip -n {ns} link set {peer} {state} failed"))
        }
    }

    /// Shapes what disk `d` sends to `rate` (a `tc` rate such as `4mbit`) with a token bucket.
    pub fn shape(&self, d: usize, rate: &str) -> Result<(), String> {
        let (ns, _, peer) = self.names(d);
        let args = [
            "netns", "exec", &ns, "tc", "qdisc", "replace", "dev", &peer, "root", "tbf", "rate",
            rate, "burst", "32kbit", "latency", "400ms",
        ];
        if ip(&args) {
            Ok(())
        } else {
            Err(format!("tc on {peer} in {ns} failed (is `tc` installed?)"))
        }
    }

    /// Removes disk `d`'s shaping (nothing to remove is fine).
    pub fn unshape(&self, d: usize) {
        let (ns, _, peer) = self.names(d);
        ip(&[
            "netns", "exec", &ns, "tc", "qdisc", "del", "dev", &peer, "root",
        ]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for d in 0..self.disks {
            let (ns, veth, _) = self.names(d);
            ip(&["link", "del", &veth]);
            ip(&["netns", "del", &ns]);
        }
        if self.host_ns {
            let (ns, veth, _) = self.host_names();
            ip(&["link", "del", &veth]);
            ip(&["netns", "del", &ns]);
        }
        ip(&["link", "del", &self.bridge()]);
    }
}

/// A token bucket's burst for `rate` (`100mbit`, `10gbit`, …): 10 ms of it, at least 32 kbit
/// (a bucket smaller than a few packets cannot reach its rate).
fn tbf_burst(rate: &str) -> String {
    let lower = rate.to_ascii_lowercase();
    let (number, unit) = lower.split_at(
        lower
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(lower.len()),
    );
    let per_sec: f64 = number.parse::<f64>().unwrap_or(0.0)
        * match unit {
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            _ => 1.0,
        };
    let bits = (per_sec / 100.0).max(32e3);
    format!("{}kbit", (bits / 1e3).ceil() as u64)
}
