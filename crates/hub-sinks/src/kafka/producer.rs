//! One destination's idempotent producer: a task that owns the connections, the cluster's metadata,
//! the producer id and each partition's sequence, fed by the attempts through a channel.
//!
//! Whatever attempts are waiting when the task comes round go out together: one `Produce` per
//! leader, one batch per partition, acknowledged by every in-sync replica (`acks=all`). At one
//! attempt at a time this is one request per record; under load the batches grow by themselves,
//! with no lingering. A request whose connection failed before its answer is sent once more,
//! identical (same producer id, epoch and sequences), on a new connection: the broker keeps one
//! copy. Any other failure takes a new producer id, so the sequences start clean.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::conn::{Conn, Dialer};
use crate::sink::failure;
use super::protocol::{self, Metadata, ProducerId, Record, code};
use crate::sink::{Failure, FailureKind};

/// Records sent in one round at most.
const MAX_ROUND: usize = 512;
/// How long metadata is trusted without a failure to say otherwise.
const METADATA_TTL: Duration = Duration::from_secs(300);

/// A record to produce, and where its outcome goes.
pub struct Job {
    pub record: Record,
    pub reply: oneshot::Sender<Result<(), Failure>>,
}

/// The handle attempts hold: the task ends when the last handle is dropped.
#[derive(Debug, Clone)]
pub struct Producer {
    jobs: mpsc::Sender<Job>,
}

impl Producer {
    /// Starts the task of a destination.
    pub fn start(dialer: Dialer, bootstrap: Vec<(String, u16)>, topic: String) -> Self {
        let (jobs, rx) = mpsc::channel(4 * MAX_ROUND);
        let state = State {
            dialer,
            bootstrap,
            topic,
            conns: HashMap::new(),
            metadata: None,
            metadata_stale: false,
            producer: None,
            sequences: HashMap::new(),
        };
        tokio::spawn(state.run(rx));
        Self { jobs }
    }

    /// Produces one record; `Ok` once every in-sync replica has it.
    pub async fn send(&self, record: Record, timeout: Duration) -> Result<(), Failure> {
        let (reply, outcome) = oneshot::channel();
        let waited = tokio::time::timeout(timeout, async {
            self.jobs.send(Job { record, reply }).await.map_err(|_| closed())?;
            outcome.await.map_err(|_| closed())?
        });
        waited.await.unwrap_or_else(|_| {
            Err(failure(
                true,
                FailureKind::Timeout,
                format!("Kafka did not acknowledge within {} ms", timeout.as_millis()),
            ))
        })
    }
}

fn closed() -> Failure {
    failure(true, FailureKind::Unreachable, "the Kafka producer stopped")
}

struct State {
    dialer: Dialer,
    bootstrap: Vec<(String, u16)>,
    topic: String,
    /// Connections by broker node id.
    conns: HashMap<i32, Conn>,
    metadata: Option<(Metadata, Instant)>,
    /// A failure said the metadata may be out of date.
    metadata_stale: bool,
    producer: Option<ProducerId>,
    /// The next sequence of each partition, for the current producer id.
    sequences: HashMap<i32, i32>,
}

impl State {
    async fn run(mut self, mut rx: mpsc::Receiver<Job>) {
        while let Some(first) = rx.recv().await {
            let mut round = vec![first];
            while round.len() < MAX_ROUND {
                match rx.try_recv() {
                    Ok(job) => round.push(job),
                    Err(_) => break,
                }
            }
            // An attempt that gave up waiting is not sent: it is retried later as a whole.
            round.retain(|job| !job.reply.is_closed());
            if !round.is_empty() {
                self.round(round).await;
            }
        }
    }

