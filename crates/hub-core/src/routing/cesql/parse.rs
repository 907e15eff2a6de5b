//! The CESQL parser: precedence climbing over the tokens, with the grammar's precedence table
//! (see the module above). Both the recursion and the tree's depth are bounded by [`MAX_DEPTH`],
//! so no input can exhaust the stack here or when the tree is evaluated.

use super::lex::{Kind, Token, tokens};
use super::{BinOp, Glob, MAX_DEPTH, MAX_EXPRESSION_CHARS, Node, ParseError, Value, functions};

/// Binding powers: higher binds tighter.
const LOGIC: u8 = 1;
const COMPARE: u8 = 2;
const ADD: u8 = 3;
const MUL: u8 = 4;
const IN: u8 = 5;
const LIKE: u8 = 6;
const PREFIX: u8 = 7;

pub(super) fn parse(text: &str) -> Result<Node, ParseError> {
    let chars = text.chars().count();
    if chars > MAX_EXPRESSION_CHARS {
        return Err(ParseError::at(
            MAX_EXPRESSION_CHARS + 1,
            format!("the expression is longer than {MAX_EXPRESSION_CHARS} characters"),
        ));
    }
    let tokens = tokens(text)?;
    let mut parser = Parser { tokens, pos: 0, end: chars + 1 };
    if parser.tokens.is_empty() {
        return Err(ParseError::at(1, "the expression is empty"));
    }
    let (node, _) = parser.expression(0, 1)?;
    match parser.peek() {
        None => Ok(node),
        Some(t) => Err(ParseError::at(t.at, format!("unexpected {} after a complete expression", t.kind.describe()))),
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    /// The position just past the text, for errors at its end.
    end: usize,
}

fn keyword(kind: &Kind, word: &str) -> bool {
    matches!(kind, Kind::Word(w) if w.eq_ignore_ascii_case(word))
}

const KEYWORDS: [&str; 9] = ["AND", "OR", "XOR", "NOT", "LIKE", "EXISTS", "IN", "TRUE", "FALSE"];

fn is_keyword(word: &str) -> bool {
    KEYWORDS.iter().any(|k| word.eq_ignore_ascii_case(k))
}

/// A CloudEvents attribute name as an expression names it: letters and digits, read in lower case.
fn identifier(word: &str) -> Option<String> {
    let valid = !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric())
        && !word.chars().all(|c| c.is_ascii_digit())
        && !is_keyword(word);
    valid.then(|| word.to_ascii_lowercase())
}

