//! The few requests of the Kafka protocol a producer needs, at fixed versions every broker since
//! Kafka 2.1 serves (and 4.x still does): `SaslHandshake` v1, `SaslAuthenticate` v1, `Metadata` v4,
//! `InitProducerId` v1 and `Produce` v3 with record batches of magic 2. All are non-flexible
//! versions: request header v1, response header v0. Decoding never trusts a length it reads: every
//! read is bounds-checked, and a malformed answer is an error, never a panic.

use crc::{CRC_32_ISCSI, Crc};

pub const PRODUCE: i16 = 0;
pub const METADATA: i16 = 3;
pub const SASL_HANDSHAKE: i16 = 17;
pub const INIT_PRODUCER_ID: i16 = 22;
pub const SASL_AUTHENTICATE: i16 = 36;

/// The version each request is sent at.
pub fn version(api_key: i16) -> i16 {
    match api_key {
        PRODUCE => 3,
        METADATA => 4,
        INIT_PRODUCER_ID => 1,
        _ => 1,
    }
}

/// Error codes the producer tells apart.
pub mod code {
    pub const NONE: i16 = 0;
    pub const CORRUPT_MESSAGE: i16 = 2;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    /// `COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE`, `NOT_COORDINATOR`: ask again.
    pub const COORDINATOR_NOT_READY: [i16; 3] = [14, 15, 16];
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
    pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub const ILLEGAL_SASL_STATE: i16 = 34;
    pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
    pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
    pub const INVALID_RECORD: i16 = 87;
}

/// Whether retrying a record refused with `code` can never help.
pub fn permanent(code: i16) -> bool {
    matches!(
        code,
        code::CORRUPT_MESSAGE
            | code::UNKNOWN_TOPIC_OR_PARTITION
            | code::MESSAGE_TOO_LARGE
            | code::RECORD_LIST_TOO_LARGE
            | code::INVALID_TOPIC_EXCEPTION
            | code::INVALID_RECORD
    )
}

/// A short name for an error code, for a failure's reason.
pub fn name(code: i16) -> String {
    let known = match code {
        code::CORRUPT_MESSAGE => "CORRUPT_MESSAGE",
        code::UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
        code::LEADER_NOT_AVAILABLE => "LEADER_NOT_AVAILABLE",
        code::NOT_LEADER_OR_FOLLOWER => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        code::MESSAGE_TOO_LARGE => "MESSAGE_TOO_LARGE",
        code::INVALID_TOPIC_EXCEPTION => "INVALID_TOPIC_EXCEPTION",
        code::RECORD_LIST_TOO_LARGE => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        code::TOPIC_AUTHORIZATION_FAILED => "TOPIC_AUTHORIZATION_FAILED",
        code::CLUSTER_AUTHORIZATION_FAILED => "CLUSTER_AUTHORIZATION_FAILED",
        code::UNSUPPORTED_SASL_MECHANISM => "UNSUPPORTED_SASL_MECHANISM",
        code::ILLEGAL_SASL_STATE => "ILLEGAL_SASL_STATE",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        code::DUPLICATE_SEQUENCE_NUMBER => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        code::SASL_AUTHENTICATION_FAILED => "SASL_AUTHENTICATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        code::INVALID_RECORD => "INVALID_RECORD",
        _ => "",
    };
    if known.is_empty() { format!("error {code}") } else { format!("{known} ({code})") }
}

