//! The engine inside a worker: a code's runtime and context ([`Sandbox`]), the cache of them
//! ([`Cache`]), and the reading of a handler's answer. Nothing here is run in the hub's own
//! process but by tools and tests; the hub runs it in [`crate::worker`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rquickjs::context::intrinsic;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, Function, Runtime, Value};

use crate::{
    Answer, Code, CompileError, Failure, Input, Limits, MAX_CODE, MAX_LOG_LINE, MAX_LOG_LINES, MAX_STACK, Output, Run,
};

/// This thread's CPU time: what a run's budget is counted in (a busy machine slows a run down
/// in wall time, never in CPU time).
pub(crate) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// Checks that `code` compiles and defines `handler` (what a subscription's create or `PATCH`
/// refuses), within `limits` (its top level runs once, as it would before the first event).
pub fn check(code: &str, limits: &Limits) -> Result<(), CompileError> {
    Sandbox::new(code, limits).map(|_| ())
}

/// Runtimes a cache keeps, at most, whatever their size.
const CACHE_ENTRIES: usize = 256;
/// Runs a handler must have made within its budget before it is judged light (see [`Cache::run`]).
const LIGHT_AFTER: u32 = 8;

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
    code: Code,
    sandbox: Sandbox,
    bytes: usize,
    used: u64,
    memory: usize,
    /// Runs of this runtime that ended within the budget, and the CPU time they took, smoothed.
    runs: u32,
    typical: Duration,
}

impl Cache {
    pub fn new(max_bytes: usize) -> Self {
        Self { kept: HashMap::new(), bytes: 0, max_bytes, tick: 0 }
    }

    /// The runtimes kept, and the bytes they held after their last run.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The code kept under `key`, if its runtime is kept.
    pub fn code(&self, key: &[u8; 32]) -> Option<Code> {
        self.kept.get(key).map(|k| k.code.clone())
    }

    /// Runs `code`'s handler on `event` within `limits`, on its kept runtime (made when missing).
    ///
    /// The kernel charges a thread for the interrupts it happened to be running under (this
    /// kernel does not count interrupt time apart), so on a busy machine a run can be charged
    /// a millisecond or more it did not spend. A run stopped at its budget whose handler is light
    /// (its last [`LIGHT_AFTER`] runs or more ended within the budget, needing under half of it
    /// as a rule) is run once more on a fresh runtime; a second stop is final. A handler that
    /// spends its budget on every run is never light, and never run twice. The worker's bound
    /// (twice the budget plus 5 ms) counts both tries and the runtime made between them: a light
    /// handler whose top level is slow can reach it, and then fails as it would have.
    pub fn run(&mut self, code: &Code, event: &Input, limits: &Limits) -> Run {
        let started = Instant::now();
        let (mut output, mut logs, light) = match self.run_kept(code, event, limits) {
            Ok(ran) => ran,
            Err(e) => return compile_failed(e, started),
        };
        let again = light && matches!(output, Err(Failure::Cpu(_)));
        if again {
            (output, logs) = match self.run_kept(code, event, limits) {
                Ok((output, logs, _)) => (output, logs),
                Err(e) => return compile_failed(e, started),
            };
        }
        Run { output, logs, duration: started.elapsed(), again }
    }

