//! The webhook's HTTP/1.1 client: one request an attempt, on a connection kept alive between
//! attempts to the same origin.
//!
//! An attempt in flight holds only what it needs while its receiver thinks: its connection and
//! a read buffer of 1 KiB (grown only for a long answer head, to 64 KiB). Its request is written
//! from one buffer of its exact size, freed once sent. A general client holds, for every request
//! out, a connection task, its request channel, 8 KiB read and write buffers and its service
//! stack's futures: two thirds of an attempt's memory (docs/BENCHMARKS.md "Memory per attempt in
//! flight").
//!
//! Redirects are never followed and there is no proxy. A name is resolved once through the
//! address guard and only the addresses it checked are dialled. The whole exchange (resolution,
//! connection, TLS, request, answer) has the attempt's deadline; a connection has at most 10 s of
//! it. A request is sent once: the client never sends it again by itself.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};
use url::Url;

use crate::guard::{Refused, Resolution, check_resolved};

/// What a read buffer starts with: a receiver's answer head is a few hundred bytes.
const READ_START: usize = 1024;
/// The longest answer head read.
pub(crate) const HEAD_MAX: usize = 64 << 10;
/// The most header lines an answer head may have.
const HEADERS_MAX: usize = 100;
/// The longest chunk-size line or trailer section of a chunked answer.
const CHUNK_LINE_MAX: usize = 16 << 10;
/// How long an idle connection is kept.
const IDLE_FOR: Duration = Duration::from_secs(90);
/// How often idle connections are looked over: those past [`IDLE_FOR`] or closed by their
/// receiver are dropped even when their origin is never sent to again.
const SWEEP_EVERY: Duration = Duration::from_secs(15);
/// How many idle connections are kept for one origin.
const IDLE_PER_ORIGIN: usize = 1024;
/// The longest a connection (TCP and TLS) may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);
const USER_AGENT: &str = concat!("streaming-hub/", env!("CARGO_PKG_VERSION"));

/// The client: its TLS configuration and its idle connections by origin.
pub(crate) struct Client {
    tls: Arc<rustls::ClientConfig>,
    allow_private: bool,
    origins: Arc<Mutex<Origins>>,
}

type Origins = HashMap<Origin, Place>;

/// What the client keeps for one origin: its idle connections, the oldest first, and the attempts
/// waiting for a connection while they make one.
#[derive(Default)]
struct Place {
    idle: Vec<Idle>,
    waiting: std::collections::VecDeque<tokio::sync::oneshot::Sender<Conn>>,
}

impl Place {
    /// Drops the idle connections past their time or closed by their receiver, and the attempts
    /// that no longer wait.
    fn sweep(&mut self, now: Instant) {
        self.idle.retain_mut(|i| now.duration_since(i.since) < IDLE_FOR && i.conn.still_open());
        self.waiting.retain(|w| !w.is_closed());
    }

    fn unused(&self) -> bool {
        self.idle.is_empty() && self.waiting.is_empty()
    }

