//! One connection to one NATS server, spoken directly: dialled only at addresses the address guard
//! checked, upgraded to TLS when the server is `tls://` or asks for it (the certificate checked
//! against the server's name by the platform's verifier), logged in from `CONNECT` (a token, a user
//! and password, or an nkey signing the server's nonce), then used by one attempt at a time: a
//! publish waits for its JetStream acknowledgement on an inbox of the connection's own, or, for
//! core NATS, for the `PONG` that follows it (an `-ERR` before it refuses the publish). Servers a
//! cluster advertises are never dialled: only the configured ones are.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::config::Server;
use super::nkey::KeyPair;
use crate::sink::{Failure, FailureKind, failure};

/// The longest protocol line read (`INFO` included): more is a broken or hostile server.
const MAX_LINE: usize = 64 * 1024;
/// The largest acknowledgement read.
const MAX_REPLY: usize = 64 * 1024;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// How the hub logs in.
#[derive(Clone)]
pub enum Login {
    None,
    Token(String),
    User(String, String),
    Nkey(Arc<KeyPair>),
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Token(_) => "token",
            Self::User(..) => "user",
            Self::Nkey(_) => "nkey",
        })
    }
}



/// What a publish came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Published {
    /// Accepted: the stream's acknowledgement (JetStream), or nothing (core NATS).
    Acknowledged(Option<String>),
}

/// An open, logged-in connection.
pub struct Conn {
    reader: BufReader<tokio::io::ReadHalf<Box<dyn Stream>>>,
    writer: tokio::io::WriteHalf<Box<dyn Stream>>,
    /// The inbox prefix of this connection's acknowledgements (`_INBOX.<random>.`).
    inbox: String,
    next: u64,
    max_payload: usize,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("inbox", &self.inbox).finish_non_exhaustive()
    }
}

/// A line of the server's.
enum Line {
    Info,
    Ok,
    Err(String),
    Ping,
    Pong,
    /// `MSG`/`HMSG`: the subject, the header bytes and the total bytes that follow.
    Msg { subject: String, header: usize, total: usize },
}

fn parse(line: &str) -> Result<Line, String> {
    let mut words = line.split_ascii_whitespace();
    let op = words.next().unwrap_or_default().to_ascii_uppercase();
    let rest: Vec<&str> = words.collect();
    let number = |s: &str| s.parse::<usize>().map_err(|_| format!("the server sent a malformed line: {line:.80}"));
    match op.as_str() {
        "INFO" => Ok(Line::Info),
        "+OK" => Ok(Line::Ok),
        "-ERR" => Ok(Line::Err(rest.join(" ").trim_matches('\'').to_owned())),
        "PING" => Ok(Line::Ping),
        "PONG" => Ok(Line::Pong),
        // MSG <subject> <sid> [reply] <size>
        "MSG" if (3..=4).contains(&rest.len()) => {
            Ok(Line::Msg { subject: rest[0].to_owned(), header: 0, total: number(rest[rest.len() - 1])? })
        }
        // HMSG <subject> <sid> [reply] <header size> <total size>
        "HMSG" if (4..=5).contains(&rest.len()) => {
            let header = number(rest[rest.len() - 2])?;
            let total = number(rest[rest.len() - 1])?;
            if header > total {
                return Err(format!("the server sent a malformed line: {line:.80}"));
            }
            Ok(Line::Msg { subject: rest[0].to_owned(), header, total })
        }
        _ => Err(format!("the server sent an unknown line: {line:.80}")),
    }
}

/// Reads one line (without its CRLF), bounded.
async fn read_line(reader: &mut (impl AsyncBufReadExt + Unpin)) -> std::io::Result<String> {
    let mut line = Vec::new();
    let read = reader.take(MAX_LINE as u64 + 2).read_until(b'\n', &mut line).await?;
    if read == 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the server closed the connection"));
    }
    if !line.ends_with(b"\n") {
        return Err(std::io::Error::other("the server sent a line too long"));
    }
    while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        line.pop();
    }
    String::from_utf8(line).map_err(|_| std::io::Error::other("the server sent a line that is not UTF-8"))
}

/// What the server's `INFO` says that the hub needs.
struct Info {
    tls_required: bool,
    nonce: Option<String>,
    headers: bool,
    max_payload: usize,
}

