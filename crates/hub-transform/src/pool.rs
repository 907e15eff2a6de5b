//! The hub's side of transformations: runs queued per tenant and taken in turn, each driven to a
//! worker process by a thread of the pool that watches the worker's CPU time and kills it past its
//! bound. No tenant code runs in the hub's process.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::wire::{Reply, Request, read_frame, write_frame};
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

/// Worker processes that run transforms, one per thread of the pool, started when first needed
/// and started again after one stops. Runs wait in one queue per tenant and free threads take
/// them from the tenants in turn, so a tenant whose handlers spend their whole budget on many
/// events delays another tenant's next run by at most one run per worker. Each run is bounded by
/// the worker's CPU time as the kernel counts it: past twice its budget (plus a few
/// milliseconds for a runtime's start) the worker is killed, and only that run fails.
#[derive(Debug, Clone)]
pub struct Pool {
    shared: Arc<Shared>,
    /// Closes the queue when the last clone of the pool is dropped (the threads then end, and
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
    /// Runs waiting for a worker.
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
/// How long a failed start is reported (by [`Health::cannot_start`]) when no start follows.
pub const START_FAILURE_HELD: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Queue {
    turns: VecDeque<String>,
    waiting: HashMap<String, VecDeque<Job>>,
    queued: usize,
    closed: bool,
    /// Threads waiting for a run: a push wakes one only when there is one to wake.
    idle: usize,
}

impl Queue {
    fn push(&mut self, tenant: &str, job: Job) {
        self.queued += 1;
        match self.waiting.get_mut(tenant) {
            Some(waiting) => waiting.push_back(job),
            None => {
                self.waiting.insert(tenant.to_owned(), VecDeque::from([job]));
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
        self.queued -= usize::from(job.is_some());
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
    /// The process ids of the workers alive.
    pids: Mutex<Vec<u32>>,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
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
        self.0.ready.notify_all();
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
    work: Work,
    reply: tokio::sync::oneshot::Sender<Reply>,
}

impl Pool {
    /// A pool of `workers` worker processes (at least one) started by `command`, each run within
    /// `limits`, all workers together keeping at most `cache_bytes` of compiled runtimes. Workers
    /// start when first needed; they end when the last clone of the pool is dropped.
    pub fn new(command: WorkerCommand, workers: usize, limits: Limits, cache_bytes: usize) -> io::Result<Self> {
        let workers = workers.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            ready: Condvar::new(),
            counters: Counters::default(),
            command,
            limits,
            cache_bytes: (cache_bytes / workers).max(1 << 20),
        });
        for i in 0..workers {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new().name(format!("transform-{i}")).spawn(move || drive(&shared))?;
        }
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
        let (reply, answer) = tokio::sync::oneshot::channel();
        let wake = {
            let mut queue = self.shared.queue();
            queue.push(tenant, Job { work, reply });
            queue.idle > 0
        };
        if wake {
            self.shared.ready.notify_one();
        }
        answer.await.ok()
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
            waiting: self.shared.queue().queued,
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

/// One thread of the pool: takes runs in turn and drives each to its worker.
fn drive(shared: &Shared) {
    let mut worker: Option<Worker> = None;
    let retire = |worker: &mut Option<Worker>| {
        if let Some(w) = worker.take() {
            let _ = w.retire(&shared.counters);
        }
    };
    loop {
        let job = {
            let mut queue = shared.queue();
            loop {
                if let Some(job) = queue.pop() {
                    break job;
                }
                if queue.closed {
                    drop(queue);
                    retire(&mut worker);
                    return;
                }
                queue.idle += 1;
                queue = shared.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
                queue.idle -= 1;
            }
        };
        // Its asker hung up: nobody waits for this run.
        if job.reply.is_closed() {
            continue;
        }
        shared.counters.busy.fetch_add(1, Ordering::Relaxed);
        // A panic here fails this run, not the thread: its worker (in whatever state) is
        // retired and the count of busy runs given back.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(shared, &mut worker, &job.work)));
        shared.counters.busy.fetch_sub(1, Ordering::Relaxed);
        let reply = served.unwrap_or_else(|_| {
            retire(&mut worker);
            failed(&job.work, Failure::Worker("the pool failed unexpectedly while driving it".into()), Instant::now())
        });
        let _ = job.reply.send(reply);
    }
}

/// One run on this thread's worker (started when missing); a worker that stops is dropped, and
/// the run fails with what happened.
fn serve(shared: &Shared, slot: &mut Option<Worker>, work: &Work) -> Reply {
    let started = Instant::now();
    let limits = shared.limits;
    let mut with_code = false;
    loop {
        let worker = match slot {
            Some(worker) => worker,
            None => match Worker::start(shared) {
                Ok(worker) => slot.insert(worker),
                Err(e) => return failed(work, Failure::Worker(format!("it could not be started: {e}")), started),
            },
        };
        let request = match work {
            Work::Run { code, input } => {
                Request::Run { key: code.key, code: with_code.then(|| code.text()), input: input.text(), limits }
            }
            Work::Once { code, input } => Request::Once { code, input: input.text(), limits },
            Work::Check { code } => Request::Check { code, limits },
        };
        match worker.ask(&request.frame(), &limits) {
            Ok(Reply::NeedCode) if !with_code && matches!(work, Work::Run { .. }) => with_code = true,
            Ok(Reply::NeedCode | Reply::Ready) => {
                let stop = Stop::Garbled("an answer that is not one to its request".into());
                let failure = slot.take().map_or(Failure::Stopped, |w| w.end(stop, &limits, &shared.counters));
                return failed(work, failure, started);
            }
            Ok(reply) => return reply,
            Err(stop) => {
                let failure = slot.take().map_or(Failure::Stopped, |w| w.end(stop, &limits, &shared.counters));
                return failed(work, failure, started);
            }
        }
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
}

/// One worker process and its pipes.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    pid: u32,
    /// Its CPU time as it last reported it (with its last answer): the next run's start.
    cpu: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl Worker {
    fn start(shared: &Shared) -> io::Result<Self> {
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
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("the worker's pipes were not made"));
        };
        let pid = child.id();
        let mut worker = Self { child, stdin, stdout, pid, cpu: Duration::ZERO };
        // It says when it is confined and ready, with its CPU time so far.
        let spoke = readable(&worker.stdout, WORKER_START);
        let ready = if spoke { worker.answer(0).ok() } else { None };
        if spoke && ready.is_none() {
            // Its pipe ended (or said something else): it is on its way out. Its end is a moment
            // behind the pipe's; wait that moment, so the reason names how it ended.
            let deadline = Instant::now() + Duration::from_millis(500);
            while matches!(worker.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
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
            return Err(io::Error::other(why));
        }
        *lock(&c.cannot_start) = None;
        lock(&c.pids).push(pid);
        Ok(worker)
    }

    /// One answer of the worker's, of at most `most` bytes beside its fixed part: its CPU time
    /// and what it says.
    fn answer(&mut self, most: usize) -> Result<(Duration, Reply), Stop> {
        match read_frame(&mut self.stdout, most.saturating_add(64)) {
            Ok(Some(frame)) => Reply::decode(&frame).map_err(|e| Stop::Garbled(e.to_string())),
            Ok(None) => Err(Stop::Gone),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(Stop::Garbled(e.to_string())),
            Err(_) => Err(Stop::Gone),
        }
    }

    /// Sends one request and waits for its answer, watching the worker's CPU time: on the fast
    /// path nothing is read but the answer (it carries the worker's CPU time, the next run's
    /// start); only a run slower than its bound in wall time has its CPU time read from the
    /// kernel while it runs.
    fn ask(&mut self, frame: &[u8], limits: &Limits) -> Result<Reply, Stop> {
        let started = Instant::now();
        let bound = limits.cpu.saturating_mul(2).saturating_add(CPU_GRACE);
        let wall = WALL_FLOOR.max(limits.cpu.saturating_mul(200));
        write_frame(&mut self.stdin, frame).map_err(|_| Stop::Gone)?;
        // CPU time never runs faster than the wall clock: nothing can pass the bound before
        // what is left of it has passed in wall time.
        let mut wait = bound;
        // The run's start on the kernel's clock: what the worker last reported, but never past
        // the kernel's first reading (a worker that lied about its clock gains at most one wait).
        let mut start: Option<Duration> = None;
        while !readable(&self.stdout, wait) {
            let now = self.cpu_now().ok_or(Stop::Gone)?;
            let used = now.saturating_sub(*start.get_or_insert(self.cpu.min(now)));
            if used > bound {
                return Err(Stop::Cpu(used));
            }
            let waited = started.elapsed();
            if waited > wall {
                return Err(Stop::Wall(wall));
            }
            wait = bound.saturating_sub(used).min(wall.saturating_sub(waited)).max(Duration::from_micros(200));
        }
        let (cpu, reply) = self.answer(limits.memory.saturating_mul(2).saturating_add(1 << 20))?;
        // An answer that came after the bound was passed still passed it.
        let spent = cpu.saturating_sub(start.unwrap_or(self.cpu));
        if spent > bound {
            return Err(Stop::Cpu(spent));
        }
        self.cpu = cpu;
        Ok(reply)
    }

    /// The worker's CPU time as the kernel counts it (its one thread's time on a CPU), or
    /// `None` when it is gone.
    fn cpu_now(&self) -> Option<Duration> {
        let text = std::fs::read_to_string(format!("/proc/{}/schedstat", self.pid)).ok()?;
        text.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
    }

    /// Kills and reaps the worker, and forgets it: its CPU time when it was killed and how it
    /// ended.
    fn retire(mut self, c: &Counters) -> (Option<Duration>, io::Result<std::process::ExitStatus>) {
        let _ = self.child.kill();
        // Killed but not yet reaped: its CPU time can still be read, and no longer grows.
        let last = self.cpu_now();
        let status = self.child.wait();
        lock(&c.pids).retain(|p| *p != self.pid);
        self.pid = 0;
        (last, status)
    }

    /// Ends a worker whose answer did not come, and says what happened to its run.
    fn end(self, stop: Stop, limits: &Limits, c: &Counters) -> Failure {
        let start = self.cpu;
        let (last, status) = self.retire(c);
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

/// A worker dropped without being retired (its thread unwinding) is still killed and reaped.
impl Drop for Worker {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `pipe` has something to read (or has closed) within `wait`.
fn readable(pipe: &ChildStdout, wait: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(pipe, PollFlags::IN)];
    let timeout =
        Timespec { tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX), tv_nsec: i64::from(wait.subsec_nanos()) };
    loop {
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return true,
        }
    }
}
