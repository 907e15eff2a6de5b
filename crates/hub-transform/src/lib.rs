//! Transformations (SPEC §10): a tenant's JavaScript `handler(event)` reshapes an event for its
//! destination, or returns `null` to skip it, inside a sandbox.
//!
//! The sandbox is QuickJS (through `rquickjs`): a runtime of its own per code, with a memory limit
//! its allocator enforces and a CPU budget its interrupt hook enforces, and a context holding only
//! the language: no module loader, no I/O, no `Date`, no `performance`, no `Math.random`, no
//! timers. `console.log` lines are captured, bounded. A code's runtime is made once per thread
//! ([`Cache`], bounded in bytes) and reused for its events; one that ran out of its budget or its
//! memory is thrown away, so the next event starts clean. The hub runs transforms on a [`Pool`] of
//! threads of their own, never on the threads that serve HTTP or read Kafka.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Runtime, Value};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// The longest code a transform may hold.
pub const MAX_CODE: usize = 64 * 1024;
/// `console.log` lines kept of one run, and the bytes of each.
pub const MAX_LOG_LINES: usize = 50;
pub const MAX_LOG_LINE: usize = 1024;
/// The deepest a handler's calls may go (bytes of the engine's stack).
const MAX_STACK: usize = 256 * 1024;

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
    /// The pool's threads are gone (the hub is stopping).
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

/// One run: its output or why there is none, the lines it logged, and how long it took.
#[derive(Debug, Clone)]
pub struct Run {
    pub output: Result<Output, Failure>,
    pub logs: Vec<String>,
    pub duration: Duration,
}

/// Checks that `code` compiles and defines `handler` (what a subscription's create or `PATCH`
/// refuses), within `limits` (its top level runs once, as it would before the first event).
pub fn check(code: &str, limits: &Limits) -> Result<(), CompileError> {
    Sandbox::new(code, limits).map(|_| ())
}

/// Runs `code`'s handler on `event` (a JSON object) within `limits`, on this thread's own cache
/// (for tools and tests; the hub runs transforms on a [`Pool`]).
pub fn run(code: &str, event: &Json, limits: &Limits) -> Run {
    thread_local! {
        static KEPT: RefCell<Cache> = RefCell::new(Cache::new(CACHE_BYTES));
    }
    KEPT.with(|cache| cache.borrow_mut().run(&Code::new("", code), &Input::from(event), limits))
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

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The bytes of compiled runtimes a cache keeps, by QuickJS's own account of each.
pub const CACHE_BYTES: usize = 64 << 20;
/// Runtimes a cache keeps, at most, whatever their size.
const CACHE_ENTRIES: usize = 256;

/// Compiled runtimes of one thread, one per code, reused across events: the least recently used
/// go first past [`CACHE_BYTES`] or [`CACHE_ENTRIES`]. A runtime that ran out of its budget or
/// its memory is dropped, so the next event starts clean.
pub struct Cache {
    kept: HashMap<[u8; 32], Kept>,
    bytes: usize,
    max_bytes: usize,
    tick: u64,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("kept", &self.kept.len()).field("bytes", &self.bytes).finish_non_exhaustive()
    }
}

struct Kept {
    sandbox: Sandbox,
    bytes: usize,
    used: u64,
    memory: usize,
}

impl Cache {
    pub fn new(max_bytes: usize) -> Self {
        Self { kept: HashMap::new(), bytes: 0, max_bytes, tick: 0 }
    }

    /// The runtimes kept, and their bytes when they were made.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Runs `code`'s handler on `event` within `limits`, on its kept runtime (made when missing).
    pub fn run(&mut self, code: &Code, event: &Input, limits: &Limits) -> Run {
        let started = Instant::now();
        self.tick += 1;
        // A runtime made under another memory limit is made again.
        if self.kept.get(&code.key).is_some_and(|k| k.memory != limits.memory) {
            self.forget(&code.key);
        }
        if !self.kept.contains_key(&code.key) {
            let sandbox = match Sandbox::new(&code.text, limits) {
                Ok(sandbox) => sandbox,
                Err(e) => return compile_failed(e, started),
            };
            let bytes = usize::try_from(sandbox.runtime.memory_usage().memory_used_size).unwrap_or(0);
            self.bytes += bytes;
            self.kept.insert(code.key, Kept { sandbox, bytes, used: self.tick, memory: limits.memory });
            self.trim(&code.key);
        }
        let Some(kept) = self.kept.get_mut(&code.key) else {
            return compile_failed(CompileError { message: "no runtime".into(), line: None, column: None }, started);
        };
        kept.used = self.tick;
        let (output, logs) = kept.sandbox.call(event, limits);
        // A runtime that ran out of time or memory may be left in any state.
        if matches!(output, Err(Failure::Cpu(_) | Failure::Memory(_))) {
            self.forget(&code.key);
        }
        Run { output, logs, duration: started.elapsed() }
    }

