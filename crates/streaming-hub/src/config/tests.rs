//! The configuration's own tests: defaults, refusals by variable, aliases, production rules.
use super::*;

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn defaults_are_the_spec_defaults() {
    let c = Config::from_vars(HashMap::new()).expect("defaults are valid");
    assert!(c.env.is_local());
    assert_eq!(c.role, Role::All);
    assert_eq!(c.http_listen_addr.to_string(), "127.0.0.1:8080");
    assert!(matches!(&c.database, Database::Sqlite { path } if path == &PathBuf::from("./streaming-hub.db")));
    assert_eq!(c.max_in_flight, 2048);
    assert_eq!(c.dispatch_claim_batch, 16);
    assert_eq!(c.dispatch_idle_interval, Duration::from_millis(250));
    assert_eq!(c.poison_threshold, 5);
    assert_eq!(c.retry_curve, default_retry_curve());
    assert_eq!(c.retry_deadline, Duration::from_secs(24 * 3600));
    assert_eq!((c.pull_rate, c.pull_burst), (100, 200));
    assert_eq!(c.replay_rate, 250);
    assert!(c.autodisable_enabled);
    assert_eq!(c.autodisable_failure_window, Duration::from_secs(120 * 3600));
    assert_eq!(c.autodisable_failure_spread, Duration::from_secs(12 * 3600));
    assert_eq!(c.dlq_retention, Duration::from_secs(168 * 3600));
    assert!(!c.allow_private_sinks);
    assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
    assert!(c.only_tenant.is_none());
}

#[test]
fn every_invalid_variable_is_named() {
    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_ROLE", "everything"),
        ("STREAMING_HUB_DISPATCH_WORKERS", "0"),
        ("STREAMING_HUB_RETRY_CURVE", "1s,soon"),
        ("STREAMING_HUB_HTTP_LISTEN_ADDR", "localhost"),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "maybe"),
        ("STREAMING_HUB_AWS_DEFAULT_CREDENTIALS", "perhaps"),
        ("STREAMING_HUB_AWS_ENDPOINT_URL", "ftp://emulator"),
        ("STREAMING_HUB_POSTGRES_DSN", "mysql://x"),
        ("STREAMING_HUB_SHUTDOWN_TIMEOUT", "30"),
        ("STREAMING_HUB_DRAIN_DELAY", "soon"),
        ("STREAMING_HUB_OIDC_ISSUER", "https://hub.example.com/oidc"),
        ("STREAMING_HUB_OIDC_KEY_OVERLAP", "a day"),
        ("STREAMING_HUB_TRANSFORM_CPU", "5 minutes"),
        ("STREAMING_HUB_TRANSFORM_MEMORY", "16MB"),
    ]))
    .expect_err("invalid");
    let named: Vec<&str> = err.0.iter().map(|p| p.variable.as_str()).collect();
    for v in [
        "STREAMING_HUB_ROLE",
        "STREAMING_HUB_DISPATCH_WORKERS",
        "STREAMING_HUB_RETRY_CURVE",
        "STREAMING_HUB_HTTP_LISTEN_ADDR",
        "STREAMING_HUB_ALLOW_PRIVATE_SINKS",
        "STREAMING_HUB_AWS_DEFAULT_CREDENTIALS",
        "STREAMING_HUB_AWS_ENDPOINT_URL",
        "STREAMING_HUB_POSTGRES_DSN",
        "STREAMING_HUB_SHUTDOWN_TIMEOUT",
        "STREAMING_HUB_DRAIN_DELAY",
        "STREAMING_HUB_OIDC_ISSUER",
        "STREAMING_HUB_OIDC_KEY_OVERLAP",
        "STREAMING_HUB_TRANSFORM_CPU",
        "STREAMING_HUB_TRANSFORM_MEMORY",
    ] {
        assert!(named.contains(&v), "{v} not named in {err}");
    }
    assert!(!err.to_string().contains("mysql://x"), "a DSN is never echoed");
}

