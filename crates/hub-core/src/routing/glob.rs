//! Wildcard patterns without backtracking regexes: CESQL's `LIKE` (`%`, `_`) and the content
//! patterns' `wildcard` (`*`). A pattern is compiled once into literal characters and wildcards;
//! matching walks the value once per remembered `*`/`%` position, so it costs at most
//! O(value × pattern) steps whatever either holds, and never recurses.

/// One element of a compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Char(char),
    /// Exactly one character.
    One,
    /// Any run of characters, none included.
    Many,
}

/// A compiled wildcard pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pieces: Vec<Piece>,
}

impl Glob {
    /// A CESQL `LIKE` pattern: `%` any run, `_` one character, `\%`, `\_` and `\\` the character
    /// itself; any other backslash is a backslash.
    pub fn like(pattern: &str) -> Self {
        Self::compile(pattern, |c| match c {
            '%' => Some(Piece::Many),
            '_' => Some(Piece::One),
            _ => None,
        })
    }

    /// A content pattern's `wildcard`: `*` any run, `\*` and `\\` the character itself.
    pub fn wildcard(pattern: &str) -> Self {
        Self::compile(pattern, |c| (c == '*').then_some(Piece::Many))
    }

    fn compile(pattern: &str, special: impl Fn(char) -> Option<Piece>) -> Self {
        let mut pieces = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.peek().copied() {
                    Some(n) if n == '\\' || special(n).is_some() => {
                        pieces.push(Piece::Char(n));
                        chars.next();
                    }
                    _ => pieces.push(Piece::Char('\\')),
                }
                continue;
            }
            match special(c) {
                // A run of wildcards matches what one does.
                Some(Piece::Many) if pieces.last() == Some(&Piece::Many) => {}
                Some(p) => pieces.push(p),
                None => pieces.push(Piece::Char(c)),
            }
        }
        Self { pieces }
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let p = &self.pieces;
        let (mut pi, mut si) = (0usize, 0usize);
        // The pattern position after the last `Many` and the value position it was tried at.
        let mut retry: Option<(usize, usize)> = None;
        loop {
            // Each position tried is a step of the evaluation's budget (`meter`).
            if !super::meter::spend(1) {
                return false;
            }
            let rest = value.get(si..).unwrap_or("");
            if let Some(piece) = p.get(pi) {
                match piece {
                    Piece::Many => {
                        retry = Some((pi + 1, si));
                        pi += 1;
                        continue;
                    }
                    Piece::One => {
                        if let Some(c) = rest.chars().next() {
                            si += c.len_utf8();
                            pi += 1;
                            continue;
                        }
                    }
                    Piece::Char(c) => {
                        if rest.starts_with(*c) {
                            si += c.len_utf8();
                            pi += 1;
                            continue;
                        }
                    }
                }
            } else if rest.is_empty() {
                return true;
            }
            // A mismatch: let the last `Many` take one more character, or fail.
            let Some((after, from)) = retry else { return false };
            let Some(c) = value.get(from..).and_then(|r| r.chars().next()) else { return false };
            retry = Some((after, from + c.len_utf8()));
            pi = after;
            si = from + c.len_utf8();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        let cases = [
            ("abc", "abc", true),
            ("a%b%c", "azzzbzzzc", true),
            ("a%b%c", "ac", false),
            ("_b%", "abcd1", true),
            ("_b%", "b", false),
            ("a\\%b", "a%b", true),
            ("a\\%b", "azb", false),
            ("a\\_b", "a_b", true),
            ("ab\\c", "ab\\c", true),
            ("%", "", true),
            ("_", "é", true),
            ("%é", "café", true),
            (".%.%.", ".ab.cde.", true),
            (".%.%.", "ab.cde", false),
        ];
        for (pattern, value, expected) in cases {
            assert_eq!(Glob::like(pattern).matches(value), expected, "{value} LIKE {pattern}");
        }
    }

    #[test]
    fn wildcard_patterns() {
        assert!(Glob::wildcard("*.png").matches("a/b.png"));
        assert!(!Glob::wildcard("*.png").matches("a/b.jpg"));
        assert!(Glob::wildcard("a\\*b").matches("a*b"));
        assert!(!Glob::wildcard("a\\*b").matches("axb"));
        assert!(Glob::wildcard("a_b").matches("a_b"));
        assert!(!Glob::wildcard("a_b").matches("axb"));
    }

    proptest::proptest! {
        /// Matching never panics, and a value always matches itself escaped.
        #[test]
        fn total_and_reflexive(pattern in "\\PC{0,12}", value in "\\PC{0,24}") {
            let _ = Glob::like(&pattern).matches(&value);
            let _ = Glob::wildcard(&pattern).matches(&value);
            let escaped: String = value.chars().flat_map(|c| {
                if matches!(c, '%' | '_' | '\\') { vec!['\\', c] } else { vec![c] }
            }).collect();
            proptest::prop_assert!(Glob::like(&escaped).matches(&value));
        }
    }
}