fn digits(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| c.is_ascii_digit())
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn peek_kind(&self, ahead: usize) -> Option<&Kind> {
        self.tokens.get(self.pos + ahead).map(|t| &t.kind)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn here(&self) -> usize {
        self.peek().map_or(self.end, |t| t.at)
    }

    fn unexpected(&self, wanted: &str) -> ParseError {
        match self.peek() {
            Some(t) => ParseError::at(t.at, format!("expected {wanted}, found {}", t.kind.describe())),
            None => ParseError::at(self.end, format!("expected {wanted}, found the end of the expression")),
        }
    }

    fn expect(&mut self, kind: &Kind, wanted: &str) -> Result<(), ParseError> {
        if self.peek_kind(0) == Some(kind) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    fn deeper(&self, level: usize, depth: usize) -> Result<(), ParseError> {
        if level > MAX_DEPTH || depth > MAX_DEPTH {
            Err(ParseError::at(self.here(), format!("the expression nests deeper than {MAX_DEPTH} levels")))
        } else {
            Ok(())
        }
    }

    /// An expression whose operators all bind at least as tight as `min`; `level` is the
    /// recursion depth. Answers the node and its depth.
    fn expression(&mut self, min: u8, level: usize) -> Result<(Node, usize), ParseError> {
        self.deeper(level, 0)?;
        let (mut lhs, mut depth) = self.prefix(level)?;
        while let Some(kind) = self.peek_kind(0).cloned() {
            let negated = keyword(&kind, "NOT");
            let op_kind = if negated { self.peek_kind(1).cloned() } else { Some(kind.clone()) };
            let Some(op_kind) = op_kind else { break };
            if keyword(&op_kind, "LIKE") {
                if LIKE < min {
                    break;
                }
                self.pos += if negated { 2 } else { 1 };
                let at = self.here();
                let pattern = match self.next() {
                    Some(Token { kind: Kind::Str(s), .. }) => Glob::like(&s),
                    _ => return Err(ParseError::at(at, "LIKE needs a string literal as its pattern")),
                };
                depth += 1;
                self.deeper(level, depth)?;
                lhs = Node::Like { operand: Box::new(lhs), pattern, negated };
                continue;
            }
            if keyword(&op_kind, "IN") {
                if IN < min {
                    break;
                }
                self.pos += if negated { 2 } else { 1 };
                let (set, set_depth) = self.list(level, false)?;
                depth = depth.max(set_depth) + 1;
                self.deeper(level, depth)?;
                lhs = Node::In { operand: Box::new(lhs), set, negated };
                continue;
            }
            if negated {
                return Err(ParseError::at(self.here(), "NOT here must be followed by LIKE or IN"));
            }
            let Some((op, power)) = binary(&kind) else {
                if matches!(kind, Kind::RParen | Kind::Comma) {
                    break;
                }
                return Err(self.unexpected("an operator"));
            };
            if power < min {
                break;
            }
            self.pos += 1;
            // AND, OR and XOR group to the right; the others to the left.
            let next_min = if power == LOGIC { power } else { power + 1 };
            let (rhs, rhs_depth) = self.expression(next_min, level + 1)?;
            depth = depth.max(rhs_depth) + 1;
            self.deeper(level, depth)?;
            lhs = Node::Binary(op, Box::new(lhs), Box::new(rhs));
        }
        Ok((lhs, depth))
    }

    fn prefix(&mut self, level: usize) -> Result<(Node, usize), ParseError> {
        let Some(token) = self.next() else {
            self.pos -= 1;
            return Err(self.unexpected("an expression"));
        };
        match token.kind {
            Kind::Word(ref w) if w.eq_ignore_ascii_case("NOT") => {
                let (operand, depth) = self.expression(PREFIX, level + 1)?;
                Ok((Node::Not(Box::new(operand)), depth + 1))
            }
            Kind::Minus | Kind::Plus => {
                let negative = token.kind == Kind::Minus;
                if let Some(Kind::Word(w)) = self.peek_kind(0).cloned()
                    && digits(&w)
                {
                    let at = self.here();
                    self.pos += 1;
                    return integer(&w, negative, token.at.min(at)).map(|v| (Node::Lit(v), 1));
                }
                if !negative {
                    return Err(ParseError::at(token.at, "'+' must be followed by digits"));
                }
                let (operand, depth) = self.expression(PREFIX, level + 1)?;
                Ok((Node::Neg(Box::new(operand)), depth + 1))
            }
            Kind::LParen => {
                let (inner, depth) = self.expression(0, level + 1)?;
                self.expect(&Kind::RParen, "')'")?;
                Ok((inner, depth))
            }
            Kind::Str(s) => Ok((Node::Lit(Value::Str(s.into())), 1)),
            Kind::Word(w) => self.word(w, token.at, level),
            _ => {
                self.pos -= 1;
                Err(self.unexpected("an expression"))
            }
        }
    }

    fn word(&mut self, w: String, at: usize, level: usize) -> Result<(Node, usize), ParseError> {
        if w.eq_ignore_ascii_case("TRUE") || w.eq_ignore_ascii_case("FALSE") {
            return Ok((Node::Lit(Value::Bool(w.eq_ignore_ascii_case("TRUE"))), 1));
        }
        if w.eq_ignore_ascii_case("EXISTS") {
            let here = self.here();
            return match self.next() {
                Some(Token { kind: Kind::Word(name), .. }) => match identifier(&name) {
                    Some(name) => Ok((Node::Exists(name), 1)),
                    None => Err(ParseError::at(here, format!("'{name}' is not an attribute name"))),
                },
                _ => Err(ParseError::at(here, "EXISTS needs an attribute name")),
            };
        }
        if digits(&w) {
            return integer(&w, false, at).map(|v| (Node::Lit(v), 1));
        }
        if self.peek_kind(0) == Some(&Kind::LParen) {
            let valid = w.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && w.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
                && !is_keyword(&w);
            if !valid {
                return Err(ParseError::at(at, format!("'{w}' is not a function name")));
            }
            self.pos += 1;
            let (args, depth) = self.list(level, true)?;
            let name = w.to_ascii_uppercase();
            let function = functions::resolve(&name, args.len());
            return Ok((Node::Call { function, name, args, at }, depth + 1));
        }
        match identifier(&w) {
            Some(name) => Ok((Node::Attr(name), 1)),
            None if is_keyword(&w) => Err(ParseError::at(at, format!("unexpected keyword {}", w.to_ascii_uppercase()))),
            None => Err(ParseError::at(at, format!("'{w}' is not an attribute name (letters and digits only)"))),
        }
    }

    /// A parenthesised, comma-separated list (its `(` already read unless `opened`); an `IN` set
    /// may not be empty, a function's arguments may.
    fn list(&mut self, level: usize, opened: bool) -> Result<(Vec<Node>, usize), ParseError> {
        if !opened {
            self.expect(&Kind::LParen, "'(' opening the IN set")?;
        }
        let mut items = Vec::new();
        let mut depth = 0;
        if opened && self.peek_kind(0) == Some(&Kind::RParen) {
            self.pos += 1;
            return Ok((items, depth));
        }
        loop {
            let (item, d) = self.expression(0, level + 1)?;
            depth = depth.max(d);
            items.push(item);
            match self.peek_kind(0) {
                Some(Kind::Comma) => self.pos += 1,
                Some(Kind::RParen) => {
                    self.pos += 1;
                    return Ok((items, depth));
                }
                _ => return Err(self.unexpected("',' or ')'")),
            }
        }
    }
}

fn binary(kind: &Kind) -> Option<(BinOp, u8)> {
    Some(match kind {
        Kind::Word(w) if w.eq_ignore_ascii_case("AND") => (BinOp::And, LOGIC),
        Kind::Word(w) if w.eq_ignore_ascii_case("OR") => (BinOp::Or, LOGIC),
        Kind::Word(w) if w.eq_ignore_ascii_case("XOR") => (BinOp::Xor, LOGIC),
        Kind::Eq => (BinOp::Eq, COMPARE),
        Kind::NotEq => (BinOp::NotEq, COMPARE),
        Kind::Lt => (BinOp::Lt, COMPARE),
        Kind::LtEq => (BinOp::LtEq, COMPARE),
        Kind::Gt => (BinOp::Gt, COMPARE),
        Kind::GtEq => (BinOp::GtEq, COMPARE),
        Kind::Plus => (BinOp::Add, ADD),
        Kind::Minus => (BinOp::Sub, ADD),
        Kind::Star => (BinOp::Mul, MUL),
        Kind::Slash => (BinOp::Div, MUL),
        Kind::Percent => (BinOp::Rem, MUL),
        _ => return None,
    })
}

/// An integer literal, which must fit 32 bits with its sign.
fn integer(digits: &str, negative: bool, at: usize) -> Result<Value<'static>, ParseError> {
    let out_of_range = || ParseError::at(at, "an integer literal must fit in 32 bits (-2147483648 to 2147483647)");
    let significant = digits.trim_start_matches('0');
    if significant.len() > 10 {
        return Err(out_of_range());
    }
    let magnitude: i64 = if significant.is_empty() { 0 } else { significant.parse().map_err(|_| out_of_range())? };
    let value = if negative { -magnitude } else { magnitude };
    i32::try_from(value).map(Value::Int).map_err(|_| out_of_range())
}
