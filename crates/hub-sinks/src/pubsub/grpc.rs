//! Pub/Sub's `Publish` as a gRPC call over HTTP/2 (`h2`), spoken here so that every connection
//! goes through the address guard: the endpoint's name resolved once, every address checked, the
//! checked addresses dialled, TLS (ALPN `h2`) checked by the platform's verifier. One connection
//! per endpoint carries every attempt at once (HTTP/2 streams); a broken one is made again. Each
//! endpoint's connection is made under a lock of its own: an endpoint that is slow to resolve,
//! connect or shake hands holds back only its own attempts, never another tenant's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::net::TcpStream;

use crate::cache::BoundedCache;
use crate::sink::{Failure, FailureKind, failure, lock};

/// The largest answer read: a `PublishResponse` for one message is a few dozen bytes, and an
/// endpoint the tenant names must not make every attempt in flight hold a megabyte.
const MAX_ANSWER: usize = 64 * 1024;

/// The messages of `google.pubsub.v1` the hub sends and reads.
pub mod proto {
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PubsubMessage {
        #[prost(bytes = "vec", tag = "1")]
        pub data: Vec<u8>,
        #[prost(map = "string, string", tag = "2")]
        pub attributes: HashMap<String, String>,
        #[prost(string, tag = "5")]
        pub ordering_key: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PublishRequest {
        #[prost(string, tag = "1")]
        pub topic: String,
        #[prost(message, repeated, tag = "2")]
        pub messages: Vec<PubsubMessage>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PublishResponse {
        #[prost(string, repeated, tag = "1")]
        pub message_ids: Vec<String>,
    }
}

/// Where the publisher connects: `https://host[:port]` or, for an emulator, `http://…`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn parse(url: &str) -> Option<Self> {
        let u = url::Url::parse(url).ok()?;
        let tls = match u.scheme() {
            "https" => true,
            "http" => false,
            _ => return None,
        };
        let host = u.host_str()?.trim_start_matches('[').trim_end_matches(']').to_owned();
        Some(Self { tls, port: u.port_or_known_default()?, host })
    }

    fn authority(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        format!("{host}:{}", self.port)
    }
}

/// HTTP/2 connections by endpoint (at most [`crate::cache::CAPACITY`] endpoints kept; a dropped
/// one's connection closes with its last attempt).
#[derive(Debug, Default)]
pub struct Channels {
    slots: std::sync::Mutex<BoundedCache<Endpoint, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// An endpoint's connection, and how many times it was made (so that an attempt that found it
/// broken replaces only the one it found).
#[derive(Debug, Default)]
struct Slot {
    made: u64,
    send: Option<h2::client::SendRequest<Bytes>>,
}
/// What a gRPC status means for an attempt.
fn status_failure(code: u32, message: &str) -> Failure {
    let text = |what: &str| format!("Pub/Sub {what} (gRPC {code}): {message}");
    match code {
        // INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION: this message or topic will not change.
        3 => failure(false, FailureKind::Refused, text("refused the message")),
        5 => failure(false, FailureKind::Refused, text("has no such topic")),
        9 => failure(false, FailureKind::Refused, text("refused the message")),
        7 | 16 => failure(true, FailureKind::Unauthorized, text("refused the credentials")),
        4 => failure(true, FailureKind::Timeout, text("did not answer in time")),
        14 => failure(true, FailureKind::Unreachable, text("is unavailable")),
        _ => failure(true, FailureKind::Refused, text("refused the message")),
    }
}

/// A gRPC message frame: not compressed, its length, its bytes.
fn frame(message: &impl prost::Message) -> Bytes {
    let body = message.encode_to_vec();
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&body);
    out.freeze()
}

