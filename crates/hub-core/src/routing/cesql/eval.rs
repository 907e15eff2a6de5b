//! Evaluation: total over any event. Each node answers a value of its type; an operand's failure
//! makes its operator answer its own zero value with that error, and the operator's own casts
//! answer their value with the first cast error (see the module above).

use std::borrow::Cow;

use super::{Attributes, BinOp, ErrorKind, EvalError, Node, Type, Value, functions};

/// A failed evaluation: the value the node still answers, and the first error.
#[derive(Debug)]
pub(super) struct Fail<'a> {
    pub value: Value<'a>,
    pub error: EvalError,
}

pub(super) type Eval<'a> = Result<Value<'a>, Fail<'a>>;

/// Evaluates a child of a node of type `ty`: a failure answers that type's zero value.
fn operand<'a>(node: &'a Node, event: &'a dyn Attributes, ty: Type) -> Eval<'a> {
    eval(node, event).map_err(|f| Fail { value: ty.zero(), error: f.error })
}

/// The casts one operator makes, keeping the first that failed.
#[derive(Debug, Default)]
pub(super) struct Casts {
    error: Option<EvalError>,
}

impl Casts {
    fn fail(&mut self, kind: ErrorKind, message: impl FnOnce() -> String) {
        if self.error.is_none() {
            self.error = Some(EvalError::new(kind, message()));
        }
    }

    /// Records an error of the operator itself (a division by zero, a function's bad argument).
    pub fn error(&mut self, kind: ErrorKind, message: impl FnOnce() -> String) {
        self.fail(kind, message);
    }

    pub fn int(&mut self, v: &Value<'_>) -> i32 {
        match v {
            Value::Int(i) => *i,
            Value::Bool(b) => i32::from(*b),
            Value::Str(s) => match parse_int(s) {
                Some(i) => i,
                None => {
                    self.fail(ErrorKind::Cast, || format!("cannot cast the string {s:?} to an Integer"));
                    0
                }
            },
        }
    }

    /// An implicit cast to Boolean: an Integer does not cast implicitly.
    pub fn bool(&mut self, v: &Value<'_>) -> bool {
        match v {
            Value::Bool(b) => *b,
            Value::Str(s) => match parse_bool(s) {
                Some(b) => b,
                None => {
                    self.fail(ErrorKind::Cast, || format!("cannot cast the string {s:?} to a Boolean"));
                    false
                }
            },
            Value::Int(i) => {
                self.fail(ErrorKind::Cast, || format!("an Integer ({i}) is not a Boolean; use BOOL() to cast it"));
                false
            }
        }
    }

    /// The explicit cast `BOOL(x)`: an Integer is true unless 0.
    pub fn bool_explicit(&mut self, v: &Value<'_>) -> bool {
        match v {
            Value::Int(i) => *i != 0,
            other => self.bool(other),
        }
    }

    pub fn string<'a>(&mut self, v: Value<'a>) -> Cow<'a, str> {
        match v {
            Value::Str(s) => s,
            Value::Int(i) => Cow::Owned(i.to_string()),
            Value::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
        }
    }

    /// `v` cast to the type of `like`.
    pub fn cast_like<'a>(&mut self, v: Value<'a>, like: &Value<'_>) -> Value<'a> {
        match like {
            Value::Bool(_) => Value::Bool(self.bool(&v)),
            Value::Int(_) => Value::Int(self.int(&v)),
            Value::Str(_) => Value::Str(self.string(v)),
        }
    }

    pub fn finish(self, value: Value<'_>) -> Eval<'_> {
        match self.error {
            None => Ok(value),
            Some(error) => Err(Fail { value, error }),
        }
    }
}

