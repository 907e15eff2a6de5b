//! Transformations (SPEC §10): a tenant's JavaScript `handler(event)` reshapes an event for its
//! destination, or returns `null` to skip it, inside a sandbox.
//!
//! The sandbox is QuickJS (through `rquickjs`): a runtime of its own per code, with a memory limit
//! its allocator enforces and a CPU budget its interrupt hook enforces, and a context holding only
//! the language: no module loader, no I/O, no `Date`, no `performance`, no `Math.random`, no
//! promises or timers. `console.log` lines are captured, bounded. A code's runtime is made once per
//! thread and reused for its events; one that ran out of its budget or its memory is thrown away,
//! so the next event starts clean. Nothing here blocks on I/O: callers run it on a blocking thread,
//! never on the threads that serve HTTP or read Kafka.

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
/// Runtimes a thread keeps, one per code.
const KEPT_PER_THREAD: usize = 64;

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
}

/// What a run gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The event as the handler returned it.
    Event(Json),
    /// `null`: do not deliver.
    Skip,
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

/// Runs `code`'s handler on `event` (a JSON object) within `limits`, on this thread's runtime of
/// that code (made when missing).
pub fn run(code: &str, event: &Json, limits: &Limits) -> Run {
    let started = Instant::now();
    let key: [u8; 32] =
        Sha256::new().chain_update(code.as_bytes()).chain_update(limits.memory.to_le_bytes()).finalize().into();
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        if !kept.contains_key(&key) && kept.len() >= KEPT_PER_THREAD {
            kept.clear();
        }
        let sandbox = match kept.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match Sandbox::new(code, limits) {
                Ok(sandbox) => v.insert(sandbox),
                Err(e) => return compile_failed(e, started),
            },
        };
        let (output, logs) = sandbox.call(event, limits);
        // A runtime that ran out of time or memory may be left in any state: the next event gets
        // a new one.
        if matches!(output, Err(Failure::Cpu(_) | Failure::Memory(_))) {
            kept.remove(&key);
        }
        Run { output, logs, duration: started.elapsed() }
    })
}

/// Runs `code` once on `event` in a runtime of its own, kept by no cache: for code tried once
/// (`POST /v1/transforms/test`), which must neither pay for a cache key nor stay in memory.
pub fn run_once(code: &str, event: &Json, limits: &Limits) -> Run {
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

thread_local! {
    static KEPT: RefCell<HashMap<[u8; 32], Sandbox>> = RefCell::new(HashMap::new());
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

    fn call(&self, event: &Json, limits: &Limits) -> (Result<Output, Failure>, Vec<String>) {
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
fn call_handler<'js>(ctx: &Ctx<'js>, event: &Json) -> Result<Output, CallError<'js>> {
    let engine = |e: rquickjs::Error| CallError::Caught(CaughtError::Error(e));
    let invalid = |m: &str| CallError::Answer(Failure::Invalid(m.to_owned()));
    let handler: Function = ctx.globals().get("handler").map_err(engine)?;
    let input: Value = ctx.json_parse(event.to_string()).catch(ctx).map_err(CallError::Caught)?;
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
    serde_json::from_str(&text)
        .map(Output::Event)
        .map_err(|e| CallError::Answer(Failure::Invalid(format!("the handler's answer is not JSON: {e}"))))
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
