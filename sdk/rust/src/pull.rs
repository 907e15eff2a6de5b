//! Paging a pull subscription: `GET /v1/subscriptions/{id}/events`.
//!
//! Reading is the acknowledgement: a returned page moves the subscription's durable cursor past
//! it, so store what a page holds before reading on.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::value::RawValue;

/// One pulled event.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub seq: i64,
    /// The CloudEvents id: deduplicate by it.
    pub ce_id: String,
    /// The event key `<resourcetype>.<eventtype>`.
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub time: String,
    #[serde(default)]
    pub schema_version: String,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub data_content_type: String,
    /// JSON as received, or a JSON string (base64 when `payload_encoding` is `base64`).
    pub payload: Box<RawValue>,
    #[serde(default)]
    pub payload_encoding: Option<String>,
}

/// One page and, when it was full, the seq to read after.
#[derive(Debug, Clone, Deserialize)]
pub struct Page {
    pub items: Vec<Event>,
    pub next_cursor: Option<i64>,
    /// Items that could not be parsed (one nested deeper than serde_json allows, say): reading
    /// acknowledged them, so they are handed on rather than lost with the page.
    #[serde(skip)]
    pub unreadable: Vec<Unreadable>,
}

/// A pulled item that could not be parsed: its raw JSON text, why, and its place among the
/// page's items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub index: usize,
    pub raw: String,
    pub error: String,
}

impl Page {
    /// Reads a page; when it does not parse whole, each item is parsed on its own and those
    /// that cannot be are kept in `unreadable`.
    pub fn parse(body: &[u8]) -> Result<Self, Error> {
        if let Ok(page) = serde_json::from_slice::<Page>(body) {
            return Ok(page);
        }
        let text = String::from_utf8_lossy(body);
        let (items, cursor) = split_page(&text).map_err(Error::Unreadable)?;
        let next_cursor = match cursor {
            Some(raw) => serde_json::from_str::<Option<i64>>(raw).map_err(|e| Error::Unreadable(e.to_string()))?,
            None => None,
        };
        let mut page = Page { items: Vec::new(), next_cursor, unreadable: Vec::new() };
        for (index, raw) in items.into_iter().enumerate() {
            match serde_json::from_str::<Event>(raw) {
                Ok(event) => page.items.push(event),
                Err(e) => page.unreadable.push(Unreadable { index, raw: raw.to_owned(), error: e.to_string() }),
            }
        }
        Ok(page)
    }
}

fn skip(b: &[u8], mut i: usize, also: u8) -> usize {
    while i < b.len() && (b" \t\r\n".contains(&b[i]) || b[i] == also) {
        i += 1;
    }
    i
}

/// The index just past the JSON value that starts at `b[i]`: a scan, never a recursion.
fn value_end(b: &[u8], mut i: usize) -> Result<usize, String> {
    if i < b.len() && !b"[{\"".contains(&b[i]) {
        while i < b.len() && !b",]} \t\r\n".contains(&b[i]) {
            i += 1;
        }
        return Ok(i);
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    while i < b.len() {
        let c = b[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
                if depth == 0 {
                    return Ok(i + 1);
                }
            }
        } else if c == b'"' {
            in_string = true;
        } else if c == b'[' || c == b'{' {
            depth += 1;
        } else if c == b']' || c == b'}' {
            depth = depth.saturating_sub(1);
            if depth == 0 {
                return Ok(i + 1);
            }
        }
        i += 1;
    }
    Err("the page ends inside a value".to_owned())
}

/// A page's items as raw JSON texts, and its `next_cursor`, found without parsing the items.
pub fn split_page(text: &str) -> Result<(Vec<&str>, Option<&str>), String> {
    let b = text.as_bytes();
    let (mut items, mut cursor) = (Vec::new(), None);
    let mut i = skip(b, 0, 0);
    if b.get(i) != Some(&b'{') {
        return Err("a page is a JSON object".to_owned());
    }
    i += 1;
    loop {
        i = skip(b, i, b',');
        if i >= b.len() || b[i] == b'}' {
            return Ok((items, cursor));
        }
        let end = value_end(b, i)?;
        let key: String = serde_json::from_str(text.get(i..end).unwrap_or_default()).map_err(|e| e.to_string())?;
        i = skip(b, end, 0);
        if b.get(i) != Some(&b':') {
            return Err("a page member has no value".to_owned());
        }
        i = skip(b, i + 1, 0);
        let end = value_end(b, i)?;
        if key == "items" && b.get(i) == Some(&b'[') {
            let mut j = i + 1;
            loop {
                j = skip(b, j, b',');
                if j + 1 >= end {
                    break;
                }
                let item_end = value_end(b, j)?;
                items.push(text.get(j..item_end).unwrap_or_default());
                j = item_end;
            }
        } else if key == "next_cursor" {
            cursor = text.get(i..end);
        }
        i = end;
    }
}

