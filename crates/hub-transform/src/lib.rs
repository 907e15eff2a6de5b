//! Transformations (SPEC §10, §11): a tenant's JavaScript `handler(event)` reshapes an event for
//! its destination, or returns `null` to skip it, inside a sandbox that the operating system holds.
//!
//! The engine is QuickJS (through `rquickjs`), and it never runs in the hub's own process. The hub
//! keeps a [`Pool`] of **worker processes** (its own executable in worker mode, [`worker::serve`]),
//! spoken to over a pipe ([`wire`]): each worker drops what it may do before it reads a run (no
//! file, socket or process may be opened: a seccomp filter kills it on any system call but reading
//! its pipe, writing its answer and managing its memory; no core dumps; a data-segment limit), and
//! the pool's supervisor measures each run's **CPU time by the kernel's account** and kills the
//! worker past twice the budget, whatever the engine does inside its built-ins. A killed or
//! crashed worker fails only the run it held, and the next run starts a new one.
//!
//! Inside a worker, [`Cache`] keeps a compiled runtime per code (bounded by the bytes each holds
//! now, measured after every run), with a memory limit its allocator enforces and a CPU budget its
//! interrupt hook enforces on the thread's CPU time (the gentle stop: the runtime survives), and a
//! context holding only the language: no module loader, no I/O, no `Date`, no `performance`, no
//! `Math.random`, no timers. `console.log` lines are captured, bounded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;
use sha2::{Digest, Sha256};

mod pool;
mod sandbox;
pub mod wire;
pub mod worker;

pub use pool::{Health, Pool, WorkerCommand};
// The engine in this process is for the worker (and this crate's tests) only: the hub reaches it
// through the pool, so no tenant code can run in the hub's own process.
#[cfg(test)]
use sandbox::{Cache, check, run_once};

/// The longest code a transform may hold.
pub const MAX_CODE: usize = 64 * 1024;
/// `console.log` lines kept of one run, and the bytes of each.
pub const MAX_LOG_LINES: usize = 50;
pub const MAX_LOG_LINE: usize = 1024;
/// The deepest a handler's calls may go (bytes of the engine's stack).
pub(crate) const MAX_STACK: usize = 256 * 1024;

/// What one run may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub cpu: Duration,
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { cpu: Duration::from_millis(5), memory: 16 << 20 }
    }
}

/// Code that does not compile, or defines no `handler` function: the engine's message and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", at(*line, *column))]
pub struct CompileError {
    pub message: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
}

fn at(line: Option<u32>, column: Option<u32>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

/// Why a run produced no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The handler threw: its message.
    #[error("the handler threw: {0}")]
    Thrown(String),
    #[error("the handler ran past its CPU budget of {0} ms")]
    Cpu(u128),
    #[error("the handler ran past its memory limit of {0} bytes")]
    Memory(usize),
    /// It returned something that is not an event or `null`.
    #[error("{0}")]
    Invalid(String),
    /// The code itself did not load.
    #[error("the code does not compile: {0}")]
    Compile(CompileError),
    /// The worker that held the run stopped without answering (it crashed, was killed, or
    /// could not be started): what happened.
    #[error("the transform worker stopped: {0}")]
    Worker(String),
    /// The pool is gone (the hub is stopping).
    #[error("transforms are not running (the hub is stopping)")]
    Stopped,
}

/// What a run gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The event as the handler returned it.
    Event(Answer),
    /// `null`: do not deliver.
    Skip,
}

/// The event a handler returned, as the JSON text its `JSON.stringify` wrote: the order of its
/// keys is the handler's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer(String);

impl Answer {
    /// An answer of this JSON text (what a handler's `JSON.stringify` would have written).
    pub fn from_text(text: String) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The answer as a JSON value (keys in the value's own order).
    pub fn json(&self) -> Json {
        serde_json::from_str(&self.0).unwrap_or(Json::Null)
    }
}

/// One run: its output or why there is none, the lines it logged, how long it took, and whether
/// it was stopped at its CPU budget and run once more (a light handler's, see
/// [`sandbox::Cache::run`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub output: Result<Output, Failure>,
    pub logs: Vec<String>,
    pub duration: Duration,
    pub again: bool,
}

impl Run {
    /// A run that gave no output for `failure`, logging nothing, after `duration`.
    pub fn failed(failure: Failure, duration: Duration) -> Self {
        Self { output: Err(failure), logs: Vec::new(), duration, again: false }
    }
}

/// The event a handler is given, as JSON text (what the engine parses): made once by the caller,
/// with no tree of values in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input(String);

impl Input {
    /// JSON text of an object; the engine refuses anything else as a thrown error.
    pub fn from_text(text: String) -> Self {
        Self(text)
    }

    pub fn text(&self) -> &str {
        &self.0
    }
}

impl From<&Json> for Input {
    fn from(event: &Json) -> Self {
        Self(event.to_string())
    }
}

/// A code and who owns it, as a cache knows it: its key is computed once, not per run. Two owners
/// never share a runtime, even with the same code (a handler's globals outlive a run).
#[derive(Clone)]
pub struct Code {
    key: [u8; 32],
    text: Arc<str>,
}

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Code").field("bytes", &self.text.len()).finish_non_exhaustive()
    }
}

impl Code {
    /// `owner` names whose code it is (a subscription); `text` is the JavaScript.
    pub fn new(owner: &str, text: &str) -> Self {
        let key = Sha256::new()
            .chain_update((owner.len() as u64).to_le_bytes())
            .chain_update(owner.as_bytes())
            .chain_update(text.as_bytes())
            .finalize()
            .into();
        Self { key, text: Arc::from(text) }
    }

    /// A code known by its key alone (a worker is sent the key the pool computed).
    pub(crate) fn with_key(key: [u8; 32], text: &str) -> Self {
        Self { key, text: Arc::from(text) }
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The bytes of compiled runtimes a cache keeps, by QuickJS's own account of each.
pub const CACHE_BYTES: usize = 64 << 20;

#[cfg(test)]
mod tests;
