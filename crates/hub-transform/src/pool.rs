//! The hub's side of transformations: runs queued per tenant and taken in turn, driven to a worker
//! process by a thread of the pool (several light runs at once) that watches the worker's CPU time
//! and kills it past a run's bound. No tenant code runs in the hub's process.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{self, BufReader};
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
/// events delays another tenant's next run by at most one run per worker. A thread hands its
/// worker up to [`BATCH`] waiting runs at once when they are light (runs of tenants none of whose
/// runs lately spent more than a quarter of its budget); a heavy tenant's run goes alone. Each run
/// is bounded by the worker's CPU time as the kernel counts it: past twice its budget (plus a few
/// milliseconds for a runtime's start) the worker is killed, and only that run fails (those handed
/// over after it had not started: they go to the next worker).
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
    /// Runs of light handlers stopped at their CPU budget and run once more on a fresh runtime
    /// (the kernel charged them time they did not spend, or the handler met an event that makes
    /// it slow), since the pool started.
    pub ran_again: u64,
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
/// The most runs sent to a worker at once, and the most bytes of their requests (well under what
/// a pipe holds, so writing them never waits for the worker to read).
const BATCH: usize = 16;
const BATCH_BYTES: usize = 48 << 10;
/// How long a tenant's runs go to a worker alone after one of them spent more than a quarter of
/// its budget or stopped its worker.
const HEAVY_FOR: Duration = Duration::from_secs(60);
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
    /// Tenants whose runs are sent to a worker alone, until when: one of their runs lately spent
    /// more than a quarter of its budget, or stopped its worker.
    heavy: HashMap<String, Instant>,
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

    /// The next run in turn, when it may follow others to a busy worker: a run (not a try or a
    /// check) of a tenant not heavy, of at most `room` bytes.
    fn pop_light(&mut self, room: usize) -> Option<Job> {
        let tenant = self.turns.front()?;
        let job = self.waiting.get(tenant)?.front()?;
        let light = matches!(job.work, Work::Run { .. })
            && job.work.bytes() <= room
            && self.heavy.get(tenant).is_none_or(|until| *until <= Instant::now());
        if light { self.pop() } else { None }
    }

    /// Sends `tenant`'s runs to workers alone for a while.
    fn weigh(&mut self, tenant: &str) {
        let now = Instant::now();
        if self.heavy.len() >= 1024 {
            self.heavy.retain(|_, until| *until > now);
        }
        self.heavy.insert(tenant.to_owned(), now + HEAVY_FOR);
    }
}

#[derive(Default)]
struct Counters {
    busy: AtomicUsize,
    killed_cpu: AtomicU64,
    most_cpu_killed_ns: AtomicU64,
    killed_wall: AtomicU64,
    crashed: AtomicU64,
    ran_again: AtomicU64,
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

impl Work {
    /// About the bytes of its request.
    fn bytes(&self) -> usize {
        64 + match self {
            Self::Run { input, .. } => input.text().len(),
            Self::Once { code, input } => code.len() + input.text().len(),
            Self::Check { code } => code.len(),
        }
    }

    /// Its request; a run's code is sent only `with_code`.
    fn request(&self, limits: Limits, with_code: bool) -> Request<'_> {
        match self {
            Self::Run { code, input } => {
                Request::Run { key: code.key, code: with_code.then(|| code.text()), input: input.text(), limits }
            }
            Self::Once { code, input } => Request::Once { code, input: input.text(), limits },
            Self::Check { code } => Request::Check { code, limits },
        }
    }
}

struct Job {
    tenant: String,
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
            queue.push(tenant, Job { tenant: tenant.to_owned(), work, reply });
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
            ran_again: c.ran_again.load(Ordering::Relaxed),
            cannot_start: lock(&c.cannot_start)
                .as_ref()
                .filter(|(_, at)| at.elapsed() < START_FAILURE_HELD)
                .map(|(why, _)| why.clone()),
        }
    }
}

fn stopped(started: Instant) -> Run {
    Run::failed(Failure::Stopped, started.elapsed())
}

/// One thread of the pool: takes runs in turn and drives them to its worker. Light runs (see
/// [`Queue::pop_light`]) go several at once: the worker goes from one to the next without waiting
/// for this thread, and this thread wakes once for several.
fn drive(shared: &Shared) {
    let mut worker: Option<Worker> = None;
    loop {
        let batch = {
            let mut queue = shared.queue();
            let first = loop {
                if let Some(job) = queue.pop() {
                    break job;
                }
                if queue.closed {
                    drop(queue);
                    if let Some(w) = worker.take() {
                        let _ = w.retire(&shared.counters);
                    }
                    return;
                }
                queue.idle += 1;
                queue = shared.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
                queue.idle -= 1;
            };
            let alone = !matches!(first.work, Work::Run { .. })
                || queue.heavy.get(&first.tenant).is_some_and(|until| *until > Instant::now());
            let mut room = BATCH_BYTES.saturating_sub(first.work.bytes());
            let mut batch = VecDeque::from([first]);
            while !alone && batch.len() < BATCH {
                let Some(job) = queue.pop_light(room) else { break };
                room -= job.work.bytes();
                batch.push_back(job);
            }
            batch
        };
        // Their askers hung up: nobody waits for these runs.
        let mut batch: VecDeque<Job> = batch.into_iter().filter(|job| !job.reply.is_closed()).collect();
        if batch.is_empty() {
            continue;
        }
        shared.counters.busy.fetch_add(1, Ordering::Relaxed);
        // A panic here fails the runs not yet answered, not the thread: its worker (in whatever
        // state) is retired and the count of busy workers given back.
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(shared, &mut worker, &mut batch)));
        shared.counters.busy.fetch_sub(1, Ordering::Relaxed);
        if served.is_err() {
            if let Some(w) = worker.take() {
                let _ = w.retire(&shared.counters);
            }
            for job in batch {
                let failure = Failure::Worker("the pool failed unexpectedly while driving it".into());
                let _ = job.reply.send(failed(&job.work, failure, Instant::now()));
            }
        }
    }
}