#[test]
fn an_admin_token_is_checked_when_given() {
    let err = Config::from_vars(vars(&[("STREAMING_HUB_ENV", "staging"), ("STREAMING_HUB_ADMIN_TOKEN", "short")]))
        .expect_err("too short");
    assert_eq!(err.0[0].variable, "STREAMING_HUB_ADMIN_TOKEN");
    // Without one, the start checks for admin keys (tests/it/cli.rs).
    let c = Config::from_vars(vars(&[("STREAMING_HUB_ENV", "staging")])).expect("valid");
    assert!(c.admin_token.is_none());
}

#[test]
fn retry_curve_and_durations_parse() {
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_RETRY_CURVE", "0s, 100ms,1s"),
        ("STREAMING_HUB_RETRY_DEADLINE", "1h30m"),
    ]))
    .expect("valid");
    assert_eq!(c.retry_curve, vec![Duration::ZERO, Duration::from_millis(100), Duration::from_secs(1)]);
    assert_eq!(c.retry_deadline, Duration::from_secs(5400));
}

#[test]
fn postgres_and_single_tenant_mode() {
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_POSTGRES_DSN", "postgres://u:pw@db/hub"),
        ("STREAMING_HUB_TENANT_ID", "acme"),
    ]))
    .expect("valid");
    assert!(matches!(c.database, Database::Postgres { .. }));
    assert_eq!(c.only_tenant.map(|t| t.to_string()), Some("acme".to_owned()));
    assert!(!format!("{:?}", c.database).contains("pw"), "the DSN is a secret");
    let c = Config::from_vars(vars(&[("STREAMING_HUB_TENANT_ID", "default")])).expect("valid");
    assert!(c.only_tenant.is_none());
}

#[test]
fn production_refuses_each_unsafe_setting_by_name() {
    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_ENV", "production"),
        ("STREAMING_HUB_KAFKA_BROKERS", "k:9092"),
        ("STREAMING_HUB_POSTGRES_DSN", "postgres://hub@db/hub?sslmode=disable"),
        ("STREAMING_HUB_ALLOW_PRIVATE_SINKS", "true"),
    ]))
    .expect_err("unsafe");
    let named: Vec<&str> = err.0.iter().map(|p| p.variable.as_str()).collect();
    for v in [
        "STREAMING_HUB_KAFKA_TLS_ENABLED",
        "STREAMING_HUB_POSTGRES_DSN",
        "STREAMING_HUB_ALLOW_PRIVATE_SINKS",
        "STREAMING_HUB_KEK_REF",
    ] {
        assert!(named.contains(&v), "{v} not named in {err}");
    }
    let safe = Config::from_vars(vars(&[
        ("STREAMING_HUB_ENV", "production"),
        ("STREAMING_HUB_KAFKA_BROKERS", "k:9093"),
        ("STREAMING_HUB_KAFKA_TLS_ENABLED", "true"),
        ("STREAMING_HUB_POSTGRES_DSN", "postgres://hub@db/hub?sslmode=verify-full"),
        ("STREAMING_HUB_ADMIN_TOKEN", "a-long-enough-admin-token"),
        ("STREAMING_HUB_KEK_REF", "HUB_KEK"),
    ]));
    assert!(safe.is_ok(), "{safe:?}");
}

#[test]
fn kafka_settings() {
    let c =
        Config::from_vars(vars(&[("STREAMING_HUB_KAFKA_BROKERS", "k1:9092,k2:9092"), ("STREAMING_HUB_ENV", "local")]))
            .expect("valid");
    let k = c.kafka.expect("kafka");
    assert_eq!(k.group_id, "streaming-hub.local");
    assert_eq!(k.dlq_group_id, "streaming-hub-dlq.local");
    assert!(k.scram.is_none() && !k.tls);
    assert!(Config::from_vars(HashMap::new()).expect("valid").kafka.is_none(), "no brokers, no consumer");

    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_KAFKA_BROKERS", "k1:9092"),
        ("STREAMING_HUB_KAFKA_SCRAM_USERNAME", "hub"),
        ("STREAMING_HUB_KAFKA_SCRAM_MECHANISM", "PLAIN"),
        ("STREAMING_HUB_KAFKA_CA_CERT", "/nonexistent/ca.pem"),
    ]))
    .expect_err("invalid");
    let named: Vec<&str> = err.0.iter().map(|p| p.variable.as_str()).collect();
    for v in
        ["STREAMING_HUB_KAFKA_SCRAM_PASSWORD", "STREAMING_HUB_KAFKA_SCRAM_MECHANISM", "STREAMING_HUB_KAFKA_CA_CERT"]
    {
        assert!(named.contains(&v), "{v} not named in {err}");
    }
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_KAFKA_BROKERS", "k1:9093"),
        ("STREAMING_HUB_KAFKA_SCRAM_USERNAME", "hub"),
        ("STREAMING_HUB_KAFKA_SCRAM_PASSWORD", "s3cret-pass"),
        ("STREAMING_HUB_KAFKA_TLS_ENABLED", "true"),
    ]))
    .expect("valid");
    assert!(!format!("{c:?}").contains("s3cret-pass"), "the SCRAM password is a secret");
}

