//! Background tasks that must not end unseen.
//!
//! Every long-running task of the hub (consumers, the dispatcher, retention, gauges, the HTTP
//! server) is spawned here under a name. A task that ends — by returning or by a panic — while
//! the hub is not stopping is a failure: it is logged with its name, readiness turns 503 naming
//! it, and the hub stops, so `serve` exits non-zero and the orchestrator restarts the process.
//! A hub that silently lost its Kafka consumer would keep answering `/readyz` 200 forever.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a room is started with beside its configuration: the supervisor its tasks run under, the
/// token that stops them, and the tasks started so far (the hub waits for each when it stops).
#[derive(Debug)]
pub(crate) struct Launch {
    pub supervisor: Supervisor,
    pub stop: CancellationToken,
    tasks: Vec<JoinHandle<Option<()>>>,
}

impl Launch {
    pub fn new(supervisor: Supervisor, stop: CancellationToken) -> Self {
        Self { supervisor, stop, tasks: Vec::new() }
    }

    /// Spawns a room's task under `name` (see [`Supervisor::spawn`]).
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tasks.push(self.supervisor.spawn(name, task));
    }

    /// The tasks started, in the order they were.
    pub fn into_tasks(self) -> Vec<JoinHandle<Option<()>>> {
        self.tasks
    }
}

/// Watches the hub's background tasks.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// Cancelled when the hub stops on purpose: tasks ending after it are not failures.
    stopping: CancellationToken,
    /// Cancelled by the supervisor when a task fails, to stop the whole hub.
    shutdown: CancellationToken,
    failed: Arc<Mutex<Option<String>>>,
}

impl Supervisor {
    pub fn new(stopping: CancellationToken, shutdown: CancellationToken) -> Self {
        Self { stopping, shutdown, failed: Arc::default() }
    }

    /// Spawns `task` under `name`.
    pub fn spawn<F, T>(&self, name: &'static str, task: F) -> JoinHandle<Option<T>>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let inner = tokio::spawn(task);
        let this = self.clone();
        tokio::spawn(async move {
            match inner.await {
                Ok(value) if this.stopping.is_cancelled() => Some(value),
                Ok(value) => {
                    this.fail(name, "ended while the hub was running");
                    Some(value)
                }
                Err(e) if e.is_panic() => {
                    this.fail(name, "panicked");
                    None
                }
                Err(_) => None,
            }
        })
    }

    fn fail(&self, name: &'static str, how: &str) {
        tracing::error!(task = name, "background task {how}; readiness is off and the hub stops");
        let mut failed = self.failed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        failed.get_or_insert_with(|| name.to_owned());
        self.shutdown.cancel();
    }

    /// The first task that failed, if any.
    pub fn failed(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_ends_or_panics_while_running_fails_the_hub() {
        let (stopping, shutdown) = (CancellationToken::new(), CancellationToken::new());
        let supervisor = Supervisor::new(stopping.clone(), shutdown.clone());
        supervisor.spawn("quits", async {}).await.expect("join");
        assert_eq!(supervisor.failed().as_deref(), Some("quits"));
        assert!(shutdown.is_cancelled(), "the hub is told to stop");

        let (stopping, shutdown) = (CancellationToken::new(), CancellationToken::new());
        let supervisor = Supervisor::new(stopping.clone(), shutdown.clone());
        let handle = supervisor.spawn("panics", async { panic!("boom") });
        assert_eq!(handle.await.expect("join"), None::<()>);
        assert_eq!(supervisor.failed().as_deref(), Some("panics"));
    }

    #[tokio::test]
    async fn a_task_that_ends_because_the_hub_stops_is_no_failure() {
        let (stopping, shutdown) = (CancellationToken::new(), CancellationToken::new());
        let supervisor = Supervisor::new(stopping.clone(), shutdown.clone());
        let stop = stopping.clone();
        let handle = supervisor.spawn("worker", async move { stop.cancelled().await });
        stopping.cancel();
        handle.await.expect("join");
        assert_eq!(supervisor.failed(), None);
        assert!(!shutdown.is_cancelled());
    }
}