fn info(line: &str) -> Result<Info, Failure> {
    let body = line.strip_prefix("INFO").map(str::trim).ok_or_else(|| {
        failure(true, FailureKind::Refused, "the server did not greet with INFO: it may not be a NATS server")
    })?;
    let v: Value = serde_json::from_str(body)
        .map_err(|_| failure(true, FailureKind::Refused, "the server's INFO is not JSON: it may not be a NATS server"))?;
    Ok(Info {
        tls_required: v["tls_required"].as_bool().unwrap_or(false),
        nonce: v["nonce"].as_str().map(str::to_owned),
        headers: v["headers"].as_bool().unwrap_or(false),
        max_payload: v["max_payload"].as_u64().and_then(|n| usize::try_from(n).ok()).unwrap_or(1 << 20),
    })
}

fn io_failure(what: &str, e: &std::io::Error) -> Failure {
    failure(true, FailureKind::Unreachable, format!("{what}: {e}"))
}

/// Whether an `-ERR` refuses the login (it is then not worth retrying as is).
fn unauthorized(err: &str) -> bool {
    let e = err.to_ascii_lowercase();
    e.contains("authorization") || e.contains("authentication")
}

impl Conn {
    /// Connects to `server`, logs in and, for JetStream, subscribes to its inbox.
    pub async fn open(
        server: &Server,
        login: &Login,
        allow_private: bool,
        jetstream: bool,
        timeout: Duration,
    ) -> Result<Conn, Failure> {
        let (host, port) = (server.host.as_str(), server.port);
        let addrs = crate::guard::checked_server("NATS server", host, port, allow_private).await?;
        let opened = tokio::time::timeout(timeout, Self::handshake(server, &addrs, login, jetstream, timeout)).await;
        opened.map_err(|_| {
            failure(true, FailureKind::Timeout, format!("{host}:{port} did not complete the login within {} ms", timeout.as_millis()))
        })?
    }