#[test]
fn the_configuration_reference_lists_every_variable() {
    let reference = include_str!("../../../../docs/CONFIGURATION.md");
    for variable in KNOWN {
        assert!(reference.contains(&format!("| `{variable}` |")), "{variable} is missing from docs/CONFIGURATION.md");
    }
}

#[test]
fn the_original_deployments_names_are_accepted() {
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_ENV", "Staging"),
        ("STREAMING_HUB_ADMIN_TOKEN", "a-token-of-sixteen-plus"),
        ("STREAMING_HUB_HTTP_LISTEN_ADDR", ":8080"),
        ("STREAMING_HUB_POSTGRES_DSN", "postgres://u@db/hub"),
        ("STREAMING_HUB_POSTGRES_MAX_OPEN_CONNS", "40"),
        ("STREAMING_HUB_POSTGRES_MAX_IDLE_CONNS", "5"),
        ("STREAMING_HUB_POSTGRES_CONN_MAX_LIFETIME", "10m"),
        ("STREAMING_HUB_PRE_STOP_DRAIN_TIMEOUT", "7s"),
        ("STREAMING_HUB_LOG_LEVEL", "debug"),
    ]))
    .expect("valid");
    assert_eq!(c.env.as_str(), "staging");
    assert_eq!(c.http_listen_addr.to_string(), "0.0.0.0:8080");
    let Database::Postgres { pool, .. } = c.database else { panic!("postgres") };
    assert_eq!((pool.max_connections, pool.min_connections), (40, 5));
    assert_eq!(pool.max_lifetime, Some(Duration::from_secs(600)));
    assert_eq!(c.drain_delay, Duration::from_secs(7));
    assert!(c.ignored.is_empty(), "no alias is reported as ignored: {:?}", c.ignored);

    let both = Config::from_vars(vars(&[
        ("STREAMING_HUB_POSTGRES_MAX_CONNECTIONS", "10"),
        ("STREAMING_HUB_POSTGRES_MAX_OPEN_CONNS", "40"),
    ]))
    .expect_err("conflict");
    assert!(both.to_string().contains("STREAMING_HUB_POSTGRES_MAX_OPEN_CONNS"), "{both}");
}

#[test]
fn migrate_needs_only_the_database() {
    let outside_local = [
        ("STREAMING_HUB_ENV", "staging"),
        ("STREAMING_HUB_POSTGRES_DSN", "postgres://u@db/hub"),
        ("STREAMING_HUB_KAFKA_BROKERS", "k:9092"),
        ("STREAMING_HUB_KAFKA_CA_CERT", "/nonexistent/ca.pem"),
    ];
    assert!(Config::from_vars(vars(&outside_local)).is_err(), "serve needs the admin token and a readable CA");
    let c = Config::for_migrate(vars(&outside_local)).expect("migrate needs neither");
    assert!(matches!(c.database, Database::Postgres { .. }));
    assert!(c.kafka.is_none());
    let bad_dsn = [("STREAMING_HUB_ENV", "staging"), ("STREAMING_HUB_POSTGRES_DSN", "mysql://x")];
    let err = Config::for_migrate(vars(&bad_dsn)).expect_err("the database still counts");
    assert!(err.to_string().contains("STREAMING_HUB_POSTGRES_DSN"), "{err}");
}