/// Runs `jobs` on this thread's worker (started when missing), answering each as its answer
/// comes; those answered are taken off `jobs`. A worker that stops fails the run it was on and is
/// dropped; the runs sent after that one had not started, and go to the next worker.
fn serve(shared: &Shared, slot: &mut Option<Worker>, jobs: &mut VecDeque<Job>) {
    let started = Instant::now();
    let limits = shared.limits;
    // Runs whose code the worker did not keep: sent again with it, one at a time, at the end.
    let mut without_code = VecDeque::new();
    loop {
        let with_code = jobs.is_empty();
        if with_code {
            match without_code.pop_front() {
                Some(job) => jobs.push_back(job),
                None => return,
            }
        }
        let worker = match slot {
            Some(worker) => worker,
            None => match Worker::start(shared) {
                Ok(worker) => slot.insert(worker),
                Err(e) => {
                    for job in jobs.drain(..).chain(without_code.drain(..)) {
                        let failure = Failure::Worker(format!("it could not be started: {e}"));
                        let _ = job.reply.send(failed(&job.work, failure, started));
                    }
                    return;
                }
            },
        };
        let mut frames = Vec::with_capacity(jobs.iter().map(|job| job.work.bytes()).sum());
        for job in jobs.iter() {
            job.work.request(limits, with_code).write_to(&mut frames);
        }
        let mut outcome = worker.send(&frames);
        let mut since = Instant::now();
        while outcome.is_ok()
            && let Some(job) = jobs.front()
        {
            let run = matches!(job.work, Work::Run { .. });
            match worker.answer_within(&limits, since) {
                Ok((Reply::NeedCode, _)) if run && !with_code => without_code.extend(jobs.pop_front()),
                Ok((Reply::NeedCode | Reply::Ready, _)) => {
                    outcome = Err(Stop::Garbled("an answer that is not one to its request".into()));
                }
                Ok((reply, spent)) => {
                    // A run that carried its code counts its compilation too: not a sign of a
                    // heavy handler (one that runs past its budget stops its worker, below).
                    if run && !with_code && spent > limits.cpu / 4 {
                        shared.queue().weigh(&job.tenant);
                    }
                    if matches!(&reply, Reply::Ran(ran) if ran.again) {
                        shared.counters.ran_again.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(job) = jobs.pop_front() {
                        let _ = job.reply.send(reply);
                    }
                }
                Err(stop) => outcome = Err(stop),
            }
            since = Instant::now();
        }
        if let Err(stop) = outcome {
            let failure = slot.take().map_or(Failure::Stopped, |w| w.end(stop, &limits, &shared.counters));
            if let Some(job) = jobs.pop_front() {
                shared.queue().weigh(&job.tenant);
                let _ = job.reply.send(failed(&job.work, failure, started));
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
        _ => Reply::Ran(Run::failed(failure, started.elapsed())),
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
    /// Answers, read as many at once as have come.
    stdout: BufReader<ChildStdout>,
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
        let stdout = BufReader::with_capacity(64 << 10, stdout);
        let mut worker = Self { child, stdin, stdout, pid, cpu: Duration::ZERO };
        // It says when it is confined and ready, with its CPU time so far.
        let spoke = worker.readable(WORKER_START);
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

    /// Sends requests (whole frames, at most what a pipe holds beside one request).
    fn send(&mut self, frames: &[u8]) -> Result<(), Stop> {
        write_frame(&mut self.stdin, frames).map_err(|_| Stop::Gone)
    }

    /// Waits for the answer to the run the worker is on (it started when the last answer came,
    /// or at `since`, whichever is later), watching the worker's CPU time: on the fast path
    /// nothing is read but the answer (it carries the worker's CPU time, the next run's start);
    /// only a run slower than its bound in wall time has its CPU time read from the kernel while
    /// it runs. The answer, and the CPU time its run spent.
    fn answer_within(&mut self, limits: &Limits, since: Instant) -> Result<(Reply, Duration), Stop> {
        let bound = limits.cpu.saturating_mul(2).saturating_add(CPU_GRACE);
        let wall = WALL_FLOOR.max(limits.cpu.saturating_mul(200));
        // CPU time never runs faster than the wall clock: nothing can pass the bound before
        // what is left of it has passed in wall time.
        let mut wait = bound;
        // The run's start on the kernel's clock: what the worker last reported, but never past
        // the kernel's first reading (a worker that lied about its clock gains at most one wait).
        let mut start: Option<Duration> = None;
        while !self.readable(wait) {
            let now = self.cpu_now().ok_or(Stop::Gone)?;
            let used = now.saturating_sub(*start.get_or_insert(self.cpu.min(now)));
            if used > bound {
                return Err(Stop::Cpu(used));
            }
            let waited = since.elapsed();
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
        Ok((reply, spent))
    }

    /// Whether an answer (or the pipe's end) is here, or comes within `wait`.
    fn readable(&self, wait: Duration) -> bool {
        !self.stdout.buffer().is_empty() || readable(self.stdout.get_ref(), wait)
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