    async fn handshake(
        server: &Server,
        addrs: &[SocketAddr],
        login: &Login,
        jetstream: bool,
        timeout: Duration,
    ) -> Result<Conn, Failure> {
        let (host, port) = (server.host.as_str(), server.port);
        let mut tcp = None;
        for addr in addrs {
            if let Ok(Ok(stream)) = tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                tcp = Some(stream);
                break;
            }
        }
        let mut tcp = tcp.ok_or_else(|| {
            failure(true, FailureKind::Unreachable, format!("the server {host}:{port} could not be reached"))
        })?;
        let _ = tcp.set_nodelay(true);
        // The server greets in clear, then TLS starts when either side wants it.
        let greeting = {
            let mut reader = BufReader::new(&mut tcp);
            let line = read_line(&mut reader).await.map_err(|e| io_failure("reading the server's INFO", &e))?;
            if !reader.buffer().is_empty() {
                return Err(failure(true, FailureKind::Refused, "the server sent more than its INFO before the login"));
            }
            info(&line)?
        };
        let tls = server.tls || greeting.tls_required;
        let stream: Box<dyn Stream> = if tls {
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|_| failure(false, FailureKind::Refused, format!("{host} is not a valid TLS server name")))?;
            let connector = tokio_rustls::TlsConnector::from(crate::sink::platform_tls(false)?);
            let stream = connector
                .connect(name, tcp)
                .await
                .map_err(|e| failure(true, FailureKind::Unreachable, format!("TLS with {host}:{port} failed: {e}")))?;
            Box::new(stream)
        } else {
            Box::new(tcp)
        };
        if !greeting.headers {
            return Err(failure(
                false,
                FailureKind::Refused,
                "the server does not support headers (NATS 2.2 or later is needed)",
            ));
        }
        let mut connect = json!({
            "verbose": false, "pedantic": false, "tls_required": tls, "name": "streaming-hub",
            "lang": "rust", "version": env!("CARGO_PKG_VERSION"), "protocol": 1,
            "headers": true, "no_responders": true,
        });
        match login {
            Login::None => {}
            Login::Token(token) => connect["auth_token"] = json!(token),
            Login::User(user, password) => {
                connect["user"] = json!(user);
                connect["pass"] = json!(password);
            }
            Login::Nkey(pair) => {
                let nonce = greeting.nonce.as_deref().ok_or_else(|| {
                    failure(true, FailureKind::Unauthorized, "the server sent no nonce to sign: it does not take nkeys")
                })?;
                connect["nkey"] = json!(pair.public_key());
                connect["sig"] = json!(pair.sign(nonce.as_bytes()));
            }
        }
        let (read, writer) = tokio::io::split(stream);
        let mut random = [0u8; 12];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
        let inbox = format!("_INBOX.{}.", hex(&random));
        let mut conn = Conn { reader: BufReader::new(read), writer, inbox, next: 0, max_payload: greeting.max_payload };
        let mut hello = format!("CONNECT {connect}\r\n");
        if jetstream {
            hello.push_str(&format!("SUB {}* 1\r\n", conn.inbox));
        }
        hello.push_str("PING\r\n");
        conn.send(hello.as_bytes()).await?;
        // The login is taken when the PONG comes; an -ERR before it refuses it.
        match conn.until_pong().await {
            Ok(()) => Ok(conn),
            Err(e) if unauthorized(&e) => {
                Err(failure(true, FailureKind::Unauthorized, format!("the server refused the login: {e}")))
            }
            Err(e) => Err(failure(true, FailureKind::Refused, format!("the server refused the connection: {e}"))),
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.writer.write_all(bytes).await.map_err(|e| io_failure("writing to the server", &e))?;
        self.writer.flush().await.map_err(|e| io_failure("writing to the server", &e))
    }

    /// Reads until the server's `PONG`, answering its `PING`s; an `-ERR` first is the error.
    async fn until_pong(&mut self) -> Result<(), String> {
        loop {
            let line = read_line(&mut self.reader).await.map_err(|e| e.to_string())?;
            match parse(&line)? {
                Line::Pong => return Ok(()),
                Line::Ping => self.send(b"PONG\r\n").await.map_err(|f| f.reason)?,
                Line::Err(e) => return Err(e),
                Line::Msg { total, .. } => {
                    self.skip(total).await.map_err(|e| e.to_string())?;
                }
                Line::Info | Line::Ok => {}
            }
        }
    }

    async fn skip(&mut self, total: usize) -> std::io::Result<()> {
        let mut rest = (&mut self.reader).take(total as u64 + 2);
        tokio::io::copy(&mut rest, &mut tokio::io::sink()).await.map(|_| ())
    }

    /// Publishes `payload` with `headers` to `subject`; with `jetstream`, waits for the stream's
    /// acknowledgement.
    pub async fn publish(
        &mut self,
        subject: &str,
        headers: &[(String, String)],
        payload: &[u8],
        jetstream: bool,
    ) -> Result<Published, Failure> {
        let mut block = String::from("NATS/1.0\r\n");
        for (name, value) in headers {
            let clean = |s: &str| !s.is_empty() && !s.contains(['\r', '\n']);
            if !clean(name) || name.contains(':') || name.contains(' ') || value.contains(['\r', '\n']) {
                return Err(failure(
                    false,
                    FailureKind::Refused,
                    format!("the header {name:?} cannot be sent as a NATS header (a line break or a colon in it)"),
                ));
            }
            block.push_str(&format!("{name}: {value}\r\n"));
        }
        block.push_str("\r\n");
        if block.len() + payload.len() > self.max_payload {
            return Err(failure(
                false,
                FailureKind::Refused,
                format!("the message ({} bytes) is larger than the server takes ({} bytes)", block.len() + payload.len(), self.max_payload),
            ));
        }
        self.next += 1;
        let reply = format!("{}{}", self.inbox, self.next);
        let mut frame = if jetstream {
            format!("HPUB {subject} {reply} {} {}\r\n", block.len(), block.len() + payload.len()).into_bytes()
        } else {
            format!("HPUB {subject} {} {}\r\n", block.len(), block.len() + payload.len()).into_bytes()
        };
        frame.extend_from_slice(block.as_bytes());
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        if !jetstream {
            frame.extend_from_slice(b"PING\r\n");
        }
        self.send(&frame).await?;
        if !jetstream {
            return self
                .until_pong()
                .await
                .map(|()| Published::Acknowledged(None))
                .map_err(|e| failure(true, refusal_kind(&e), format!("the server refused the publish: {e}")));
        }
        loop {
            let line = read_line(&mut self.reader).await.map_err(|e| io_failure("reading the acknowledgement", &e))?;
            match parse(&line).map_err(|e| failure(true, FailureKind::Refused, e))? {
                Line::Msg { subject: to, header, total } => {
                    if total > MAX_REPLY {
                        return Err(failure(true, FailureKind::Refused, "the server sent an acknowledgement too large"));
                    }
                    let mut body = vec![0; total + 2];
                    self.reader.read_exact(&mut body).await.map_err(|e| io_failure("reading the acknowledgement", &e))?;
                    body.truncate(total);
                    if to != reply {
                        // An acknowledgement of an earlier publish whose wait ended: not this one's.
                        continue;
                    }
                    return acknowledgement(&body[..header], &body[header..], subject);
                }
                Line::Ping => self.send(b"PONG\r\n").await?,
                Line::Err(e) => {
                    return Err(failure(true, refusal_kind(&e), format!("the server refused the publish: {e}")));
                }
                Line::Info | Line::Ok | Line::Pong => {}
            }
        }
    }
}

