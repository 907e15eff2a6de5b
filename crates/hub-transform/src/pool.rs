//! The hub's side of transformations: runs queued per tenant and taken in turn, each driven to a
//! worker process by a task of the pool (one per worker, on the hub's runtime, speaking to the
//! worker's pipes through the runtime's reactor) that watches the worker's CPU time and kills it
//! past its bound. While a worker's recent runs were all quick, its task sends it several runs at
//! once, so that it goes from one to the next without being woken and its answers come back
//! several to a read. No tenant code runs in the hub's process, and no thread of the hub stands
//! between a run and its worker.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, oneshot};

use crate::wire::{Reply, Request};
use crate::{Code, CompileError, Failure, Input, Limits, Run};

/// How a worker is started: a program and the arguments that put it in worker mode (the hub's
/// own executable and `transform-worker`). The pool adds the worker's settings after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl WorkerCommand {
    /// `program` (a build of the hub) in worker mode.
    pub fn of(program: PathBuf) -> Self {
        Self { program, args: vec![crate::worker::COMMAND.into()] }
    }

    /// The running executable in worker mode.
    pub fn this_executable() -> io::Result<Self> {
        Ok(Self::of(std::env::current_exe()?))
    }
}

/// Worker processes that run transforms, one per task of the pool, started when first needed
/// and started again after one stops. Runs wait in one queue per tenant and free tasks take
/// them from the tenants in turn, so a tenant whose handlers spend their whole budget on many
/// events delays another tenant's next run by at most one run per worker. Each run is bounded by
/// the worker's CPU time as the kernel counts it: past twice its budget (plus a few
/// milliseconds for a runtime's start) the worker is killed, and only that run fails.
#[derive(Debug, Clone)]
pub struct Pool {
    shared: Arc<Shared>,
    /// Closes the queue when the last clone of the pool is dropped (the tasks then end, and
    /// their workers with them).
    _closer: Arc<Closer>,
}

/// What the pool's workers are doing, for metrics and readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Worker processes alive.
    pub alive: usize,
    /// Runs being worked on now.
    pub busy: usize,
    /// Runs waiting for a worker (whose callers still wait for them).
    pub waiting: usize,
    /// Workers killed because a run passed its CPU bound, since the pool started.
    pub killed_cpu: u64,
    /// The most CPU time a killed run had spent when its worker was killed (the kernel's
    /// count): what the bound held in practice.
    pub most_cpu_killed: Duration,
    /// Workers killed because a run passed the wall-time watchdog, since the pool started.
    pub killed_wall: u64,
    /// Workers that stopped by themselves (a crash, the system-call filter), since the start.
    pub crashed: u64,
    /// Set while workers cannot be started: why the last start failed, when it failed within
    /// [`START_FAILURE_HELD`] and none has started since (a failure long past, with no run asking
    /// for a worker since, says nothing of now).
    pub cannot_start: Option<String>,
}

/// The least CPU a run may spend past its budget before its worker is killed: a new worker's
/// start, and a runtime's compilation on a cache miss, are counted with the run.
const CPU_GRACE: Duration = Duration::from_millis(5);
/// The wall time a run may take, at the least, before its worker is taken for stuck (a run's
/// CPU budget is counted in CPU time; a busy machine slows a run in wall time only).
const WALL_FLOOR: Duration = Duration::from_secs(2);
/// How long a new worker may take to say it is confined and ready.
const WORKER_START: Duration = Duration::from_secs(10);
/// The least a read asks of a worker's pipe (a pipe holds 64 KiB by default).
const READ_CHUNK: usize = 64 << 10;
/// How long a failed start is reported (by [`Health::cannot_start`]) when no start follows.
pub const START_FAILURE_HELD: Duration = Duration::from_secs(60);
/// How many runs a worker may be sent before its answers come back, once its recent runs were
/// all quick.
const PIPELINE: usize = 8;
/// Runs a worker must have ended quickly in a row before it is sent more than one at a time: a
/// worker whose runs spend their budget (a hostile handler) takes one at a time, so that another
/// tenant's run never waits behind several of them.
const CALM_RUNS: u32 = 16;
/// A quick run: one that spent at most this much CPU time.
const QUICK_RUN: Duration = Duration::from_millis(1);
/// The largest request sent behind others, and the most bytes of requests sent behind others not
/// yet answered.
const PIPELINED_FRAME: usize = 16 << 10;
const PIPELINED_BYTES: usize = 64 << 10;
/// How often a run under way for long looks whether its caller still waits for it.
const HANGUP_CHECK: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Queue {
    turns: VecDeque<String>,
    waiting: HashMap<String, VecDeque<Job>>,
    closed: bool,
}