    fn forget(&mut self, key: &[u8; 32]) {
        if let Some(k) = self.kept.remove(key) {
            self.bytes -= k.bytes;
        }
    }

    /// Drops the least recently used runtimes, never `keep`, until within bounds.
    fn trim(&mut self, keep: &[u8; 32]) {
        while self.bytes > self.max_bytes || self.kept.len() > CACHE_ENTRIES {
            let oldest = self.kept.iter().filter(|(k, _)| *k != keep).min_by_key(|(_, v)| v.used).map(|(k, _)| *k);
            match oldest {
                Some(key) => self.forget(&key),
                None => return,
            }
        }
    }
}

/// Threads of their own that run transforms, each with its [`Cache`]: what the dispatcher awaits,
/// so no transform runs on the threads that serve HTTP or read Kafka. Runs wait in one queue per
/// tenant and free threads take them from the tenants in turn, so a tenant whose handlers spend
/// their whole budget on many events delays another tenant's next run by at most one run per
/// thread, not by its whole backlog. Each run is bounded by its CPU budget.
#[derive(Debug, Clone)]
pub struct Pool {
    shared: Arc<Shared>,
    /// Closes the queue when the last clone of the pool is dropped (the threads then end).
    _closer: Arc<Closer>,
}

/// Runs waiting, by tenant, and the tenants in the order their turns come.
#[derive(Default)]
struct Queue {
    turns: std::collections::VecDeque<String>,
    waiting: HashMap<String, std::collections::VecDeque<Job>>,
    closed: bool,
    /// Threads waiting for a run: a push wakes one only when there is one to wake.
    idle: usize,
}

impl Queue {
    fn push(&mut self, tenant: &str, job: Job) {
        match self.waiting.get_mut(tenant) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.waiting.insert(tenant.to_owned(), std::collections::VecDeque::from([job]));
                self.turns.push_back(tenant.to_owned());
            }
        }
    }

    /// The next tenant's oldest run; that tenant goes to the back of the turns if it has more.
    fn pop(&mut self) -> Option<Job> {
        let tenant = self.turns.pop_front()?;
        let waiting = self.waiting.get_mut(&tenant)?;
        let job = waiting.pop_front();
        if waiting.is_empty() {
            self.waiting.remove(&tenant);
        } else {
            self.turns.push_back(tenant);
        }
        job
    }
}

#[derive(Default)]
struct Shared {
    queue: std::sync::Mutex<Queue>,
    ready: std::sync::Condvar,
}

impl Shared {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.queue().closed = true;
        self.0.ready.notify_all();
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Closer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closer").finish_non_exhaustive()
    }
}

struct Job {
    code: Code,
    event: Input,
    reply: tokio::sync::oneshot::Sender<Run>,
}

impl Pool {
    /// Starts `threads` threads (at least one) that run within `limits`, each keeping at most
    /// `cache_bytes` of compiled runtimes. They end when the last clone of the pool is dropped.
    pub fn new(threads: usize, limits: Limits, cache_bytes: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name(format!("transform-{i}")).spawn(move || {
                let mut cache = Cache::new(cache_bytes);
                loop {
                    let job = {
                        let mut queue = shared.queue();
                        loop {
                            if let Some(job) = queue.pop() {
                                break job;
                            }
                            if queue.closed {
                                return;
                            }
                            queue.idle += 1;
                            queue = shared.ready.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
                            queue.idle -= 1;
                        }
                    };
                    let run = cache.run(&job.code, &job.event, &limits);
                    let _ = job.reply.send(run);
                }
            })?;
        }
        let closer = Arc::new(Closer(Arc::clone(&shared)));
        Ok(Self { shared, _closer: closer })
    }

    /// Runs `code` of `tenant` on `event` when a thread is free and the tenant's turn comes.
    pub async fn run(&self, tenant: &str, code: Code, event: Input) -> Run {
        let started = Instant::now();
        let (reply, answer) = tokio::sync::oneshot::channel();
        let wake = {
            let mut queue = self.shared.queue();
            queue.push(tenant, Job { code, event, reply });
            queue.idle > 0
        };
        if wake {
            self.shared.ready.notify_one();
        }
        answer.await.unwrap_or_else(|_| Run {
            output: Err(Failure::Stopped),
            logs: Vec::new(),
            duration: started.elapsed(),
        })
    }
}

