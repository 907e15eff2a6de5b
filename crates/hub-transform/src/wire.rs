//! What the pool and a worker say over the worker's pipes: frames of a little-endian `u32` length
//! and that many bytes, the first of which names the message. Strings and bytes inside a frame are
//! a `u32` length and the bytes; numbers are little-endian `u64`. Every answer of a worker's starts
//! with its CPU time (what the pool counts the next run from). Both ends bound what they read, and
//! the pool reads a worker's frames as a third party's: any bytes give an answer or an error.

use std::io::{self, Read, Write};
use std::time::Duration;

use crate::{Answer, CompileError, Failure, Limits, Output, Run};

/// The largest request a worker reads: the code and an event (events are bounded well below).
pub const MAX_REQUEST: usize = 80 << 20;

/// A request to a worker, borrowing what it carries (nothing is copied to send it but into its
/// frame, nor to read it but out of its frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request<'a> {
    /// Run the code kept under `key` on `input`; `code` is sent when the worker asked for it.
    Run { key: [u8; 32], code: Option<&'a str>, input: &'a str, limits: Limits },
    /// Run `code` once on `input` in a runtime kept by nothing.
    Once { code: &'a str, input: &'a str, limits: Limits },
    /// Compile `code` and run its top level, as before a first event.
    Check { code: &'a str, limits: Limits },
}

/// A worker's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A new worker is confined and reads requests (its first frame).
    Ready,
    /// The code of a `Run` is not kept here: send it again with its code.
    NeedCode,
    /// What the run gave.
    Ran(Run),
    /// What a check found.
    Checked(Result<(), CompileError>),
}

const RUN: u8 = b'R';
const ONCE: u8 = b'O';
const CHECK: u8 = b'C';
const READY: u8 = b'Y';
const NEED_CODE: u8 = b'N';
const RAN: u8 = b'A';
const CHECKED: u8 = b'K';

/// Writes one whole frame (as [`Request::frame`] and [`Reply::frame`] make them).
pub fn write_frame(out: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    out.write_all(frame)?;
    out.flush()
}

/// Reads one frame's body of at most `max` bytes; `None` at the end of the stream before a frame.
pub fn read_frame(input: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = usize::try_from(u32::from_le_bytes(len)).unwrap_or(usize::MAX);
    if len > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes is over {max}")));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body)?;
    Ok(Some(body))
}

/// A frame being written at the end of a buffer: its length is filled in when it is done.
struct Out<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Out<'a> {
    fn at_end_of(buf: &'a mut Vec<u8>) -> Self {
        let start = buf.len();
        buf.extend_from_slice(&[0; 4]);
        Self { buf, start }
    }
    /// The frame is whole: its length first.
    fn finish(self) {
        // Frames are bounded well below 4 GiB (a request by MAX_REQUEST, an answer by the
        // run's memory limit).
        let len = u32::try_from(self.buf.len() - self.start - 4).unwrap_or(u32::MAX);
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_le_bytes());
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Every field is bounded well below 4 GiB by the frame's own bound.
        self.buf.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes());
        self.buf.extend_from_slice(v);
        self
    }
    fn limits(&mut self, l: &Limits) -> &mut Self {
        self.u64(u64::try_from(l.cpu.as_micros()).unwrap_or(u64::MAX)).u64(l.memory as u64)
    }
    fn position(&mut self, v: Option<u32>) -> &mut Self {
        self.u64(v.map_or(u64::MAX, u64::from))
    }
}

/// A frame being read; any shortfall is an error naming what was cut.
struct In<'a>(&'a [u8]);

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed frame: {what}"))
}

impl<'a> In<'a> {
    fn u8(&mut self) -> io::Result<u8> {
        let (&v, rest) = self.0.split_first().ok_or_else(|| malformed("cut short"))?;
        self.0 = rest;
        Ok(v)
    }
    fn u64(&mut self) -> io::Result<u64> {
        let (v, rest) = self.0.split_first_chunk::<8>().ok_or_else(|| malformed("cut short"))?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*v))
    }
    fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let (len, rest) = self.0.split_first_chunk::<4>().ok_or_else(|| malformed("cut short"))?;
        let len = usize::try_from(u32::from_le_bytes(*len)).unwrap_or(usize::MAX);
        if rest.len() < len {
            return Err(malformed("a field longer than its frame"));
        }
        let (v, rest) = rest.split_at(len);
        self.0 = rest;
        Ok(v)
    }
    fn str(&mut self) -> io::Result<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| malformed("text that is not UTF-8"))
    }
    fn string(&mut self) -> io::Result<String> {
        self.str().map(str::to_owned)
    }
    fn limits(&mut self) -> io::Result<Limits> {
        let cpu = Duration::from_micros(self.u64()?);
        let memory = usize::try_from(self.u64()?).unwrap_or(usize::MAX);
        Ok(Limits { cpu, memory })
    }
    fn position(&mut self) -> io::Result<Option<u32>> {
        Ok(u32::try_from(self.u64()?).ok())
    }
    fn end(&self) -> io::Result<()> {
        if self.0.is_empty() { Ok(()) } else { Err(malformed("bytes after its end")) }
    }
}

impl<'a> Request<'a> {
    /// The request as a whole frame.
    pub fn frame(&self) -> Vec<u8> {
        let mut frame = Vec::new();
        self.write_to(&mut frame);
        frame
    }