impl Queue {
    fn push(&mut self, tenant: &str, job: Job) {
        match self.waiting.get_mut(tenant) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.waiting.insert(tenant.to_owned(), VecDeque::from([job]));
                self.turns.push_back(tenant.to_owned());
            }
        }
    }

    /// Puts back a run taken but not run (its worker stopped under another run), first of its
    /// tenant's and that tenant first in turn.
    fn unpop(&mut self, job: Job) {
        match self.waiting.get_mut(job.tenant.as_str()) {
            Some(waiting) => waiting.push_front(job),
            None => {
                self.turns.push_front(job.tenant.clone());
                self.waiting.insert(job.tenant.clone(), VecDeque::from([job]));
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
struct Counters {
    busy: AtomicUsize,
    killed_cpu: AtomicU64,
    most_cpu_killed_ns: AtomicU64,
    killed_wall: AtomicU64,
    crashed: AtomicU64,
    /// Why the last start of a worker failed and when, until one starts.
    cannot_start: Mutex<Option<(String, Instant)>>,
    /// The process ids of the workers alive (each worker takes its own out when reaped).
    pids: Arc<Mutex<Vec<u32>>>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes a task waiting for a run (or keeps the wake for the next that waits).
    ready: Notify,
    /// The pool's size, and its tasks running: tasks are started on the runtime of the run that
    /// finds fewer than the size (the first runs, or runs on a new runtime after one ended).
    size: usize,
    drivers: AtomicUsize,
    counters: Counters,
    command: WorkerCommand,
    limits: Limits,
    cache_bytes: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }
}

struct Closer(Arc<Shared>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.queue().closed = true;
        self.0.ready.notify_waiters();
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("command", &self.command).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Closer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closer").finish_non_exhaustive()
    }
}

/// What a run asks of a worker.
enum Work {
    Run { code: Code, input: Input },
    Once { code: String, input: Input },
    Check { code: String },
}

struct Job {
    tenant: String,
    work: Work,
    reply: oneshot::Sender<Reply>,
}

impl Pool {
    /// A pool of `workers` worker processes (at least one) started by `command`, each run within
    /// `limits`, all workers together keeping at most `cache_bytes` of compiled runtimes. Its
    /// tasks start on the runtime of its first run, and workers when first needed; they end when
    /// the last clone of the pool is dropped (or their runtime ends).
    pub fn new(command: WorkerCommand, workers: usize, limits: Limits, cache_bytes: usize) -> io::Result<Self> {
        let workers = workers.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            ready: Notify::new(),
            size: workers,
            drivers: AtomicUsize::new(0),
            counters: Counters::default(),
            command,
            limits,
            cache_bytes: (cache_bytes / workers).max(1 << 20),
        });
        let closer = Arc::new(Closer(Arc::clone(&shared)));
        Ok(Self { shared, _closer: closer })
    }

    /// Runs `code` of `tenant` on `event` when a worker is free and the tenant's turn comes; the
    /// code's compiled runtime is kept by the worker for its next events.
    pub async fn run(&self, tenant: &str, code: Code, event: Input) -> Run {
        let started = Instant::now();
        match self.ask(tenant, Work::Run { code, input: event }).await {
            Some(Reply::Ran(run)) => run,
            _ => stopped(started),
        }
    }

    /// Runs `code` once on `event` in a runtime kept by nothing (code tried once).
    pub async fn run_once(&self, tenant: &str, code: String, event: Input) -> Run {
        let started = Instant::now();
        match self.ask(tenant, Work::Once { code, input: event }).await {
            Some(Reply::Ran(run)) => run,
            _ => stopped(started),
        }
    }

    /// Whether `code` compiles and defines `handler`, its top level run once within the limits.
    pub async fn check(&self, tenant: &str, code: String) -> Result<(), CompileError> {
        match self.ask(tenant, Work::Check { code }).await {
            Some(Reply::Checked(checked)) => checked,
            _ => Err(CompileError { message: Failure::Stopped.to_string(), line: None, column: None }),
        }
    }

    async fn ask(&self, tenant: &str, work: Work) -> Option<Reply> {
        self.drive();
        let (reply, answer) = oneshot::channel();
        self.shared.queue().push(tenant, Job { tenant: tenant.to_owned(), work, reply });
        self.shared.ready.notify_one();
        answer.await.ok()
    }

    /// Starts the pool's missing tasks on the current runtime.
    fn drive(&self) {
        let shared = &self.shared;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        while shared.drivers.load(Ordering::Acquire) < shared.size {
            let alive = shared.drivers.load(Ordering::Acquire);
            if alive < shared.size
                && shared.drivers.compare_exchange(alive, alive + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                let running = Running(Arc::clone(shared));
                drop(runtime.spawn(drive(running)));
            }
        }
    }

    /// The process ids of the workers alive now.
    pub fn worker_pids(&self) -> Vec<u32> {
        lock(&self.shared.counters.pids).clone()
    }

    /// What the workers are doing now.
    pub fn health(&self) -> Health {
        let c = &self.shared.counters;
        Health {
            alive: lock(&c.pids).len(),
            busy: c.busy.load(Ordering::Relaxed),
            waiting: self.shared.queue().waiting.values().flatten().filter(|job| !job.reply.is_closed()).count(),
            killed_cpu: c.killed_cpu.load(Ordering::Relaxed),
            most_cpu_killed: Duration::from_nanos(c.most_cpu_killed_ns.load(Ordering::Relaxed)),
            killed_wall: c.killed_wall.load(Ordering::Relaxed),
            crashed: c.crashed.load(Ordering::Relaxed),
            cannot_start: lock(&c.cannot_start)
                .as_ref()
                .filter(|(_, at)| at.elapsed() < START_FAILURE_HELD)
                .map(|(why, _)| why.clone()),
        }
    }
}

