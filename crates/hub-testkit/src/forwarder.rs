//! A TCP forwarder a test controls: the one address through which a hub reaches its database,
//! standing in for a cloud endpoint or a virtual IP. The test can cut it (every connection
//! through it is closed, and new ones are closed as soon as they arrive, as while a server
//! restarts) and restore it, or point it at another server (a failover).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// A running forwarder; it stops when dropped.
#[derive(Debug)]
pub struct Forwarder {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Moves on every cut and retarget: connections made before it end.
    epoch: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct State {
    target: SocketAddr,
    cut: bool,
}

impl Forwarder {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State { target, cut: false }));
        let (epoch, _) = tokio::sync::watch::channel(0u64);
        let (shared, epochs) = (Arc::clone(&state), epoch.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, cut) = {
                    let s = shared.lock().unwrap_or_else(|p| p.into_inner());
                    (s.target, s.cut)
                };
                if cut {
                    drop(client);
                    continue;
                }
                let mut ended = epochs.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else { return };
                    let mut client = client;
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = ended.changed() => {}
                    }
                });
            }
        });
        Ok(Self { addr, state, epoch, task })
    }

    /// Closes every connection through the forwarder and every new one until [`Self::restore`].
    pub fn cut(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).cut = true;
        self.epoch.send_modify(|e| *e += 1);
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).cut = false;
    }

    /// Forwards new connections to `target` from now on, and closes the ones to the old target.
    pub fn retarget(&self, target: SocketAddr) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).target = target;
        self.epoch.send_modify(|e| *e += 1);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
        self.epoch.send_modify(|e| *e += 1);
    }
}
