//! CESQL tokens: the lexer of the CloudEvents SQL grammar (`CESQLLexer.g4`).
//!
//! Keywords are case-insensitive; a run of letters, digits and underscores is one word, told
//! apart as keyword, integer, identifier or function name by the parser. String literals are
//! single- or double-quoted: the quote is escaped by a backslash (or doubled), and every other
//! backslash pair is kept as written, so a `LIKE` pattern still sees its `\%` and `\_`. Positions
//! are counted in characters from 1, as a person reading the expression counts them.

use super::ParseError;

/// One token and the character position where it starts (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub at: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A run of `[A-Za-z0-9_]`: a keyword, an unsigned integer, an identifier or a function name.
    Word(String),
    Str(String),
    LParen,
    RParen,
    Comma,
    Star,
    Slash,
    Percent,
    Plus,
    Minus,
    Eq,
    NotEq,
    Lt,
    LtEq,
    Gt,
    GtEq,
}

impl Kind {
    /// How the token reads in an error message.
    pub fn describe(&self) -> String {
        match self {
            Kind::Word(w) => format!("'{w}'"),
            Kind::Str(_) => "a string literal".to_owned(),
            Kind::LParen => "'('".to_owned(),
            Kind::RParen => "')'".to_owned(),
            Kind::Comma => "','".to_owned(),
            Kind::Star => "'*'".to_owned(),
            Kind::Slash => "'/'".to_owned(),
            Kind::Percent => "'%'".to_owned(),
            Kind::Plus => "'+'".to_owned(),
            Kind::Minus => "'-'".to_owned(),
            Kind::Eq => "'='".to_owned(),
            Kind::NotEq => "'!='".to_owned(),
            Kind::Lt => "'<'".to_owned(),
            Kind::LtEq => "'<='".to_owned(),
            Kind::Gt => "'>'".to_owned(),
            Kind::GtEq => "'>='".to_owned(),
        }
    }
}

/// The tokens of `text`, or the first character that cannot start one.
pub(crate) fn tokens(text: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let at = i + 1;
        let next = chars.get(i + 1).copied();
        let (kind, len) = match c {
            ' ' | '\t' | '\r' | '\n' => {
                i += 1;
                continue;
            }
            '(' => (Kind::LParen, 1),
            ')' => (Kind::RParen, 1),
            ',' => (Kind::Comma, 1),
            '*' => (Kind::Star, 1),
            '/' => (Kind::Slash, 1),
            '%' => (Kind::Percent, 1),
            '+' => (Kind::Plus, 1),
            '-' => (Kind::Minus, 1),
            '=' => (Kind::Eq, 1),
            '!' if next == Some('=') => (Kind::NotEq, 2),
            '<' if next == Some('>') => (Kind::NotEq, 2),
            '<' if next == Some('=') => (Kind::LtEq, 2),
            '<' => (Kind::Lt, 1),
            '>' if next == Some('=') => (Kind::GtEq, 2),
            '>' => (Kind::Gt, 1),
            '\'' | '"' => {
                let (s, len) = string(&chars, i)?;
                (Kind::Str(s), len)
            }
            c if c.is_ascii_alphanumeric() || c == '_' => {
                let len = chars[i..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').count();
                (Kind::Word(chars[i..i + len].iter().collect()), len)
            }
            other => {
                return Err(ParseError::at(at, format!("unexpected character {other:?}")));
            }
        };
        out.push(Token { kind, at });
        i += len;
    }
    Ok(out)
}

/// The string literal opening at `start`: its value and how many characters it took.
fn string(chars: &[char], start: usize) -> Result<(String, usize), ParseError> {
    let quote = chars[start];
    let mut value = String::new();
    let mut i = start + 1;
    loop {
        match (chars.get(i).copied(), chars.get(i + 1).copied()) {
            (None, _) | (Some('\\'), None) => {
                return Err(ParseError::at(start + 1, "unterminated string literal"));
            }
            (Some('\\'), Some(c)) if c == quote => {
                value.push(quote);
                i += 2;
            }
            (Some('\\'), Some(c)) => {
                value.push('\\');
                value.push(c);
                i += 2;
            }
            (Some(c), Some(d)) if c == quote && d == quote => {
                value.push(quote);
                i += 2;
            }
            (Some(c), _) if c == quote => return Ok((value, i + 1 - start)),
            (Some(c), _) => {
                value.push(c);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Kind> {
        tokens(text).expect("tokens").into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn operators_and_words() {
        assert_eq!(
            kinds("a<>b != c<=1>=2"),
            vec![
                Kind::Word("a".into()),
                Kind::NotEq,
                Kind::Word("b".into()),
                Kind::NotEq,
                Kind::Word("c".into()),
                Kind::LtEq,
                Kind::Word("1".into()),
                Kind::GtEq,
                Kind::Word("2".into()),
            ]
        );
    }

    #[test]
    fn string_escapes_keep_other_backslashes() {
        assert_eq!(kinds(r#"'a"b\'c'"#), vec![Kind::Str("a\"b'c".into())]);
        assert_eq!(kinds(r#""a'b\"c""#), vec![Kind::Str("a'b\"c".into())]);
        assert_eq!(kinds(r"'a\%b'"), vec![Kind::Str(r"a\%b".into())]);
        assert_eq!(kinds("'it''s'"), vec![Kind::Str("it's".into())]);
    }

    #[test]
    fn errors_name_the_position() {
        let e = tokens("a = 'open").expect_err("unterminated");
        assert_eq!(e.position, 5);
        let e = tokens("a # b").expect_err("character");
        assert_eq!(e.position, 3);
        assert!(tokens(r"'abc\'").is_err());
    }
}
