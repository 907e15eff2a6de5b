//! The PostgreSQL DSN as the driver will use it.
//!
//! The start-up rules (TLS in production, a root certificate that exists) judge the options the
//! driver itself parses from the DSN, never a reading of our own: a parameter the driver reads
//! twice (`sslmode=require&sslmode=disable`, or its alias `ssl-mode`) is refused outright, since
//! the driver takes the last and a reader of the text sees the first. Parameters the driver
//! does not know are refused too: it would ignore them with a log line that quotes their value.
//! No problem ever quotes the DSN or a parameter's value (the DSN may hold a password).

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

use super::quoted;

/// The query parameters the driver reads, each group one setting under its several names.
const PARAMETERS: &[&[&str]] = &[
    &["sslmode", "ssl-mode"],
    &["sslrootcert", "ssl-root-cert", "ssl-ca"],
    &["sslcert", "ssl-cert"],
    &["sslkey", "ssl-key"],
    &["statement-cache-capacity"],
    &["host", "hostaddr"],
    &["port"],
    &["dbname"],
    &["user"],
    &["password"],
    &["application_name"],
    &["options"],
];

/// What the driver will do with a DSN: TLS mode and the root certificate file it names, if any.
#[derive(Debug, Clone)]
pub struct Dsn {
    pub ssl_mode: PgSslMode,
    /// The file of trusted roots (`sslrootcert` or `PGSSLROOTCERT`), when one is named.
    pub root_cert: Option<std::path::PathBuf>,
}

impl Dsn {
    /// TLS that cannot be downgraded: `require`, `verify-ca` or `verify-full`.
    pub fn tls_required(&self) -> bool {
        matches!(self.ssl_mode, PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull)
    }
}

/// Parses a DSN the way the driver will, refusing what would make its reading ambiguous; the
/// error names the part at fault and never quotes a value. `pg_env` is the driver's own
/// `PGSSLROOTCERT` (the process environment), used when the DSN names no root certificate.
pub fn parse(raw: &str, pg_root_cert_env: Option<&str>) -> Result<Dsn, String> {
    let url = url::Url::parse(raw).map_err(|_| "must be a postgres:// or postgresql:// URL".to_owned())?;
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Err("must be a postgres:// or postgresql:// URL".to_owned());
    }
    let mut seen: Vec<(usize, String)> = Vec::new();
    let mut root_cert = None;
    for (key, value) in url.query_pairs() {
        let Some(group) = PARAMETERS.iter().position(|names| names.contains(&key.as_ref())) else {
            if key.starts_with("options[") && key.ends_with(']') {
                continue;
            }
            return Err(format!("names the parameter {}, which the driver does not read", quoted(&key)));
        };
        if let Some((_, first)) = seen.iter().find(|(g, _)| *g == group) {
            return Err(format!("sets {first} more than once (as {key}); the driver would use the last: set it once"));
        }
        seen.push((group, key.clone().into_owned()));
        if group == 1 && !value.trim_start().starts_with("-----BEGIN") {
            root_cert = Some(std::path::PathBuf::from(value.as_ref()));
        }
    }
    // The driver's own parser: what it accepts and the TLS mode it will use (the DSN's, else
    // `PGSSLMODE`, else `prefer`).
    let options = PgConnectOptions::from_str(raw).map_err(|e| match e {
        sqlx::Error::Configuration(_) => {
            "has a parameter the driver cannot read (sslmode, port or statement-cache-capacity)".to_owned()
        }
        _ => "is not a DSN the driver can read".to_owned(),
    })?;
    if root_cert.is_none() && !seen.iter().any(|(g, _)| *g == 1) {
        root_cert = pg_root_cert_env
            .filter(|v| !v.trim_start().starts_with("-----BEGIN") && !v.is_empty())
            .map(std::path::PathBuf::from);
    }
    Ok(Dsn { ssl_mode: options.get_ssl_mode(), root_cert })
}

/// The problem with a root certificate file the driver would need, if any: a verifying TLS mode
/// with a named file that cannot be read stops the start here, instead of every connection
/// failing later as if the database were down.
pub fn root_cert_problem(dsn: &Dsn) -> Option<String> {
    if !matches!(dsn.ssl_mode, PgSslMode::VerifyCa | PgSslMode::VerifyFull) {
        return None;
    }
    let path = dsn.root_cert.as_ref()?;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && std::fs::File::open(path).is_ok() => None,
        _ => Some(format!("sslrootcert names {}, which is not a readable file", quoted(&path.display().to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_decides_the_tls_mode() {
        let cases = [
            ("postgres://h/d?sslmode=require", true),
            ("postgres://h/d?sslmode=verify-full", true),
            ("postgres://h/d?ssl-mode=verify-ca", true),
            ("postgres://h/d?sslmode=prefer", false),
            ("postgres://h/d?sslmode=allow", false),
            ("postgres://h/d?sslmode=disable", false),
        ];
        for (dsn, tls) in cases {
            assert_eq!(parse(dsn, None).expect(dsn).tls_required(), tls, "{dsn}");
        }
    }

    #[test]
    fn a_setting_given_twice_is_refused_whatever_its_name() {
        for dsn in [
            "postgres://h/d?sslmode=require&sslmode=disable",
            "postgres://h/d?sslmode=require&sslmode=allow",
            "postgres://h/d?sslmode=verify-full&sslmode=disable",
            "postgres://h/d?sslmode=require&sslmode=prefer",
            "postgres://h/d?sslmode=require&ssl-mode=disable",
            "postgres://h/d?sslrootcert=/a&ssl-ca=/b",
            "postgres://u:secretpw@h/d?sslmode=require&password=x&password=y",
        ] {
            let err = parse(dsn, None).expect_err(dsn);
            assert!(err.contains("more than once"), "{dsn}: {err}");
            assert!(!err.contains("secretpw") && !err.contains("disable"), "no value is quoted: {err}");
        }
    }

    #[test]
    fn unknown_parameters_are_refused_without_their_value() {
        let err = parse("postgres://h/d?sslmode=require&passwd=hunter2", None).expect_err("unknown");
        assert!(err.contains("passwd") && !err.contains("hunter2"), "{err}");
        let err = parse("postgres://h/d?sslmode=sometimes", None).expect_err("bad mode");
        assert!(!err.contains("sometimes"), "{err}");
    }

    #[test]
    fn a_missing_root_certificate_is_named() {
        let dsn = parse("postgres://h/d?sslmode=verify-full&sslrootcert=/nonexistent/root.crt", None).expect("parses");
        let problem = root_cert_problem(&dsn).expect("missing file");
        assert!(problem.contains("/nonexistent/root.crt"), "{problem}");
        let from_env = parse("postgres://h/d?sslmode=verify-ca", Some("/nonexistent/env.crt")).expect("parses");
        assert!(root_cert_problem(&from_env).is_some_and(|p| p.contains("env.crt")));
        // Without a verifying mode the file is never read.
        let require = parse("postgres://h/d?sslmode=require&sslrootcert=/nonexistent/root.crt", None).expect("parses");
        assert_eq!(root_cert_problem(&require), None);
        let file = std::env::temp_dir().join(format!("sh-root-{}.crt", std::process::id()));
        std::fs::write(&file, "-----BEGIN CERTIFICATE-----\n").expect("write");
        let present =
            parse(&format!("postgres://h/d?sslmode=verify-full&sslrootcert={}", file.display()), None).expect("parses");
        assert_eq!(root_cert_problem(&present), None);
        let _ = std::fs::remove_file(file);
    }
}