/// A Kafka answer that does not read as the request's response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the broker sent a malformed {0} response")]
pub struct Malformed(pub &'static str);

/// Writes the primitive types of the protocol.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn i8(&mut self, v: i8) -> &mut Self {
        self.0.push(v as u8);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn string(&mut self, s: &str) -> &mut Self {
        self.i16(s.len() as i16);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    pub fn null_string(&mut self) -> &mut Self {
        self.i16(-1)
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.i32(b.len() as i32);
        self.0.extend_from_slice(b);
        self
    }
    /// A zig-zag varint (records use them).
    pub fn varint(&mut self, v: i64) -> &mut Self {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            if z < 0x80 {
                self.0.push(z as u8);
                return self;
            }
            self.0.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
    }
    pub fn varbytes(&mut self, b: Option<&[u8]>) -> &mut Self {
        match b {
            None => self.varint(-1),
            Some(b) => {
                self.varint(b.len() as i64);
                self.0.extend_from_slice(b);
                self
            }
        }
    }
}

/// Reads the primitive types of the protocol, bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < n {
            return Err(Malformed(self.what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    pub fn i8(&mut self) -> Result<i8, Malformed> {
        Ok(self.take(1)?[0] as i8)
    }
    pub fn i16(&mut self) -> Result<i16, Malformed> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().map_err(|_| Malformed(self.what))?))
    }
    pub fn i32(&mut self) -> Result<i32, Malformed> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().map_err(|_| Malformed(self.what))?))
    }
    pub fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().map_err(|_| Malformed(self.what))?))
    }
    pub fn string(&mut self) -> Result<String, Malformed> {
        self.null_string()?.ok_or(Malformed(self.what))
    }
    pub fn null_string(&mut self) -> Result<Option<String>, Malformed> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let bytes = self.take(len as usize)?;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }
    pub fn bytes(&mut self) -> Result<Vec<u8>, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Vec::new());
        }
        Ok(self.take(len as usize)?.to_vec())
    }
    /// An array's length, refused when it could not fit in what is left (each element takes at
    /// least `min_element` bytes): a hostile length never allocates.
    pub fn array(&mut self, min_element: usize) -> Result<usize, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(0);
        }
        let len = len as usize;
        if len.saturating_mul(min_element.max(1)) > self.buf.len() {
            return Err(Malformed(self.what));
        }
        Ok(len)
    }
}

/// A request: its header (v1) and body, framed with its size.
pub fn frame(api_key: i16, correlation_id: i32, client_id: &str, body: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.i32(0).i16(api_key).i16(version(api_key)).i32(correlation_id).string(client_id);
    w.0.extend_from_slice(body);
    let size = (w.0.len() - 4) as i32;
    w.0[..4].copy_from_slice(&size.to_be_bytes());
    w.0
}

/// `SaslHandshake` v1.
pub fn sasl_handshake(mechanism: &str) -> Vec<u8> {
    let mut w = Writer::default();
    w.string(mechanism);
    w.0
}

/// The error code of a `SaslHandshake` answer.
pub fn sasl_handshake_response(body: &[u8]) -> Result<i16, Malformed> {
    Reader::new(body, "SaslHandshake").i16()
}

/// `SaslAuthenticate` v1.
pub fn sasl_authenticate(auth: &[u8]) -> Vec<u8> {
    let mut w = Writer::default();
    w.bytes(auth);
    w.0
}

/// A `SaslAuthenticate` answer: the error code and message, and the server's bytes.
pub fn sasl_authenticate_response(body: &[u8]) -> Result<(i16, Option<String>, Vec<u8>), Malformed> {
    let mut r = Reader::new(body, "SaslAuthenticate");
    Ok((r.i16()?, r.null_string()?, r.bytes()?))
}

/// `Metadata` v4 for one topic, never creating it.
pub fn metadata(topic: &str) -> Vec<u8> {
    let mut w = Writer::default();
    w.i32(1).string(topic).i8(0);
    w.0
}

/// A broker of the cluster, as metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddr {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

/// What metadata says of the cluster and the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub brokers: Vec<BrokerAddr>,
    /// The topic's error code (`UNKNOWN_TOPIC_OR_PARTITION` when it does not exist).
    pub topic_error: i16,
    /// Each partition's leader, by partition index (`-1`: none now).
    pub leaders: Vec<i32>,
}

