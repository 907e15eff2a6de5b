//! `hub-bench`: the benchmark scenarios of Streaming Hub (docs/BENCHMARKS.md). Each starts the
//! `streaming-hub` binary as a process of its own and drives it from this one.
#![forbid(unsafe_code)]

mod auth;
mod catalog;
mod crowd;
mod fanout;
mod harness;
mod history;
mod ingest;
mod peer;
mod portal;
mod retention;
mod roles;
mod routing;
mod scale;
mod scenarios;
mod sinks;
mod slow;
mod sso;
mod stats;
mod transform;

use std::process::ExitCode;

use clap::Parser;

/// Benchmark scenarios (see docs/BENCHMARKS.md). Each prints a table and writes JSON (`--json`,
/// default `bench-results/<scenario>.json`). The hub runs as a process of its own, on SQLite, or on
/// PostgreSQL when `STREAMING_HUB_POSTGRES_DSN` is set.
#[derive(Parser)]
#[command(name = "hub-bench", version, about = "Streaming Hub benchmarks: measured figures, never test assertions")]
enum BenchScenario {
    /// Kafka into the inbox, against a plain batched INSERT of the same rows.
    Ingest {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 8, value_parser = at_least_one)]
        tenants: usize,
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..=64))]
        partitions: i32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A burst of events (HTTP or Kafka) delivered to webhook receivers answering 204.
    PushBurst {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        /// Concurrent HTTP producers.
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        /// Tenants, each with a webhook subscription to its own receiver URL.
        #[arg(long, default_value_t = 4, value_parser = at_least_one)]
        tenants: usize,
        #[arg(long, value_enum, default_value = "http")]
        via: scenarios::Via,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A steady rate of events: end-to-end latency.
    Steady {
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        rate: u32,
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One tenant floods while another sends a trickle: the trickle's latency against alone.
    Fairness {
        #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
        flood: usize,
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A fast subscription's throughput alone and beside one whose receiver takes 2 s.
    SlowDestination {
        #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A new subscription replays the inbox while one tenant sends live events: their latency
    /// against alone.
    Replay {
        /// Events in the inbox before the replay.
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        history: usize,
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        rate: u32,
        /// The replay's own rate (its request's `rate`); the hub's default when left out.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        replay_rate: Option<u32>,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// The disk under the store: how long each commit-sized write and `fdatasync` takes, as fast
    /// as they go (PostgreSQL's WAL flush at every commit). No hub runs.
    Disk {
        /// A folder on the store's disk (for PostgreSQL, one on its data directory's file system).
        #[arg(long, default_value_os_t = std::env::temp_dir())]
        dir: std::path::PathBuf,
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// PostgreSQL's own floor: one ~1 KiB row inserted and committed a statement, paced at
    /// `--rate`, then back to back. No hub runs; needs STREAMING_HUB_POSTGRES_DSN.
    Commit {
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        rate: u32,
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Ingest with subscriptions that carry content filters (a CESQL expression and a content
    /// pattern each, which every event passes), against the same subscriptions without filters.
    Routing {
        #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
        events: usize,
        /// Pull subscriptions of the one tenant.
        #[arg(long, default_value_t = 100, value_parser = at_least_one)]
        subscriptions: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One tenant's events to webhooks whose receivers answer after a delay (as real endpoints
    /// do), at the hub's defaults; optionally receivers that serve only so many at once.
    SlowReceivers {
        /// How long each receiver takes to answer, in milliseconds.
        #[arg(long, default_value_t = 200)]
        latency_ms: u64,
        #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        subscriptions: usize,
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        receivers: usize,
        /// Each subscription's receiver serves this many at once and answers 503 beyond.
        #[arg(long, value_parser = at_least_one)]
        capacity: Option<usize>,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        /// Delivery replicas on one PostgreSQL (events are posted to the first; each replica
        /// paces its share of the destinations).
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        replicas: usize,
        /// Receivers over TLS, of a private CA the subscriptions trust.
        #[arg(long)]
        tls: bool,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A steady rate to one webhook whose receiver answers late and keeps up: from each post to
    /// its request reaching the receiver, in the first five seconds and after.
    KeepsUp {
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
        rate: u32,
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(6..))]
        seconds: u64,
        /// How long the receiver takes to answer, in milliseconds.
        #[arg(long, default_value_t = 200)]
        latency_ms: u64,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// `slow-receivers` with one webhook, made of a peer (Svix or Hookdeck Outpost) started
    /// beforehand by its start script in `--run` (shared/peers/<peer>), for figures beside this
    /// hub's from the same harness.
    Peer {
        #[arg(long, value_enum)]
        peer: peer::Peer,
        /// The folder the peer's start script ran in (its token and PID files).
        #[arg(long)]
        run: std::path::PathBuf,
        /// The peer's API (Svix: http://127.0.0.1:8071, Outpost: http://127.0.0.1:8072).
        #[arg(long)]
        api: String,
        /// Where the receiver listens: the address the peer's endpoint points at.
        #[arg(long, default_value = "127.0.0.1:9100")]
        receiver: String,
        #[arg(long, default_value_t = 200)]
        latency_ms: u64,
        #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A draft selection tried on a large inbox: `--events` events over the last 24 hours loaded
    /// with COPY, then `POST …/simulate` over that day, three times (PostgreSQL only).
    Simulate {
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// What the subscriptions an event does not match cost it: for each `--counts` (the first is
    /// the one compared with), a hub whose tenant holds that many subscriptions matching none of
    /// the burst and one webhook that takes it all; with `--per-tenant N`, they belong to other
    /// tenants, `N` each.
    Crowd {
        #[arg(long, value_delimiter = ',', default_values_t = [10, 1_000, 10_000])]
        counts: Vec<usize>,
        #[arg(long, default_value_t = 0)]
        per_tenant: usize,
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Whether a full hub is as fast as an empty one: for each `--history` size (the first is the
    /// one compared with; 0 is an empty hub), a fresh hub whose tenant holds that many events, a
    /// pull stream over them and as many finished jobs and attempts, then a burst, steady
    /// latency, a pull page, the event log by type and by time and the subscription listing
    /// (PostgreSQL when STREAMING_HUB_POSTGRES_DSN is set, else SQLite).
    Scale {
        #[arg(long, value_delimiter = ',', default_values_t = [0, 1_000_000])]
        history: Vec<usize>,
        /// Finished jobs (one attempt each) stored beside the history: those of its newest events,
        /// at most one per event.
        #[arg(long, default_value_t = 5_000_000)]
        jobs: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Another tenant's HTTP ingest alone and while one tenant simulates a million events back to
    /// back (PostgreSQL only).
    SimulateFairness {
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
        events: usize,
        /// The other tenant's posts per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One customer's thousand events erased from a large inbox (`--events` loaded with COPY, as
    /// `simulate` does) while a writer ingests `--rate` events a second (PostgreSQL only).
    Erasure {
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 200)]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// What authenticating to a receiver costs a delivery: one webhook signed only, with HTTP
    /// Basic, an OAuth2 bearer token, TLS to a private CA, and mutual TLS, a fresh hub each.
    AuthCost {
        #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// What a person's token (single sign-on) costs a request beside an API key: the same read with
    /// a key, one remembered token, and a new token each time.
    SsoCost {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        requests: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// What a transform costs a delivery: one webhook over TLS with no transform, a trivial one and
    /// a realistic field mapping, a fresh hub each.
    TransformCost {
        #[arg(long, default_value_t = 4_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        /// Rounds of the three ways in turn, each transform set against its own round's none.
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        rounds: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// The budget is CPU time: a handler needing 2 ms of CPU (budget 5 ms) on every event while
    /// threads of this process keep every core busy, none of its runs refused.
    TransformBusy {
        #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
        events: usize,
        /// The CPU the handler is calibrated to need, ms.
        #[arg(long, default_value_t = 2.0)]
        cpu_ms: f64,
        /// Threads spinning beside the hub (default: twice the cores).
        #[arg(long)]
        spinners: Option<usize>,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One tenant's transformed deliveries alone and beside another tenant's subscriptions whose
    /// handlers spend their whole CPU budget on every run.
    TransformIsolation {
        /// The other tenant's subscriptions with hostile handlers.
        #[arg(long, default_value_t = 16, value_parser = at_least_one)]
        subscriptions: usize,
        /// Events posted to them.
        #[arg(long, default_value_t = 200, value_parser = at_least_one)]
        flood: usize,
        /// The measured tenant's posts per second.
        #[arg(long, default_value_t = 20)]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One tenant's deliveries alone and beside another tenant's subscriptions to receivers that
    /// never answer.
    Hanging {
        /// The other tenant's subscriptions to receivers that never answer.
        #[arg(long, default_value_t = 20, value_parser = at_least_one)]
        subscriptions: usize,
        /// Events posted to them.
        #[arg(long, default_value_t = 500, value_parser = at_least_one)]
        flood: usize,
        /// The measured tenant's posts per second.
        #[arg(long, default_value_t = 50)]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// One tenant's events to many webhooks over several receivers: every subscription takes
    /// every event; then many with a CESQL filter each, a few passing each event.
    Fanout {
        #[arg(long, default_value_t = 2_000, value_parser = at_least_one)]
        events: usize,
        /// Webhook subscriptions taking every event.
        #[arg(long, default_value_t = 100, value_parser = at_least_one)]
        subscriptions: usize,
        /// Receivers (each its own address) the subscriptions are spread over.
        #[arg(long, default_value_t = 10, value_parser = at_least_one)]
        receivers: usize,
        /// Webhook subscriptions with a CESQL filter each, in the second run.
        #[arg(long, default_value_t = 1_000, value_parser = at_least_one)]
        filtered: usize,
        /// How many of those each event passes.
        #[arg(long, default_value_t = 5, value_parser = at_least_one)]
        matches: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A burst to one webhook over many ordering keys, unordered and then ordered by key.
    Ordered {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 1_000, value_parser = at_least_one)]
        keys: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A burst to one subscription of each new sink type (Kafka; SNS, Kinesis and S3 on the AWS
    /// emulator at STREAMING_HUB_BENCH_AWS_ENDPOINT, default http://127.0.0.1:5000).
    Sinks {
        #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 16, value_parser = at_least_one)]
        producers: usize,
        /// Which sinks, comma-separated.
        #[arg(long, value_enum, value_delimiter = ',', default_values_t = [sinks::Kind::Kafka, sinks::Kind::Nats, sinks::Kind::Pubsub, sinks::Kind::Sns, sinks::Kind::Kinesis, sinks::Kind::S3])]
        sink: Vec<sinks::Kind>,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// HTTP ingest with payload checking off, warn and quarantine against a ~2 KiB schema, and the
    /// in-process cost of learning a type and of checking a body.
    Catalog {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A burst to one webhook: what the per-minute subscription statistics cost delivery.
    Stats {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// The console's reads on a tenant with many subscriptions and events, timed from outside.
    Portal {
        #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
        subscriptions: usize,
        #[arg(long, default_value_t = 1_000_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 32, value_parser = at_least_one)]
        producers: usize,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// What one event costs the ingest and the delivery side (hub CPU, PostgreSQL CPU, commits,
    /// WAL), for the capacity model in docs/SCALING.md. Needs PostgreSQL and Apache Kafka.
    Roles {
        #[arg(long, default_value_t = 50_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(i32).range(1..=64))]
        partitions: i32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Inbox retention at scale (PostgreSQL only): one day of events, loaded with COPY over eight
    /// days, removed in the layout before (rows deleted) and in the partitioned inbox (a day
    /// dropped), with a writer's latency before and during.
    Retention {
        #[arg(long, default_value_t = 10_000_000, value_parser = at_least_one)]
        events: usize,
        /// Bytes of each event's JSON payload.
        #[arg(long, default_value_t = 1024, value_parser = at_least_one)]
        payload: usize,
        /// Events a second the writer ingests meanwhile.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Job retention at scale (PostgreSQL only): one day of finished jobs with their attempts,
    /// spread over eight days, removed in the layout before (rows deleted) and in partitioned jobs
    /// (a day dropped), with PostgreSQL's CPU per retained row and a writer's latency.
    JobRetention {
        #[arg(long, default_value_t = 5_000_000, value_parser = at_least_one)]
        jobs: usize,
        /// Events a second the writer ingests meanwhile (each makes a job).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        rate: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// A pull consumer paging with next_cursor.
    Pull {
        #[arg(long, default_value_t = 20_000, value_parser = at_least_one)]
        events: usize,
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1000))]
        page: u32,
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
}

fn at_least_one(raw: &str) -> Result<usize, String> {
    match raw.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("must be a whole number of at least 1 (got {raw:?})")),
    }
}

fn json_path(json: Option<std::path::PathBuf>, scenario: &str) -> std::path::PathBuf {
    json.unwrap_or_else(|| std::path::PathBuf::from(format!("bench-results/{scenario}.json")))
}

#[tokio::main]
async fn main() -> ExitCode {
    let scenario = BenchScenario::parse();
    match run(scenario).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(scenario: BenchScenario) -> anyhow::Result<()> {
    match scenario {
        BenchScenario::Ingest { events, tenants, partitions, json } => {
            ingest::ingest(events, tenants, partitions, &json_path(json, "ingest")).await
        }
        BenchScenario::PushBurst { events, producers, tenants, via, json } => {
            let name = if via == scenarios::Via::Kafka { "push-burst-kafka" } else { "push-burst" };
            scenarios::push_burst(events, producers, tenants, via, &json_path(json, name)).await
        }
        BenchScenario::Steady { rate, seconds, json } => {
            scenarios::steady(rate, seconds, &json_path(json, "steady")).await
        }
        BenchScenario::Fairness { flood, rate, json } => {
            scenarios::fairness(flood, rate, &json_path(json, "fairness")).await
        }
        BenchScenario::SlowDestination { events, json } => {
            scenarios::slow_destination(events, &json_path(json, "slow-destination")).await
        }
        BenchScenario::Disk { dir, seconds, json } => scenarios::disk(&dir, seconds, &json_path(json, "disk")),
        BenchScenario::Commit { rate, seconds, json } => {
            scenarios::commit(rate, seconds, &json_path(json, "commit")).await
        }
        BenchScenario::Routing { events, subscriptions, producers, json } => {
            routing::routing(events, subscriptions, producers, &json_path(json, "routing")).await
        }
        BenchScenario::SlowReceivers {
            latency_ms,
            events,
            subscriptions,
            receivers,
            capacity,
            producers,
            replicas,
            tls,
            json,
        } => {
            slow::slow_receivers(
                latency_ms,
                events,
                subscriptions,
                receivers,
                capacity,
                producers,
                replicas,
                tls,
                &json_path(json, "slow-receivers"),
            )
            .await
        }
        BenchScenario::Peer { peer, run, api, receiver, latency_ms, events, producers, json } => {
            peer::peer(peer, run, api, receiver, latency_ms, events, producers, &json_path(json, "peer")).await
        }
        BenchScenario::Crowd { counts, per_tenant, events, json } => {
            crowd::crowd(&counts, per_tenant, events, &json_path(json, "crowd")).await
        }
        BenchScenario::KeepsUp { rate, seconds, latency_ms, json } => {
            slow::keeps_up(rate, seconds, latency_ms, &json_path(json, "keeps-up")).await
        }
        BenchScenario::Scale { history, jobs, json } => scale::scale(&history, jobs, &json_path(json, "scale")).await,
        BenchScenario::Simulate { events, json } => history::simulate(events, &json_path(json, "simulate")).await,
        BenchScenario::SimulateFairness { events, rate, json } => {
            history::simulate_fairness(events, rate, &json_path(json, "simulate-fairness")).await
        }
        BenchScenario::Erasure { events, rate, json } => {
            history::erasure(events, rate, &json_path(json, "erasure")).await
        }
        BenchScenario::AuthCost { events, producers, json } => {
            auth::auth_cost(events, producers, &json_path(json, "auth-cost")).await
        }
        BenchScenario::SsoCost { requests, json } => sso::sso_cost(requests, &json_path(json, "sso-cost")).await,
        BenchScenario::TransformCost { events, producers, rounds, json } => {
            transform::transform_cost(events, producers, rounds, &json_path(json, "transform-cost")).await
        }
        BenchScenario::TransformBusy { events, cpu_ms, spinners, json } => {
            let spinners = spinners.unwrap_or_else(|| 2 * std::thread::available_parallelism().map_or(2, |n| n.get()));
            transform::transform_busy(events, cpu_ms, spinners, &json_path(json, "transform-busy")).await
        }
        BenchScenario::TransformIsolation { subscriptions, flood, rate, json } => {
            slow::transform_isolation(subscriptions, flood, rate, &json_path(json, "transform-isolation")).await
        }
        BenchScenario::Hanging { subscriptions, flood, rate, json } => {
            slow::hanging(subscriptions, flood, rate, &json_path(json, "hanging")).await
        }
        BenchScenario::Fanout { events, subscriptions, receivers, filtered, matches, producers, json } => {
            fanout::fanout(events, subscriptions, receivers, filtered, matches, producers, &json_path(json, "fanout"))
                .await
        }
        BenchScenario::Ordered { events, keys, producers, json } => {
            routing::ordered(events, keys, producers, &json_path(json, "ordered")).await
        }
        BenchScenario::Sinks { events, producers, sink, json } => {
            sinks::sinks(&sink, events, producers, &json_path(json, "sinks")).await
        }
        BenchScenario::Catalog { events, producers, json } => {
            catalog::catalog(events, producers, &json_path(json, "catalog")).await
        }
        BenchScenario::Stats { events, producers, json } => {
            stats::stats(events, producers, &json_path(json, "stats")).await
        }
        BenchScenario::Portal { subscriptions, events, producers, json } => {
            portal::portal(subscriptions, events, producers, &json_path(json, "portal")).await
        }
        BenchScenario::Roles { events, partitions, json } => {
            roles::roles(events, partitions, &json_path(json, "roles")).await
        }
        BenchScenario::Retention { events, payload, rate, json } => {
            retention::retention(events, payload, rate, &json_path(json, "retention")).await
        }
        BenchScenario::JobRetention { jobs, rate, json } => {
            retention::job_retention(jobs, rate, &json_path(json, "job-retention")).await
        }
        BenchScenario::Pull { events, page, json } => scenarios::pull(events, page, &json_path(json, "pull")).await,
        BenchScenario::Replay { history, rate, replay_rate, json } => {
            scenarios::replay(history, rate, replay_rate, &json_path(json, "replay")).await
        }
    }
}
