//! The `streaming-hub` binary: `serve`, `migrate`, `demo`, `api-key create`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hub_core::TenantId;
use streaming_hub::config::Config;
use streaming_hub::{api, telemetry};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "streaming-hub", version, about = "Event delivery hub: CloudEvents in, webhooks and queues out")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the hub (configured by STREAMING_HUB_* variables).
    Serve,
    /// Apply pending database migrations and exit.
    Migrate,
    /// Show the whole product on a throwaway embedded hub, with a local receiver.
    Demo,
    /// Run a benchmark scenario and print its figures.
    Bench {
        #[command(subcommand)]
        scenario: BenchScenario,
    },
    /// Manage tenant API keys.
    ApiKey {
        #[command(subcommand)]
        command: ApiKeyCommand,
    },
}

#[derive(Subcommand)]
enum BenchScenario {
    /// Events posted over HTTP, delivered to a local webhook receiver.
    PushBurst {
        /// How many events.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Concurrent producers.
        #[arg(long, default_value_t = 32)]
        producers: usize,
        /// Where the figures are written as JSON.
        #[arg(long, default_value = "bench-results/push-burst.json")]
        json: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum ApiKeyCommand {
    /// Create a key for a tenant and print it (shown once).
    Create {
        /// The tenant the key belongs to.
        #[arg(long)]
        tenant: String,
        /// A label to tell keys apart.
        #[arg(long, default_value = "cli")]
        name: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // The demo prints a report; its logs stay quiet unless asked for.
    let default_filter = if matches!(cli.command, Command::Demo | Command::Bench { .. }) { "warn" } else { "info" };
    telemetry::init_logs(!config.env.is_local(), default_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command, config)) {
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
        Command::Demo => streaming_hub::demo::run().await,
        Command::Bench { scenario: BenchScenario::PushBurst { events, producers, json } } => {
            anyhow::ensure!(events > 0, "--events: must be at least 1");
            anyhow::ensure!(producers > 0, "--producers: must be at least 1");
            streaming_hub::bench::push_burst(events, producers, &json).await
        }
        Command::Migrate => {
            let store = streaming_hub::open_store(&config, true).await?;
            let pending = store.pending_migrations().await?;
            anyhow::ensure!(pending.is_empty(), "migrations still pending: {pending:?}");
            println!("database schema is up to date");
            Ok(())
        }
        Command::ApiKey { command: ApiKeyCommand::Create { tenant, name } } => {
            let tenant = TenantId::parse(&tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
            api::admin::valid_name("--name", &name).map_err(|e| anyhow::anyhow!("{}", e.message))?;
            let store = streaming_hub::open_store(&config, false).await?;
            let (record, key) = streaming_hub::keys::issue(store.as_ref(), &tenant, &name).await?;
            eprintln!("created API key {} for tenant {} (shown once):", record.id, record.tenant_id);
            println!("{key}");
            Ok(())
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let hub = streaming_hub::start(config, shutdown.clone()).await?;
    if hub.admin_token_generated {
        // Local mode only: the operator needs this token to call /admin.
        println!("STREAMING_HUB_ADMIN_TOKEN not set; generated for this run: {}", hub.admin_token.expose());
    }
    println!("streaming hub listening on http://{}", hub.addr);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received; draining");
        shutdown.cancel();
    });
    hub.wait().await
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