#[test]
fn a_cell_lists_its_tenants_and_excludes_single_tenant_mode() {
    let c = Config::from_vars(vars(&[("STREAMING_HUB_TENANTS", "acme, globex,acme")])).expect("valid");
    let cell: Vec<String> = c.cell.expect("a cell").iter().map(ToString::to_string).collect();
    assert_eq!(cell, vec!["acme", "globex"]);
    assert!(Config::from_vars(vars(&[])).expect("valid").cell.is_none());
    let long = format!("acme,{}", "x".repeat(257));
    for bad in ["acme,,globex", ",", long.as_str()] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_TENANTS", bad)])).expect_err(bad).to_string();
        assert!(err.contains("STREAMING_HUB_TENANTS") && err.contains("entry"), "{bad}: {err}");
    }
    let err = Config::from_vars(vars(&[("STREAMING_HUB_TENANTS", "acme"), ("STREAMING_HUB_TENANT_ID", "acme")]))
        .expect_err("conflict")
        .to_string();
    assert!(err.contains("STREAMING_HUB_TENANTS") && err.contains("STREAMING_HUB_TENANT_ID"), "{err}");
}

#[test]
fn an_unknown_environment_is_refused_not_taken_for_local() {
    for env in ["prod", "dev", "test", "Production2"] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_ENV", env)])).expect_err(env);
        assert!(err.to_string().contains("STREAMING_HUB_ENV"), "{err}");
    }
}

#[test]
fn a_kafka_ca_may_be_a_base64_pem() {
    use base64::Engine;
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let encoded = base64::engine::general_purpose::STANDARD.encode(pem);
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_KAFKA_BROKERS", "k:9092"),
        ("STREAMING_HUB_KAFKA_TLS_ENABLED", "true"),
        ("STREAMING_HUB_KAFKA_CA_CERT", &encoded),
    ]))
    .expect("valid");
    assert!(matches!(c.kafka.expect("kafka").ca_cert, Some(CaCert::Pem(p)) if p == pem));
    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_KAFKA_BROKERS", "k:9092"),
        ("STREAMING_HUB_KAFKA_TLS_ENABLED", "true"),
        ("STREAMING_HUB_KAFKA_CA_CERT", "bm90IGEgY2VydA=="),
    ]))
    .expect_err("not a PEM");
    assert!(err.to_string().contains("STREAMING_HUB_KAFKA_CA_CERT"), "{err}");
}

#[test]
fn a_log_filter_is_checked_at_start() {
    let problems = Config::from_vars(vars(&[("STREAMING_HUB_LOG", "info,hub_store=loud")])).expect_err("refused");
    assert!(problems.0.iter().any(|p| p.variable == "STREAMING_HUB_LOG"), "{problems}");
    let c = Config::from_vars(vars(&[("STREAMING_HUB_LOG_LEVEL", "debug")])).expect("valid");
    assert_eq!(c.log.as_deref(), Some("debug"), "the original's name is read too");
}

#[test]
fn unknown_variables_are_reported_as_ignored() {
    let c = Config::from_vars(vars(&[("STREAMING_HUB_OTEL_ENDPOINT", "x"), ("OTHER", "y")])).expect("valid");
    assert_eq!(c.ignored, vec!["STREAMING_HUB_OTEL_ENDPOINT".to_owned()]);
}

#[test]
fn an_empty_value_is_a_value_where_absence_chooses_a_mode() {
    for name in [
        "STREAMING_HUB_ENV",
        "STREAMING_HUB_POSTGRES_DSN",
        "STREAMING_HUB_KAFKA_BROKERS",
        "STREAMING_HUB_ADMIN_TOKEN",
        "STREAMING_HUB_KEK_REF",
    ] {
        for empty in ["", "  "] {
            let err = Config::from_vars(vars(&[(name, empty)])).expect_err(name);
            assert!(err.0.iter().any(|p| p.variable == name && p.message.contains("empty")), "{name}: {err}");
        }
    }
    // Elsewhere an empty value still means the default.
    let c = Config::from_vars(vars(&[("STREAMING_HUB_DISPATCH_WORKERS", "")])).expect("valid");
    assert_eq!(c.max_in_flight, 2048);
}

