//! TCP sockets of every link between members (host ↔ disk, disk ↔ disk, relays) and clients.
//!
//! **Unsent data is kept out of the kernel.** Every connection checks its peer with HTTP/2
//! pings ([`crate::config::Deadlines`]); a ping written behind megabytes of data already in
//! the kernel's send buffer waits until they drained, which on a slow link (4 Mbit/s drains
//! 4 MiB in 8 s) is longer than the ping's timeout: a healthy but slow exchange was closed as
//! dead (`ConnectionReset` at the receiver). With `TCP_NOTSENT_LOWAT` the kernel holds at most
//! [`UNSENT_LOWAT_BYTES`] of data not yet sent (data in flight is not limited, so a fast
//! link's window still fills); the rest waits in HTTP/2's own queue, where control frames
//! (pings, window updates) go first.
//!
//! **HTTP/2 receive windows** are set on both ends of every member's link
//! ([`HTTP2_STREAM_WINDOW_BYTES`], [`HTTP2_CONNECTION_WINDOW_BYTES`]): they bound what a peer
//! may send ahead of the reader, outside any job's grant.
use std::os::fd::AsRawFd;

/// Bytes of not-yet-sent data a socket's kernel buffer may hold.
pub const UNSENT_LOWAT_BYTES: i32 = 128 * 1024;

/// Sets `TCP_NODELAY` and `TCP_NOTSENT_LOWAT` on a connected TCP socket.
///
/// # Errors
/// The kernel refusing an option.
pub fn tune(socket: &tokio::net::TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let value: libc::c_int = UNSENT_LOWAT_BYTES;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local; the descriptor
    // belongs to `socket`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Connects to `uri`'s host and port and tunes the socket ([`tune`]): a connector for
/// tonic's `Endpoint::connect_with_connector`.
///
/// # Errors
/// Resolution or connection failure; a URI without host or port.
pub async fn connect(
    uri: http::Uri,
) -> std::io::Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>> {
    let host = uri
        .host()
        .ok_or_else(|| std::io::Error::other(format!("no host in {uri}")))?;
    let port = uri
        .port_u16()
        .ok_or_else(|| std::io::Error::other(format!("no port in {uri}")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, port)).await?;
    tune(&stream)?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}

/// A connection to a member at `address` (`ip:port`): TCP without Nagle, a connect timeout,
/// HTTP/2 pings that close it when the peer stops answering (a stream from a stopped or cut
/// off peer fails within the deadline, never hangs), and TLS when `tls` is given (the peer
/// checked against the cluster's CA, this member's certificate shown). Connect it with
/// [`connector`].
///
/// # Errors
/// A malformed address.
pub fn member_endpoint(
    address: &str,
    deadlines: crate::config::Deadlines,
    connect_timeout: std::time::Duration,
    tls: Option<&crate::tls::TlsMaterial>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(deadlines.ping_interval())
        .keep_alive_timeout(deadlines.ping_timeout())
        .keep_alive_while_idle(true);
    let endpoint = endpoint
        .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES);
    match tls {
        Some(t) => endpoint.tls_config(t.client()),
        None => Ok(endpoint),
    }
}

/// HTTP/2 receive window of one stream on every member's link: how much a sender may have in
/// flight ahead of what the receiver read. hyper's defaults (1 MiB at a server) held a
/// loopback `DoPut` to about half of what the transport does with this (issue 34).
pub const HTTP2_STREAM_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
/// HTTP/2 receive window of one connection (all its streams) on every member's link.
pub const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 2 * HTTP2_STREAM_WINDOW_BYTES;

/// A member's server with the links' HTTP/2 receive windows ([`HTTP2_STREAM_WINDOW_BYTES`],
/// [`HTTP2_CONNECTION_WINDOW_BYTES`]).
pub fn server_windows(builder: tonic::transport::Server) -> tonic::transport::Server {
    builder
        .initial_stream_window_size(HTTP2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(HTTP2_CONNECTION_WINDOW_BYTES)
}

/// The connector of every member's and client's channel ([`connect`]).
pub fn connector() -> tower::util::ServiceFn<
    fn(
        http::Uri,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = std::io::Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>>,
                > + Send,
        >,
    >,
> {
    tower::service_fn(|uri| Box::pin(connect(uri)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sockets_keep_little_unsent_data_in_the_kernel() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = tokio::spawn(async move { listener.accept().await.unwrap().0 });
        let uri: http::Uri = format!("http://{address}").parse().unwrap();
        let client = connect(uri).await.unwrap().into_inner();
        let server = accepted.await.unwrap();
        tune(&server).unwrap();
        for s in [&client, &server] {
            let mut value: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt writes at most `len` bytes into a live local.
            let rc = unsafe {
                libc::getsockopt(
                    s.as_raw_fd(),
                    libc::IPPROTO_TCP,
                    libc::TCP_NOTSENT_LOWAT,
                    (&raw mut value).cast(),
                    &mut len,
                )
            };
            assert_eq!((rc, value), (0, UNSENT_LOWAT_BYTES));
            assert!(s.nodelay().unwrap());
        }
    }
}

/// This machine's identity as its kernel gives it (`/proc/sys/kernel/random/boot_id`: the same
/// for every process and network namespace under one running kernel, new at each boot), or
/// None where there is none. A host and a disk with the same one share the machine's cores.
pub fn machine_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