/// Runs `code` once on `event` in a runtime of its own, kept by no cache: for code tried once
/// (`POST /v1/transforms/test`), which must neither pay for a cache key nor stay in memory.
pub fn run_once(code: &str, event: &Input, limits: &Limits) -> Run {
    let started = Instant::now();
    match Sandbox::new(code, limits) {
        Ok(sandbox) => {
            let (output, logs) = sandbox.call(event, limits);
            Run { output, logs, duration: started.elapsed() }
        }
        Err(e) => compile_failed(e, started),
    }
}

fn compile_failed(e: CompileError, started: Instant) -> Run {
    Run { output: Err(Failure::Compile(e)), logs: Vec::new(), duration: started.elapsed() }
}

/// One code's runtime and context, with what its hooks read.
struct Sandbox {
    // Dropped in this order: the context before its runtime.
    context: Context,
    runtime: Runtime,
    /// Nanoseconds since `epoch` past which the interrupt hook stops the code.
    deadline: Arc<AtomicU64>,
    /// Set by the hook when it stopped the code.
    interrupted: Arc<AtomicBool>,
    epoch: Instant,
    logs: Rc<RefCell<Vec<String>>>,
}

const PRELUDE: &str = r#"
(() => {
  const log = globalThis.__hub_log;
  delete globalThis.__hub_log;
  const text = (v) => {
    if (typeof v === "string") return v;
    try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; } catch (e) { return String(v); }
  };
  const write = (...args) => log(args.map(text).join(" "));
  globalThis.console = Object.freeze({ log: write, info: write, warn: write, error: write, debug: write });
  delete Math.random;
})();
"#;

impl Sandbox {
    fn new(code: &str, limits: &Limits) -> Result<Self, CompileError> {
        if code.len() > MAX_CODE {
            return Err(CompileError {
                message: format!("code is at most {MAX_CODE} bytes"),
                line: None,
                column: None,
            });
        }
        let engine = |e: rquickjs::Error| CompileError { message: e.to_string(), line: None, column: None };
        let runtime = Runtime::new().map_err(engine)?;
        // Modules resolve to nothing: `import()` is refused at once.
        runtime.set_loader(rquickjs::loader::BuiltinResolver::default(), rquickjs::loader::BuiltinLoader::default());
        runtime.set_memory_limit(limits.memory);
        runtime.set_max_stack_size(MAX_STACK);
        let epoch = Instant::now();
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let interrupted = Arc::new(AtomicBool::new(false));
        {
            let (deadline, interrupted) = (Arc::clone(&deadline), Arc::clone(&interrupted));
            runtime.set_interrupt_handler(Some(Box::new(move || {
                let past = epoch.elapsed().as_nanos() as u64 > deadline.load(Ordering::Relaxed);
                if past {
                    interrupted.store(true, Ordering::Relaxed);
                }
                past
            })));
        }
        // The language only: no Date, no Performance, no WeakRef, no Proxy. Promises must exist:
        // an `import()` makes one, and without the intrinsic QuickJS leaves objects behind that
        // abort the process when the runtime is freed. Their jobs are run out after each call.
        type Language = (
            intrinsic::Eval,
            intrinsic::RegExpCompiler,
            intrinsic::RegExp,
            intrinsic::Json,
            intrinsic::MapSet,
            intrinsic::Promise,
        );
        let context = Context::custom::<Language>(&runtime).map_err(engine)?;
        let logs: Rc<RefCell<Vec<String>>> = Rc::default();
        let sandbox = Self { context, runtime, deadline, interrupted, epoch, logs };
        sandbox.arm(limits);
        let loaded = sandbox.context.with(|ctx| -> Result<(), CompileError> {
            let sink = Rc::clone(&sandbox.logs);
            let log = Function::new(ctx.clone(), move |line: String| {
                let mut logs = sink.borrow_mut();
                if logs.len() < MAX_LOG_LINES {
                    logs.push(clip(line));
                }
            })
            .map_err(engine)?;
            ctx.globals().set("__hub_log", log).map_err(engine)?;
            ctx.eval::<(), _>(PRELUDE).map_err(engine)?;
            if let Err(e) = ctx.eval::<(), _>(code).catch(&ctx) {
                return Err(compile_error(&e, sandbox.interrupted.load(Ordering::Relaxed), limits));
            }
            let handler: Value = ctx.globals().get("handler").map_err(engine)?;
            if !handler.is_function() {
                return Err(CompileError {
                    message: "the code must define function handler(event)".into(),
                    line: None,
                    column: None,
                });
            }
            Ok(())
        });
        sandbox.settle();
        loaded?;
        sandbox.logs.borrow_mut().clear();
        Ok(sandbox)
    }

    /// Starts the CPU budget of one run.
    fn arm(&self, limits: &Limits) {
        self.interrupted.store(false, Ordering::Relaxed);
        let until = self.epoch.elapsed() + limits.cpu;
        self.deadline.store(until.as_nanos() as u64, Ordering::Relaxed);
    }