fn stopped(started: Instant) -> Run {
    Run { output: Err(Failure::Stopped), logs: Vec::new(), duration: started.elapsed() }
}

/// A run sent to a worker and not yet answered.
struct Flight {
    job: Job,
    /// Whether its code went with it (the worker had asked for it).
    with_code: bool,
    /// The bytes of its request.
    bytes: usize,
}

/// What a thread of the pool holds: its worker (while one runs) and the runs sent to it, oldest
/// first.
struct Driver<'a> {
    shared: &'a Shared,
    worker: Option<Worker>,
    flights: VecDeque<Flight>,
    /// Quick runs in a row on this thread; the pipeline opens past [`CALM_RUNS`].
    calm: u32,
}

/// A task of the pool, counted while it runs (it may end with its runtime, or by a panic: the
/// next run starts another).
struct Running(Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.drivers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A worker counted busy while this lives (its task may be dropped at any await).
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One task of the pool: takes runs in turn and drives them to its worker. Should it end
/// otherwise than by the pool's closing (its runtime ending, a panic), its worker is killed with
/// it and the runs it had sent fail as stopped.
async fn drive(running: Running) {
    let shared = &*running.0;
    let mut d = Driver { shared, worker: None, flights: VecDeque::new(), calm: 0 };
    while d.take().await {
        if d.flights.is_empty() {
            continue;
        }
        let busy = Busy::new(&shared.counters.busy);
        while !d.flights.is_empty() {
            d.answer().await;
            // Room in the pipeline is filled while answers come.
            if !d.flights.is_empty() && !d.take().await {
                break;
            }
        }
        drop(busy);
    }
    if let Some(w) = d.worker.take() {
        let _ = w.retire().await;
    }
}

impl Driver<'_> {
    /// Takes runs in turn and sends them to the worker (started when missing): waiting for one
    /// when none is under way, else as many as the pipeline has room for. `false` once the pool
    /// is closed and nothing is left to do.
    async fn take(&mut self) -> bool {
        let limits = self.shared.limits;
        let depth = if self.calm >= CALM_RUNS { PIPELINE } else { 1 };
        while self.flights.len() < depth {
            let job = loop {
                // Listening before looking: a run queued in between still wakes this task.
                let notified = self.shared.ready.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                {
                    let mut queue = self.shared.queue();
                    if let Some(job) = queue.pop() {
                        break Some(job);
                    }
                    if !self.flights.is_empty() {
                        break None;
                    }
                    if queue.closed {
                        return false;
                    }
                }
                notified.await;
            };
            let Some(job) = job else { break };
            // Its asker hung up: nobody waits for this run.
            if job.reply.is_closed() {
                continue;
            }
            let worker = match &mut self.worker {
                Some(worker) => worker,
                None => match Worker::start(self.shared).await {
                    Ok(worker) => self.worker.insert(worker),
                    Err(e) => {
                        let failure = Failure::Worker(format!("it could not be started: {e}"));
                        let _ = job.reply.send(failed(&job.work, failure, Instant::now()));
                        continue;
                    }
                },
            };
            let frame = request(&job.work, false, limits).frame();
            let sent: usize = self.flights.iter().map(|f| f.bytes).sum();
            if !self.flights.is_empty() && (frame.len() > PIPELINED_FRAME || sent + frame.len() > PIPELINED_BYTES) {
                // A large request waits until the worker is free; it keeps its place.
                self.shared.queue().unpop(job);
                break;
            }
            worker.out.extend_from_slice(&frame);
            self.flights.push_back(Flight { job, with_code: false, bytes: frame.len() });
        }
        true
    }

    /// Waits for the oldest run's answer and gives it to its asker; a worker that stops fails
    /// that run alone, and the runs sent after it go back to the front of the queue.
    async fn answer(&mut self) {
        let limits = self.shared.limits;
        let Some(flight) = self.flights.front() else { return };
        let answered = match &mut self.worker {
            Some(worker) => worker.exchange(&limits, || flight.job.reply.is_closed()).await,
            None => Err(Stop::Gone),
        };
        let stop = match answered {
            Ok((_, Reply::NeedCode)) if !flight.with_code && matches!(flight.job.work, Work::Run { .. }) => {
                // Sent again with its code, behind what was sent since.
                let Some(mut flight) = self.flights.pop_front() else { return };
                let frame = request(&flight.job.work, true, limits).frame();
                if let Some(worker) = &mut self.worker {
                    worker.out.extend_from_slice(&frame);
                }
                (flight.with_code, flight.bytes) = (true, frame.len());
                self.flights.push_back(flight);
                return;
            }
            Ok((_, Reply::NeedCode | Reply::Ready)) => Stop::Garbled("an answer that is not one to its request".into()),
            Ok((spent, reply)) => {
                self.calm = if spent > QUICK_RUN { 0 } else { self.calm.saturating_add(1) };
                if let Some(flight) = self.flights.pop_front() {
                    let _ = flight.job.reply.send(reply);
                }
                return;
            }
            Err(stop) => stop,
        };
        self.calm = 0;
        let failure = match self.worker.take() {
            Some(w) => w.end(stop, &limits, &self.shared.counters).await,
            None => Failure::Stopped,
        };
        let Some(oldest) = self.flights.pop_front() else { return };
        let _ = oldest.job.reply.send(failed(&oldest.job.work, failure, Instant::now()));
        // Nothing of theirs ran: they keep their places.
        let mut queue = self.shared.queue();
        for flight in self.flights.drain(..).rev() {
            queue.unpop(flight.job);
        }
    }
}