    /// Forgets the attempts at the front that no longer wait.
    fn prune(&mut self) {
        while self.waiting.front().is_some_and(tokio::sync::oneshot::Sender::is_closed) {
            self.waiting.pop_front();
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle: usize = crate::sink::lock(&self.origins).values().map(|p| p.idle.len()).sum();
        f.debug_struct("Client").field("allow_private", &self.allow_private).field("idle", &idle).finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Origin {
    tls: bool,
    /// The URL's host as written in it (IPv6 literals in brackets).
    host: String,
    port: u16,
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Why an exchange gave no answer.
#[derive(Debug)]
pub(crate) enum Error {
    /// No answer head within the deadline.
    Timeout,
    /// The address guard refused the host.
    Refused(Refused),
    /// The host resolves to no address.
    Unresolved(String),
    /// No connection could be made (its detail, never the URL).
    Connect(String),
    /// The connection failed or the answer was not HTTP/1.x (its detail, never the URL).
    Exchange(String),
}

/// An answer: its status, its headers, and its body as far as read.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The body did not complete within the deadline.
    pub(crate) stalled: bool,
}

impl Answer {
    /// The first value of header `name` (lower case) that is text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One request to send, written out: what the attempt held to make it (its headers) can go before
/// the receiver is waited for.
pub(crate) struct Request {
    origin: Origin,
    written: Vec<u8>,
    timeout: Duration,
    /// How much of the answer's body is kept.
    cap: usize,
}

impl Request {
    /// A `POST` of `body` to `url` with `headers` (and `authorization`), answered within
    /// `timeout`, of whose answer `cap` bytes of body are kept.
    pub(crate) fn post(
        url: &Url,
        headers: &HeaderMap,
        authorization: Option<&HeaderValue>,
        body: &[u8],
        timeout: Duration,
        cap: usize,
    ) -> Result<Self, Error> {
        let origin = origin(url)?;
        let written = encode(&origin, url, headers, authorization, body);
        Ok(Self { origin, written, timeout, cap })
    }
}

impl Client {
    /// A client; in a runtime, a task looks its idle connections over every [`SWEEP_EVERY`] for as
    /// long as the client lives.
    pub(crate) fn new(tls: Arc<rustls::ClientConfig>, allow_private: bool) -> Self {
        let origins: Arc<Mutex<Origins>> = Arc::default();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let held = Arc::downgrade(&origins);
            runtime.spawn(async move {
                let mut every = tokio::time::interval(SWEEP_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                every.tick().await;
                loop {
                    every.tick().await;
                    let Some(origins) = held.upgrade() else { return };
                    sweep(&origins);
                }
            });
        }
        Self { tls, allow_private, origins }
    }

    #[cfg(test)]
    fn sweep(&self) {
        sweep(&self.origins);
    }

    /// Sends `request` and reads its answer.
    pub(crate) async fn post(&self, request: Request) -> Result<Answer, Error> {
        let Request { origin, written, timeout, cap } = request;
        let deadline = Instant::now() + timeout;
        let mut conn = match self.take(&origin) {
            Some(conn) => conn,
            None => self.connection(&origin, deadline).await?,
        };
        let sent = timeout_at(deadline, async {
            conn.write_all(&written).await?;
            conn.flush().await
        })
        .await;
        // Not held while the receiver is waited for.
        drop(written);
        match sent {
            Err(_) => return Err(Error::Timeout),
            Ok(Err(e)) => return Err(Error::Exchange(format!("sending the request: {e}"))),
            Ok(Ok(())) => {}
        }
        let mut reader = Reader { conn, buf: Vec::with_capacity(READ_START), deadline };
        let head = reader.head().await?;
        let (body, end) = reader.body(&head, cap).await;
        let Reader { conn, buf, .. } = reader;
        if end == End::Complete && head.keep_alive && buf.is_empty() {
            self.put(origin, conn);
        }
        Ok(Answer { status: head.status, headers: head.headers, body, stalled: end == End::Stalled })
    }

    /// An idle connection to `origin` still open, the most recent first.
    fn take(&self, origin: &Origin) -> Option<Conn> {
        let mut origins = crate::sink::lock(&self.origins);
        let place = origins.get_mut(origin)?;
        let now = Instant::now();
        let mut found = None;
        while let Some(Idle { mut conn, since }) = place.idle.pop() {
            if now.duration_since(since) < IDLE_FOR && conn.still_open() {
                found = Some(conn);
                break;
            }
        }
        place.prune();
        if place.unused() {
            origins.remove(origin);
        }
        found
    }

    /// Gives a connection back: to the attempt waiting longest, or to the idle ones.
    fn put(&self, origin: Origin, mut conn: Conn) {
        let now = Instant::now();
        let mut origins = crate::sink::lock(&self.origins);
        let place = origins.entry(origin).or_default();
        while let Some(waiting) = place.waiting.pop_front() {
            match waiting.send(conn) {
                Ok(()) => return,
                Err(back) => conn = back,
            }
        }
        // The oldest are at the front: those past their time go first.
        let expired = place.idle.iter().take_while(|i| now.duration_since(i.since) >= IDLE_FOR).count();
        place.idle.drain(..expired);
        if place.idle.len() < IDLE_PER_ORIGIN {
            place.idle.push(Idle { conn, since: now });
        }
    }

    /// A connection for an attempt that found none idle: one it makes, or one another attempt
    /// gives back meanwhile, whichever comes first. A connection the receiver was slow to accept
    /// (a full accept queue drops the first try, which the kernel makes again a second later) then
    /// costs the attempt no more than the next answer on another connection; the one it was making
    /// is dropped.
    async fn connection(&self, origin: &Origin, deadline: Instant) -> Result<Conn, Error> {
        let (tell, mut given) = tokio::sync::oneshot::channel();
        crate::sink::lock(&self.origins).entry(origin.clone()).or_default().waiting.push_back(tell);
        // Boxed: making a connection (resolution, TCP, a TLS handshake) takes more state than the
        // rest of an exchange, and most attempts find a connection kept.
        let made = tokio::select! {
            biased;
            Ok(conn) = &mut given => Ok(conn),
            made = Box::pin(self.connect(origin, deadline)) => made,
        };
        // One given back just as this attempt stopped waiting goes back for others.
        given.close();
        if let Ok(conn) = given.try_recv() {
            self.put(origin.clone(), conn);
        }
        let mut origins = crate::sink::lock(&self.origins);
        if let Some(place) = origins.get_mut(origin) {
            place.prune();
            if place.unused() {
                origins.remove(origin);
            }
        }
        made
    }

    async fn connect(&self, origin: &Origin, deadline: Instant) -> Result<Conn, Error> {
        let by = deadline.min(Instant::now() + CONNECT_WITHIN);
        let late = || if by == deadline { Error::Timeout } else { Error::Connect("no connection within 10 s".into()) };
        let addrs = match timeout_at(by, check_resolved(&origin.host, origin.port, self.allow_private)).await {
            Err(_) => return Err(late()),
            Ok(Err(Resolution::Refused(refused))) => return Err(Error::Refused(refused)),
            Ok(Err(Resolution::Unresolved)) => return Err(Error::Unresolved(origin.host.clone())),
            Ok(Ok(addrs)) => addrs,
        };
        let mut failed = None;
        let mut stream = None;
        for addr in addrs {
            match timeout_at(by, TcpStream::connect(addr)).await {
                Err(_) => return Err(late()),
                Ok(Ok(s)) => {
                    stream = Some(s);
                    break;
                }
                Ok(Err(e)) => failed = Some(e),
            }
        }
        let Some(stream) = stream else {
            return Err(Error::Connect(failed.map_or_else(|| "no address".to_owned(), |e| e.to_string())));
        };
        let _ = stream.set_nodelay(true);
        if !origin.tls {
            return Ok(Conn::Plain(stream));
        }
        let name = rustls::pki_types::ServerName::try_from(origin.host.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|_| Error::Connect("the host is not a valid TLS server name".into()))?
            .to_owned();
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls));
        match timeout_at(by, connector.connect(name, stream)).await {
            Err(_) => Err(late()),
            Ok(Err(e)) => Err(Error::Connect(format!("TLS: {e}"))),
            Ok(Ok(tls)) => Ok(Conn::Tls(Box::new(tls))),
        }
    }
}

/// Looks every origin's idle connections over (see [`Place::sweep`]); an origin with nothing left
/// is forgotten.
fn sweep(origins: &Mutex<Origins>) {
    let now = Instant::now();
    let mut origins = crate::sink::lock(origins);
    origins.retain(|_, place| {
        place.sweep(now);
        !place.unused()
    });
}

fn origin(url: &Url) -> Result<Origin, Error> {
    let tls = match url.scheme() {
        "https" => true,
        "http" => false,
        _ => return Err(Error::Exchange("the URL is not http or https".into())),
    };
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| Error::Exchange("the URL names no host".into()))?;
    let port = url.port_or_known_default().unwrap_or(if tls { 443 } else { 80 });
    Ok(Origin { tls, host: host.to_owned(), port })
}

/// The request's head and body in one buffer of their size.
fn encode(origin: &Origin, url: &Url, headers: &HeaderMap, authorization: Option<&HeaderValue>, body: &[u8]) -> Vec<u8> {
    let query = url.query();
    let lines = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum::<usize>();
    let mut out = Vec::with_capacity(
        160 + url.path().len()
            + query.map_or(0, str::len)
            + origin.host.len()
            + lines
            + authorization.map_or(0, HeaderValue::len)
            + body.len(),
    );
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(url.path().as_bytes());
    if let Some(query) = query {
        out.push(b'?');
        out.extend_from_slice(query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(origin.host.as_bytes());
    if let Some(port) = url.port() {
        out.extend_from_slice(format!(":{port}").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    for (name, value) in headers {
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    if !headers.contains_key(reqwest::header::USER_AGENT) {
        line(b"user-agent", USER_AGENT.as_bytes());
    }
    if !headers.contains_key(reqwest::header::ACCEPT) {
        line(b"accept", b"*/*");
    }
    if let Some(authorization) = authorization {
        line(b"authorization", authorization.as_bytes());
    }
    line(b"content-length", body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// An answer's head as the client needs it.
#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    framing: Framing,
    /// The connection may carry another request after this answer.
    keep_alive: bool,
}

/// How the answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    /// At the end of the connection.
    Close,
}

/// How reading a body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The whole body was read.
    Complete,
    /// Reading stopped before its end: the cap, a malformed body, or a failed connection.
    Cut,
    /// The deadline passed before its end.
    Stalled,
}

/// Reads an answer from a connection, keeping what was read past the part being parsed.
struct Reader<S> {
    conn: S,
    buf: Vec<u8>,
    deadline: Instant,
}

/// Reading more failed: the deadline passed, or the connection failed or ended.
enum More {
    Late,
    Ended,
    Failed(io::Error),
}

impl<S: AsyncRead + Unpin> Reader<S> {
    /// Reads more into the buffer, growing it (to at most `max` bytes) when full.
    async fn more(&mut self, max: usize) -> Result<(), More> {
        if self.buf.len() == self.buf.capacity() {
            let grown = (self.buf.capacity() * 2).clamp(READ_START, max.max(READ_START));
            self.buf.reserve_exact(grown.saturating_sub(self.buf.len()).max(1));
        }
        match timeout_at(self.deadline, self.conn.read_buf(&mut self.buf)).await {
            Err(_) => Err(More::Late),
            Ok(Ok(0)) => Err(More::Ended),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(More::Failed(e)),
        }
    }

    /// Reads the answer's head (after any interim `1xx` answers) and takes it off the buffer.
    async fn head(&mut self) -> Result<Head, Error> {
        loop {
            if let Some((head, used)) = parse_head(&self.buf)? {
                self.buf.drain(..used);
                match head {
                    Some(head) => return Ok(head),
                    None => continue,
                }
            }
            if self.buf.len() >= HEAD_MAX {
                return Err(Error::Exchange(format!("the answer's head is longer than {} KiB", HEAD_MAX >> 10)));
            }
            match self.more(HEAD_MAX).await {
                Ok(()) => {}
                Err(More::Late) => return Err(Error::Timeout),
                Err(More::Ended) if self.buf.is_empty() => {
                    return Err(Error::Exchange("the connection closed before an answer".into()));
                }
                Err(More::Ended) => return Err(Error::Exchange("the connection closed within the answer's head".into())),
                Err(More::Failed(e)) => return Err(Error::Exchange(format!("reading the answer: {e}"))),
            }
        }
    }

    /// Reads the body framed as `head` says, keeping at most `cap` bytes of it.
    async fn body(&mut self, head: &Head, cap: usize) -> (Vec<u8>, End) {
        let mut body = Vec::new();
        let end = match head.framing {
            Framing::None => End::Complete,
            Framing::Length(n) => self.exact(n, &mut body, cap).await,
            Framing::Close => self.until_closed(&mut body, cap).await,
            Framing::Chunked => self.chunked(&mut body, cap).await,
        };
        (body, end)
    }

    /// Takes `n` bytes of body, reading as needed.
    async fn exact(&mut self, mut n: u64, body: &mut Vec<u8>, cap: usize) -> End {
        loop {
            let here = usize::try_from(n).unwrap_or(usize::MAX).min(self.buf.len());
            keep(body, &self.buf[..here], cap);
            self.buf.drain(..here);
            n -= here as u64;
            if n == 0 {
                return End::Complete;
            }
            if body.len() >= cap {
                return End::Cut;
            }
            if let Err(more) = self.more(READ_START * 4).await {
                return ended(more);
            }
        }
    }

    async fn until_closed(&mut self, body: &mut Vec<u8>, cap: usize) -> End {
        loop {
            keep(body, &self.buf, cap);
            self.buf.clear();
            if body.len() >= cap {
                return End::Cut;
            }
            match self.more(READ_START * 4).await {
                Ok(()) => {}
                Err(More::Ended) => return End::Complete,
                Err(more) => return ended(more),
            }
        }
    }

    async fn chunked(&mut self, body: &mut Vec<u8>, cap: usize) -> End {
        loop {
            let size = loop {
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.buf.drain(..used);
                        break size;
                    }
                    // Past the cap, only what was already read is looked at.
                    Ok(httparse::Status::Partial) if body.len() >= cap => return End::Cut,
                    Ok(httparse::Status::Partial) if self.buf.len() < CHUNK_LINE_MAX => {
                        if let Err(more) = self.more(CHUNK_LINE_MAX).await {
                            return ended(more);
                        }
                    }
                    _ => return End::Cut,
                }
            };
            if size == 0 {
                return self.trailers().await;
            }
            let end = self.exact(size, body, cap).await;
            if end != End::Complete {
                return end;
            }
            // The chunk's data ends with CRLF.
            while self.buf.len() < 2 {
                if let Err(more) = self.more(CHUNK_LINE_MAX).await {
                    return ended(more);
                }
            }
            if &self.buf[..2] != b"\r\n" {
                return End::Cut;
            }
            self.buf.drain(..2);
        }
    }

    /// The trailer section after the last chunk, up to its empty line.
    async fn trailers(&mut self) -> End {
        loop {
            if self.buf.starts_with(b"\r\n") {
                self.buf.drain(..2);
                return End::Complete;
            }
            if let Some(at) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                self.buf.drain(..at + 4);
                return End::Complete;
            }
            if self.buf.len() >= CHUNK_LINE_MAX {
                return End::Cut;
            }
            if let Err(more) = self.more(CHUNK_LINE_MAX).await {
                return ended(more);
            }
        }
    }
}

fn ended(more: More) -> End {
    match more {
        More::Late => End::Stalled,
        More::Ended | More::Failed(_) => End::Cut,
    }
}

fn keep(body: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    let room = cap.saturating_sub(body.len());
    body.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

/// Parses an answer head at the start of `buf`: `None` while incomplete; `Some((None, used))` for
/// an interim `1xx` answer to skip; `Some((Some(head), used))` for the answer.
fn parse_head(buf: &[u8]) -> Result<Option<(Option<Head>, usize)>, Error> {
    let mut lines = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut parsed = httparse::Response::new(&mut lines);
    let used = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::Exchange(format!("the answer has more than {HEADERS_MAX} header lines")));
        }
        Err(e) => return Err(Error::Exchange(format!("the answer is not HTTP/1.x: {e}"))),
    };
    let status = parsed.code.unwrap_or_default();
    if status == 101 {
        return Err(Error::Exchange("the answer switches protocols".into()));
    }
    if (100..200).contains(&status) {
        return Ok(Some((None, used)));
    }
    let mut headers = Vec::new();
    let mut length: Option<u64> = None;
    let mut chunked = None;
    let mut close = parsed.version != Some(1);
    for h in parsed.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = std::str::from_utf8(h.value).ok().map(str::trim);
        match name.as_str() {
            "content-length" => {
                let n = value
                    .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| Error::Exchange("the answer's Content-Length is not a length".into()))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Error::Exchange("the answer has two different Content-Lengths".into()));
                }
                length = Some(n);
            }
            "transfer-encoding" => {
                // Only the last coding says how the body ends.
                let last = value.and_then(|v| v.rsplit(',').next()).map(str::trim).unwrap_or_default();
                chunked = Some(last.eq_ignore_ascii_case("chunked"));
            }
            "connection" if value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"))) => {
                close = true;
            }
            _ => {}
        }
        if let Some(value) = value {
            headers.push((name, value.to_owned()));
        }
    }
    let framing = if status == 204 || status == 304 {
        Framing::None
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    // A body framed two ways was not the receiver's doing alone: the connection is not trusted
    // with another request.
    let keep_alive = !close && framing != Framing::Close && !(chunked.is_some() && length.is_some());
    Ok(Some((Some(Head { status, headers, framing, keep_alive }), used)))
}