#[test]
fn long_values_are_refused_and_never_echoed() {
    let long = "x".repeat(5 * 1024 * 1024);
    for name in
        ["STREAMING_HUB_ROLE", "STREAMING_HUB_ADMIN_TOKEN", "STREAMING_HUB_POSTGRES_DSN", "STREAMING_HUB_LOG_LEVEL"]
    {
        let err = Config::from_vars(vars(&[(name, long.as_str())])).expect_err(name).to_string();
        assert!(err.contains(name), "{err}");
        assert!(err.len() < 300, "{name}: {} bytes of error", err.len());
    }
    // A value short enough to read but wrong is quoted by a short prefix only.
    let wrong = format!("both{}", "y".repeat(4000));
    let err = Config::from_vars(vars(&[("STREAMING_HUB_ROLE", wrong.as_str())])).expect_err("bad").to_string();
    assert!(err.contains("\"bothyyy") && err.contains("4004 bytes") && err.len() < 300, "{err}");
    // A long unknown name is reported cut.
    let name = format!("STREAMING_HUB_{}", "Z".repeat(1_000_000));
    let c = Config::from_vars(vars(&[(name.as_str(), "1")])).expect("unknown names are ignored");
    assert_eq!(c.ignored.len(), 1);
    assert!(c.ignored[0].len() < 100, "{}", c.ignored[0].len());
}

#[test]
fn the_admin_token_is_bounded() {
    let huge = "t".repeat(1025);
    let err = Config::from_vars(vars(&[("STREAMING_HUB_ADMIN_TOKEN", huge.as_str())])).expect_err("too long");
    assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_ADMIN_TOKEN"), "{err}");
    assert!(!err.to_string().contains(&huge[..64]), "never echoed");
    let fine = "t".repeat(1024);
    assert!(Config::from_vars(vars(&[("STREAMING_HUB_ADMIN_TOKEN", fine.as_str())])).is_ok());
}

#[test]
fn production_judges_the_tls_mode_the_driver_will_use() {
    let production = |dsn: &str| {
        Config::from_vars(vars(&[
            ("STREAMING_HUB_ENV", "production"),
            ("STREAMING_HUB_POSTGRES_DSN", dsn),
            ("STREAMING_HUB_ADMIN_TOKEN", "a-long-enough-admin-token"),
            ("STREAMING_HUB_KEK_REF", "HUB_KEK"),
        ]))
    };
    for weak in [
        "postgres://hub:pw@db/hub?sslmode=require&sslmode=disable",
        "postgres://hub:pw@db/hub?sslmode=require&sslmode=allow",
        "postgres://hub:pw@db/hub?sslmode=verify-full&sslmode=disable",
        "postgres://hub:pw@db/hub?sslmode=require&sslmode=prefer",
        "postgres://hub:pw@db/hub?sslmode=require&ssl-mode=disable",
        "postgres://hub:pw@db/hub?sslmode=prefer",
        "postgres://hub:pw@db/hub",
    ] {
        let err = production(weak).expect_err(weak);
        assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_POSTGRES_DSN"), "{weak}: {err}");
        assert!(!err.to_string().contains("pw@"), "never the DSN: {err}");
    }
    for strong in ["postgres://hub@db/hub?sslmode=require", "postgres://hub@db/hub?ssl-mode=verify-ca"] {
        assert!(production(strong).is_ok(), "{strong}");
    }
    // A verifying mode whose root certificate is missing stops here, naming the file.
    let err = production("postgres://hub@db/hub?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
        .expect_err("missing root certificate");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    // In every environment.
    let err = Config::from_vars(vars(&[(
        "STREAMING_HUB_POSTGRES_DSN",
        "postgres://hub@db/hub?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem",
    )]))
    .expect_err("missing root certificate");
    assert!(err.to_string().contains("STREAMING_HUB_POSTGRES_DSN"), "{err}");
}

#[test]
fn the_variable_the_kek_reference_names_is_not_ignored() {
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_KEK_REF", "STREAMING_HUB_KEK"),
        ("STREAMING_HUB_KEK", "k"),
        ("STREAMING_HUB_UNKNOWN", "1"),
    ]))
    .expect("valid");
    assert_eq!(c.ignored, vec!["STREAMING_HUB_UNKNOWN".to_owned()]);
}