/// The message of an answer's frames.
fn unframe(mut body: Bytes) -> Result<Bytes, String> {
    if body.len() < 5 {
        return Err("an answer without a message".into());
    }
    if body[0] != 0 {
        return Err("a compressed answer, which was not asked for".into());
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    if len > body.len() {
        return Err("a truncated answer".into());
    }
    Ok(body.split_to(len))
}

fn grpc_status(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .map(|m| percent_encoding::percent_decode_str(m).decode_utf8_lossy().into_owned())
        .unwrap_or_default();
    Some((code, crate::sink::cap_text(message.as_bytes(), 512)))
}

impl Channels {
    async fn connect(
        &self,
        endpoint: &Endpoint,
        allow_private: bool,
        timeout: Duration,
    ) -> Result<h2::client::SendRequest<Bytes>, Failure> {
        let (host, port) = (endpoint.host.as_str(), endpoint.port);
        let addrs = crate::guard::checked_server("Pub/Sub endpoint", host, port, allow_private).await?;
        let handshake = async {
            let mut tcp = None;
            for addr in &addrs {
                if let Ok(stream) = TcpStream::connect(addr).await {
                    tcp = Some(stream);
                    break;
                }
            }
            let tcp = tcp.ok_or_else(|| {
                failure(true, FailureKind::Unreachable, format!("the endpoint {host}:{port} could not be reached"))
            })?;
            let _ = tcp.set_nodelay(true);
            let refused = |e: h2::Error| failure(true, FailureKind::Unreachable, format!("HTTP/2 with {host}:{port} failed: {e}"));
            if endpoint.tls {
                let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|_| failure(false, FailureKind::Refused, format!("{host} is not a valid TLS server name")))?;
                let tls = tokio_rustls::TlsConnector::from(crate::sink::platform_tls(true)?)
                    .connect(name, tcp)
                    .await
                    .map_err(|e| failure(true, FailureKind::Unreachable, format!("TLS with {host}:{port} failed: {e}")))?;
                let (send, connection) = h2::client::handshake(tls).await.map_err(refused)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok(send)
            } else {
                let (send, connection) = h2::client::handshake(tcp).await.map_err(refused)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok(send)
            }
        };
        tokio::time::timeout(timeout, handshake).await.map_err(|_| {
            failure(true, FailureKind::Timeout, format!("{host}:{port} did not answer within {} ms", timeout.as_millis()))
        })?
    }

    /// The slot of `endpoint`'s connection.
    fn slot(&self, endpoint: &Endpoint) -> Arc<tokio::sync::Mutex<Slot>> {
        let now = Instant::now();
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(endpoint, now) {
            return slot;
        }
        let slot = Arc::default();
        slots.insert(endpoint.clone(), Arc::clone(&slot), now);
        slot
    }

    /// A ready connection to `endpoint` and which one it is, made when there is none or the kept
    /// one is closed. Waiting for a stream is done outside the lock; making a connection, under
    /// the endpoint's own.
    async fn channel(
        &self,
        endpoint: &Endpoint,
        allow_private: bool,
        timeout: Duration,
    ) -> Result<(u64, h2::client::SendRequest<Bytes>), Failure> {
        let slot = self.slot(endpoint);
        let (seen, kept) = {
            let slot = slot.lock().await;
            (slot.made, slot.send.clone())
        };
        if let Some(send) = kept {
            if let Ok(Ok(ready)) = tokio::time::timeout(timeout, send.ready()).await {
                return Ok((seen, ready));
            }
        }
        let mut slot = slot.lock().await;
        let send = match slot.send.clone() {
            // Another attempt made a new one meanwhile.
            Some(send) if slot.made != seen => send,
            _ => {
                let send = self.connect(endpoint, allow_private, timeout).await?;
                slot.made += 1;
                slot.send = Some(send.clone());
                send
            }
        };
        let made = slot.made;
        drop(slot);
        let ready = tokio::time::timeout(timeout, send.ready())
            .await
            .map_err(|_| failure(true, FailureKind::Timeout, "the endpoint did not accept a request in time"))?
            .map_err(|e| failure(true, FailureKind::Unreachable, format!("the endpoint closed the connection: {e}")))?;
        Ok((made, ready))
    }

    /// Drops `endpoint`'s connection `made`, found broken (not a newer one).
    async fn forget(&self, endpoint: &Endpoint, made: u64) {
        let slot = self.slot(endpoint);
        let mut slot = slot.lock().await;
        if slot.made == made {
            slot.send = None;
        }
    }

    /// Calls `method` (`/google.pubsub.v1.Publisher/Publish`) with `request`; the answer's message.
    pub async fn call<Answer: prost::Message + Default>(
        &self,
        endpoint: &Endpoint,
        method: &str,
        request: &impl prost::Message,
        token: Option<&str>,
        allow_private: bool,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let mut used = None;
        let exchange = async {
            let (made, mut send) = self.channel(endpoint, allow_private, timeout).await?;
            used = Some(made);
            let scheme = if endpoint.tls { "https" } else { "http" };
            let mut builder = http::Request::builder()
                .method("POST")
                .uri(format!("{scheme}://{}{method}", endpoint.authority()))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("grpc-timeout", format!("{}m", timeout.as_millis()))
                .header("user-agent", concat!("streaming-hub/", env!("CARGO_PKG_VERSION")));
            if let Some(token) = token {
                builder = builder.header("authorization", format!("Bearer {token}"));
            }
            let request_head = builder.body(()).map_err(|e| failure(false, FailureKind::Refused, e.to_string()))?;
            let broken = |e: h2::Error| failure(true, FailureKind::Unreachable, format!("the call failed: {e}"));
            let (answer, mut body) = send.send_request(request_head, false).map_err(broken)?;
            body.send_data(frame(request), true).map_err(broken)?;
            let answer = answer.await.map_err(broken)?;
            if answer.status() != http::StatusCode::OK {
                return Err(failure(
                    true,
                    if answer.status().as_u16() == 401 || answer.status().as_u16() == 403 {
                        FailureKind::Unauthorized
                    } else {
                        FailureKind::Refused
                    },
                    format!("Pub/Sub answered HTTP {}", answer.status().as_u16()),
                ));
            }
            // A status in the headers is a call that ended at once (an error, usually).
            if let Some((code, message)) = grpc_status(answer.headers()) {
                if code != 0 {
                    return Err(status_failure(code, &message));
                }
            }
            let mut stream = answer.into_body();
            let mut data = BytesMut::new();
            while let Some(chunk) = stream.data().await {
                let chunk = chunk.map_err(broken)?;
                let _ = stream.flow_control().release_capacity(chunk.len());
                data.extend_from_slice(&chunk);
                if data.len() > MAX_ANSWER {
                    return Err(failure(true, FailureKind::Refused, "Pub/Sub's answer is too large"));
                }
            }
            if let Some((code, message)) = stream.trailers().await.map_err(broken)?.as_ref().and_then(grpc_status) {
                if code != 0 {
                    return Err(status_failure(code, &message));
                }
            }
            let message = unframe(data.freeze()).map_err(|e| failure(true, FailureKind::Refused, format!("Pub/Sub sent {e}")))?;
            Answer::decode(message).map_err(|e| failure(true, FailureKind::Refused, format!("Pub/Sub's answer is not readable: {e}")))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => {
                if let (Err(f), Some(made)) = (&result, used) {
                    if f.kind == FailureKind::Unreachable {
                        self.forget(endpoint, made).await;
                    }
                }
                result
            }
            Err(_) => Err(failure(true, FailureKind::Timeout, format!("Pub/Sub did not answer within {} ms", timeout.as_millis()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_message_is_framed_and_read_back() {
        let answer = proto::PublishResponse { message_ids: vec!["42".into()] };
        let read = unframe(frame(&answer)).expect("a frame");
        assert_eq!(<proto::PublishResponse as prost::Message>::decode(read).expect("decodes"), answer);
        assert!(unframe(Bytes::from_static(&[1, 0, 0, 0, 0])).is_err(), "compressed");
        assert!(unframe(Bytes::from_static(&[0, 0, 0, 0, 9, 1])).is_err(), "truncated");
    }

    #[test]
    fn statuses_become_classified_failures() {
        assert!(!status_failure(5, "Topic not found").retryable);
        assert_eq!(status_failure(16, "").kind, FailureKind::Unauthorized);
        assert_eq!(status_failure(14, "").kind, FailureKind::Unreachable);
        assert!(status_failure(8, "quota").retryable);
    }

    proptest! {
        #[test]
        fn any_answer_is_read_or_refused_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(message) = unframe(Bytes::from(bytes)) {
                let _ = <proto::PublishResponse as prost::Message>::decode(message);
            }
        }
    }
}