/// Why a read failed.
#[derive(Debug)]
pub enum Error {
    /// The hub answered in its error shape.
    Api { code: u16, title: String, message: String },
    /// The base URL is not usable, or the request did not complete.
    Transport(reqwest::Error),
    /// The answer is not a page.
    Unreadable(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Api { code, title, message } => write!(f, "{code} {title}: {message}"),
            Self::Transport(e) => write!(f, "the request failed: {e}"),
            Self::Unreadable(e) => write!(f, "the answer is not a page: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// A `Retry-After` of seconds or an HTTP date; at least 100 ms, at most `ceiling`.
pub fn retry_after(raw: Option<&str>, ceiling: Duration) -> Duration {
    let wait = match raw.map(str::trim) {
        Some(s) => match s.parse::<f64>() {
            Ok(secs) if secs.is_finite() && secs >= 0.0 => Duration::from_secs_f64(secs.min(86_400.0)),
            _ => httpdate::parse_http_date(s)
                .ok()
                .and_then(|at| at.duration_since(SystemTime::now()).ok())
                .unwrap_or(Duration::from_secs(1)),
        },
        None => Duration::from_secs(1),
    };
    wait.clamp(Duration::from_millis(100), ceiling.max(Duration::from_millis(100)))
}

/// Reads a pull subscription page by page.
#[derive(Debug, Clone)]
pub struct PullConsumer {
    base_url: String,
    api_key: String,
    subscription_id: String,
    /// Page size, 1 to 1000; `None` leaves the hub's default.
    pub limit: Option<u32>,
    /// Cap of one `Retry-After` wait.
    pub max_wait: Duration,
    client: reqwest::Client,
    next: Option<i64>,
}

impl PullConsumer {
    /// A consumer with its own HTTP client. TLS uses rustls with the ring provider, installed as
    /// the process default unless another provider is already installed.
    pub fn new(base_url: &str, api_key: &str, subscription_id: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self::with_client(base_url, api_key, subscription_id, reqwest::Client::new())
    }

    /// A consumer that sends through `client` (for proxies, timeouts or custom TLS).
    pub fn with_client(base_url: &str, api_key: &str, subscription_id: &str, client: reqwest::Client) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            subscription_id: subscription_id.to_owned(),
            limit: None,
            max_wait: Duration::from_secs(30),
            client,
            next: None,
        }
    }

    /// One page, waiting out `429` answers as their `Retry-After` says.
    pub async fn next_page(&mut self) -> Result<Page, Error> {
        loop {
            let mut url =
                reqwest::Url::parse(&self.base_url).map_err(|e| Error::Unreadable(format!("base url: {e}")))?;
            url.path_segments_mut()
                .map_err(|()| Error::Unreadable("base url: cannot hold a path".to_owned()))?
                .pop_if_empty()
                .extend(["v1", "subscriptions", &self.subscription_id, "events"]);
            if let Some(after) = self.next {
                url.query_pairs_mut().append_pair("after", &after.to_string());
            }
            if let Some(limit) = self.limit {
                url.query_pairs_mut().append_pair("limit", &limit.to_string());
            }
            let response = self
                .client
                .get(url)
                .bearer_auth(&self.api_key)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(Error::Transport)?;
            let status = response.status().as_u16();
            let retry = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body = response.bytes().await.map_err(Error::Transport)?;
            if status == 429 {
                tokio::time::sleep(retry_after(retry.as_deref(), self.max_wait)).await;
                continue;
            }
            if status != 200 {
                #[derive(Deserialize)]
                struct Shape {
                    code: u16,
                    title: String,
                    message: String,
                }
                return Err(match serde_json::from_slice::<Shape>(&body) {
                    Ok(s) => Error::Api { code: s.code, title: s.title, message: s.message },
                    Err(_) => Error::Api {
                        code: status,
                        title: "unexpected_answer".to_owned(),
                        message: String::from_utf8_lossy(&body).trim().to_owned(),
                    },
                });
            }
            let page = Page::parse(&body)?;
            self.next = page.next_cursor;
            return Ok(page);
        }
    }

    /// Reads pages until a short one (caught up), handing each event to `handle` in seq order;
    /// returns how many were read. An item that cannot be parsed is written to standard error
    /// and passed over: see [`PullConsumer::drain_all`] to receive it instead.
    pub async fn drain(&mut self, handle: impl FnMut(Event)) -> Result<usize, Error> {
        self.drain_all(handle, |u| {
            eprintln!(
                "streaming hub: a pulled item could not be parsed ({}); its raw text is {} bytes",
                u.error,
                u.raw.len()
            )
        })
        .await
    }

    /// [`PullConsumer::drain`], with each item that cannot be parsed handed, in its place, to
    /// `unreadable`: the page was acknowledged when read, so none of it is ever dropped.
    pub async fn drain_all(
        &mut self,
        mut handle: impl FnMut(Event),
        mut unreadable: impl FnMut(Unreadable),
    ) -> Result<usize, Error> {
        let mut read = 0;
        loop {
            let page = self.next_page().await?;
            let done = page.next_cursor.is_none();
            let total = page.items.len() + page.unreadable.len();
            let mut bad = page.unreadable.into_iter().peekable();
            let mut good = page.items.into_iter();
            for index in 0..total {
                read += 1;
                match bad.next_if(|u| u.index == index) {
                    Some(u) => unreadable(u),
                    None => {
                        if let Some(event) = good.next() {
                            handle(event);
                        }
                    }
                }
            }
            if done {
                return Ok(read);
            }
        }
    }
}
