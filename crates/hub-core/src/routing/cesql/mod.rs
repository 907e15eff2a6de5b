//! CloudEvents SQL (CESQL v1): expressions over an event's context attributes.
//!
//! [`Expression::parse`] builds the tree once (a subscription holds it, never the text);
//! [`Expression::evaluate`] is total over any event: every operator and function answers a value
//! of its type, with the first error that arose. Errors follow the specification's rules: an
//! operand that failed makes its operator answer the zero value of its own type (`false`, `0`,
//! `""`) with that error, and an operator's own failure (a cast, a division by zero) answers the
//! operator's value with it. As a filter an expression passes an event only when it answers
//! `true` without an error.
//!
//! The grammar is `CESQLParser.g4`'s: function calls and unary operators bind tightest, then
//! `LIKE`, `IN`, `* / %`, `+ -`, comparisons, and last `AND`, `OR`, `XOR`, which share one
//! precedence and group to the right. Keywords, function names and attribute names are
//! case-insensitive (attribute names are read in lower case).
//!
//! Bounds: an expression is at most [`MAX_EXPRESSION_CHARS`] characters and
//! [`MAX_DEPTH`] levels deep (every operator, call and parenthesis is a level).

mod eval;
mod functions;
mod lex;
mod parse;

use std::borrow::Cow;
use std::fmt;

use super::glob::Glob;

/// The longest expression accepted, in characters.
pub const MAX_EXPRESSION_CHARS: usize = 4096;
/// The deepest expression tree accepted.
pub const MAX_DEPTH: usize = 64;

/// A CESQL value. Strings borrow from the expression or the event where they can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    Bool(bool),
    Int(i32),
    Str(Cow<'a, str>),
}

impl Value<'_> {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "Boolean",
            Value::Int(_) => "Integer",
            Value::Str(_) => "String",
        }
    }

    /// The value as an owned one.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
        }
    }
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Str(s) => f.write_str(s),
        }
    }
}

/// The three primitive types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Bool,
    Int,
    Str,
}

impl Type {
    fn zero(self) -> Value<'static> {
        match self {
            Type::Bool => Value::Bool(false),
            Type::Int => Value::Int(0),
            Type::Str => Value::Str(Cow::Borrowed("")),
        }
    }

    fn of(value: &Value<'_>) -> Self {
        match value {
            Value::Bool(_) => Type::Bool,
            Value::Int(_) => Type::Int,
            Value::Str(_) => Type::Str,
        }
    }
}

/// What an expression reads of an event: its context attributes and extensions by lower-case
/// name, typed as CESQL sees them (anything that is not a Boolean or an Integer is a String).
pub trait Attributes {
    fn attribute(&self, name: &str) -> Option<Value<'_>>;
}

/// An expression that does not parse: where (the character, from 1) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {reason}")]
pub struct ParseError {
    pub position: usize,
    pub reason: String,
}

impl ParseError {
    pub(crate) fn at(position: usize, reason: impl Into<String>) -> Self {
        Self { position, reason: reason.into() }
    }
}

/// The kinds of evaluation error the specification names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Math,
    Cast,
    MissingAttribute,
    MissingFunction,
    FunctionEvaluation,
    /// The evaluation used up its budget (SPEC §10, "Filter budget"): the hub's own, not the
    /// specification's.
    Budget,
}

impl ErrorKind {
    /// The name the TCK uses.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Math => "math",
            ErrorKind::Cast => "cast",
            ErrorKind::MissingAttribute => "missingAttribute",
            ErrorKind::MissingFunction => "missingFunction",
            ErrorKind::FunctionEvaluation => "functionEvaluation",
            ErrorKind::Budget => "budget",
        }
    }
}

/// An error that arose while evaluating.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    pub kind: ErrorKind,
    pub message: String,
}

impl EvalError {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    And,
    Or,
    Xor,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// A built-in function, resolved by name and number of arguments when parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Length,
    Concat,
    ConcatWs,
    Lower,
    Upper,
    Trim,
    Left,
    Right,
    Substring,
    Abs,
    Int,
    Bool,
    String,
}

/// A parsed expression's tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Lit(Value<'static>),
    Attr(String),
    Exists(String),
    Not(Box<Node>),
    Neg(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    Like { operand: Box<Node>, pattern: Glob, negated: bool },
    In { operand: Box<Node>, set: Vec<Node>, negated: bool },
    Call { function: Option<Builtin>, name: String, args: Vec<Node>, at: usize },
}

impl Node {
    /// The type the node answers, as far as it is known before evaluation (an attribute's is
    /// not: the specification then takes Boolean).
    fn result_type(&self) -> Type {
        match self {
            Node::Lit(v) => Type::of(v),
            Node::Attr(_) | Node::Exists(_) | Node::Not(_) | Node::Like { .. } | Node::In { .. } => Type::Bool,
            Node::Neg(_) => Type::Int,
            Node::Binary(op, ..) => match op {
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => Type::Int,
                _ => Type::Bool,
            },
            Node::Call { function, .. } => function.map_or(Type::Bool, functions::result_type),
        }
    }
}

/// A parsed CESQL expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expression {
    root: Node,
}

/// A function the expression calls that the hub does not have: a call that can only fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFunction {
    pub name: String,
    pub arity: usize,
    pub position: usize,
}

impl Expression {
    /// Parses an expression, within the bounds above.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        parse::parse(text).map(|root| Self { root })
    }

    /// Evaluates it against an event: the value, and the first error that arose.
    pub fn evaluate<'a>(&'a self, event: &'a dyn Attributes) -> (Value<'a>, Option<EvalError>) {
        match eval::eval(&self.root, event) {
            Ok(v) => (v, None),
            Err(fail) => (fail.value, Some(fail.error)),
        }
    }

    /// Whether it passes the event as a filter: `true`, without an error.
    pub fn passes(&self, event: &dyn Attributes) -> bool {
        matches!(eval::eval(&self.root, event), Ok(Value::Bool(true)))
    }

    /// The type of its value when it is known before evaluation (a bare attribute's is not).
    pub fn static_type(&self) -> Option<Type> {
        match self.root {
            Node::Attr(_) => None,
            ref other => Some(other.result_type()),
        }
    }

    /// The calls of functions the hub does not have, first to last.
    pub fn unknown_functions(&self) -> Vec<UnknownFunction> {
        let mut out = Vec::new();
        let mut stack = vec![&self.root];
        while let Some(node) = stack.pop() {
            match node {
                Node::Lit(_) | Node::Attr(_) | Node::Exists(_) => {}
                Node::Not(n) | Node::Neg(n) | Node::Like { operand: n, .. } => stack.push(n),
                Node::Binary(_, l, r) => {
                    stack.push(l);
                    stack.push(r);
                }
                Node::In { operand, set, .. } => {
                    stack.push(operand);
                    stack.extend(set);
                }
                Node::Call { function, name, args, at } => {
                    if function.is_none() {
                        out.push(UnknownFunction { name: name.clone(), arity: args.len(), position: *at });
                    }
                    stack.extend(args);
                }
            }
        }
        out.sort_by_key(|f| f.position);
        out
    }
}

#[cfg(test)]
mod tests;
