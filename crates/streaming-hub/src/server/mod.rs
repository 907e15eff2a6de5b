//! The HTTP server loop: HTTP/1.1 on hyper, with the limits that keep it answering.
//!
//! - At most `max_connections` connections are served at once; one more is answered `503` in
//!   the error shape and closed at once, so idle or half-open sockets cannot exhaust descriptors.
//! - A client must send each request's headers within `header_timeout` (idle keep-alive
//!   connections included), or the connection is closed.
//! - A request must be answered within `request_timeout` (body reading included), or it is
//!   answered `408` in the error shape (see `api::router`).
//! - Answers go out without a Nagle delay (`TCP_NODELAY`).
//! - What hyper refuses before the router sees it (malformed HTTP: 400, 414, 431) is answered in
//!   the error shape too ([`shaped`]).
//!
//! On `stop` it stops accepting and lets connections in flight finish their current request.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::HttpLimits;

mod shaped;

use shaped::Shaped;

/// How long connections in flight may take to finish once the server stops.
const GRACE: Duration = Duration::from_secs(10);

/// The answer to a connection over the cap, in the error shape.
fn refusal() -> Vec<u8> {
    let body = r#"{"code":503,"title":"too_many_connections","message":"the server has too many open connections; retry later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         retry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves `router` on `listener` until `stop`.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: HttpLimits,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_headers(100);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was accepted: wait a moment.
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            metrics::counter!(crate::telemetry::metric::HTTP_REFUSED_CONNECTIONS).increment(1);
            tracing::debug!(peer = %peer, "connection refused: too many open connections");
            tokio::spawn(async move {
                let mut tcp = tcp;
                let _ = tokio::time::timeout(Duration::from_secs(1), tcp.write_all(&refusal())).await;
                let _ = tcp.shutdown().await;
            });
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(Shaped::new(tcp)), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    if tokio::time::timeout(GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the shutdown grace period were closed");
    }
    Ok(())
}
