//! Links that can be slowed or cut: a TCP proxy in front of each disk, for `adisk chaos`.
//!
//! ```text
//!   host ──► proxy of disk d (the address cluster.toml names) ──► disk d (its own port)
//!   disk e ─┘   (exchange streams and repairs reach d through it too)
//! ```
//!
//! A proxy forwards bytes both ways, in chunks of at most [`CHUNK_BYTES`]. Its link is
//! [`LinkMode::Up`] (forward at once), [`LinkMode::Slow`] (each chunk waits
//! [`SLOW_DELAY`] first: a congested link), or [`LinkMode::Cut`] (nothing is forwarded and
//! nothing refused: new connections are accepted and held, bytes in flight stay where they
//! are — a cable pulled, which the other side only notices by its deadlines). Userspace, so
//! it needs no kernel queueing discipline (this machine's kernel has no `netem`) and no root.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest chunk a proxy forwards at once.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// What a slow link adds to every chunk.
pub const SLOW_DELAY: Duration = Duration::from_millis(20);

/// The state of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkMode {
    /// Forward at once.
    Up = 0,
    /// Every chunk waits [`SLOW_DELAY`].
    Slow = 1,
    /// Nothing is forwarded.
    Cut = 2,
}

/// A proxy in front of one disk; it stops when dropped.
pub struct LinkProxy {
    mode: Arc<AtomicU8>,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl LinkProxy {
    /// Listens on `listen` and forwards every connection to `target`.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub async fn start(listen: &str, target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let mode = Arc::new(AtomicU8::new(LinkMode::Up as u8));
        let task = tokio::spawn(accept(listener, target, mode.clone()));
        Ok(LinkProxy {
            mode,
            address,
            task,
        })
    }

    /// Where the proxy listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Sets the link's state (connections open now follow it too).
    pub fn set(&self, mode: LinkMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

impl Drop for LinkProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, mode: Arc<AtomicU8>) {
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let _ = client.set_nodelay(true);
        connections.spawn(forward(client, target, mode.clone()));
        while connections.try_join_next().is_some() {}
    }
}

/// One connection: waits while the link is cut, then connects to the disk and pumps both ways.
async fn forward(client: TcpStream, target: SocketAddr, mode: Arc<AtomicU8>) {
    wait_unless_cut(&mode).await;
    let Ok(disk) = TcpStream::connect(target).await else {
        return;
    };
    let _ = disk.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (disk_read, disk_write) = disk.into_split();
    tokio::select! {
        () = pump(client_read, disk_write, mode.clone()) => {}
        () = pump(disk_read, client_write, mode) => {}
    }
}

async fn wait_unless_cut(mode: &AtomicU8) {
    while mode.load(Ordering::SeqCst) == LinkMode::Cut as u8 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Copies `from` to `to` chunk by chunk under the link's state, until either side closes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU8>,
) {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        wait_unless_cut(&mode).await;
        if mode.load(Ordering::SeqCst) == LinkMode::Slow as u8 {
            tokio::time::sleep(SLOW_DELAY).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind a proxy: bytes pass when up, wait when cut, pass again when up.
    #[tokio::test]
    async fn a_cut_link_holds_bytes_until_it_is_up_again() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 16];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = LinkProxy::start("127.0.0.1:0", target).await.unwrap();
        let mut c = TcpStream::connect(proxy.address()).await.unwrap();
        let mut b = [0u8; 4];
        c.write_all(b"ping").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping");
        proxy.set(LinkMode::Cut);
        c.write_all(b"held").await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), c.read_exact(&mut b))
                .await
                .is_err(),
            "a cut link forwards nothing"
        );
        proxy.set(LinkMode::Slow);
        let t = std::time::Instant::now();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"held");
        assert!(t.elapsed() >= SLOW_DELAY, "a slow link delays every chunk");
        proxy.set(LinkMode::Up);
        c.write_all(b"pong").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"pong");
    }
}
