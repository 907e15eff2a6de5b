//! The built-in functions of CESQL v1, resolved by name and number of arguments when an
//! expression is parsed. Each casts its arguments to its parameter types and always answers a
//! value of its result type, with an error when an argument is out of its domain.

use std::borrow::Cow;

use super::eval::{Casts, Eval};
use super::{Builtin, ErrorKind, Type, Value};
use crate::routing::meter::{self, MAX_BUILT};

/// Charges the evaluation's budget for reading `bytes`: `None` (with the error) once it is gone.
fn read(casts: &mut Casts, bytes: usize) -> Option<()> {
    if meter::spend_bytes(bytes) {
        return Some(());
    }
    casts.error(ErrorKind::Budget, || "the evaluation used up its budget".to_owned());
    None
}

/// Charges for building `adding` more bytes onto a result that will then be `total` bytes long,
/// refusing a result longer than [`MAX_BUILT`] before anything is built.
fn build(casts: &mut Casts, adding: usize, total: usize) -> Option<()> {
    if total > MAX_BUILT {
        casts.error(ErrorKind::FunctionEvaluation, || {
            format!("the result would be {total} bytes; a function builds at most {MAX_BUILT}")
        });
        return None;
    }
    read(casts, adding)
}

/// The function `name` (upper case) taking `arity` arguments, if there is one.
pub(super) fn resolve(name: &str, arity: usize) -> Option<Builtin> {
    Some(match (name, arity) {
        ("LENGTH", 1) => Builtin::Length,
        ("CONCAT", _) => Builtin::Concat,
        ("CONCAT_WS", n) if n >= 1 => Builtin::ConcatWs,
        ("LOWER", 1) => Builtin::Lower,
        ("UPPER", 1) => Builtin::Upper,
        ("TRIM", 1) => Builtin::Trim,
        ("LEFT", 2) => Builtin::Left,
        ("RIGHT", 2) => Builtin::Right,
        ("SUBSTRING", 2 | 3) => Builtin::Substring,
        ("ABS", 1) => Builtin::Abs,
        ("INT", 1) => Builtin::Int,
        ("BOOL", 1) => Builtin::Bool,
        ("STRING", 1) => Builtin::String,
        _ => return None,
    })
}

pub(super) fn result_type(f: Builtin) -> Type {
    match f {
        Builtin::Length | Builtin::Abs | Builtin::Int => Type::Int,
        Builtin::Bool => Type::Bool,
        _ => Type::Str,
    }
}

fn chars(s: &str) -> i64 {
    i64::try_from(s.chars().count()).unwrap_or(i64::MAX)
}

/// The characters of `s` from `start` (0-based), at most `len` of them.
fn slice<'a>(s: Cow<'a, str>, start: usize, len: usize) -> Cow<'a, str> {
    if start == 0 && len >= s.chars().count() {
        return s;
    }
    Cow::Owned(s.chars().skip(start).take(len).collect())
}

pub(super) fn call(f: Builtin, args: Vec<Value<'_>>) -> Eval<'_> {
    let mut casts = Casts::default();
    let count = args.len();
    let mut args = args.into_iter();
    let mut next = move || args.next().unwrap_or(Value::Bool(false));
    let value = match f {
        Builtin::Length => {
            let s = casts.string(next());
            match read(&mut casts, s.len()) {
                Some(()) => Value::Int(i32::try_from(chars(&s)).unwrap_or(i32::MAX)),
                None => Value::Int(0),
            }
        }
        Builtin::Concat | Builtin::ConcatWs => {
            let separator = (f == Builtin::ConcatWs).then(|| casts.string(next()).into_owned());
            let parts = count - usize::from(separator.is_some());
            let mut out = String::new();
            let mut within = true;
            for i in 0..parts {
                let part = casts.string(next());
                let sep = separator.as_deref().filter(|_| i > 0).unwrap_or("");
                // Charged before it is built: a huge result is refused, never allocated.
                let adding = sep.len() + part.len();
                if within && build(&mut casts, adding, out.len() + adding).is_none() {
                    within = false;
                }
                if within {
                    out.push_str(sep);
                    out.push_str(&part);
                }
            }
            if !within {
                out.clear();
            }
            Value::Str(Cow::Owned(out))
        }
        Builtin::Lower | Builtin::Upper => {
            let s = casts.string(next());
            // A case change may grow a string (up to three times, for some characters).
            let grown = s.len().saturating_mul(3);
            match build(&mut casts, grown, grown) {
                Some(()) if f == Builtin::Lower => Value::Str(Cow::Owned(s.to_lowercase())),
                Some(()) => Value::Str(Cow::Owned(s.to_uppercase())),
                None => Value::Str(Cow::Borrowed("")),
            }
        }
        Builtin::Trim => Value::Str(match casts.string(next()) {
            Cow::Borrowed(b) => Cow::Borrowed(b.trim()),
            Cow::Owned(o) => Cow::Owned(o.trim().to_owned()),
        }),
        Builtin::Left | Builtin::Right => {
            let s = casts.string(next());
            let n = casts.int(&next());
            if read(&mut casts, s.len()).is_none() {
                Value::Str(Cow::Borrowed(""))
            } else if n < 0 {
                casts.error(ErrorKind::FunctionEvaluation, || format!("the length {n} is negative"));
                Value::Str(s)
            } else {
                let total = s.chars().count();
                let n = usize::try_from(n).unwrap_or(usize::MAX).min(total);
                let start = if f == Builtin::Left { 0 } else { total - n };
                Value::Str(slice(s, start, n))
            }
        }
        Builtin::Substring => {
            let s = casts.string(next());
            let pos = i64::from(casts.int(&next()));
            let len = (count == 3).then(|| casts.int(&next()));
            let total = chars(&s);
            if read(&mut casts, s.len()).is_none() {
                Value::Str(Cow::Borrowed(""))
            } else if pos > total || pos < -total {
                casts.error(ErrorKind::FunctionEvaluation, || {
                    format!("the position {pos} is outside a string of {total} characters")
                });
                Value::Str(Cow::Borrowed(""))
            } else if let Some(l) = len.filter(|l| *l < 0) {
                casts.error(ErrorKind::FunctionEvaluation, || format!("the length {l} is negative"));
                Value::Str(Cow::Borrowed(""))
            } else if pos == 0 {
                Value::Str(Cow::Borrowed(""))
            } else {
                let start = if pos > 0 { pos - 1 } else { total + pos };
                let take = len.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(0));
                Value::Str(slice(s, usize::try_from(start).unwrap_or(0), take))
            }
        }
        Builtin::Abs => {
            let i = casts.int(&next());
            Value::Int(i.checked_abs().unwrap_or_else(|| {
                casts.error(ErrorKind::Math, || format!("ABS({i}) does not fit in 32 bits"));
                i32::MAX
            }))
        }
        Builtin::Int => Value::Int(casts.int(&next())),
        Builtin::Bool => Value::Bool(casts.bool_explicit(&next())),
        Builtin::String => Value::Str(casts.string(next())),
    };
    casts.finish(value)
}
