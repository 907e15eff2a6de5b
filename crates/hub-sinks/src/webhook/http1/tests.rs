use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};

use super::*;

/// A connection that gives `data` in pieces of the sizes `sizes` cycles through, then ends.
struct Pieces {
    data: Vec<u8>,
    sizes: Vec<usize>,
    at: usize,
    turn: usize,
}

impl AsyncRead for Pieces {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let size = self.sizes[self.turn % self.sizes.len()].max(1);
        self.turn += 1;
        let n = size.min(buf.remaining()).min(self.data.len() - self.at);
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        Poll::Ready(Ok(()))
    }
}

fn reader(data: Vec<u8>, sizes: Vec<usize>) -> Reader<Pieces> {
    let deadline = Instant::now() + Duration::from_secs(5);
    Reader { conn: Pieces { data, sizes, at: 0, turn: 0 }, buf: Vec::with_capacity(READ_START), deadline }
}

/// An answer read: its head, its body and how the body ended; or why it was refused.
type Read = Result<(Head, Vec<u8>, End), String>;

/// Reads one answer, and counts what was left unread.
fn read(data: Vec<u8>, sizes: Vec<usize>, cap: usize) -> (Read, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    runtime.block_on(async {
        let mut r = reader(data, sizes);
        let head = match r.head().await {
            Ok(head) => head,
            Err(e) => return (Err(format!("{e:?}")), r.buf.len()),
        };
        let (body, end) = r.body(&head, cap).await;
        let left = r.buf.len() + (r.conn.data.len() - r.conn.at);
        (Ok((head, body, end)), left)
    })
}

/// How a test answer frames its body.
#[derive(Debug, Clone)]
enum Framed {
    Length,
    /// In chunks of these sizes (cycled), with an extension on each size line and trailers.
    Chunked(Vec<usize>, bool, bool),
    Close,
}

fn answer(body: &[u8], framed: &Framed) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\nx-a: 1\r\n".to_vec();
    match framed {
        Framed::Length => {
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
        }
        Framed::Close => {
            out.extend_from_slice(b"connection: close\r\n\r\n");
            out.extend_from_slice(body);
        }
        Framed::Chunked(sizes, extension, trailers) => {
            out.extend_from_slice(b"transfer-encoding: gzip, chunked\r\n\r\n");
            let mut rest = body;
            let mut turn = 0;
            while !rest.is_empty() {
                let n = sizes[turn % sizes.len()].clamp(1, rest.len());
                turn += 1;
                out.extend_from_slice(format!("{n:X}").as_bytes());
                if *extension {
                    out.extend_from_slice(b";name=value");
                }
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&rest[..n]);
                out.extend_from_slice(b"\r\n");
                rest = &rest[n..];
            }
            out.extend_from_slice(b"0\r\n");
            if *trailers {
                out.extend_from_slice(b"x-trailer: yes\r\nx-other: 2\r\n");
            }
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

fn framed() -> impl Strategy<Value = Framed> {
    prop_oneof![
        Just(Framed::Length),
        Just(Framed::Close),
        (proptest::collection::vec(1usize..300, 1..5), any::<bool>(), any::<bool>())
            .prop_map(|(sizes, e, t)| Framed::Chunked(sizes, e, t)),
    ]
}

proptest! {
    /// Whatever the framing and however the bytes arrive, the body reads back as sent, cut at the
    /// cap; an answer read whole leaves nothing behind, and one that ends with its connection is
    /// never kept for another request.
    #[test]
    fn any_framed_body_reads_back_as_sent(
        body in proptest::collection::vec(any::<u8>(), 0..3000),
        framed in framed(),
        sizes in proptest::collection::vec(1usize..2000, 1..6),
        cap in prop_oneof![Just(4096usize), 0usize..3500],
    ) {
        let (read, left) = read(answer(&body, &framed), sizes, cap);
        let (head, got, end) = read.map_err(TestCaseError::fail)?;
        prop_assert_eq!(head.status, 200);
        prop_assert_eq!(&got[..], &body[..body.len().min(cap)]);
        // Past the cap, reading stops where more would be needed: a body read whole meanwhile
        // is complete.
        if body.len() <= cap {
            prop_assert_eq!(end, End::Complete);
        }
        match end {
            End::Complete => prop_assert_eq!(left, 0),
            End::Cut => prop_assert!(body.len() > cap),
            End::Stalled => prop_assert!(false, "nothing waits here"),
        }
        prop_assert_eq!(head.keep_alive, !matches!(framed, Framed::Close));
    }

    /// Any bytes a receiver sends are an answer or a named refusal, never a panic, and no more
    /// than the cap is kept.
    #[test]
    fn any_bytes_are_an_answer_or_a_refusal(
        data in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..2000),
            (proptest::collection::vec(any::<u8>(), 0..600), framed()).prop_map(|(b, f)| {
                let mut a = answer(&b, &f);
                let n = a.len();
                a.truncate(n / 2 + b.len() % (n / 2 + 1));
                a
            }),
            "HTTP/1\\.[01] [0-9]{3} [a-z]{0,5}\r\n([a-zA-Z-]{1,20}: [ -~]{0,30}\r\n){0,8}\r\n[ -~]{0,300}"
                .prop_map(String::into_bytes),
        ],
        sizes in proptest::collection::vec(1usize..700, 1..4),
        cap in 0usize..5000,
    ) {
        if let (Ok((_, body, _)), _) = read(data, sizes, cap) {
            prop_assert!(body.len() <= cap);
        }
    }
}

