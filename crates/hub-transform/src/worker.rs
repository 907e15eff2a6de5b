//! A worker process: what the hub's executable runs as `transform-worker`. It gives up what it may
//! do ([`confine`]), then answers requests from its standard input on its standard output
//! ([`crate::wire`]) until the input ends. The pool that started it holds its CPU time.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::AsFd;

use crate::sandbox::{Cache, check, run_once, thread_cpu};
use crate::wire::{MAX_REQUEST, Reply, Request, read_frame, write_frame};
use crate::{Code, Input};

/// The argument that puts the hub's executable in worker mode.
pub const COMMAND: &str = "transform-worker";

/// What a worker is started with (its command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of compiled runtimes its cache keeps, by what they hold now.
    pub cache_bytes: usize,
    /// What its data may grow by past what it holds once started (its `RLIMIT_DATA` is set
    /// that far above), bytes: past it, allocation fails.
    pub data_limit: u64,
    /// The process that started it: when that one is gone, so is the worker.
    pub parent: u32,
}

impl Settings {
    /// The settings from the arguments the pool gives (`--cache-bytes N --data-limit N
    /// --parent PID`), each named when missing or not a number.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = args.into_iter();
        let (mut cache, mut data, mut parent) = (None, None, None);
        while let Some(name) = args.next() {
            let value = args.next().ok_or_else(|| format!("{name}: a value is missing"))?;
            let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{name}: must be a whole number (got {v:?})"));
            match name.as_str() {
                "--cache-bytes" => cache = Some(number(&value)?),
                "--data-limit" => data = Some(number(&value)?),
                "--parent" => parent = Some(number(&value)?),
                other => return Err(format!("{other}: not an argument of a transform worker")),
            }
        }
        Ok(Self {
            cache_bytes: usize::try_from(cache.ok_or("--cache-bytes: missing")?)
                .map_err(|_| "--cache-bytes: too large")?,
            data_limit: data.ok_or("--data-limit: missing")?,
            parent: u32::try_from(parent.ok_or("--parent: missing")?).map_err(|_| "--parent: not a process id")?,
        })
    }
}

