//! Puts hyper's own answers in the error shape.
//!
//! hyper answers a request it cannot parse (a malformed request line or header: 400; a URI over
//! its limit: 414; too many or too large headers: 431) by itself, before the router sees the
//! request, with a head and an empty body, and closes the connection. [`Shaped`] wraps a
//! connection's socket and, when hyper writes such a head, writes the same status with an
//! error-shape body instead. Nothing else is touched: every answer of the router carries a body,
//! so a bodiless 400, 414 or 431 head can only be hyper's own; and no body the hub sends (JSON,
//! the console's files) is itself such a head.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's socket whose hyper-made error heads are rewritten.
pub struct Shaped<S> {
    inner: S,
    /// A rewritten answer still being written, and the length of the head it stands for.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> Shaped<S> {
    pub fn new(inner: S) -> Self {
        Self { inner, pending: None }
    }
}

/// The error-shape answer for a head hyper wrote by itself, if `head` is one.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let (head, rest) = text.split_once("\r\n\r\n")?;
    if !rest.is_empty() {
        return None;
    }
    let mut lines = head.split("\r\n");
    let status = lines.next()?.strip_prefix("HTTP/1.1 ")?.get(..3)?;
    let (code, title, message) = match status {
        "400" => (400, "bad_request", "the request is not valid HTTP/1.1 (request line or a header is malformed)"),
        "414" => (414, "uri_too_long", "the request target is too long"),
        "431" => (431, "request_header_fields_too_large", "the request has too many headers or they are too large"),
        _ => return None,
    };
    let mut empty = false;
    let mut kept = Vec::new();
    for line in lines {
        let name = line.split(':').next().unwrap_or_default().trim();
        if name.eq_ignore_ascii_case("content-length") {
            empty = line.split(':').nth(1).map(str::trim) == Some("0");
        } else if !name.eq_ignore_ascii_case("content-type") && !name.eq_ignore_ascii_case("connection") {
            kept.push(line);
        }
    }
    if !empty {
        return None;
    }
    let body = serde_json::json!({ "code": code, "title": title, "message": message }).to_string();
    let mut answer = format!(
        "HTTP/1.1 {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        &head["HTTP/1.1 ".len()..head.find("\r\n").unwrap_or(head.len())],
        body.len()
    );
    for line in kept {
        answer.push_str(line);
        answer.push_str("\r\n");
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    Some(answer.into_bytes())
}

impl<S: AsyncWrite + Unpin> Shaped<S> {
    /// Writes the rest of a rewritten answer; `Ready(Ok(n))` with the head's length once done.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        while let Some((answer, head_len)) = &mut self.pending {
            if answer.is_empty() {
                let n = *head_len;
                self.pending = None;
                return Poll::Ready(Ok(n));
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, answer))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            answer.drain(..n);
        }
        Poll::Ready(Ok(0))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Shaped<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Shaped<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match rewrite(buf) {
                Some(answer) => self.pending = Some((answer, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_pending(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            let first = bufs.iter().find(|b| !b.is_empty());
            let only = bufs.iter().filter(|b| !b.is_empty()).count() == 1;
            match first.filter(|_| only).and_then(|b| rewrite(b)) {
                Some(answer) => self.pending = Some((answer, first.map_or(0, |b| b.len()))),
                None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        self.poll_pending(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_parse_error_heads_are_rewritten() {
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT\r\n\r\n";
        let answer = String::from_utf8(rewrite(hyper_431).expect("rewritten")).expect("text");
        let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{head}");
        assert!(head.contains("\r\ndate: Tue, 01 Dec 2026 10:00:00 GMT"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(body["code"], 431);
        assert_eq!(body["title"], "request_header_fields_too_large");

        for not_hyper in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
            b"{\"data\":\"HTTP/1.1 400 Bad Request\\r\\ncontent-length: 0\\r\\n\\r\\n\"}",
            b"\xff\xfe",
            b"",
        ] {
            assert_eq!(rewrite(not_hyper), None, "{:?}", String::from_utf8_lossy(not_hyper));
        }
    }
}