fn head_of(text: &str) -> Result<Head, String> {
    match read(text.as_bytes().to_vec(), vec![7], 4096).0 {
        Ok((head, _, _)) => Ok(head),
        Err(e) => Err(e),
    }
}

#[test]
fn heads_say_how_the_body_ends_and_whether_the_connection_is_kept() {
    let head = head_of("HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n").expect("204");
    assert_eq!((head.framing, head.keep_alive), (Framing::None, true), "no body after 204");
    let head = head_of("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok").expect("1.0");
    assert_eq!((head.framing, head.keep_alive), (Framing::Length(2), false), "HTTP/1.0 is not kept");
    let head = head_of("HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\nok").expect("c");
    assert!(!head.keep_alive);
    let head = head_of("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\nok").expect("same twice");
    assert_eq!(head.framing, Framing::Length(2));
    let head =
        head_of("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 2\r\n\r\n0\r\n\r\n").expect("both");
    assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, false), "framed two ways: not kept");
    let head = head_of("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nzz").expect("not chunked last");
    assert_eq!((head.framing, head.keep_alive), (Framing::Close, false));
    let head = head_of("HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nWebHook-Allowed-Rate: 60\r\n\r\n").expect("429");
    assert_eq!(head.status, 429);
    let answer = Answer { status: 429, headers: head.headers, body: Vec::new(), stalled: false };
    assert_eq!((answer.header("retry-after"), answer.header("webhook-allowed-rate")), (Some("3"), Some("60")));
}