#[test]
fn the_catalog_settings_are_read_and_each_bad_one_named() {
    let c = Config::from_vars(HashMap::new()).expect("defaults");
    assert!(c.manifest_sources.is_empty());
    assert_eq!(c.manifest_refresh_interval, Duration::from_secs(300));
    assert_eq!(c.validate_payloads, super::PayloadValidation::Off);
    let c = Config::from_vars(vars(&[
        (
            "STREAMING_HUB_MANIFEST_SOURCES",
            " https://ledger.internal/streaming, file:/etc/hub/cards.json ,https://ledger.internal/streaming",
        ),
        ("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "45s"),
        ("STREAMING_HUB_VALIDATE_PAYLOADS", "Quarantine"),
    ]))
    .expect("valid");
    assert_eq!(
        c.manifest_sources,
        ["https://ledger.internal/streaming", "file:/etc/hub/cards.json"],
        "trimmed, once each"
    );
    assert_eq!(c.manifest_refresh_interval, Duration::from_secs(45));
    assert_eq!(c.validate_payloads, super::PayloadValidation::Quarantine);
    for (sources, says) in [
        ("https://a.example/streaming,,file:/x.json", "entry 2 is empty"),
        ("ftp://a.example/streaming", "entry 1"),
        ("ledger.internal/streaming", "must be an http(s) URL or a file: path"),
        ("file:", "names no file"),
        ("https://", "entry 1"),
    ] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_MANIFEST_SOURCES", sources)])).expect_err(sources);
        let p = err.0.iter().find(|p| p.variable == "STREAMING_HUB_MANIFEST_SOURCES").expect("named");
        assert!(p.message.contains(says), "{sources}: {}", p.message);
    }
    let many = (0..65).map(|i| format!("https://p{i}.example/streaming")).collect::<Vec<_>>().join(",");
    assert!(Config::from_vars(vars(&[("STREAMING_HUB_MANIFEST_SOURCES", &many)])).is_err());
    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_MANIFEST_REFRESH_INTERVAL", "500ms"),
        ("STREAMING_HUB_VALIDATE_PAYLOADS", "strict"),
    ]))
    .expect_err("refused");
    let named: Vec<&str> = err.0.iter().map(|p| p.variable.as_str()).collect();
    assert!(
        named.contains(&"STREAMING_HUB_MANIFEST_REFRESH_INTERVAL")
            && named.contains(&"STREAMING_HUB_VALIDATE_PAYLOADS")
    );
}

#[test]
fn the_portal_settings_are_read_and_each_bad_one_named() {
    let c = Config::from_vars(HashMap::new()).expect("defaults");
    assert_eq!((c.portal_frame_ancestors.as_str(), c.public_url.as_deref()), ("'none'", None));
    let c = Config::from_vars(vars(&[
        ("STREAMING_HUB_PORTAL_FRAME_ANCESTORS", " 'self'   https://app.example.com https://*.bank.example:8443 "),
        ("STREAMING_HUB_PUBLIC_URL", "https://hub.bank.example/"),
    ]))
    .expect("valid");
    assert_eq!(c.portal_frame_ancestors, "'self' https://app.example.com https://*.bank.example:8443");
    assert_eq!(c.public_url.as_deref(), Some("https://hub.bank.example"));
    for (value, says) in [
        ("'none' https://a.example", "must stand alone"),
        ("https://a.example; script-src *", "is not a frame source"),
        ("javascript:alert(1)", "is not a frame source"),
        ("'unsafe-inline'", "is not a frame source"),
    ] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_PORTAL_FRAME_ANCESTORS", value)])).expect_err(value);
        let p = err.0.iter().find(|p| p.variable == "STREAMING_HUB_PORTAL_FRAME_ANCESTORS").expect("named");
        assert!(p.message.contains(says), "{value}: {}", p.message);
    }
    let err = Config::from_vars(vars(&[("STREAMING_HUB_PUBLIC_URL", "hub.example")])).expect_err("no scheme");
    assert_eq!(err.0[0].variable, "STREAMING_HUB_PUBLIC_URL");
}