    /// One run on the code's kept runtime (made when missing): what it gave, its logs, and
    /// whether the handler was light before it.
    fn run_kept(
        &mut self,
        code: &Code,
        event: &Input,
        limits: &Limits,
    ) -> Result<(Result<Output, Failure>, Vec<String>, bool), CompileError> {
        self.tick += 1;
        // A runtime made under another memory limit is made again.
        if self.kept.get(&code.key).is_some_and(|k| k.memory != limits.memory) {
            self.forget(&code.key);
        }
        if !self.kept.contains_key(&code.key) {
            let sandbox = Sandbox::new(&code.text, limits)?;
            let bytes = sandbox.held();
            self.bytes += bytes;
            self.kept.insert(
                code.key,
                Kept {
                    code: code.clone(),
                    sandbox,
                    bytes,
                    used: self.tick,
                    memory: limits.memory,
                    runs: 0,
                    typical: Duration::ZERO,
                },
            );
            self.trim(Some(&code.key));
        }
        let Some(kept) = self.kept.get_mut(&code.key) else {
            return Err(CompileError { message: "no runtime".into(), line: None, column: None });
        };
        kept.used = self.tick;
        let light = kept.runs >= LIGHT_AFTER && kept.typical <= limits.cpu / 2;
        let (output, logs, spent) = kept.sandbox.call(event, limits);
        if !matches!(output, Err(Failure::Cpu(_))) {
            kept.runs = kept.runs.saturating_add(1);
            kept.typical = if kept.runs == 1 { spent } else { (kept.typical * 7 + spent) / 8 };
        }
        // What the runtime holds now (a handler may keep what it made in its globals), not what
        // it held when it was made.
        let now = kept.sandbox.held();
        self.bytes = self.bytes - kept.bytes + now;
        kept.bytes = now;
        // A runtime that ran out of time or memory may be left in any state.
        if matches!(output, Err(Failure::Cpu(_) | Failure::Memory(_))) {
            self.forget(&code.key);
        }
        self.trim(None);
        Ok((output, logs, light))
    }

    fn forget(&mut self, key: &[u8; 32]) {
        if let Some(k) = self.kept.remove(key) {
            self.bytes -= k.bytes;
        }
    }

    /// Drops the least recently used runtimes, never `keep`, until within bounds.
    fn trim(&mut self, keep: Option<&[u8; 32]>) {
        while self.bytes > self.max_bytes || self.kept.len() > CACHE_ENTRIES {
            let oldest =
                self.kept.iter().filter(|(k, _)| Some(*k) != keep).min_by_key(|(_, v)| v.used).map(|(k, _)| *k);
            match oldest {
                Some(key) => self.forget(&key),
                None => return,
            }
        }
    }
}

/// Runs `code` once on `event` in a runtime of its own, kept by no cache: for code tried once
/// (`POST /v1/transforms/test`), which must neither pay for a cache key nor stay in memory.
pub fn run_once(code: &str, event: &Input, limits: &Limits) -> Run {
    let started = Instant::now();
    match Sandbox::new(code, limits) {
        Ok(sandbox) => {
            let (output, logs, _) = sandbox.call(event, limits);
            Run { output, logs, duration: started.elapsed(), again: false }
        }
        Err(e) => compile_failed(e, started),
    }
}

fn compile_failed(e: CompileError, started: Instant) -> Run {
    Run::failed(Failure::Compile(e), started.elapsed())
}