    /// Appends the request, a whole frame, to `out` (several requests go in one write).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let mut o = Out::at_end_of(out);
        match *self {
            Self::Run { key, code, input, limits } => {
                o.u8(RUN).bytes(&key).limits(&limits).bytes(input.as_bytes());
                if let Some(code) = code {
                    o.bytes(code.as_bytes());
                }
            }
            Self::Once { code, input, limits } => {
                o.u8(ONCE).limits(&limits).bytes(code.as_bytes()).bytes(input.as_bytes());
            }
            Self::Check { code, limits } => {
                o.u8(CHECK).limits(&limits).bytes(code.as_bytes());
            }
        }
        o.finish();
    }

    /// A request from a frame's body.
    pub fn decode(body: &'a [u8]) -> io::Result<Self> {
        let mut i = In(body);
        let request = match i.u8()? {
            RUN => {
                let key: [u8; 32] = i.bytes()?.try_into().map_err(|_| malformed("a key not of 32 bytes"))?;
                let limits = i.limits()?;
                let input = i.str()?;
                let code = if i.0.is_empty() { None } else { Some(i.str()?) };
                Self::Run { key, code, input, limits }
            }
            ONCE => {
                let limits = i.limits()?;
                Self::Once { code: i.str()?, input: i.str()?, limits }
            }
            CHECK => {
                let limits = i.limits()?;
                Self::Check { code: i.str()?, limits }
            }
            other => return Err(malformed(&format!("unknown request {other}"))),
        };
        i.end()?;
        Ok(request)
    }
}

const EVENT: u8 = 0;
const SKIP: u8 = 1;
const THROWN: u8 = 2;
const CPU: u8 = 3;
const MEMORY: u8 = 4;
const INVALID: u8 = 5;
const COMPILE: u8 = 6;
const WORKER: u8 = 7;
const STOPPED: u8 = 8;

impl Reply {
    /// The answer as a whole frame, with the worker's CPU time so far.
    pub fn frame(&self, cpu: Duration) -> Vec<u8> {
        let mut frame = Vec::new();
        let mut o = Out::at_end_of(&mut frame);
        o.u64(u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX));
        match self {
            Self::Ready => {
                o.u8(READY);
            }
            Self::NeedCode => {
                o.u8(NEED_CODE);
            }
            Self::Ran(run) => {
                o.u8(RAN).u64(u64::try_from(run.duration.as_micros()).unwrap_or(u64::MAX)).u8(u8::from(run.again));
                match &run.output {
                    Ok(Output::Event(answer)) => {
                        o.u8(EVENT).bytes(answer.text().as_bytes());
                    }
                    Ok(Output::Skip) => {
                        o.u8(SKIP);
                    }
                    Err(failure) => encode_failure(&mut o, failure),
                }
                o.u64(run.logs.len() as u64);
                for line in &run.logs {
                    o.bytes(line.as_bytes());
                }
            }
            Self::Checked(checked) => {
                o.u8(CHECKED);
                match checked {
                    Ok(()) => o.u8(0),
                    Err(e) => o.u8(1).bytes(e.message.as_bytes()).position(e.line).position(e.column),
                };
            }
        }
        o.finish();
        frame
    }

    /// The worker's CPU time and its answer, from a frame's body.
    pub fn decode(body: &[u8]) -> io::Result<(Duration, Self)> {
        let mut i = In(body);
        let cpu = Duration::from_nanos(i.u64()?);
        let reply = match i.u8()? {
            READY => Self::Ready,
            NEED_CODE => Self::NeedCode,
            RAN => {
                let duration = Duration::from_micros(i.u64()?);
                let again = match i.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(malformed("a run's second try is said by 0 or 1")),
                };
                let output = match i.u8()? {
                    EVENT => Ok(Output::Event(Answer::from_text(i.string()?))),
                    SKIP => Ok(Output::Skip),
                    kind => Err(decode_failure(kind, &mut i)?),
                };
                let count = i.u64()?;
                if count > crate::MAX_LOG_LINES as u64 {
                    return Err(malformed("more log lines than a run keeps"));
                }
                let logs = (0..count).map(|_| i.string()).collect::<io::Result<Vec<_>>>()?;
                Self::Ran(Run { output, logs, duration, again })
            }
            CHECKED => Self::Checked(match i.u8()? {
                0 => Ok(()),
                _ => Err(CompileError { message: i.string()?, line: i.position()?, column: i.position()? }),
            }),
            other => return Err(malformed(&format!("unknown reply {other}"))),
        };
        i.end()?;
        Ok((cpu, reply))
    }
}

fn encode_failure(o: &mut Out, failure: &Failure) {
    match failure {
        Failure::Thrown(m) => o.u8(THROWN).bytes(m.as_bytes()),
        Failure::Cpu(ms) => o.u8(CPU).u64(u64::try_from(*ms).unwrap_or(u64::MAX)),
        Failure::Memory(bytes) => o.u8(MEMORY).u64(*bytes as u64),
        Failure::Invalid(m) => o.u8(INVALID).bytes(m.as_bytes()),
        Failure::Compile(e) => o.u8(COMPILE).bytes(e.message.as_bytes()).position(e.line).position(e.column),
        Failure::Worker(m) => o.u8(WORKER).bytes(m.as_bytes()),
        Failure::Stopped => o.u8(STOPPED),
    };
}

fn decode_failure(kind: u8, i: &mut In<'_>) -> io::Result<Failure> {
    Ok(match kind {
        THROWN => Failure::Thrown(i.string()?),
        CPU => Failure::Cpu(u128::from(i.u64()?)),
        MEMORY => Failure::Memory(usize::try_from(i.u64()?).unwrap_or(usize::MAX)),
        INVALID => Failure::Invalid(i.string()?),
        COMPILE => Failure::Compile(CompileError { message: i.string()?, line: i.position()?, column: i.position()? }),
        WORKER => Failure::Worker(i.string()?),
        STOPPED => Failure::Stopped,
        other => return Err(malformed(&format!("unknown outcome {other}"))),
    })
}