pub fn metadata_response(body: &[u8], topic: &str) -> Result<Metadata, Malformed> {
    let mut r = Reader::new(body, "Metadata");
    r.i32()?; // throttle
    let mut brokers = Vec::new();
    for _ in 0..r.array(12)? {
        let node_id = r.i32()?;
        let host = r.string()?;
        let port = u16::try_from(r.i32()?).map_err(|_| Malformed("Metadata"))?;
        r.null_string()?; // rack
        brokers.push(BrokerAddr { node_id, host, port });
    }
    r.null_string()?; // cluster id
    r.i32()?; // controller
    let mut found = None;
    for _ in 0..r.array(9)? {
        let error = r.i16()?;
        let name = r.string()?;
        r.i8()?; // internal
        let mut leaders = Vec::new();
        for _ in 0..r.array(18)? {
            r.i16()?; // partition error: the leader says it all
            let index = r.i32()?;
            let leader = r.i32()?;
            for _ in 0..r.array(4)? {
                r.i32()?;
            }
            for _ in 0..r.array(4)? {
                r.i32()?;
            }
            let index = usize::try_from(index).map_err(|_| Malformed("Metadata"))?;
            if index >= 100_000 {
                return Err(Malformed("Metadata"));
            }
            if leaders.len() <= index {
                leaders.resize(index + 1, -1);
            }
            leaders[index] = leader;
        }
        if name == topic {
            found = Some((error, leaders));
        }
    }
    let (topic_error, leaders) = found.unwrap_or((code::UNKNOWN_TOPIC_OR_PARTITION, Vec::new()));
    Ok(Metadata { brokers, topic_error, leaders })
}

/// `InitProducerId` v1 for an idempotent (not transactional) producer.
pub fn init_producer_id() -> Vec<u8> {
    let mut w = Writer::default();
    w.null_string().i32(60_000);
    w.0
}

/// The error code, producer id and epoch of an `InitProducerId` answer.
pub fn init_producer_id_response(body: &[u8]) -> Result<(i16, i64, i16), Malformed> {
    let mut r = Reader::new(body, "InitProducerId");
    r.i32()?; // throttle
    Ok((r.i16()?, r.i64()?, r.i16()?))
}

/// One record of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// The idempotent producer's identity in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerId {
    pub id: i64,
    pub epoch: i16,
}

const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// A record batch (magic 2, uncompressed, create time `timestamp_ms`) of `records` from
/// `producer`, its first record at sequence `base_sequence`.
pub fn record_batch(records: &[&Record], producer: ProducerId, base_sequence: i32, timestamp_ms: i64) -> Vec<u8> {
    let mut body = Writer::default();
    body.i16(0) // attributes: no compression, create time, not transactional
        .i32(records.len() as i32 - 1)
        .i64(timestamp_ms)
        .i64(timestamp_ms)
        .i64(producer.id)
        .i16(producer.epoch)
        .i32(base_sequence)
        .i32(records.len() as i32);
    for (delta, record) in records.iter().enumerate() {
        let mut r = Writer::default();
        r.i8(0).varint(0).varint(delta as i64).varbytes(Some(&record.key)).varbytes(Some(&record.value));
        r.varint(record.headers.len() as i64);
        for (name, value) in &record.headers {
            r.varbytes(Some(name.as_bytes())).varbytes(Some(value));
        }
        body.varint(r.0.len() as i64);
        body.0.extend_from_slice(&r.0);
    }
    let crc = CRC32C.checksum(&body.0);
    let mut batch = Writer::default();
    batch.i64(0).i32((4 + 1 + 4 + body.0.len()) as i32).i32(-1).i8(2).i32(crc as i32);
    batch.0.extend_from_slice(&body.0);
    batch.0
}

/// `Produce` v3 of batches for partitions of one topic, waiting for every in-sync replica.
pub fn produce(topic: &str, timeout_ms: i32, batches: &[(i32, Vec<u8>)]) -> Vec<u8> {
    let mut w = Writer::default();
    w.null_string().i16(-1).i32(timeout_ms).i32(1).string(topic).i32(batches.len() as i32);
    for (partition, batch) in batches {
        w.i32(*partition).bytes(batch);
    }
    w.0
}