/// One code's runtime and context, with what its hooks read.
pub(crate) struct Sandbox {
    // Dropped in this order: the context before its runtime.
    context: Context,
    runtime: Runtime,
    /// The thread's CPU time (nanoseconds) past which the interrupt hook stops the code.
    deadline: Arc<AtomicU64>,
    /// Set by the hook when it stopped the code.
    interrupted: Arc<AtomicBool>,
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
    pub(crate) fn new(code: &str, limits: &Limits) -> Result<Self, CompileError> {
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
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let interrupted = Arc::new(AtomicBool::new(false));
        {
            let (deadline, interrupted) = (Arc::clone(&deadline), Arc::clone(&interrupted));
            runtime.set_interrupt_handler(Some(Box::new(move || {
                let past = thread_cpu().as_nanos() as u64 > deadline.load(Ordering::Relaxed);
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
        let sandbox = Self { context, runtime, deadline, interrupted, logs };
        let _ = sandbox.arm(limits);
        let loaded = sandbox.context.with(|ctx| -> Result<(), Result<CompileError, Caught>> {
            let sink = Rc::clone(&sandbox.logs);
            let log = Function::new(ctx.clone(), move |line: String| {
                let mut logs = sink.borrow_mut();
                if logs.len() < MAX_LOG_LINES {
                    logs.push(clip(line));
                }
            })
            .map_err(|e| Ok(engine(e)))?;
            ctx.globals().set("__hub_log", log).map_err(|e| Ok(engine(e)))?;
            ctx.eval::<(), _>(PRELUDE).map_err(|e| Ok(engine(e)))?;
            if let Err(e) = ctx.eval::<(), _>(code).catch(&ctx) {
                return Err(Err(Caught::read(&e, sandbox.interrupted.load(Ordering::Relaxed))));
            }
            let handler: Value = ctx.globals().get("handler").map_err(|e| Ok(engine(e)))?;
            if !handler.is_function() {
                return Err(Ok(CompileError {
                    message: "the code must define function handler(event)".into(),
                    line: None,
                    column: None,
                }));
            }
            Ok(())
        });
        sandbox.settle();
        loaded.map_err(|e| e.unwrap_or_else(|caught| compile_error(&caught, sandbox.exhausted(limits), limits)))?;
        sandbox.logs.borrow_mut().clear();
        Ok(sandbox)
    }

    /// Starts the CPU budget of one run: the thread's CPU time at its start.
    fn arm(&self, limits: &Limits) -> Duration {
        self.interrupted.store(false, Ordering::Relaxed);
        let start = thread_cpu();
        let until = start.saturating_add(limits.cpu);
        self.deadline.store(u64::try_from(until.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        start
    }

    /// The bytes the runtime holds now, by the engine's own account.
    fn held(&self) -> usize {
        usize::try_from(self.runtime.memory_usage().memory_used_size).unwrap_or(usize::MAX)
    }

    /// Whether the runtime is at its memory limit (what an exception of no value means then).
    fn exhausted(&self, limits: &Limits) -> bool {
        self.held().saturating_add(64 << 10) >= limits.memory
    }

    /// Calls the handler on `event`: what it gave, its logs, and the CPU time the call took.
    pub(crate) fn call(&self, event: &Input, limits: &Limits) -> (Result<Output, Failure>, Vec<String>, Duration) {
        self.logs.borrow_mut().clear();
        let start = self.arm(limits);
        let output = self.context.with(|ctx| {
            let result = call_handler(&ctx, event);
            result.map_err(|e| match e {
                CallError::Caught(caught) => Err(Caught::read(&caught, self.interrupted.load(Ordering::Relaxed))),
                CallError::Answer(failure) => Ok(failure),
            })
        });
        let output = output.map_err(|e| e.unwrap_or_else(|caught| caught.failure(self.exhausted(limits), limits)));
        self.settle();
        self.deadline.store(u64::MAX, Ordering::Relaxed);
        (output, std::mem::take(&mut *self.logs.borrow_mut()), thread_cpu().saturating_sub(start))
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

/// A caught exception, read while the engine is held.
struct Caught {
    interrupted: bool,
    /// `null` or `undefined` when that is what was thrown.
    valueless: Option<&'static str>,
    /// Its message and stack.
    text: String,
    /// The engine's own "out of memory" error.
    engine_oom: bool,
}

impl Caught {
    fn read(caught: &CaughtError<'_>, interrupted: bool) -> Self {
        let text = describe(caught);
        let valueless = match caught {
            CaughtError::Value(v) if v.is_null() => Some("null"),
            CaughtError::Value(v) if v.is_undefined() => Some("undefined"),
            _ => None,
        };
        let engine_oom = matches!(caught, CaughtError::Exception(_)) && text.starts_with("out of memory");
        Self { interrupted, valueless, text, engine_oom }
    }

    /// What it means: the hook's stop, the engine out of memory (its "out of memory" error, or
    /// an exception of no value while the runtime is at its limit), or the handler's own throw
    /// (`throw null` is the handler's, not the engine's).
    fn failure(&self, exhausted: bool, limits: &Limits) -> Failure {
        if self.interrupted {
            return Failure::Cpu(limits.cpu.as_millis());
        }
        if self.engine_oom || (exhausted && (self.valueless.is_some() || self.text.contains("out of memory"))) {
            return Failure::Memory(limits.memory);
        }
        // The engine's out of memory can surface as a throw of no value once the handler's
        // frames (and what they held) are freed: the message says both.
        if let Some(what) = self.valueless {
            return Failure::Thrown(format!(
                "{what} (no error value: a `throw {what}`, or memory running out in the middle of a throw)"
            ));
        }
        Failure::Thrown(clip(self.text.lines().next().unwrap_or_default().to_owned()))
    }
}

fn compile_error(caught: &Caught, exhausted: bool, limits: &Limits) -> CompileError {
    let failure = caught.failure(exhausted, limits);
    let text = &caught.text;
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