#[test]
fn interim_answers_are_skipped_and_bad_heads_named() {
    let (read, left) = read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nlink: x\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n".to_vec(), vec![5], 10);
    assert_eq!(read.expect("the final answer").0.status, 201);
    assert_eq!(left, 0);
    let refused = [
        ("HTTP/1.1 101 Switching\r\n\r\n", "switches protocols"),
        ("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok", "two different"),
        ("HTTP/1.1 200 OK\r\ncontent-length: -2\r\n\r\n", "not a length"),
        ("HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\n", "not a length"),
        ("SMTP ready\r\n\r\n", "not HTTP/1.x"),
        ("HTTP/1.1 200 OK\r\ncontent-len", "closed within the answer's head"),
        ("", "closed before an answer"),
    ];
    for (text, why) in refused {
        let e = head_of(text).expect_err(text);
        assert!(e.contains(why), "{text:?}: {e}");
    }
    let many: String = (0..=HEADERS_MAX).map(|i| format!("x-{i}: v\r\n")).collect();
    let e = head_of(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")).expect_err("too many");
    assert!(e.contains("more than 100 header lines"), "{e}");
    let long = format!("HTTP/1.1 200 OK\r\nx-long: {}\r\n\r\n", "v".repeat(HEAD_MAX));
    let e = head_of(&long).expect_err("too long");
    assert!(e.contains("longer than 64 KiB"), "{e}");
}

#[test]
fn a_body_that_does_not_come_in_time_is_stalled() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    runtime.block_on(async {
        let (client, mut server) = tokio::io::duplex(1024);
        tokio::io::AsyncWriteExt::write_all(&mut server, b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
            .await
            .expect("write");
        let mut r = Reader { conn: client, buf: Vec::new(), deadline: Instant::now() + Duration::from_millis(200) };
        let head = r.head().await.expect("head");
        let (body, end) = r.body(&head, 100).await;
        assert_eq!((body.as_slice(), end), (&b"half"[..], End::Stalled));
        drop(server);
    });
}

#[test]
fn requests_are_written_whole_with_the_host_and_length() {
    let url: Url = "http://[::1]:8080/a/b?x=1&y=%20".parse().expect("url");
    let mut headers = HeaderMap::new();
    headers.insert("x-lerian-event-id", HeaderValue::from_static("e1"));
    let authorization = HeaderValue::from_static("Bearer t");
    let written = Request::post(&url, &headers, Some(&authorization), b"{}", Duration::ZERO, 0).expect("a request").written;
    let text = String::from_utf8(written.clone()).expect("text");
    assert!(text.starts_with("POST /a/b?x=1&y=%20 HTTP/1.1\r\nhost: [::1]:8080\r\n"), "{text}");
    for line in ["x-lerian-event-id: e1\r\n", "authorization: Bearer t\r\n", "content-length: 2\r\n", "accept: */*\r\n"] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(text.ends_with("\r\n\r\n{}"), "{text}");
    assert!(written.capacity() >= written.len());
    let https: Url = "https://example.com/".parse().expect("url");
    let o = origin(&https).expect("origin");
    assert_eq!((o.tls, o.host.as_str(), o.port), (true, "example.com", 443));
    assert!(origin(&"ftp://example.com/".parse().expect("url")).is_err());
}

/// Idle connections the receiver closed, or kept past their time, are dropped by the sweep even
/// when their origin is never sent to again; an origin with nothing left is forgotten.
#[tokio::test]
async fn idle_connections_closed_or_past_their_time_are_swept() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let client = Client::new(tls(None, None).expect("tls"), true);
    let origin = Origin { tls: false, host: "127.0.0.1".into(), port: addr.port() };
    let idle = |client: &Client| crate::sink::lock(&client.origins).get(&origin).map_or(0, |p| p.idle.len());
    let closed = TcpStream::connect(addr).await.expect("connect");
    let (closing, _) = listener.accept().await.expect("accept");
    let kept = TcpStream::connect(addr).await.expect("connect");
    let (_keeping, _) = listener.accept().await.expect("accept");
    client.put(origin.clone(), Conn::Plain(closed));
    client.put(origin.clone(), Conn::Plain(kept));
    client.sweep();
    assert_eq!(idle(&client), 2, "both open");
    drop(closing);
    let deadline = Instant::now() + Duration::from_secs(10);
    while idle(&client) != 1 {
        assert!(Instant::now() < deadline, "the connection its receiver closed is still kept");
        tokio::time::sleep(Duration::from_millis(10)).await;
        client.sweep();
    }
    {
        let mut origins = crate::sink::lock(&client.origins);
        let place = origins.get_mut(&origin).expect("the origin");
        place.idle[0].since = Instant::now().checked_sub(IDLE_FOR).expect("an instant that long ago");
    }
    client.sweep();
    assert!(crate::sink::lock(&client.origins).is_empty(), "nothing left for the origin");
}