/// The request a run makes of a worker; a `Run` carries its code only when the worker asked.
fn request(work: &Work, with_code: bool, limits: Limits) -> Request<'_> {
    match work {
        Work::Run { code, input } => {
            Request::Run { key: code.key, code: with_code.then(|| code.text()), input: input.text(), limits }
        }
        Work::Once { code, input } => Request::Once { code, input: input.text(), limits },
        Work::Check { code } => Request::Check { code, limits },
    }
}

fn failed(work: &Work, failure: Failure, started: Instant) -> Reply {
    match work {
        // As the worker says it of a check that fails the same way.
        Work::Check { .. } => {
            Reply::Checked(Err(CompileError { message: failure.to_string(), line: None, column: None }))
        }
        _ => Reply::Ran(Run { output: Err(failure), logs: Vec::new(), duration: started.elapsed() }),
    }
}

/// Why a worker's answer did not come.
#[derive(Debug)]
enum Stop {
    /// Its run passed its CPU bound (having spent this much); it was killed.
    Cpu(Duration),
    /// It answered nothing within the wall-time watchdog; it was killed.
    Wall(Duration),
    /// Its pipe closed or broke: it stopped by itself.
    Gone,
    /// It said something that is not an answer (or too much of one).
    Garbled(String),
    /// Nobody waits for its run any more (its caller hung up); it was killed.
    Abandoned,
}

