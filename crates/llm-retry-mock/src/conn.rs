//! One accepted connection: hyper's HTTP/1.1 + h2c server over a socket
//! wrapper that can end the connection abruptly on a reply's request.
//!
//! Two ways to end it, both by dropping the hyper connection future (and so
//! the socket) from the connection task:
//! - reset: `SO_LINGER` 0 is set just before the socket closes, so the
//!   kernel sends an RST instead of a FIN;
//! - close after flush: the next completed flush (which carries every byte
//!   hyper buffered) triggers an ordinary close (FIN), so the client gets
//!   every byte sent so far and then an incomplete body.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::handler;
use crate::server::Shared;

const OPEN: u8 = 0;
const CLOSE_AFTER_FLUSH: u8 = 1;
const RESET: u8 = 2;

/// How a reply asks its connection to end.
#[derive(Debug, Default)]
pub(crate) struct ConnControl {
    mode: AtomicU8,
    abort: Notify,
}

impl ConnControl {
    /// End the connection now, with an RST.
    pub(crate) fn reset_now(&self) {
        self.mode.store(RESET, Ordering::SeqCst);
        self.abort.notify_one();
    }

    /// End the connection (FIN) after the next completed flush.
    pub(crate) fn close_after_flush(&self) {
        let _ =
            self.mode
                .compare_exchange(OPEN, CLOSE_AFTER_FLUSH, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn flushed(&self) {
        if self.mode.load(Ordering::SeqCst) == CLOSE_AFTER_FLUSH {
            self.abort.notify_one();
        }
    }

    fn wants_reset(&self) -> bool {
        self.mode.load(Ordering::SeqCst) == RESET
    }
}

/// Serves one connection until the client leaves, a reply ends it, or the
/// task is aborted (shutdown).
pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let ctl = Arc::new(ConnControl::default());
    let io = TokioIo::new(ConnIo {
        stream,
        ctl: Arc::clone(&ctl),
    });
    let svc_ctl = Arc::clone(&ctl);
    let service =
        service_fn(move |req| handler::handle(Arc::clone(&shared), Arc::clone(&svc_ctl), req));
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, service);
    tokio::select! {
        res = conn => {
            if let Err(err) = res {
                tracing::trace!(error = %err, "llm-retry-mock: connection ended with an error");
            }
        }
        () = ctl.abort.notified() => {
            tracing::trace!("llm-retry-mock: connection aborted by its reply");
        }
    }
}

/// The socket, plus the hooks that let a reply end the connection.
#[derive(Debug)]
struct ConnIo {
    stream: TcpStream,
    ctl: Arc<ConnControl>,
}

impl Drop for ConnIo {
    fn drop(&mut self) {
        if self.ctl.wants_reset() {
            // SO_LINGER 0 makes close() send an RST. The deprecation warns
            // that a *non-zero* linger blocks the thread on drop; a zero
            // linger never blocks. `set_zero_linger` is the same call but
            // only exists in recent tokio versions.
            #[allow(deprecated)]
            let _ = self.stream.set_linger(Some(Duration::ZERO));
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
        self.ctl.flushed();
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
