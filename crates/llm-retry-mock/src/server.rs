//! The server: [`MockServer`] binds loopback, accepts connections on a
//! tokio task, and exposes the request log.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::conn;
use crate::record::{RecordedRequest, Records};
use crate::router::Router;
use crate::script::Script;

/// State shared by every connection of one server.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) router: Router,
    pub(crate) records: Records,
}

/// A scripted LLM API upstream on `127.0.0.1`, serving HTTP/1.1 (keep-alive)
/// and h2c (prior knowledge) on an ephemeral port.
///
/// Each connection runs on its own tokio task; the accept loop runs on
/// another. [`MockServer::shutdown`] stops both and waits; dropping the
/// server aborts them. Must be started inside a tokio runtime.
///
/// See the [crate docs](crate) for a complete example.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for MockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .field("requests", &self.shared.records.len())
            .finish_non_exhaustive()
    }
}

impl MockServer {
    /// Binds `127.0.0.1:0` and starts serving `script` on a tokio task.
    ///
    /// # Errors
    ///
    /// When the listener cannot be bound.
    pub async fn start(script: Script) -> io::Result<MockServer> {
        MockServer::start_on(0, script).await
    }

    /// Binds `127.0.0.1:port` (any free port for `0`) and starts serving
    /// `script`: for a process outside the test that must be told the
    /// address before the mock starts.
    ///
    /// # Errors
    ///
    /// When the listener cannot be bound (the port is taken).
    pub async fn start_on(port: u16, script: Script) -> io::Result<MockServer> {
        let listener = listen(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            router: Router::new(script),
            records: Records::default(),
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stopped));
        Ok(MockServer {
            addr,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// When the server started, on the tokio clock: the zero of every
    /// [`Route::outage`](crate::Route::outage) window and the moment every
    /// [`Route::capacity`](crate::Route::capacity) bucket was full.
    /// Compare it with [`RecordedRequest::received_at`] to place requests
    /// on that timeline.
    pub fn started_at(&self) -> tokio::time::Instant {
        self.shared.router.started()
    }

    /// The bound address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path` (a `/` is inserted when
    /// `path` is not empty and starts with neither `/` nor `?`).
    pub fn url(&self, path: &str) -> String {
        let sep = if path.is_empty() || path.starts_with(['/', '?']) {
            ""
        } else {
            "/"
        };
        format!("http://{}{sep}{path}", self.addr)
    }

    /// Every request received so far, in the order their bodies finished
    /// arriving (before each was answered).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.records.snapshot()
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        self.shared.records.len()
    }

    /// How many requests were received for exactly `path` (query excluded).
    pub fn requests_to(&self, path: &str) -> usize {
        self.shared.records.count_path(path)
    }

    /// Forgets every recorded request. Route counters (which reply of a
    /// sequence comes next) are not reset.
    pub fn reset_records(&self) {
        self.shared.records.clear();
    }

    /// Stops accepting, ends every connection (in-flight requests included;
    /// clients see their connection close), and waits for all of it.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Dropping the accept task drops its JoinSet, which aborts every
            // connection task.
            task.abort();
        }
    }
}

/// Connections the kernel queues before the accept loop takes them. tokio's
/// `TcpListener::bind` listens with 128: a test opening more connections
/// at once than that would have the SYNs beyond it dropped, and those
/// connects retried by the kernel a second later, in real time, which a
/// paused tokio clock outruns.
const BACKLOG: u32 = 1024;

fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    // As tokio's bind: not on Windows, where it lets another socket take
    // the port.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    conns.spawn(conn::serve(stream, Arc::clone(&shared)));
                }
                Err(err) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %err, "llm-retry-mock: accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}