/// The worker's entry point, from the arguments after `transform-worker` (the hub's executable
/// and this crate's test worker both start here): a bad argument is named, exit status 2.
pub fn main(args: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    match Settings::from_args(args) {
        Ok(settings) => serve(settings),
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Serves requests until standard input ends; the exit status says why it stopped.
pub fn serve(settings: Settings) -> std::process::ExitCode {
    if let Err(e) = confine(&settings) {
        // Nothing is run unconfined: the pool sees the exit and reports it.
        let _ = writeln!(io::stderr(), "transform worker: cannot confine itself: {e}");
        return std::process::ExitCode::from(3);
    }
    let mut input = io::stdin().lock();
    let mut output = PipeOut(io::stdout());
    let mut cache = Cache::new(settings.cache_bytes);
    let mut reply = Reply::Ready;
    loop {
        // Each answer carries the worker's CPU time, which the pool counts the next run from.
        if write_frame(&mut output, &reply.frame(thread_cpu())).is_err() {
            return std::process::ExitCode::from(5);
        }
        let frame = match read_frame(&mut input, MAX_REQUEST) {
            Ok(Some(frame)) => frame,
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(_) => return std::process::ExitCode::from(4),
        };
        reply = match Request::decode(&frame) {
            Ok(request) => answer(&mut cache, request),
            Err(_) => return std::process::ExitCode::from(4),
        };
    }
}

fn answer(cache: &mut Cache, request: Request<'_>) -> Reply {
    match request {
        Request::Run { key, code, input, limits } => {
            let Some(code) = code.map(|text| Code::with_key(key, text)).or_else(|| cache.code(&key)) else {
                return Reply::NeedCode;
            };
            Reply::Ran(cache.run(&code, &Input::from_text(input.to_owned()), &limits))
        }
        Request::Once { code, input, limits } => {
            Reply::Ran(run_once(code, &Input::from_text(input.to_owned()), &limits))
        }
        Request::Check { code, limits } => Reply::Checked(check(code, &limits)),
    }
}

/// Standard output written straight to its descriptor: a frame leaves in as few writes as the
/// pipe takes, with no line buffering in between.
struct PipeOut(io::Stdout);

impl Write for PipeOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match rustix::io::write(self.0.as_fd(), buf) {
                Err(rustix::io::Errno::INTR) => continue,
                other => return other.map_err(io::Error::from),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Gives up what a worker may do, before it reads any code: it dies with the hub, dumps no core,
/// writes no file, holds at most `data_limit` of data, and may make no system call but those of
/// reading its pipe, writing its answer, managing its memory, reading its own CPU clock and
/// ending (a seccomp filter: any other call kills it).
pub fn confine(settings: &Settings) -> io::Result<()> {
    use rustix::process::{Resource, Rlimit, Signal, getppid, set_parent_process_death_signal, setrlimit};
    set_parent_process_death_signal(Some(Signal::KILL))?;
    // The hub may have gone before the signal was asked for.
    if getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(settings.parent) {
        return Err(io::Error::other("the hub that started this worker is gone"));
    }
    let none = Rlimit { current: Some(0), maximum: Some(0) };
    setrlimit(Resource::Core, none)?;
    setrlimit(Resource::Fsize, none)?;
    // The allocator has reserved its first arena by now: the limit is counted from here.
    let held = data_held()?;
    let ceiling = held.saturating_add(settings.data_limit);
    let data = Rlimit { current: Some(ceiling), maximum: Some(ceiling) };
    setrlimit(Resource::Data, data)?;
    // What the process finds out once, before the filter would forbid finding it out: the
    // clock's vDSO (read from the auxiliary vector) and the random keys of hash maps.
    let _ = crate::sandbox::thread_cpu();
    let _ = std::collections::HashMap::<u8, u8>::new();
    filter()
}

/// The bytes of the process's data (private writable mappings and the heap: what `RLIMIT_DATA`
/// counts), from `/proc/self/statm`.
fn data_held() -> io::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(5)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io::Error::other("/proc/self/statm has no data field"))?;
    Ok(pages.saturating_mul(rustix::param::page_size() as u64))
}

#[cfg(target_os = "linux")]
fn filter() -> io::Result<()> {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| io::Error::other(format!("no system-call filter for this architecture: {e}")))?;
    let allowed = [
        // The pipe.
        libc::SYS_read,
        libc::SYS_write,
        // Memory: the C library's allocator (the engine's) and the process's.
        libc::SYS_brk,
        libc::SYS_mmap,
        libc::SYS_munmap,
        libc::SYS_mremap,
        libc::SYS_madvise,
        libc::SYS_mprotect,
        // Locks of the standard library, the CPU clock of the budget, signals' plumbing.
        libc::SYS_futex,
        libc::SYS_clock_gettime,
        libc::SYS_sched_yield,
        libc::SYS_rt_sigreturn,
        libc::SYS_rt_sigprocmask,
        libc::SYS_sigaltstack,
        libc::SYS_getrandom,
        // Ending, an abort included.
        libc::SYS_exit,
        libc::SYS_exit_group,
        libc::SYS_getpid,
        libc::SYS_gettid,
        libc::SYS_tgkill,
    ];
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = allowed.into_iter().map(|s| (s, Vec::new())).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::KillProcess, SeccompAction::Allow, arch)
        .map_err(|e| io::Error::other(format!("the system-call filter: {e}")))?;
    let program: BpfProgram =
        filter.try_into().map_err(|e| io::Error::other(format!("the system-call filter: {e:?}")))?;
    seccompiler::apply_filter(&program).map_err(|e| io::Error::other(format!("the system-call filter: {e}")))
}

#[cfg(not(target_os = "linux"))]
fn filter() -> io::Result<()> {
    Err(io::Error::other("transform workers are confined with Linux's seccomp; this system has none"))
}