fn refusal_kind(err: &str) -> FailureKind {
    if unauthorized(err) || err.to_ascii_lowercase().contains("permissions violation") {
        FailureKind::Unauthorized
    } else {
        FailureKind::Refused
    }
}

/// What a JetStream acknowledgement says: `{"stream", "seq", "duplicate"?}`, an `{"error"}`, or
/// a `503` status header when no stream captures the subject.
fn acknowledgement(header: &[u8], body: &[u8], subject: &str) -> Result<Published, Failure> {
    let status = std::str::from_utf8(header).ok().and_then(|h| h.lines().next()).unwrap_or_default();
    if status.starts_with("NATS/1.0 503") {
        return Err(failure(
            true,
            FailureKind::Refused,
            format!("no JetStream stream captures the subject {subject} (no responders)"),
        ));
    }
    let text = crate::sink::cap_text(body, crate::sink::RESPONSE_CAP);
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if let Some(error) = v.get("error") {
        let description = error["description"].as_str().unwrap_or("no description");
        let code = error["code"].as_u64().and_then(|c| u16::try_from(c).ok());
        return Err(Failure {
            retryable: true,
            kind: FailureKind::Refused,
            reason: format!("the stream refused the message: {description}"),
            status: code,
            response: Some(text),
            retry_after: None,
        });
    }
    if v.get("stream").is_none() {
        return Err(failure(true, FailureKind::Refused, format!("the acknowledgement is not JetStream's: {text:.200}")));
    }
    Ok(Published::Acknowledged(Some(text)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_servers_lines_are_read_and_odd_ones_refused() {
        assert!(matches!(parse("PING"), Ok(Line::Ping)));
        assert!(matches!(parse("-ERR 'Authorization Violation'"), Ok(Line::Err(e)) if e == "Authorization Violation"));
        assert!(matches!(parse("MSG _INBOX.a.1 1 42"), Ok(Line::Msg { header: 0, total: 42, .. })));
        assert!(matches!(parse("HMSG _INBOX.a.1 1 12 30"), Ok(Line::Msg { header: 12, total: 30, .. })));
        for bad in ["HMSG a 1 30 12", "MSG a", "MSG a 1 x", "WAT", "HMSG a 1 -1 3"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn acknowledgements_deliver_refuse_or_say_no_stream() {
        assert_eq!(
            acknowledgement(b"", br#"{"stream":"S","seq":3}"#, "s").unwrap(),
            Published::Acknowledged(Some(r#"{"stream":"S","seq":3}"#.into()))
        );
        let no_stream = acknowledgement(b"NATS/1.0 503\r\n\r\n", b"", "orders").unwrap_err();
        assert!(no_stream.retryable && no_stream.reason.contains("orders"), "{no_stream:?}");
        let refused = acknowledgement(b"", br#"{"error":{"code":400,"description":"maximum messages exceeded"}}"#, "s")
            .unwrap_err();
        assert_eq!(refused.status, Some(400));
        assert!(refused.reason.contains("maximum messages exceeded"));
        assert!(acknowledgement(b"", b"not json", "s").is_err());
    }

    proptest! {
        #[test]
        fn any_line_is_read_or_refused_never_a_panic(line in "\\PC{0,200}") {
            let _ = parse(&line);
            let _ = info(&line);
        }

        #[test]
        fn any_acknowledgement_is_judged_never_a_panic(header in proptest::collection::vec(any::<u8>(), 0..64), body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = acknowledgement(&header, &body, "s");
        }
    }
}
