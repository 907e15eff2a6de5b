//! The TOML configuration file (`--config FILE`): the same settings as the environment, which
//! overrides it.
//!
//! A key is a variable's name, with or without `STREAMING_HUB_`, in any case; a table's name joins
//! its keys with `_`, so these three set the same variable:
//!
//! ```toml
//! STREAMING_HUB_KAFKA_BROKERS = "k1:9092"
//! kafka_brokers = "k1:9092"
//! [kafka]
//! brokers = "k1:9092"
//! ```
//!
//! Strings, numbers and booleans are taken as written (a duration is a string: `"30s"`); an array
//! of them is joined with commas (`retry_curve = ["1s", "5s"]`). Unlike the environment, which a
//! deployment shares with other programs, a file is this hub's alone: a key it does not read, or
//! one variable set twice, is refused with the key's name.

use std::collections::HashMap;
use std::path::Path;

use super::{ALIASES, ConfigError, KNOWN, Problem};

const PREFIX: &str = "STREAMING_HUB_";
/// The largest settings file read, in bytes.
const MAX_FILE_LEN: u64 = 1024 * 1024;

/// Reads `path` and returns the variables it sets.
pub fn read(path: &Path) -> Result<HashMap<String, String>, ConfigError> {
    // A path is short (the system's limit), and naming it whole is what an operator needs.
    let shown = path.display().to_string();
    let problem = |message: String| ConfigError(vec![Problem { variable: "--config".to_owned(), message }]);
    // A settings file is a few kilobytes; a larger one is refused before it is read.
    let size = std::fs::metadata(path).map_err(|e| problem(format!("cannot read {shown}: {e}")))?.len();
    if size > MAX_FILE_LEN {
        return Err(problem(format!("{shown} is {size} bytes long; at most {MAX_FILE_LEN} are accepted")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| problem(format!("cannot read {shown}: {e}")))?;
    parse(&text, &shown)
}

/// The variables a file's text sets; `origin` names the file in problems.
pub fn parse(text: &str, origin: &str) -> Result<HashMap<String, String>, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        ConfigError(vec![Problem {
            variable: format!("--config {origin}"),
            message: format!("is not valid TOML: {}", e.message()),
        }])
    })?;
    let mut found = Found { vars: HashMap::new(), keys: HashMap::new(), problems: Vec::new(), origin };
    found.table(&table, &[]);
    if found.problems.is_empty() { Ok(found.vars) } else { Err(ConfigError(found.problems)) }
}

struct Found<'a> {
    vars: HashMap<String, String>,
    /// Which key set each variable, to name both when one is set twice.
    keys: HashMap<String, String>,
    problems: Vec<Problem>,
    origin: &'a str,
}

impl Found<'_> {
    fn table(&mut self, table: &toml::Table, path: &[&str]) {
        for (key, value) in table {
            let mut at = path.to_vec();
            at.push(key);
            match value {
                toml::Value::Table(inner) => self.table(inner, &at),
                other => self.value(&at, other),
            }
        }
    }

    fn value(&mut self, at: &[&str], value: &toml::Value) {
        let key = at.join(".");
        let joined = at.join("_").to_ascii_uppercase();
        let variable = if joined.starts_with(PREFIX) { joined } else { format!("{PREFIX}{joined}") };
        if !KNOWN.contains(&variable.as_str()) && !ALIASES.iter().any(|(alias, _)| *alias == variable) {
            let read_as = if variable.len() > 128 { super::quoted(&variable) } else { variable };
            self.problem(&key, format!("is not a setting of this hub (read as {read_as}); see docs/CONFIGURATION.md"));
            return;
        }
        let text = match value {
            toml::Value::Array(items) => {
                let parts: Option<Vec<String>> = items.iter().map(scalar).collect();
                match parts {
                    Some(parts) => parts.join(","),
                    None => {
                        self.problem(&key, "an array may hold only strings, numbers and booleans".to_owned());
                        return;
                    }
                }
            }
            other => match scalar(other) {
                Some(text) => text,
                None => {
                    self.problem(&key, "must be a string, a number or a boolean".to_owned());
                    return;
                }
            },
        };
        if let Some(first) = self.keys.get(&variable) {
            let message = format!("sets {variable}, which {first} already sets: set it once");
            self.problem(&key, message);
            return;
        }
        self.keys.insert(variable.clone(), key);
        self.vars.insert(variable, text);
    }

    fn problem(&mut self, key: &str, message: String) {
        let key = if key.len() > 128 { super::quoted(key) } else { key.to_owned() };
        self.problems.push(Problem { variable: format!("--config {}: {key}", self.origin), message });
    }
}

fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(x) => Some(x.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// The variables of a file (if any) with the environment's over them.
pub fn merged(file: Option<&Path>, env: HashMap<String, String>) -> Result<HashMap<String, String>, ConfigError> {
    let Some(path) = file else { return Ok(env) };
    let mut vars = read(path)?;
    vars.extend(env);
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(text: &str) -> HashMap<String, String> {
        parse(text, "hub.toml").expect("parses")
    }

    fn problems(text: &str) -> Vec<String> {
        parse(text, "hub.toml")
            .expect_err("refused")
            .0
            .into_iter()
            .map(|p| format!("{}: {}", p.variable, p.message))
            .collect()
    }

    #[test]
    fn keys_name_variables_with_or_without_the_prefix_and_through_tables() {
        let v = vars(
            r#"
            env = "staging"
            STREAMING_HUB_ROLE = "delivery"
            Dispatch_Workers = 4
            allow_private_sinks = true
            retry_curve = ["1s", "5s", "1m"]
            log_level = "debug"
            [kafka]
            brokers = "k1:9092,k2:9092"
            [postgres]
            max_connections = 32
            [kafka.scram]
            username = "hub"
            "#,
        );
        let expect = [
            ("STREAMING_HUB_ENV", "staging"),
            ("STREAMING_HUB_ROLE", "delivery"),
            ("STREAMING_HUB_DISPATCH_WORKERS", "4"),
            ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true"),
            ("STREAMING_HUB_RETRY_CURVE", "1s,5s,1m"),
            ("STREAMING_HUB_LOG_LEVEL", "debug"),
            ("STREAMING_HUB_KAFKA_BROKERS", "k1:9092,k2:9092"),
            ("STREAMING_HUB_POSTGRES_MAX_CONNECTIONS", "32"),
            ("STREAMING_HUB_KAFKA_SCRAM_USERNAME", "hub"),
        ];
        for (name, value) in expect {
            assert_eq!(v.get(name).map(String::as_str), Some(value), "{name} in {v:?}");
        }
        assert_eq!(v.len(), expect.len());
    }

    #[test]
    fn unknown_keys_bad_values_and_doubles_are_refused_by_name() {
        let p = problems(
            r#"
            dispatch_wrokers = 4
            kafka_brokers = "a:1"
            retry_curve = [["1s"]]
            shutdown_timeout = { seconds = 30 }
            [kafka]
            brokers = "b:1"
            "#,
        );
        assert_eq!(p.len(), 4, "{p:#?}");
        assert!(
            p.iter().any(|m| m.contains("hub.toml: dispatch_wrokers") && m.contains("STREAMING_HUB_DISPATCH_WROKERS")),
            "{p:#?}"
        );
        assert!(p.iter().any(|m| m.contains("hub.toml: retry_curve") && m.contains("array")), "{p:#?}");
        // An inline table is a table: its keys are read, and `seconds` is not a setting.
        assert!(p.iter().any(|m| m.contains("shutdown_timeout.seconds")), "{p:#?}");
        assert!(p.iter().any(|m| m.contains("set it once")), "{p:#?}");
        let syntax = problems("env = ");
        assert!(syntax[0].contains("--config hub.toml") && syntax[0].contains("not valid TOML"), "{syntax:?}");
    }

    #[test]
    fn the_documented_example_is_read() {
        let doc = include_str!("../../../../docs/CONFIGURATION.md");
        let start = doc.find("```toml\n").expect("an example") + "```toml\n".len();
        let example = &doc[start..start + doc[start..].find("```").expect("its end")];
        let mut v = vars(example);
        assert_eq!(v["STREAMING_HUB_HTTP_LISTEN_ADDR"], ":8080");
        assert_eq!(v["STREAMING_HUB_KAFKA_TLS_ENABLED"], "true");
        // The secret from the environment, as the example says.
        v.insert("STREAMING_HUB_ADMIN_TOKEN".to_owned(), "an-admin-token-of-the-environment".to_owned());
        let config = crate::config::Config::from_vars(v).expect("a valid configuration");
        assert!(config.env.is_production());
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("streaming-hub-config-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("hub.toml");
        std::fs::write(&path, "dispatch_workers = 4\npull_rate = 7\n").expect("write");
        let env = HashMap::from([("STREAMING_HUB_DISPATCH_WORKERS".to_owned(), "12".to_owned())]);
        let v = merged(Some(&path), env).expect("merged");
        assert_eq!(v["STREAMING_HUB_DISPATCH_WORKERS"], "12");
        assert_eq!(v["STREAMING_HUB_PULL_RATE"], "7");
        let missing = merged(Some(&dir.join("absent.toml")), HashMap::new()).expect_err("refused");
        assert!(missing.to_string().contains("--config: cannot read"), "{missing}");
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