    /// Produces one round of records and answers each.
    async fn round(&mut self, jobs: Vec<Job>) {
        let metadata = match self.metadata().await {
            Ok(metadata) => metadata,
            Err(f) => {
                for job in jobs {
                    let _ = job.reply.send(Err(f.clone()));
                }
                return;
            }
        };
        // By leader, then partition, in the order the attempts came.
        let mut by_leader: BTreeMap<i32, BTreeMap<i32, Vec<Job>>> = BTreeMap::new();
        for job in jobs {
            let partition = protocol::partition_for(&job.record.key, metadata.leaders.len()) as i32;
            let leader = metadata.leaders[partition as usize];
            by_leader.entry(leader).or_default().entry(partition).or_default().push(job);
        }
        for (leader, partitions) in by_leader {
            // Asked again for each leader: a failure with the previous one takes a new id.
            match self.producer_id().await {
                Ok(producer) => self.produce(leader, producer, partitions).await,
                Err(f) => answer_all(partitions, &f),
            }
        }
    }

    /// The topic's metadata: cached, or asked of a broker (known ones first, then bootstrap).
    async fn metadata(&mut self) -> Result<Metadata, Failure> {
        if let Some((m, at)) = &self.metadata
            && !self.metadata_stale
            && at.elapsed() < METADATA_TTL
        {
            return Ok(m.clone());
        }
        let answer = self.any_call(protocol::METADATA, &protocol::metadata(&self.topic)).await?;
        let metadata = protocol::metadata_response(&answer, &self.topic)
            .map_err(|e| failure(true, FailureKind::Refused, e.to_string()))?;
        match metadata.topic_error {
            code::NONE => {}
            code::UNKNOWN_TOPIC_OR_PARTITION => {
                return Err(failure(false, FailureKind::Refused, format!("the topic {} does not exist", self.topic)));
            }
            code::TOPIC_AUTHORIZATION_FAILED => {
                return Err(failure(
                    true,
                    FailureKind::Unauthorized,
                    format!("not authorized to write to the topic {}", self.topic),
                ));
            }
            other => {
                return Err(failure(
                    true,
                    FailureKind::Refused,
                    format!("the topic {} is not available: {}", self.topic, protocol::name(other)),
                ));
            }
        }
        if metadata.leaders.is_empty() || metadata.leaders.contains(&-1) {
            return Err(failure(
                true,
                FailureKind::Refused,
                format!("a partition of the topic {} has no leader now", self.topic),
            ));
        }
        self.metadata = Some((metadata.clone(), Instant::now()));
        self.metadata_stale = false;
        Ok(metadata)
    }

