//! Service tests: the real hub on port 0 with a fresh database (SQLite file or PostgreSQL
//! schema), driven over HTTP like a producer, a tenant and an operator would.

mod admin;
mod aws_sinks;
mod catalog;
mod chaos;
mod cli;
mod clients;
mod console;
mod crash;
mod delivery;
mod erasure;
mod failover;
mod ingest;
mod kafka;
mod kafka_sink;
mod kafka_support;
mod keyless;
mod limits;
mod openapi;
mod operational;
mod operations;
mod ordering;
mod portal;
mod pull;
mod receiver;
mod receivers;
mod replay;
mod routing;
mod sdk;
mod sinks;
mod stats;
mod subscriptions;
mod support;
mod test_delivery;
mod traces;
mod transforms;