    fn call(&self, event: &Input, limits: &Limits) -> (Result<Output, Failure>, Vec<String>) {
        self.logs.borrow_mut().clear();
        self.arm(limits);
        let output = self.context.with(|ctx| {
            let result = call_handler(&ctx, event);
            result.map_err(|e| match e {
                CallError::Caught(caught) => failure(&caught, self.interrupted.load(Ordering::Relaxed), limits),
                CallError::Answer(failure) => failure,
            })
        });
        self.settle();
        self.deadline.store(u64::MAX, Ordering::Relaxed);
        (output, std::mem::take(&mut *self.logs.borrow_mut()))
    }

    /// Runs out the jobs a call left (a promise's reactions, an `import()` refused), within
    /// what is left of the budget: a runtime must hold no job and no value of a job when it
    /// is dropped.
    fn settle(&self) {
        for _ in 0..1024 {
            if !self.runtime.is_job_pending() {
                return;
            }
            let _ = self.runtime.execute_pending_job();
        }
    }
}

/// Why a call gave no event: the engine threw, or the answer is not an event.
enum CallError<'js> {
    Caught(CaughtError<'js>),
    Answer(Failure),
}

/// The handler called on the event.
fn call_handler<'js>(ctx: &Ctx<'js>, event: &Input) -> Result<Output, CallError<'js>> {
    let engine = |e: rquickjs::Error| CallError::Caught(CaughtError::Error(e));
    let invalid = |m: &str| CallError::Answer(Failure::Invalid(m.to_owned()));
    let handler: Function = ctx.globals().get("handler").map_err(engine)?;
    let input: Value = ctx.json_parse(event.text()).catch(ctx).map_err(CallError::Caught)?;
    let answer: Value = handler.call((input,)).catch(ctx).map_err(CallError::Caught)?;
    if answer.is_null() {
        return Ok(Output::Skip);
    }
    if answer.is_undefined() {
        return Err(invalid("the handler returned nothing: return the event, or null to skip it"));
    }
    if answer.is_promise() {
        return Err(invalid("the handler must return the event itself: handlers are synchronous, not async"));
    }
    if !answer.is_object() || answer.is_array() || answer.is_function() {
        return Err(invalid("the handler must return an object (the event) or null"));
    }
    let text = ctx.json_stringify(answer).catch(ctx).map_err(CallError::Caught)?;
    let text = match text {
        Some(s) => s.to_string().map_err(engine)?,
        None => return Err(invalid("the handler's answer is not JSON")),
    };
    match serde_json::from_str::<&serde_json::value::RawValue>(&text) {
        Ok(_) => Ok(Output::Event(Answer(text))),
        Err(e) => Err(CallError::Answer(Failure::Invalid(format!("the handler's answer is not JSON: {e}")))),
    }
}

fn clip(mut line: String) -> String {
    if line.len() > MAX_LOG_LINE {
        let mut end = MAX_LOG_LINE;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

/// An exception's message and stack, as text.
fn describe(caught: &CaughtError<'_>) -> String {
    match caught {
        CaughtError::Exception(e) => {
            let message = e.message().unwrap_or_default();
            let stack = e.stack().unwrap_or_default();
            if message.is_empty() { stack } else { format!("{message}\n{stack}") }
        }
        CaughtError::Value(v) => {
            if v.is_null() || v.is_undefined() {
                String::new()
            } else {
                v.as_string().and_then(|s| s.to_string().ok()).unwrap_or_else(|| format!("{:?}", v.type_of()))
            }
        }
        CaughtError::Error(e) => e.to_string(),
    }
}

fn failure(caught: &CaughtError<'_>, interrupted: bool, limits: &Limits) -> Failure {
    if interrupted {
        return Failure::Cpu(limits.cpu.as_millis());
    }
    let text = describe(caught);
    // QuickJS out of memory throws `null` or an "out of memory" error.
    if text.is_empty() || text.contains("out of memory") {
        return Failure::Memory(limits.memory);
    }
    Failure::Thrown(clip(text.lines().next().unwrap_or_default().to_owned()))
}

fn compile_error(caught: &CaughtError<'_>, interrupted: bool, limits: &Limits) -> CompileError {
    let failure = failure(caught, interrupted, limits);
    let text = describe(caught);
    // The stack names `eval_script:<line>:<column>`.
    let position = text.split("eval_script:").nth(1).map(|rest| {
        let mut parts = rest.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
        (parts.next().and_then(|l| l.parse().ok()), parts.next().and_then(|c| c.parse().ok()))
    });
    let (line, column) = position.unwrap_or((None, None));
    let message = match failure {
        Failure::Thrown(m) => m,
        other => other.to_string(),
    };
    CompileError { message, line, column }
}

#[cfg(test)]
mod tests;