/// A 32-bit base-10 integer with an optional sign, nothing else.
fn parse_int(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_bool(s: &str) -> Option<bool> {
    if s.eq_ignore_ascii_case("true") {
        Some(true)
    } else if s.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

pub(super) fn eval<'a>(node: &'a Node, event: &'a dyn Attributes) -> Eval<'a> {
    if !crate::routing::meter::spend(1) {
        return Err(Fail {
            value: Value::Bool(false),
            error: EvalError::new(ErrorKind::Budget, "the evaluation used up its budget".to_owned()),
        });
    }
    match node {
        Node::Lit(v) => Ok(match v {
            Value::Str(s) => Value::Str(Cow::Borrowed(s)),
            Value::Bool(b) => Value::Bool(*b),
            Value::Int(i) => Value::Int(*i),
        }),
        Node::Attr(name) => event.attribute(name).ok_or_else(|| Fail {
            value: Value::Bool(false),
            error: EvalError::new(ErrorKind::MissingAttribute, format!("the event has no attribute {name}")),
        }),
        Node::Exists(name) => Ok(Value::Bool(event.attribute(name).is_some())),
        Node::Not(inner) => {
            let v = operand(inner, event, Type::Bool)?;
            let mut casts = Casts::default();
            let b = casts.bool(&v);
            casts.finish(Value::Bool(!b))
        }
        Node::Neg(inner) => {
            let v = operand(inner, event, Type::Int)?;
            let mut casts = Casts::default();
            let i = casts.int(&v);
            let negated = i.checked_neg().unwrap_or_else(|| {
                casts.error(ErrorKind::Math, || format!("-({i}) does not fit in 32 bits"));
                0
            });
            casts.finish(Value::Int(negated))
        }
        Node::Binary(op, left, right) => binary(*op, left, right, event),
        Node::Like { operand: inner, pattern, negated } => {
            let v = operand(inner, event, Type::Bool)?;
            let mut casts = Casts::default();
            let s = casts.string(v);
            let matched = pattern.matches(&s);
            if crate::routing::meter::exhausted() {
                casts.error(ErrorKind::Budget, || "the evaluation used up its budget".to_owned());
            }
            casts.finish(Value::Bool(matched != *negated))
        }
        Node::In { operand: inner, set, negated } => {
            let x = operand(inner, event, Type::Bool)?;
            let mut casts = Casts::default();
            let mut found = false;
            for item in set {
                let y = operand(item, event, Type::Bool)?;
                if casts.cast_like(y, &x) == x {
                    found = true;
                    break;
                }
            }
            casts.finish(Value::Bool(found != *negated))
        }
        Node::Call { function: Some(f), args, .. } => {
            let ty = functions::result_type(*f);
            let mut values = Vec::with_capacity(args.len());
            for arg in args {
                values.push(operand(arg, event, ty)?);
            }
            functions::call(*f, values)
        }
        Node::Call { function: None, name, args, .. } => Err(Fail {
            value: Value::Bool(false),
            error: EvalError::new(
                ErrorKind::MissingFunction,
                format!("there is no function {name} taking {} argument(s)", args.len()),
            ),
        }),
    }
}

fn binary<'a>(op: BinOp, left: &'a Node, right: &'a Node, event: &'a dyn Attributes) -> Eval<'a> {
    let mut casts = Casts::default();
    match op {
        BinOp::And | BinOp::Or | BinOp::Xor => {
            let l = operand(left, event, Type::Bool)?;
            let l = casts.bool(&l);
            // AND and OR are short-circuit: the right side is not evaluated when the left decides.
            match (op, l) {
                (BinOp::And, false) => return casts.finish(Value::Bool(false)),
                (BinOp::Or, true) => return casts.finish(Value::Bool(true)),
                _ => {}
            }
            let r = operand(right, event, Type::Bool)?;
            let r = casts.bool(&r);
            let value = match op {
                BinOp::And => l && r,
                BinOp::Or => l || r,
                _ => l != r,
            };
            casts.finish(Value::Bool(value))
        }
        BinOp::Eq | BinOp::NotEq => {
            let l = operand(left, event, Type::Bool)?;
            let r = operand(right, event, Type::Bool)?;
            // `=` is defined for every type: the right operand's type chooses, the left is cast.
            let equal = casts.cast_like(l, &r) == r;
            casts.finish(Value::Bool(equal == (op == BinOp::Eq)))
        }
        BinOp::Lt | BinOp::LtEq | BinOp::Gt | BinOp::GtEq => {
            let l = operand(left, event, Type::Bool)?;
            let r = operand(right, event, Type::Bool)?;
            let (l, r) = (casts.int(&l), casts.int(&r));
            let value = match op {
                BinOp::Lt => l < r,
                BinOp::LtEq => l <= r,
                BinOp::Gt => l > r,
                _ => l >= r,
            };
            casts.finish(Value::Bool(value))
        }
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
            let l = operand(left, event, Type::Int)?;
            let r = operand(right, event, Type::Int)?;
            let (l, r) = (casts.int(&l), casts.int(&r));
            let value = match op {
                BinOp::Div | BinOp::Rem if r == 0 => {
                    casts.error(ErrorKind::Math, || "division by zero".to_owned());
                    Some(0)
                }
                BinOp::Add => l.checked_add(r),
                BinOp::Sub => l.checked_sub(r),
                BinOp::Mul => l.checked_mul(r),
                BinOp::Div => l.checked_div(r),
                _ => l.checked_rem(r),
            };
            let value = value.unwrap_or_else(|| {
                casts.error(ErrorKind::Math, || "the result does not fit in 32 bits".to_owned());
                0
            });
            casts.finish(Value::Int(value))
        }
    }
}
