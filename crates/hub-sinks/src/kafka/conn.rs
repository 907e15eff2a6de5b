//! One connection to one broker: dialled only at addresses the address guard checked (the name is
//! resolved once, every answer checked, and those very addresses dialled), TLS when the destination
//! asks for it (the certificate checked against the broker's name by the platform's verifier),
//! SASL before anything else, then requests answered one at a time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::config::Mechanism;
use super::protocol::{self, code};
use super::sasl::{Scram, plain};
use crate::sink::{Failure, FailureKind, failure};

/// The largest answer read from a broker: more is a broken or hostile one.
const MAX_RESPONSE: usize = 8 * 1024 * 1024;

/// The client id the hub's producers announce.
pub const CLIENT_ID: &str = "streaming-hub";

trait Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> Stream for T {}

/// How to reach and log in to a cluster's brokers.
#[derive(Clone)]
pub struct Dialer {
    pub tls: bool,
    pub sasl: Option<(Mechanism, String, String)>,
    pub allow_private: bool,
    pub timeout: Duration,
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("tls", &self.tls)
            .field("sasl", &self.sasl.as_ref().map(|(m, user, _)| (m.as_str(), user)))
            .finish_non_exhaustive()
    }
}


/// An open, logged-in connection.
pub struct Conn {
    stream: Box<dyn Stream>,
    correlation: i32,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("correlation", &self.correlation).finish_non_exhaustive()
    }
}


impl Dialer {
    /// Connects to `host:port` and logs in.
    pub async fn connect(&self, host: &str, port: u16) -> Result<Conn, Failure> {
        let addrs = crate::guard::checked_server("Kafka broker", host, port, self.allow_private).await?;
        let tcp = self.dial(&addrs, host, port).await?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Stream> = if self.tls {
            let name = rustls::pki_types::ServerName::try_from(host.to_owned())
                .map_err(|_| failure(false, FailureKind::Refused, format!("{host} is not a valid TLS server name")))?;
            let tls = tokio_rustls::TlsConnector::from(crate::sink::platform_tls(false)?);
            let stream = tokio::time::timeout(self.timeout, tls.connect(name, tcp))
                .await
                .map_err(|_| failure(true, FailureKind::Timeout, format!("TLS with {host}:{port} timed out")))?
                .map_err(|e| failure(true, FailureKind::Unreachable, format!("TLS with {host}:{port} failed: {e}")))?;
            Box::new(stream)
        } else {
            Box::new(tcp)
        };
        let mut conn = Conn { stream, correlation: 0 };
        if let Some((mechanism, username, password)) = &self.sasl {
            conn.login(*mechanism, username, password, self.timeout).await?;
        }
        Ok(conn)
    }

    async fn dial(&self, addrs: &[SocketAddr], host: &str, port: u16) -> Result<TcpStream, Failure> {
        for addr in addrs {
            if let Ok(Ok(tcp)) = tokio::time::timeout(self.timeout, TcpStream::connect(addr)).await {
                return Ok(tcp);
            }
        }
        Err(failure(true, FailureKind::Unreachable, format!("the broker {host}:{port} could not be reached")))
    }
}

impl Conn {
    /// Sends one request and reads its answer's body, within `timeout`.
    pub async fn call(&mut self, api_key: i16, body: &[u8], timeout: Duration) -> Result<Vec<u8>, Failure> {
        self.correlation = self.correlation.wrapping_add(1);
        let correlation = self.correlation;
        let exchange = async {
            self.stream.write_all(&protocol::frame(api_key, correlation, CLIENT_ID, body)).await?;
            self.stream.flush().await?;
            let size = self.stream.read_i32().await?;
            let size = usize::try_from(size)
                .ok()
                .filter(|s| (4..=MAX_RESPONSE).contains(s))
                .ok_or_else(|| std::io::Error::other("an answer of an impossible size"))?;
            let mut answer = vec![0; size];
            self.stream.read_exact(&mut answer).await?;
            Ok::<_, std::io::Error>(answer)
        };
        let answer = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| {
                failure(
                    true,
                    FailureKind::Timeout,
                    format!("the broker did not answer within {} ms", timeout.as_millis()),
                )
            })?
            .map_err(|e| {
                failure(true, FailureKind::Unreachable, format!("the connection to the broker failed: {e}"))
            })?;
        if answer[..4] != correlation.to_be_bytes() {
            return Err(failure(true, FailureKind::Refused, "the broker answered another request"));
        }
        Ok(answer[4..].to_vec())
    }

    async fn login(
        &mut self,
        mechanism: Mechanism,
        username: &str,
        password: &str,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let refused = |reason: String| failure(true, FailureKind::Unauthorized, reason);
        let malformed = |e: protocol::Malformed| failure(true, FailureKind::Refused, e.to_string());
        let answer =
            self.call(protocol::SASL_HANDSHAKE, &protocol::sasl_handshake(mechanism.as_str()), timeout).await?;
        match protocol::sasl_handshake_response(&answer).map_err(malformed)? {
            code::NONE => {}
            code::UNSUPPORTED_SASL_MECHANISM => {
                return Err(refused(format!("the broker does not take SASL {}", mechanism.as_str())));
            }
            other => return Err(refused(format!("the broker refused SASL: {}", protocol::name(other)))),
        }
        let step = async |conn: &mut Conn, bytes: Vec<u8>| -> Result<Vec<u8>, Failure> {
            let answer = conn.call(protocol::SASL_AUTHENTICATE, &protocol::sasl_authenticate(&bytes), timeout).await?;
            match protocol::sasl_authenticate_response(&answer).map_err(malformed)? {
                (code::NONE, _, server) => Ok(server),
                (code, message, _) => Err(refused(format!(
                    "the broker refused the login: {}{}",
                    protocol::name(code),
                    message.map(|m| format!(": {m}")).unwrap_or_default()
                ))),
            }
        };
        match mechanism {
            Mechanism::Plain => step(self, plain(username, password)).await.map(|_| ()),
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
                let nonce: String = {
                    use rand::Rng;
                    rand::rng().sample_iter(&rand::distr::Alphanumeric).take(24).map(char::from).collect()
                };
                let mut scram = Scram::new(mechanism, username, nonce);
                let server_first = step(self, scram.first()).await?;
                let last = scram.last(&server_first, password).map_err(refused)?;
                let server_final = step(self, last).await?;
                scram.verify(&server_final).map_err(refused)
            }
        }
    }
}