#[test]
fn dispatch_workers_is_a_deprecated_name_of_max_in_flight() {
    let c = Config::from_vars(vars(&[("STREAMING_HUB_DISPATCH_WORKERS", "16")])).expect("valid");
    assert_eq!(c.max_in_flight, 16);
    assert_eq!(c.deprecated.iter().map(|(v, _)| *v).collect::<Vec<_>>(), vec!["STREAMING_HUB_DISPATCH_WORKERS"]);
    let c = Config::from_vars(vars(&[("STREAMING_HUB_MAX_IN_FLIGHT", "300")])).expect("valid");
    assert_eq!((c.max_in_flight, c.deprecated.len()), (300, 0));
    let err =
        Config::from_vars(vars(&[("STREAMING_HUB_MAX_IN_FLIGHT", "300"), ("STREAMING_HUB_DISPATCH_WORKERS", "8")]))
            .expect_err("both set");
    assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_DISPATCH_WORKERS"), "{err}");
    for bad in ["0", "65537", "lots"] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_MAX_IN_FLIGHT", bad)])).expect_err(bad);
        assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_MAX_IN_FLIGHT"), "{err}");
    }
    for bad in ["0", "1.5", "-0.2", "half"] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_TENANT_IN_FLIGHT_SHARE", bad)])).expect_err(bad);
        assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_TENANT_IN_FLIGHT_SHARE"), "{err}");
    }
    let c = Config::from_vars(HashMap::new()).expect("defaults");
    assert_eq!((c.max_in_flight, c.tenant_in_flight_share), (2048, 0.5));
}

#[test]
fn the_filter_budget_is_a_bounded_duration() {
    assert_eq!(Config::from_vars(HashMap::new()).expect("defaults").filter_budget, Duration::from_millis(1));
    let c = Config::from_vars(vars(&[("STREAMING_HUB_FILTER_BUDGET", "250us")])).expect("valid");
    assert_eq!(c.filter_budget, Duration::from_micros(250));
    for bad in ["0s", "2s", "5us", "soon"] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_FILTER_BUDGET", bad)])).expect_err(bad);
        assert!(err.0.iter().any(|p| p.variable == "STREAMING_HUB_FILTER_BUDGET"), "{err}");
    }
}

