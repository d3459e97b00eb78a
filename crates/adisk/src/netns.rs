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
}

impl Net {
    /// Makes the bridge (network `10.subnet.0.0/24`) and the namespaces; on failure removes
    /// what it made and says what could not be made.
    pub fn make(disks: usize, subnet: u8) -> Result<Net, String> {
        let tag = format!("{:x}", std::process::id() % 0xfffff);
        let mut net = Net {
            tag,
            subnet,
            disks: 0,
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
        let address = format!("{}/24", self.disk(d));
        let made = ip(&["netns", "add", &ns])
            && ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer])
            && ip(&["link", "set", &peer, "netns", &ns])
            && ip(&["link", "set", &veth, "master", &self.bridge()])
            && ip(&["link", "set", &veth, "up"])
            && ip(&["-n", &ns, "addr", "add", &address, "dev", &peer])
            && ip(&["-n", &ns, "link", "set", &peer, "up"])
            && ip(&["-n", &ns, "link", "set", "lo", "up"]);
        if made {
            Ok(())
        } else {
            Err(format!("cannot make network namespace {ns}"))
        }
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
        ip(&["link", "del", &self.bridge()]);
    }
}
