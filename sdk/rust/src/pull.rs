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
            let page: Page = serde_json::from_slice(&body).map_err(|e| Error::Unreadable(e.to_string()))?;
            self.next = page.next_cursor;
            return Ok(page);
        }
    }

    /// Reads pages until a short one (caught up), handing each event to `handle` in seq order;
    /// returns how many were read.
    pub async fn drain(&mut self, mut handle: impl FnMut(Event)) -> Result<usize, Error> {
        let mut read = 0;
        loop {
            let page = self.next_page().await?;
            let done = page.next_cursor.is_none();
            for event in page.items {
                read += 1;
                handle(event);
            }
            if done {
                return Ok(read);
            }
        }
    }
}