#[test]
fn an_oidc_issuer_is_an_https_origin() {
    for bad in
        ["http://hub.example.com", "https://hub.example.com/oidc", "https://hub.example.com?x=1", "hub.example.com"]
    {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_OIDC_ISSUER", bad)])).expect_err(bad);
        assert_eq!(err.0[0].variable, "STREAMING_HUB_OIDC_ISSUER", "{bad}");
    }
    for (good, issuer) in [
        ("https://hub.example.com/", "https://hub.example.com"),
        ("https://hub.example.com:8443", "https://hub.example.com:8443"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ] {
        let config = Config::from_vars(vars(&[("STREAMING_HUB_OIDC_ISSUER", good)])).expect(good);
        assert_eq!(config.oidc_issuer.as_deref(), Some(issuer));
    }
}

#[test]
fn transform_limits_take_durations_and_sizes() {
    let config =
        Config::from_vars(vars(&[("STREAMING_HUB_TRANSFORM_CPU", "2ms"), ("STREAMING_HUB_TRANSFORM_MEMORY", "32MiB")]))
            .expect("valid");
    assert_eq!((config.transform_cpu, config.transform_memory), (Duration::from_millis(2), 32 << 20));
    let defaults = Config::from_vars(vars(&[])).expect("valid");
    assert_eq!((defaults.transform_cpu, defaults.transform_memory), (Duration::from_millis(5), 16 << 20));
    for bad in ["0", "512KiB", "2GiB", "lots"] {
        let err = Config::from_vars(vars(&[("STREAMING_HUB_TRANSFORM_MEMORY", bad)])).expect_err(bad);
        assert_eq!(err.0[0].variable, "STREAMING_HUB_TRANSFORM_MEMORY", "{bad}");
    }
}

#[test]
fn the_stall_timeout_is_longer_than_the_lease() {
    let c = Config::from_vars(vars(&[])).expect("valid");
    assert_eq!(c.dispatch_stall_timeout, Duration::from_secs(120));
    let err = Config::from_vars(vars(&[
        ("STREAMING_HUB_DISPATCH_LEASE", "90s"),
        ("STREAMING_HUB_DISPATCH_STALL_TIMEOUT", "60s"),
    ]))
    .expect_err("shorter than the lease");
    assert_eq!(err.0[0].variable, "STREAMING_HUB_DISPATCH_STALL_TIMEOUT");
}

mod sso_issuers_parser {
    use proptest::prelude::*;

    use super::values::sso_issuers;

    #[test]
    fn issuers_are_https_or_loopback_http_in_local() {
        assert_eq!(
            sso_issuers("https://idp.example.com/realms/hub/, https://login.example.com/t/v2.0", false),
            Ok(vec!["https://idp.example.com/realms/hub".to_owned(), "https://login.example.com/t/v2.0".to_owned()])
        );
        assert_eq!(sso_issuers("http://127.0.0.1:8080", true), Ok(vec!["http://127.0.0.1:8080".to_owned()]));
        for (raw, local) in [
            ("http://127.0.0.1:8080", false),
            ("http://idp.example.com", true),
            ("https://idp.example.com?x=1", false),
            ("https://u:p@idp.example.com", false),
            ("ftp://idp.example.com", false),
            ("", false),
        ] {
            let refused = sso_issuers(raw, local).expect_err(raw);
            assert!(refused.starts_with("entry 1"), "{raw}: {refused}");
        }
    }

    proptest! {
        /// Whatever the variable holds, it is a list of issuers the hub may fetch from, or a
        /// refusal naming the entry; never a panic.
        #[test]
        fn any_text_is_issuers_or_a_refusal(raw in ".{0,120}", local in any::<bool>()) {
            match sso_issuers(&raw, local) {
                Ok(issuers) => {
                    for issuer in issuers {
                        let url = url::Url::parse(&issuer).expect("an issuer is a URL");
                        prop_assert!(url.scheme() == "https" || (local && url.scheme() == "http"), "{issuer}");
                        prop_assert!(!issuer.ends_with('/'));
                    }
                }
                Err(why) => prop_assert!(why.starts_with("entry ") || why.starts_with("names more"), "{why}"),
            }
        }
    }
}

#[test]
fn console_sign_in_needs_an_issuer_and_outside_local_an_https_address() {
    let problems = |pairs: &[(&str, &str)]| -> Vec<String> {
        match Config::from_vars(vars(pairs)) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|p| p.variable.clone()).collect(),
        }
    };
    assert_eq!(
        problems(&[("STREAMING_HUB_SSO_CONSOLE_CLIENT_ID", "console")]),
        ["STREAMING_HUB_SSO_CONSOLE_CLIENT_ID"]
    );
    assert_eq!(
        problems(&[("STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET", "a-secret")]),
        ["STREAMING_HUB_SSO_CONSOLE_CLIENT_SECRET"]
    );
    assert_eq!(problems(&[("STREAMING_HUB_SSO_SESSION_TTL", "1m")]), ["STREAMING_HUB_SSO_SESSION_TTL"]);
    assert_eq!(problems(&[("STREAMING_HUB_SSO_SESSION_TTL", "30d")]), ["STREAMING_HUB_SSO_SESSION_TTL"]);
    let sso = [
        ("STREAMING_HUB_SSO_ISSUERS", "https://idp.bank.example/realms/hub"),
        ("STREAMING_HUB_SSO_AUDIENCE", "streaming-hub"),
        ("STREAMING_HUB_SSO_CONSOLE_CLIENT_ID", "console"),
    ];
    let local = Config::from_vars(vars(&sso)).expect("local needs no public address");
    assert_eq!(local.sso_console_client_id.as_deref(), Some("console"));
    assert_eq!(local.sso_session_ttl, Duration::from_secs(8 * 3600));
    let staging = |public: &str| {
        let mut pairs = sso.to_vec();
        pairs.extend([
            ("STREAMING_HUB_ENV", "staging"),
            ("STREAMING_HUB_ADMIN_TOKEN", "a-long-enough-admin-token"),
            ("STREAMING_HUB_PUBLIC_URL", public),
        ]);
        problems(&pairs)
    };
    assert_eq!(staging("http://hub.bank.example"), ["STREAMING_HUB_PUBLIC_URL"]);
    assert_eq!(staging("https://hub.bank.example"), Vec::<String>::new());
}
