//! The `streaming-hub` binary: `serve`, `migrate`, `demo`, `check-config`, `api-key create`,
//! `openapi`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use streaming_hub::config::Config;
use streaming_hub::{telemetry, trace};
use tokio_util::sync::CancellationToken;

/// mimalloc, built without transparent huge pages, for the process's Rust allocations (QuickJS
/// keeps the C library's: docs/DECISIONS.md). The `system-allocator` feature leaves them to the C
/// library, where heap profilers (heaptrack) see them.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "streaming-hub",
    version = streaming_hub::VERSION,
    about = "Event delivery hub: CloudEvents in, webhooks and queues out"
)]
struct Cli {
    /// A TOML file of settings (the STREAMING_HUB_* names, see docs/CONFIGURATION.md); the
    /// environment overrides it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the hub (configured by STREAMING_HUB_* variables and --config).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Show the whole product on a throwaway embedded hub, with a local receiver.
    Demo,
    /// Check the configuration (the environment and --config) without starting: every problem
    /// and every STREAMING_HUB_* variable this hub does not read is named; exits 2 on any.
    CheckConfig,
    /// Print the OpenAPI document this build serves at /openapi.json (sdk/ generates its API
    /// clients from it); reads no configuration.
    Openapi,
    /// Manage tenant API keys.
    ApiKey {
        #[command(subcommand)]
        command: ApiKeyCommand,
    },
    /// The ledger (docs/LEDGER.md); reads no configuration.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Check an export (`GET /v1/ledger/export`) without the hub: every entry's hash, every
    /// checkpoint's signature, and the tree at every checkpoint. Exits 0 when everything fits,
    /// 1 naming the first entry or checkpoint that does not, 2 when the file cannot be read.
    Verify {
        /// The export (JSON lines); `-` reads standard input.
        file: std::path::PathBuf,
        /// The hub's public keys (`/.well-known/ledger-keys.json`, saved), trusted instead of
        /// the keys the export lists.
        #[arg(long, value_name = "FILE")]
        keys: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum ApiKeyCommand {
    /// Create a key for a tenant and print it (shown once).
    Create {
        /// The tenant the key belongs to.
        #[arg(long, required_unless_present = "admin", conflicts_with = "admin")]
        tenant: Option<String>,
        /// An operator's admin key instead (the admin routes, named and revocable).
        #[arg(long)]
        admin: bool,
        /// A label to tell keys apart.
        #[arg(long, default_value = "cli")]
        name: String,
        /// The key stops working after this long (such as 90d or 12h); it never expires when
        /// omitted.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
        /// The key's role in its tenant: admin (everything), operator or viewer.
        #[arg(long, default_value = "admin", conflicts_with = "admin")]
        role: String,
    },
}

fn main() -> ExitCode {
    // `transform-worker`: a process the hub starts to run tenants' transforms over its standard
    // input and output (docs/TRANSFORMS.md). It confines itself and reads nothing of the hub's
    // configuration, so it is told apart before anything else is parsed.
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(hub_transform::worker::COMMAND) {
        return hub_transform::worker::main(args);
    }
    let cli = Cli::parse();
    if matches!(cli.command, Command::Openapi) {
        let doc = streaming_hub::openapi_json();
        println!("{}", serde_json::to_string_pretty(&doc).expect("the document serialises"));
        return ExitCode::SUCCESS;
    }
    if let Command::Ledger { command: LedgerCommand::Verify { file, keys } } = &cli.command {
        return verify_ledger(file, keys.as_deref());
    }
    let loaded = streaming_hub::config::file::merged(cli.config.as_deref(), std::env::vars().collect()).and_then(
        |vars| match cli.command {
            Command::Migrate => Config::for_migrate(vars),
            _ => Config::from_vars(vars),
        },
    );
    let config = match loaded {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if matches!(cli.command, Command::CheckConfig) {
        if config.ignored.is_empty() {
            println!("configuration is valid ({} environment, {} role)", config.env.as_str(), config.summary()["role"]);
            return ExitCode::SUCCESS;
        }
        for variable in &config.ignored {
            eprintln!("error: {variable}: is not a setting of this hub (see docs/CONFIGURATION.md)");
        }
        return ExitCode::from(2);
    }
    // The demo prints a report; its logs stay quiet unless asked for.
    let default_filter = if matches!(cli.command, Command::Demo) { "warn" } else { "info" };
    // Only the service exports traces.
    let traces = match cli.command {
        Command::Serve => trace::wanted(&std::env::vars().collect()),
        _ => trace::Wanted::Off,
    };
    let exporter = match telemetry::init(!config.env.is_local(), config.log.as_deref(), default_filter, &traces) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let trace::Wanted::Otlp(endpoint) = &traces {
        tracing::info!(endpoint = %endpoint, "traces are exported over OTLP");
    }
    telemetry::log_panics();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli.command, config));
    drop(runtime);
    // What is buffered goes out before the process ends.
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, config: Config) -> anyhow::Result<()> {
    match command {
        Command::Serve => serve(config).await,
        Command::Demo => streaming_hub::run_demo().await,
        Command::CheckConfig | Command::Openapi | Command::Ledger { .. } => Ok(()),
        Command::Migrate => {
            // Opening with `migrate` applies what is pending and logs which migrations those were.
            let store = streaming_hub::open_store(&config, true).await?;
            let pending = store.pending_migrations().await?;
            anyhow::ensure!(pending.is_empty(), "migrations still pending: {pending:?}");
            println!("database schema is up to date");
            Ok(())
        }
        Command::ApiKey { command: ApiKeyCommand::Create { tenant, admin, name, expires_in, role } } => {
            let store = streaming_hub::open_store(&config, false).await?;
            let request = streaming_hub::KeyRequest { tenant, admin, name, expires_in, role };
            let (record, key) = streaming_hub::create_api_key(store.as_ref(), request).await?;
            match &record.tenant_id {
                Some(t) => eprintln!("created API key {} for tenant {t} (shown once):", record.id),
                None => eprintln!("created admin key {} named {} (shown once):", record.id, record.name),
            }
            println!("{key}");
            Ok(())
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    raise_open_files();
    let shutdown = CancellationToken::new();
    let hub = streaming_hub::start(config, shutdown.clone()).await?;
    if hub.admin_token_generated {
        // Local mode only: the operator needs this token to call /admin.
        if let Some(token) = &hub.admin_token {
            println!("STREAMING_HUB_ADMIN_TOKEN not set; generated for this run: {}", token.expose());
        }
    }
    println!("streaming hub listening on http://{}", hub.addr);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; draining");
        shutdown.cancel();
    });
    hub.wait().await
}

/// Raises the soft limit of open files to the hard one, as Go's runtime does for its programs:
/// each attempt out and each connection kept to a receiver is a descriptor, and a container's soft
/// limit may be 1 024 (docs/OPERATIONS.md, "Attempts in flight").
fn raise_open_files() {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        if let (Some(soft), Some(hard)) = (limit.current, limit.maximum)
            && soft < hard
        {
            match setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) }) {
                Ok(()) => tracing::info!(from = soft, to = hard, "raised the limit of open files"),
                Err(e) => tracing::warn!(limit = soft, error = %e, "could not raise the limit of open files"),
            }
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// `streaming-hub ledger verify`.
fn verify_ledger(file: &std::path::Path, keys: Option<&std::path::Path>) -> ExitCode {
    use std::io::BufRead;
    let pinned = match keys.map(std::fs::read_to_string).transpose() {
        Ok(None) => None,
        Ok(Some(text)) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(doc) if !hub_core::ledger::export::keys_of(&doc).is_empty() => {
                Some(hub_core::ledger::export::keys_of(&doc))
            }
            _ => {
                eprintln!("error: --keys: not a JWKS document with Ed25519 keys ({{\"keys\": [...]}})");
                return ExitCode::from(2);
            }
        },
        Err(e) => {
            eprintln!("error: --keys: {e}");
            return ExitCode::from(2);
        }
    };
    let reader: Box<dyn BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        match std::fs::File::open(file) {
            Ok(f) => Box::new(std::io::BufReader::new(f)),
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                return ExitCode::from(2);
            }
        }
    };
    let mut unreadable = None;
    let lines = reader.lines().map_while(|l| match l {
        Ok(l) => Some(l),
        Err(e) => {
            unreadable = Some(e);
            None
        }
    });
    let verdict = hub_core::ledger::export::verify_with(lines, pinned);
    if let Some(e) = unreadable {
        eprintln!("error: {}: {e}", file.display());
        return ExitCode::from(2);
    }
    match verdict {
        Ok(v) => {
            println!(
                "ok: {}: {} entries, {} checkpoints verified; signed up to {} (root {})",
                v.log,
                v.entries,
                v.checkpoints,
                v.signed_size,
                v.signed_root.as_deref().unwrap_or("none")
            );
            if v.start > 0 {
                println!("note: entries 0..{} are past retention; the log is checked from their peaks", v.start);
            }
            if v.entries > v.signed_size {
                println!("note: the last {} entries are not covered by a checkpoint yet", v.entries - v.signed_size);
            }
            ExitCode::SUCCESS
        }
        Err(mismatch) => {
            eprintln!("error: {mismatch}");
            ExitCode::from(1)
        }
    }
}