/// Each partition's error code in a `Produce` answer.
pub fn produce_response(body: &[u8]) -> Result<Vec<(i32, i16)>, Malformed> {
    let mut r = Reader::new(body, "Produce");
    let mut out = Vec::new();
    for _ in 0..r.array(6)? {
        r.string()?;
        for _ in 0..r.array(22)? {
            let partition = r.i32()?;
            let error = r.i16()?;
            r.i64()?; // base offset
            r.i64()?; // log append time
            out.push((partition, error));
        }
    }
    Ok(out)
}

/// Kafka's `murmur2`, as its Java client hashes record keys.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner picks for a key.
pub fn partition_for(key: &[u8], partitions: usize) -> usize {
    ((murmur2(key) & 0x7fff_ffff) as usize) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own `Utils.murmur2` on these keys (checked against the Java client).
    #[test]
    fn murmur2_is_kafkas() {
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            ("abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key}");
        }
    }

    #[test]
    fn varints_are_zigzag() {
        let enc = |v| Writer::default().varint(v).0.clone();
        assert_eq!(enc(0), [0]);
        assert_eq!(enc(-1), [1]);
        assert_eq!(enc(1), [2]);
        assert_eq!(enc(63), [126]);
        assert_eq!(enc(64), [128, 1]);
        assert_eq!(enc(-65), [129, 1]);
    }

    #[test]
    fn malformed_answers_are_errors_never_panics() {
        for len in 0..64 {
            let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let _ = metadata_response(&junk, "t");
            let _ = produce_response(&junk);
            let _ = init_producer_id_response(&junk);
            let _ = sasl_authenticate_response(&junk);
        }
        // A huge array length in a short answer is refused before anything is allocated.
        let mut w = Writer::default();
        w.i32(0).i32(i32::MAX);
        assert_eq!(metadata_response(&w.0, "t"), Err(Malformed("Metadata")));
    }

    proptest::proptest! {
        /// A broker's answer is untrusted input: whatever bytes arrive, every decoder answers a
        /// value or `Malformed`, never a panic or an allocation the bytes cannot back.
        #[test]
        fn any_answer_decodes_or_is_malformed(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = metadata_response(&bytes, "t");
            let _ = produce_response(&bytes);
            let _ = init_producer_id_response(&bytes);
            let _ = sasl_authenticate_response(&bytes);
            let _ = sasl_handshake_response(&bytes);
        }

        /// Well-formed metadata with arbitrary partitions and brokers reads back as written.
        #[test]
        fn metadata_reads_back(leaders in proptest::collection::vec(-1i32..8, 0..64), port in 1u16..) {
            let mut w = Writer::default();
            w.i32(0).i32(1).i32(3).string("broker.example.com").i32(i32::from(port)).null_string();
            w.null_string().i32(3).i32(1).i16(0).string("t").i8(0).i32(leaders.len() as i32);
            for (i, leader) in leaders.iter().enumerate() {
                w.i16(0).i32(i as i32).i32(*leader).i32(0).i32(0);
            }
            let m = metadata_response(&w.0, "t").expect("well formed");
            proptest::prop_assert_eq!(m.leaders, leaders);
            proptest::prop_assert_eq!(m.brokers, vec![BrokerAddr { node_id: 3, host: "broker.example.com".into(), port }]);
        }
    }

    #[test]
    fn a_batch_carries_its_length_and_checksum() {
        let record = Record { key: b"k".to_vec(), value: b"v".to_vec(), headers: vec![("h".into(), b"x".to_vec())] };
        let batch = record_batch(&[&record, &record], ProducerId { id: 7, epoch: 1 }, 5, 1_000);
        let mut r = Reader::new(&batch, "batch");
        assert_eq!(r.i64(), Ok(0));
        let len = r.i32().expect("length") as usize;
        assert_eq!(len, batch.len() - 12);
        assert_eq!(r.i32(), Ok(-1));
        assert_eq!(r.i8(), Ok(2));
        let crc = r.i32().expect("crc") as u32;
        assert_eq!(crc, CRC32C.checksum(&batch[21..]));
    }
}