    /// The idempotent producer's id: kept, or asked for.
    async fn producer_id(&mut self) -> Result<ProducerId, Failure> {
        if let Some(p) = self.producer {
            return Ok(p);
        }
        // A cluster that is still starting answers "loading" or "not available" for a moment.
        let deadline = Instant::now() + self.dialer.timeout;
        let (error, id, epoch) = loop {
            let answer = self.any_call(protocol::INIT_PRODUCER_ID, &protocol::init_producer_id()).await?;
            let answer = protocol::init_producer_id_response(&answer)
                .map_err(|e| failure(true, FailureKind::Refused, e.to_string()))?;
            if !code::COORDINATOR_NOT_READY.contains(&answer.0) || Instant::now() >= deadline {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        match error {
            code::NONE => {}
            code::CLUSTER_AUTHORIZATION_FAILED => {
                return Err(failure(
                    true,
                    FailureKind::Unauthorized,
                    "not authorized to write idempotently (IdempotentWrite on the cluster)",
                ));
            }
            other => {
                return Err(failure(true, FailureKind::Refused, format!("no producer id: {}", protocol::name(other))));
            }
        }
        let producer = ProducerId { id, epoch };
        self.producer = Some(producer);
        self.sequences.clear();
        Ok(producer)
    }

    /// Forgets the producer id (the sequences start clean with the next) and asks for metadata
    /// again next time (the brokers' addresses are kept until then).
    fn reset(&mut self) {
        self.producer = None;
        self.sequences.clear();
        self.metadata_stale = true;
    }

    /// A request to any broker: a connected one, else a known one, else a bootstrap one.
    async fn any_call(&mut self, api_key: i16, body: &[u8]) -> Result<Vec<u8>, Failure> {
        let timeout = self.dialer.timeout;
        if let Some(node) = self.conns.keys().next().copied() {
            let conn = self.conns.get_mut(&node).expect("present");
            match conn.call(api_key, body, timeout).await {
                Ok(answer) => return Ok(answer),
                Err(_) => {
                    self.conns.remove(&node);
                }
            }
        }
        let mut last = failure(true, FailureKind::Unreachable, "no broker is configured");
        for (host, port) in self.bootstrap.clone() {
            match self.dialer.connect(&host, port).await {
                Ok(mut conn) => match conn.call(api_key, body, timeout).await {
                    Ok(answer) => return Ok(answer),
                    Err(f) => last = f,
                },
                Err(f) if f.kind == FailureKind::Forbidden || f.kind == FailureKind::Unauthorized => return Err(f),
                Err(f) => last = f,
            }
        }
        Err(last)
    }

    /// The connection to broker `node`, opened when needed.
    async fn conn(&mut self, node: i32) -> Result<&mut Conn, Failure> {
        if !self.conns.contains_key(&node) {
            let broker = self
                .metadata
                .as_ref()
                .and_then(|(m, _)| m.brokers.iter().find(|b| b.node_id == node).cloned())
                .ok_or_else(|| {
                    failure(true, FailureKind::Refused, format!("the cluster named no address for broker {node}"))
                })?;
            let conn = self.dialer.connect(&broker.host, broker.port).await?;
            self.conns.insert(node, conn);
        }
        Ok(self.conns.get_mut(&node).expect("inserted"))
    }

    /// One `Produce` to a leader; answers every job.
    async fn produce(&mut self, leader: i32, producer: ProducerId, partitions: BTreeMap<i32, Vec<Job>>) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut batches = Vec::with_capacity(partitions.len());
        for (partition, jobs) in &partitions {
            let records: Vec<&Record> = jobs.iter().map(|j| &j.record).collect();
            let sequence = self.sequences.entry(*partition).or_insert(0);
            batches.push((*partition, protocol::record_batch(&records, producer, *sequence, now_ms)));
            *sequence = sequence.wrapping_add(records.len() as i32) & i32::MAX;
        }
        let timeout = self.dialer.timeout;
        let request = protocol::produce(&self.topic, timeout.as_millis().saturating_sub(500).max(500) as i32, &batches);
        let mut answer = None;
        let mut last = None;
        // Sent at most twice: the second time only after the connection failed, identical.
        for _ in 0..2 {
            match self.conn(leader).await {
                Ok(conn) => match conn.call(protocol::PRODUCE, &request, timeout).await {
                    Ok(body) => {
                        answer = Some(body);
                        break;
                    }
                    Err(f) => {
                        self.conns.remove(&leader);
                        last = Some(f);
                    }
                },
                Err(f) => {
                    last = Some(f);
                    break;
                }
            }
        }
        let results = match answer.map(|body| protocol::produce_response(&body)) {
            Some(Ok(results)) => results,
            Some(Err(e)) => {
                self.reset();
                return answer_all(partitions, &failure(true, FailureKind::Refused, e.to_string()));
            }
            None => {
                self.reset();
                let f = last.unwrap_or_else(|| failure(true, FailureKind::Unreachable, "Kafka could not be reached"));
                return answer_all(partitions, &f);
            }
        };
        let mut failed = false;
        for (partition, jobs) in partitions {
            let error = results.iter().find(|(p, _)| *p == partition).map(|(_, e)| *e);
            let outcome = match error {
                Some(code::NONE | code::DUPLICATE_SEQUENCE_NUMBER) => Ok(()),
                Some(error) => {
                    failed = true;
                    let kind = if error == code::TOPIC_AUTHORIZATION_FAILED {
                        FailureKind::Unauthorized
                    } else {
                        FailureKind::Refused
                    };
                    Err(failure(
                        !protocol::permanent(error),
                        kind,
                        format!("Kafka refused the record: {}", protocol::name(error)),
                    ))
                }
                None => {
                    failed = true;
                    Err(failure(true, FailureKind::Refused, "Kafka's answer left out the record's partition"))
                }
            };
            for job in jobs {
                let _ = job.reply.send(outcome.clone());
            }
        }
        if failed {
            self.reset();
        }
    }
}

fn answer_all(partitions: BTreeMap<i32, Vec<Job>>, f: &Failure) {
    for job in partitions.into_values().flatten() {
        let _ = job.reply.send(Err(f.clone()));
    }
}
