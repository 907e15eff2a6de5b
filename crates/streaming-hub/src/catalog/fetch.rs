//! Reading a manifest or a payload schema from where the configuration points: an `http(s)`
//! URL, through the same address guard as the sinks, or a `file:` path. Both are bounded in
//! time and size.

use std::sync::Arc;
use std::time::Duration;

/// Bytes of one document, at most.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;
/// How long one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Fetches documents.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    allow_private: bool,
    max_bytes: usize,
    timeout: Duration,
}

impl Fetcher {
    /// `allow_private`: whether private addresses may be reached (as for sinks).
    pub fn new(allow_private: bool) -> Result<Self, String> {
        Self::bounded(allow_private, MAX_DOCUMENT_BYTES, FETCH_TIMEOUT)
    }

    /// A fetcher of documents of at most `max_bytes`, each fetch within `timeout`.
    pub fn bounded(allow_private: bool, max_bytes: usize, timeout: Duration) -> Result<Self, String> {
        hub_sinks::install_crypto_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(hub_sinks::guard::GuardedResolver { allow_private }))
            .no_proxy()
            // A fetch is rare (minutes apart): a fresh connection each time, never one the server
            // may have closed while it sat idle (a POST on it could not be retried).
            .pool_max_idle_per_host(0)
            .connect_timeout(timeout)
            .timeout(timeout)
            // The same reader fetches manifests, schemas and identity providers' documents.
            .user_agent(concat!("streaming-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self { client, allow_private, max_bytes, timeout })
    }

    /// The document at `location`, or why it cannot be read (without echoing more of it than a
    /// status line).
    pub async fn get(&self, location: &str) -> Result<Vec<u8>, String> {
        match location.strip_prefix("file:") {
            Some(path) => read_file(path).await,
            None => self.get_url(location).await,
        }
    }

    /// The document at an `http(s)` URL only (what a third party names is never read from a
    /// file).
    pub async fn get_url(&self, location: &str) -> Result<Vec<u8>, String> {
        let url = url::Url::parse(location).map_err(|e| format!("not a URL: {e}"))?;
        hub_sinks::guard::check_host(&url, self.allow_private).map_err(|e| e.to_string())?;
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| describe(&e, self.timeout))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("answered HTTP {status}"));
        }
        self.read_body(response).await
    }

    /// POSTs a form to an `http(s)` URL (an OAuth token endpoint), with HTTP Basic credentials
    /// when given: the status and the body, whatever the status (bounded like any document).
    pub async fn post_form(
        &self,
        location: &str,
        form: &[(&str, &str)],
        basic: Option<(&str, &str)>,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
        let url = url::Url::parse(location).map_err(|e| format!("not a URL: {e}"))?;
        hub_sinks::guard::check_host(&url, self.allow_private).map_err(|e| e.to_string())?;
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        let mut request = self
            .client
            .post(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        if let Some((user, password)) = basic {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.map_err(|e| describe(&e, self.timeout))?;
        let status = response.status();
        Ok((status, self.read_body(response).await?))
    }

    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, String> {
        let max = self.max_bytes;
        if response.content_length().is_some_and(|n| n > max as u64) {
            return Err(format!("is larger than {max} bytes"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e, self.timeout))? {
            if body.len() + chunk.len() > max {
                return Err(format!("is larger than {max} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// A `file:` location's path: `file:/a/b`, `file:///a/b` and `file:relative/b` all work.
fn path_of(location: &str) -> &str {
    location.strip_prefix("//").unwrap_or(location)
}

async fn read_file(location: &str) -> Result<Vec<u8>, String> {
    let path = path_of(location);
    let read = async {
        use tokio::io::AsyncReadExt as _;
        let file = tokio::fs::File::open(path).await?;
        let mut body = Vec::new();
        file.take(MAX_DOCUMENT_BYTES as u64 + 1).read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = tokio::time::timeout(FETCH_TIMEOUT, read)
        .await
        .map_err(|_| format!("could not be read within {} s", FETCH_TIMEOUT.as_secs()))?
        .map_err(|e| format!("cannot be read: {e}"))?;
    if body.len() > MAX_DOCUMENT_BYTES {
        return Err(format!("is larger than {MAX_DOCUMENT_BYTES} bytes"));
    }
    Ok(body)
}

/// A request failure in a few words, with its cause (a refused address names the rule).
fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    let mut text = if e.is_timeout() {
        format!("did not answer within {} s", timeout.as_secs())
    } else if e.is_connect() {
        "could not be reached".to_owned()
    } else {
        "failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_locations_take_either_form() {
        assert_eq!(super::path_of("/etc/a.json"), "/etc/a.json");
        assert_eq!(super::path_of("///etc/a.json"), "/etc/a.json");
        assert_eq!(super::path_of("schemas/a.json"), "schemas/a.json");
    }
}