/// A connection, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Conn {
    /// Whether an idle connection is still open: nothing to read yet. A receiver that closed it
    /// (or sent anything unasked) makes it unusable.
    fn still_open(&mut self) -> bool {
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(Pin::new(self).poll_read(&mut cx, &mut buf), Poll::Pending)
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A webhook's TLS configuration: the platform's verifier (with a private CA's certificates
/// beside its roots when given) and a client identity `(certificate chain, key)` in PEM when given;
/// HTTP/1.1 offered by ALPN.
pub(crate) fn tls(ca_pem: Option<&str>, identity: Option<(&str, &str)>) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    crate::sink::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match ca_pem {
        None => rustls_platform_verifier::Verifier::new(Arc::clone(&provider)),
        Some(pem) => {
            let roots = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| "the private CA is not PEM certificates".to_owned())?;
            if roots.is_empty() {
                return Err("the private CA is not PEM certificates".to_owned());
            }
            rustls_platform_verifier::Verifier::new_with_extra_roots(roots, Arc::clone(&provider))
        }
    }
    .map_err(|e| format!("cannot load the certificate verifier: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot build the TLS configuration: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((certificate, key)) => {
            let chain = CertificateDer::pem_slice_iter(certificate.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| "not a PEM key and certificate".to_owned())?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|_| "not a PEM key and certificate".to_owned())?;
            if chain.is_empty() {
                return Err("not a PEM key and certificate".to_owned());
            }
            builder.with_client_auth_cert(chain, key).map_err(|_| "the key cannot be used with the certificate".to_owned())?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests;
