//! Sink tests: one contract every sink passes, and the webhook sink's own rules, against real
//! receivers on loopback.

mod aws;
mod contract;
mod kafka;
mod kinesis;
mod nats;
mod pubsub;
mod rabbitmq;
mod receiver;
mod s3;
mod sns;
mod ssrf;
mod stored;
mod webhook;
mod webhook_auth;