/// One worker process and its pipes, the hub's ends of them non-blocking and registered with the
/// runtime's reactor.
struct Worker {
    child: Child,
    stdin: pipe::Sender,
    stdout: pipe::Receiver,
    /// Requests not yet written to its input.
    out: Vec<u8>,
    /// Bytes read from its output and not yet taken as a frame.
    read: Vec<u8>,
    pid: u32,
    /// Where the pool keeps the process ids of its workers alive.
    pids: Arc<Mutex<Vec<u32>>>,
    /// Its CPU time as it last reported it (with its last answer): the next run's start.
    cpu: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Worker {
    async fn start(shared: &Shared) -> io::Result<Self> {
        let c = &shared.counters;
        let data_limit = (shared.cache_bytes as u64)
            .saturating_add((shared.limits.memory as u64).saturating_mul(2))
            .saturating_add(256 << 20);
        let spawned = Command::new(&shared.command.program)
            .args(&shared.command.args)
            .arg("--cache-bytes")
            .arg(shared.cache_bytes.to_string())
            .arg("--data-limit")
            .arg(data_limit.to_string())
            .arg("--parent")
            .arg(std::process::id().to_string())
            // Nothing of the hub's environment (its database address, its tokens) reaches tenant
            // code's process.
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                tracing::error!(program = %shared.command.program.display(), error = %e, "a transform worker could not be started");
                *lock(&c.cannot_start) = Some((e.to_string(), Instant::now()));
                return Err(e);
            }
        };
        let pipes = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => registered(stdin, stdout),
            _ => Err(io::Error::other("the worker's pipes were not made")),
        };
        let (stdin, stdout) = match pipes {
            Ok(pipes) => pipes,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let pid = child.id();
        // Counted alive from here: whatever ends it from now on reaps it and forgets it.
        lock(&c.pids).push(pid);
        let pids = Arc::clone(&c.pids);
        let read = Vec::with_capacity(READ_CHUNK);
        let mut worker = Self { child, stdin, stdout, out: Vec::new(), read, pid, pids, cpu: Duration::ZERO };
        // It says when it is confined and ready, with its CPU time so far.
        let ready = tokio::time::timeout(WORKER_START, worker.first_frame()).await.ok().flatten();
        let why = match ready {
            // Its runs are bounded by its CPU time as the kernel shows it: without that, none is.
            Some((cpu, Reply::Ready)) if worker.cpu_now().is_some() => {
                worker.cpu = cpu;
                None
            }
            Some((_, Reply::Ready)) => Some(format!("the kernel does not show its CPU time (/proc/{pid}/schedstat)")),
            _ => Some(match worker.child.try_wait() {
                Ok(Some(status)) if status.code() == Some(3) => "it could not confine itself".to_owned(),
                Ok(Some(status)) => format!("it stopped at its start ({status})"),
                _ => format!("it did not say it was ready within {} s", WORKER_START.as_secs()),
            }),
        };
        if let Some(why) = why {
            tracing::error!(program = %shared.command.program.display(), reason = %why, "a transform worker could not be started");
            *lock(&c.cannot_start) = Some((why.clone(), Instant::now()));
            let _ = worker.retire().await;
            return Err(io::Error::other(why));
        }
        *lock(&c.cannot_start) = None;
        Ok(worker)
    }

    /// The worker's first frame (`None` when it ends before one).
    async fn first_frame(&mut self) -> Option<(Duration, Reply)> {
        loop {
            if let Some(frame) = self.take_frame(0).ok()? {
                return Some(frame);
            }
            self.fill().await.ok()?;
        }
    }

    /// The next whole frame already read, if there is one: the worker's CPU time and what it
    /// says. A frame over `most` bytes beside its fixed part is garbled.
    fn take_frame(&mut self, most: usize) -> Result<Option<(Duration, Reply)>, Stop> {
        let Some(head) = self.read.first_chunk::<4>() else { return Ok(None) };
        let len = usize::try_from(u32::from_le_bytes(*head)).unwrap_or(usize::MAX);
        let max = most.saturating_add(64);
        if len > max {
            return Err(Stop::Garbled(format!("a frame of {len} bytes is over {max}")));
        }
        let Some(body) = self.read.get(4..4 + len) else { return Ok(None) };
        let decoded = Reply::decode(body).map_err(|e| Stop::Garbled(e.to_string()));
        self.read.drain(..4 + len);
        decoded.map(Some)
    }

    /// Reads what the worker wrote, waiting for it: `Gone` when its output closed. It reads into
    /// the buffer's spare room and moves its length by what was read only, so a wait cut short
    /// leaves the buffer as it was; a read that comes short has taken all the pipe held, and the
    /// next waits for the reactor rather than asking the kernel only to hear there is nothing.
    async fn fill(&mut self) -> Result<(), Stop> {
        self.read.reserve(READ_CHUNK);
        match self.stdout.read_buf(&mut self.read).await {
            Ok(0) | Err(_) => Err(Stop::Gone),
            Ok(_) => Ok(()),
        }
    }

    /// Writes what of the requests not yet written the pipe takes now.
    fn flush(&mut self) -> Result<(), Stop> {
        while !self.out.is_empty() {
            match self.stdin.try_write(&self.out) {
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Stop::Gone),
            }
        }
        Ok(())
    }

    /// Waits for the answer to the oldest request sent, writing the requests behind it as the
    /// pipe takes them, and watching the worker's CPU time: on the fast path nothing is read but
    /// answers (each carries the worker's CPU time, the next run's start); only a run slower than
    /// its bound in wall time has its CPU time read from the kernel while it runs, and is stopped
    /// when its caller no longer waits for it. The CPU time the run spent, and the answer.
    async fn exchange(&mut self, limits: &Limits, hung_up: impl Fn() -> bool) -> Result<(Duration, Reply), Stop> {
        let since = Instant::now();
        let bound = limits.cpu.saturating_mul(2).saturating_add(CPU_GRACE);
        let wall = WALL_FLOOR.max(limits.cpu.saturating_mul(200));
        let most = limits.memory.saturating_mul(2).saturating_add(1 << 20);
        // CPU time never runs faster than the wall clock: nothing can pass the bound before
        // what is left of it has passed in wall time.
        let mut check = since + bound.min(HANGUP_CHECK);
        // The run's start on the kernel's clock: what the worker last reported, but never past
        // the kernel's first reading (a worker that lied about its clock gains at most one wait).
        let mut start: Option<Duration> = None;
        loop {
            if let Some((cpu, reply)) = self.take_frame(most)? {
                // An answer that came after the bound was passed still passed it.
                let spent = cpu.saturating_sub(start.unwrap_or(self.cpu));
                if spent > bound {
                    return Err(Stop::Cpu(spent));
                }
                self.cpu = cpu;
                return Ok((spent, reply));
            }
            self.flush()?;
            let now = Instant::now();
            if now >= check {
                let cpu = self.cpu_now().ok_or(Stop::Gone)?;
                let used = cpu.saturating_sub(*start.get_or_insert(self.cpu.min(cpu)));
                if used > bound {
                    return Err(Stop::Cpu(used));
                }
                let waited = since.elapsed();
                if waited > wall {
                    return Err(Stop::Wall(wall));
                }
                if hung_up() {
                    return Err(Stop::Abandoned);
                }
                let left = bound.saturating_sub(used).min(wall.saturating_sub(waited));
                check = now + left.clamp(Duration::from_micros(200), HANGUP_CHECK);
            }
            let writing = !self.out.is_empty();
            self.read.reserve(READ_CHUNK);
            let Self { stdin, stdout, read, .. } = self;
            tokio::select! {
                biased;
                got = stdout.read_buf(read) => if matches!(got, Ok(0) | Err(_)) {
                    return Err(Stop::Gone);
                },
                room = stdin.writable(), if writing => if room.is_err() {
                    return Err(Stop::Gone);
                },
                () = tokio::time::sleep_until(check.into()) => {}
            }
        }
    }

    /// The worker's CPU time as the kernel counts it (its one thread's time on a CPU), or
    /// `None` when it is gone.
    fn cpu_now(&self) -> Option<Duration> {
        let text = std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid)).ok()?;
        text.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
    }

    /// Kills and reaps the worker, and forgets it: its CPU time when it was killed and how it
    /// ended.
    /// Reaping waits for the kernel to tear the process down: it is done on a thread made for
    /// blocking.
    async fn retire(self) -> Retired {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn_blocking(move || self.reap())
                .await
                .unwrap_or_else(|_| (None, Err(io::Error::other("its reaping did not end")))),
            Err(_) => self.reap(),
        }
    }

    fn reap(mut self) -> Retired {
        let _ = self.child.kill();
        // Killed but not yet reaped: its CPU time can still be read, and no longer grows.
        let last = self.cpu_now();
        let status = self.child.wait();
        self.forget();
        (last, status)
    }

    /// Takes its process id out of the pool's workers alive, once reaped.
    fn forget(&mut self) {
        let pid = std::mem::take(&mut self.pid);
        lock(&self.pids).retain(|p| *p != pid);
    }

    /// Ends a worker whose answer did not come, and says what happened to its run.
    async fn end(self, stop: Stop, limits: &Limits, c: &Counters) -> Failure {
        let start = self.cpu;
        let (last, status) = self.retire().await;
        match stop {
            Stop::Cpu(used) => {
                // What it had spent by the time it was killed (its last tick included).
                let spent = last.map_or(used, |now| now.saturating_sub(start)).max(used);
                c.most_cpu_killed_ns.fetch_max(u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
                c.killed_cpu.fetch_add(1, Ordering::Relaxed);
                Failure::Cpu(limits.cpu.as_millis())
            }
            Stop::Wall(wall) => {
                c.killed_wall.fetch_add(1, Ordering::Relaxed);
                Failure::Worker(format!(
                    "it gave no answer within {} ms of wall time and was stopped",
                    wall.as_millis()
                ))
            }
            Stop::Garbled(what) => {
                c.crashed.fetch_add(1, Ordering::Relaxed);
                Failure::Worker(format!("its answer could not be read ({what})"))
            }
            Stop::Abandoned => Failure::Stopped,
            Stop::Gone => {
                c.crashed.fetch_add(1, Ordering::Relaxed);
                Failure::Worker(match status.ok().and_then(|s| s.signal().map(Err).or(s.code().map(Ok))) {
                    Some(Err(31)) => "it made a system call a worker may not make (stopped by its filter)".to_owned(),
                    Some(Err(9)) => "it was killed (signal 9)".to_owned(),
                    Some(Err(signal)) => format!("the engine crashed (signal {signal})"),
                    Some(Ok(3)) => "it could not confine itself".to_owned(),
                    Some(Ok(code)) => format!("it exited with status {code}"),
                    None => "it ended".to_owned(),
                })
            }
        }
    }
}

/// A killed worker's CPU time when it was killed, and how it ended.
type Retired = (Option<Duration>, io::Result<std::process::ExitStatus>);

/// A worker dropped without being retired (its task dropped with its runtime, or unwinding) is
/// still killed and reaped.
impl Drop for Worker {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.forget();
        }
    }
}

/// The hub's ends of a worker's pipes, made non-blocking and registered with the runtime's
/// reactor.
fn registered(stdin: ChildStdin, stdout: ChildStdout) -> io::Result<(pipe::Sender, pipe::Receiver)> {
    let stdin = pipe::Sender::from_owned_fd(std::os::fd::OwnedFd::from(stdin))?;
    Ok((stdin, pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(stdout))?))
}
