//! A real HTTP receiver on loopback that records what it gets and answers as told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

/// How the receiver answers.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// 200 echoing the body when a signature verifies with one of these secrets (so a
    /// verification challenge comes back), 401 otherwise.
    Verify(Vec<String>),
    /// Always this status.
    Status(u16),
    /// Sleep, then 204.
    Sleep(Duration),
    /// Echo the request body with 200 (a verification-aware receiver).
    Echo,
    /// Redirect elsewhere.
    Redirect(String),
    /// 200 with a large body.
    Large(usize),
}

/// One received request.
#[derive(Debug, Clone)]
pub struct Request {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

#[derive(Clone)]
struct Shared {
    behaviour: Behaviour,
    log: Arc<Mutex<Vec<Request>>>,
}

pub struct Receiver {
    pub url: String,
    log: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    pub async fn start(behaviour: Behaviour) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared { behaviour, log: Arc::clone(&log) };
        let app = axum::Router::new().fallback(handle).with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, log }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().expect("log").clone()
    }

    /// Waits (with a deadline) until `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Request> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = self.requests();
            if got.len() >= n || tokio::time::Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn handle(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    shared.log.lock().expect("log").push(Request { headers: headers.clone(), body: body.to_vec() });
    match &shared.behaviour {
        Behaviour::Verify(secrets) => {
            if hub_testkit::signature_verifies(&headers, &body, secrets) {
                (StatusCode::OK, body).into_response()
            } else {
                (StatusCode::UNAUTHORIZED, "bad signature").into_response()
            }
        }
        Behaviour::Status(code) => (StatusCode::from_u16(*code).expect("status"), "nope").into_response(),
        Behaviour::Sleep(d) => {
            tokio::time::sleep(*d).await;
            StatusCode::NO_CONTENT.into_response()
        }
        Behaviour::Echo => (StatusCode::OK, body).into_response(),
        Behaviour::Redirect(to) => (StatusCode::FOUND, [("location", to.clone())]).into_response(),
        Behaviour::Large(n) => (StatusCode::OK, "x".repeat(*n)).into_response(),
    }
}

/// `127.0.0.1:<port>` where nothing listens now.
pub fn closed_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    format!("127.0.0.1:{port}")
}

/// `127.0.0.1:<port>` of a TCP server that accepts connections and never speaks: every attempt
/// against it times out.
pub async fn silent_addr() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr.to_string()
}

/// The URL of a receiver that answers `200` with its head and the first bytes of a body, then
/// never sends the rest (keeping the connection open).
pub async fn stalled_body_url() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buf).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\n\r\naccepted, and";
            let _ = socket.write_all(head.as_bytes()).await;
            held.push(socket);
        }
    });
    format!("http://{addr}/hook")
}
