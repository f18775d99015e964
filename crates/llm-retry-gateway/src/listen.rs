//! [`listen`]: the gateway's listening socket, with a backlog for bursts.

use std::io;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel queues for the gateway before it accepts them.
///
/// tokio's `TcpListener::bind` listens with a backlog of 128. When more
/// callers than that connect at once, the kernel drops the SYNs beyond it
/// and the callers' kernels send them again only after a second, so a
/// burst of 200 callers has 72 of them wait a second or more for nothing.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `addr` (with `SO_REUSEADDR` off Windows, as tokio's bind does) and listens
/// with a backlog of [`LISTEN_BACKLOG`]. Must be called inside a tokio
/// runtime.
///
/// # Errors
///
/// When the socket cannot be made or bound (the port is taken).
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As tokio's bind: not on Windows, where it lets another socket take
    // the port.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// More connects than tokio's default backlog, made while the listener
    /// accepts none: each completes in the kernel's queue. With a backlog
    /// of 128 the 129th waits for a SYN the kernel dropped, and its connect
    /// times out.
    #[tokio::test]
    async fn a_burst_of_connects_waits_in_the_backlog_instead_of_being_dropped() {
        let listener = listen(SocketAddr::from(([127, 0, 0, 1], 0))).expect("listens");
        let addr = listener.local_addr().expect("has an address");
        let connected: Vec<std::net::TcpStream> = (0..300)
            .map(|n| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .unwrap_or_else(|error| panic!("connect {n} was dropped: {error}"))
            })
            .collect();
        assert_eq!(connected.len(), 300);
    }
}
