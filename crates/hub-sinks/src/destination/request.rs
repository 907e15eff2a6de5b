//! Parsing and validation of a subscription's `sink` as the API takes it (SPEC §2.1.1), with
//! errors that name the field (`sink.url: …`).
//!
//! A destination splits in two: the public configuration (stored in clear, shown by the API) and
//! the credentials (sealed at rest, never shown). A RabbitMQ URL's password is a credential: the
//! URL is shown without it.

use hub_core::SinkKind;
use serde_json::Value;

use super::Destination;
pub use crate::fields::{Credentials, Invalid};
use crate::registry::NAMES;

/// A validated destination.
#[derive(Debug, Clone)]
pub struct Requested {
    pub kind: SinkKind,
    /// The typed destination.
    pub typed: Destination,
    /// Shown by the API and stored in clear: the typed destination's own JSON.
    pub public: Value,
    pub credentials: Credentials,
}

impl Requested {
    /// What is stored is the typed destination's own JSON: exactly what the dispatcher will read
    /// back.
    fn new(typed: Destination, credentials: Credentials) -> Self {
        Self { kind: typed.kind(), public: typed.to_stored(), typed, credentials }
    }
}

/// Whether two stored destinations connect to the same place in the same way (what a probe
/// proved). Timeouts and static headers do not count; an unreadable one never matches.
pub fn same_connection(old: &Value, new: &Value) -> bool {
    match (Destination::from_stored(old), Destination::from_stored(new)) {
        (Ok(old), Ok(new)) => old.same_connection(&new),
        _ => false,
    }
}

/// Stored credentials were given for one destination: they never follow a change of scheme, host
/// or port to another one. Such a change must carry the credentials again.
pub fn credentials_follow(stored: &Value, new: &Requested) -> Result<(), Invalid> {
    let stored = Destination::from_stored(stored).map_err(|e| Invalid::new("sink", e))?;
    if new.credentials != Credentials::Unchanged || stored.credential_origins() == new.typed.credential_origins() {
        return Ok(());
    }
    Err(Invalid::new(
        new.typed.credentials_field(),
        "the destination moved to another scheme, host or port: give its credentials again (they are never sent to a new host)",
    ))
}

/// A destination that cannot be reached without credentials has them: given now, or kept
/// (`stored`: the subscription already has credentials, which this request leaves as they are).
pub fn credentials_present(new: &Requested, stored: bool) -> Result<(), Invalid> {
    let Some(why) = new.typed.needs_credentials() else {
        return Ok(());
    };
    let present = match new.credentials {
        Credentials::Set(_) => true,
        Credentials::Unchanged => stored,
        Credentials::Cleared => false,
    };
    if present { Ok(()) } else { Err(Invalid::new(new.typed.credentials_field(), format!("is required: {why}"))) }
}

/// Parses a `sink` object: its type here, the rest by that sink's own parse.
pub fn parse(value: &Value, allow_private: bool) -> Result<Requested, Invalid> {
    let map = value.as_object().ok_or_else(|| Invalid::new("sink", "must be an object"))?;
    let name = match map.get("type") {
        Some(Value::String(t)) => t.as_str(),
        _ => return Err(Invalid::new("sink.type", "is required")),
    };
    let (typed, credentials) = Destination::parse(name, map.clone(), allow_private)
        .ok_or_else(|| Invalid::new("sink.type", format!("must be one of {}", NAMES.join(", "))))??;
    Ok(Requested::new(typed, credentials))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(v: Value, private: bool) -> String {
        parse(&v, private).expect_err("invalid").to_string()
    }

    #[test]
    fn webhook_auth_rules() {
        let hook = |auth: Value| json!({"type": "webhook", "url": "https://bank.example/h", "auth": auth});
        let basic =
            parse(&hook(json!({"type": "basic", "username": "hub", "password": "s3cret"})), false).expect("basic");
        assert_eq!(
            basic.public["auth"],
            json!({"type": "basic", "username": "hub"}),
            "the password is not in the public part"
        );
        assert_eq!(basic.credentials, Credentials::Set(json!({"password": "s3cret"})));
        let oauth = json!({"type": "oauth2_client_credentials", "token_url": "https://login.bank.example/token",
            "client_id": "hub", "client_secret": "cs", "scope": "a b", "audience": "https://api.bank.example"});
        let parsed = parse(&hook(oauth.clone()), false).expect("oauth2");
        assert!(!parsed.public.to_string().contains("\"cs\""), "{}", parsed.public);
        assert_eq!(parsed.public["auth"]["token_url"], "https://login.bank.example/token");
        assert_eq!(parsed.credentials, Credentials::Set(json!({"client_secret": "cs"})));
        // No auth: a secret stored for an earlier one goes.
        let none = parse(&json!({"type": "webhook", "url": "https://bank.example/h"}), false).expect("plain");
        assert_eq!(none.credentials, Credentials::Cleared);
        assert!(none.public.get("auth").is_none());

        for (auth, field) in [
            (json!({"type": "basic", "username": "hub"}), "sink.auth.password: is required"),
            (json!({"type": "basic", "username": "h:ub", "password": "p"}), "sink.auth.username:"),
            (json!({"type": "basic", "password": "p"}), "sink.auth.username: is required"),
            (json!({"type": "digest"}), "sink.auth.type: must be one of"),
            (json!({"username": "u"}), "sink.auth.type: is required"),
            (json!({"type": "basic", "username": "u", "password": "p", "realm": "x"}), "sink.auth.realm:"),
            (json!("basic"), "sink.auth: must be an object"),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "http://login.bank.example/t", "client_id": "c",
                "client_secret": "s"}),
                "sink.auth.token_url: must use https",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "https://169.254.169.254/t", "client_id": "c",
                "client_secret": "s"}),
                "sink.auth.token_url:",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "https://localhost/t", "client_id": "c",
                "client_secret": "s"}),
                "sink.auth.token_url:",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "https://u:p@login.bank.example/t",
                "client_id": "c", "client_secret": "s"}),
                "sink.auth.token_url:",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "https://login.bank.example/t", "client_id": "c"}),
                "sink.auth.client_secret: is required",
            ),
            (json!({"type": "mtls", "private_key_pem": "x"}), "sink.auth.certificate_pem: is required"),
        ] {
            let e = err(hook(auth.clone()), false);
            assert!(e.starts_with(field), "{auth}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        // A private token endpoint is taken where private sinks are allowed.
        let private = json!({"type": "oauth2_client_credentials", "token_url": "http://127.0.0.1:9/t", "client_id": "c",
            "client_secret": "s"});
        assert!(parse(&hook(private), true).is_ok());
    }

    #[test]
    fn webhook_rules() {
        let ok =
            parse(&json!({"type": "webhook", "url": "https://example.com/h", "headers": {"X-Team": "risk"}}), false)
                .expect("valid");
        assert_eq!(ok.public["timeout_ms"], 10_000);
        assert_eq!(ok.public["headers"]["X-Team"], "risk");
        assert!(
            err(json!({"type": "webhook", "url": "http://example.com/h"}), false)
                .starts_with("sink.url: must use https")
        );
        assert!(parse(&json!({"type": "webhook", "url": "http://127.0.0.1:9/h"}), true).is_ok());
        for url in [
            "https://127.0.0.1/h",
            "https://10.0.0.1/",
            "https://[::1]/",
            "https://169.254.169.254/",
            "https://localhost/",
        ] {
            assert!(err(json!({"type": "webhook", "url": url}), false).starts_with("sink.url:"), "{url}");
        }
        assert!(err(json!({"type": "webhook", "url": "https://u:p@example.com/"}), false).contains("credentials"));
        assert!(err(json!({"type": "webhook"}), false).starts_with("sink.url: is required"));
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "timeout_ms": 5}), false)
                .starts_with("sink.timeout_ms")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"Authorization": "x"}}), false)
                .starts_with("sink.headers.Authorization")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"X-Lerian-Tenant-Id": "x"}}), false)
                .starts_with("sink.headers.X-Lerian-Tenant-Id")
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "queue_url": "x"}), false)
                .starts_with("sink.queue_url")
        );
        assert_eq!(ok.public["signature"], "lerian", "the original's scheme by default");
        let standard =
            parse(&json!({"type": "webhook", "url": "https://e.com", "signature": "standard-webhooks"}), false)
                .expect("valid");
        assert_eq!(standard.public["signature"], "standard-webhooks");
        assert_eq!(
            err(json!({"type": "webhook", "url": "https://e.com", "signature": "svix"}), false),
            "sink.signature: must be one of lerian, standard-webhooks, ed25519"
        );
        assert!(
            err(json!({"type": "webhook", "url": "https://e.com", "headers": {"Webhook-Id": "x"}}), false)
                .starts_with("sink.headers.Webhook-Id")
        );
    }

    /// Every way of writing a private address literally is refused at create, for every sink
    /// that takes a URL, not only the schemes whose hosts the URL parser reads as addresses.
    #[test]
    fn private_literals_are_refused_at_create_for_every_sink() {
        let hosts = [
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "0177.0.0.1",
            "127.1",
            "169.254.169.254",
            "0.0.0.0",
            "user@127.0.0.1",
            "[::1]",
            "[::ffff:127.0.0.1]",
            "10.0.0.1",
            "LOCALHOST",
            "mq.localhost",
        ];
        for host in hosts {
            let sinks = [
                json!({"type": "webhook", "url": format!("https://{host}/h")}),
                json!({"type": "rabbitmq", "url": format!("amqps://{host}:5671/vh"), "exchange": "e"}),
                json!({"type": "rabbitmq", "url": format!("amqps://hub:pw@{host}/vh"), "exchange": "e"}),
                json!({"type": "sqs", "queue_url": format!("https://{host}/123/q"), "region": "us-east-1"}),
                json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                       "endpoint_url": format!("https://{host}/")}),
                json!({"type": "eventbridge", "event_bus": "b", "region": "us-east-1",
                       "endpoint_url": format!("https://{host}/")}),
                json!({"type": "kafka", "brokers": format!("{}:9092", host.trim_start_matches("user@")), "topic": "t"}),
                json!({"type": "kafka", "brokers": format!("kafka.example.com:9092,{}:9093", host.trim_start_matches("user@")), "topic": "t"}),
                json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "region": "us-east-1",
                       "endpoint_url": format!("https://{host}/")}),
                json!({"type": "kinesis", "stream_name": "s", "region": "us-east-1", "endpoint_url": format!("https://{host}/")}),
                json!({"type": "s3", "bucket": "bkt", "region": "us-east-1", "endpoint_url": format!("https://{host}/")}),
            ];
            for sink in sinks {
                let refused = err(sink.clone(), false);
                assert!(refused.starts_with("sink."), "{host} in {sink}: {refused}");
                assert!(parse(&sink, true).is_ok() || host.contains('@'), "allowed when private sinks are: {sink}");
            }
        }
        // A public name or address is still accepted.
        for host in ["mq.example.com", "93.184.216.34"] {
            parse(&json!({"type": "rabbitmq", "url": format!("amqps://{host}/vh"), "exchange": "e"}), false)
                .expect(host);
        }
    }

    /// A URL's userinfo would be stored and shown in every listing: every URL field of every
    /// sink refuses it, except RabbitMQ's, whose password is taken out and sealed.
    #[test]
    fn no_url_field_keeps_a_password_in_clear() {
        let userinfo = ["user:s3cr3t@", "user@", ":s3cr3t@", "us%40er:s%3Acr3t@"];
        for u in userinfo {
            let sinks = [
                (json!({"type": "webhook", "url": format!("https://{u}hooks.example.com/h")}), "sink.url"),
                (
                    json!({"type": "sqs", "queue_url": format!("https://{u}sqs.us-east-1.amazonaws.com/1/q"), "region": "us-east-1"}),
                    "sink.queue_url",
                ),
                (
                    json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                        "endpoint_url": format!("https://{u}aws.example.com/")}),
                    "sink.endpoint_url",
                ),
                (
                    json!({"type": "eventbridge", "event_bus": "b", "region": "us-east-1",
                        "endpoint_url": format!("https://{u}aws.example.com/")}),
                    "sink.endpoint_url",
                ),
                (
                    json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "region": "us-east-1",
                        "endpoint_url": format!("https://{u}aws.example.com/")}),
                    "sink.endpoint_url",
                ),
                (
                    json!({"type": "kinesis", "stream_name": "s", "region": "us-east-1",
                        "endpoint_url": format!("https://{u}aws.example.com/")}),
                    "sink.endpoint_url",
                ),
                (
                    json!({"type": "s3", "bucket": "bkt", "region": "us-east-1",
                        "endpoint_url": format!("https://{u}aws.example.com/")}),
                    "sink.endpoint_url",
                ),
                (
                    json!({"type": "kafka", "brokers": format!("{u}kafka.example.com:9092"), "topic": "t"}),
                    "sink.brokers",
                ),
            ];
            for (sink, field) in sinks {
                let refused = err(sink.clone(), true);
                assert!(refused.starts_with(field), "{sink}: {refused}");
                assert!(!refused.contains("cr3t"), "the password is never echoed: {refused}");
            }
        }
        let d =
            parse(&json!({"type": "rabbitmq", "url": "amqps://hub:s3cret@mq.example.com/vh", "exchange": "e"}), false)
                .expect("RabbitMQ seals its password");
        assert!(!d.public.to_string().contains("s3cret"), "{}", d.public);
        assert!(matches!(d.credentials, Credentials::Set(_)));
    }

    /// Static header values are shown in listings: a name that says it carries a credential is
    /// refused.
    #[test]
    fn webhook_headers_that_look_like_credentials_are_refused() {
        for name in ["X-Api-Key", "X-Auth-Token", "Authorization", "x-client-secret", "X-Password", "apikey"] {
            let refused =
                err(json!({"type": "webhook", "url": "https://h.example.com/", "headers": {name: "v"}}), false);
            assert!(refused.starts_with(&format!("sink.headers.{name}")), "{name}: {refused}");
        }
        parse(&json!({"type": "webhook", "url": "https://h.example.com/", "headers": {"X-Team": "risk"}}), false)
            .expect("an ordinary header");
    }

    #[test]
    fn aws_sinks_split_credentials() {
        let d = parse(
            &json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                    "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "wJalr"}}),
            false,
        )
        .expect("valid");
        assert!(d.public.get("credentials").is_none());
        assert!(!d.public.to_string().contains("wJalr"));
        assert!(matches!(d.credentials, Credentials::Set(_)));
        assert!(err(json!({"type": "sqs", "queue_url": "https://q", "region": "us-east-1", "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE"}}), false)
            .starts_with("sink.credentials.secret_access_key"));
        assert!(err(json!({"type": "sqs", "queue_url": "https://q"}), false).starts_with("sink.region"));
        assert!(err(json!({"type": "eventbridge", "region": "us-east-1"}), false).starts_with("sink.event_bus"));
        let cleared = parse(
            &json!({"type": "eventbridge", "event_bus": "default", "region": "us-east-1", "credentials": null}),
            false,
        )
        .expect("valid");
        assert_eq!(cleared.credentials, Credentials::Cleared);
    }

    #[test]
    fn an_aws_role_is_shown_drops_stored_keys_and_is_part_of_the_connection() {
        let role = "arn:aws:iam::123456789012:role/path/streaming-hub";
        for kind in [
            json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q"}),
            json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t"}),
            json!({"type": "eventbridge", "event_bus": "default"}),
            json!({"type": "kinesis", "stream_name": "s"}),
            json!({"type": "s3", "bucket": "lerian-events"}),
        ] {
            let mut sink = kind.clone();
            sink["region"] = json!("us-east-1");
            sink["credentials"] = json!({"web_identity": {"role_arn": role, "session_name": "hub@bank"}});
            let d = parse(&sink, false).expect("valid");
            assert_eq!(
                d.public["credentials"],
                json!({"web_identity": {"role_arn": role, "session_name": "hub@bank"}})
            );
            assert_eq!(d.credentials, Credentials::Cleared, "keys stored before are dropped");
            assert!(d.typed.uses_hub_tokens());
            assert_eq!(d.public["credentials"]["web_identity"]["role_arn"], role);
            let back = Destination::from_stored(&d.public).expect("reads back");
            assert_eq!(back, d.typed);
            assert!(back.uses_hub_tokens());
            // Another role is another connection (a probe proves it again).
            let mut other = sink.clone();
            other["credentials"]["web_identity"]["role_arn"] = json!("arn:aws:iam::123456789012:role/other");
            assert!(!same_connection(&d.public, &parse(&other, false).expect("valid").public), "{kind}");
            assert!(same_connection(&d.public, &d.public));
        }
        let sqs = |credentials: Value| {
            json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                   "credentials": credentials})
        };
        for (credentials, field) in [
            (json!({"web_identity": {}}), "sink.credentials.web_identity.role_arn"),
            (
                json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:user/u"}}),
                "sink.credentials.web_identity.role_arn",
            ),
            (
                json!({"web_identity": {"role_arn": "arn:aws:iam:us-east-1:123456789012:role/r"}}),
                "sink.credentials.web_identity.role_arn",
            ),
            (
                json!({"web_identity": {"role_arn": "arn:aws:iam::123456789012:role/"}}),
                "sink.credentials.web_identity.role_arn",
            ),
            (
                json!({"web_identity": {"role_arn": role, "session_name": "x"}}),
                "sink.credentials.web_identity.session_name",
            ),
            (json!({"web_identity": {"role_arn": role, "extra": 1}}), "sink.credentials.web_identity.extra"),
            (json!({"web_identity": {"role_arn": role}, "secret_access_key": "s"}), "sink.credentials"),
        ] {
            let refused = err(sqs(credentials.clone()), false);
            assert!(refused.starts_with(&format!("{field}:")), "{credentials}: {refused}");
        }
        // Keys are never shown.
        let keys = parse(&sqs(json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "s"})), false);
        assert!(keys.expect("valid").public.get("credentials").is_none());
    }

    #[test]
    fn kafka_rules_and_its_password_is_a_credential() {
        let d = parse(
            &json!({"type": "kafka", "brokers": "k1.example.com:9093, k2.example.com:9093", "topic": "lerian.events",
                    "tls": true, "sasl": {"mechanism": "SCRAM-SHA-512", "username": "hub", "password": "s3cret"}}),
            false,
        )
        .expect("valid");
        assert_eq!(d.public["brokers"], "k1.example.com:9093,k2.example.com:9093");
        assert_eq!(d.public["sasl"], json!({"mechanism": "SCRAM-SHA-512", "username": "hub"}));
        assert!(!d.public.to_string().contains("s3cret"));
        assert_eq!(d.credentials, Credentials::Set(json!({"password": "s3cret"})));
        let kafka = |extra: Value| {
            let mut v = json!({"type": "kafka", "brokers": "k.example.com:9092", "topic": "t"});
            v.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
            err(v, false)
        };
        assert!(kafka(json!({"brokers": "k.example.com"})).starts_with("sink.brokers[0]: must be host:port"));
        assert!(kafka(json!({"brokers": "k.example.com:0"})).starts_with("sink.brokers[0]"));
        assert!(kafka(json!({"brokers": "a.example.com:1,:9092"})).starts_with("sink.brokers[1]"));
        assert!(kafka(json!({"topic": "a b"})).starts_with("sink.topic"));
        assert!(kafka(json!({"topic": ".."})).starts_with("sink.topic"));
        assert!(kafka(json!({"tls": "yes"})).starts_with("sink.tls"));
        assert!(kafka(json!({"sasl": {"mechanism": "GSSAPI", "username": "u"}})).starts_with("sink.sasl.mechanism"));
        assert!(kafka(json!({"sasl": {"mechanism": "PLAIN"}})).starts_with("sink.sasl.username"));
        assert!(
            kafka(json!({"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}})).starts_with("sink.tls"),
            "a password is never sent in clear"
        );
        let many: Vec<String> = (0..17).map(|i| format!("k{i}.example.com:9092")).collect();
        assert!(kafka(json!({"brokers": many.join(",")})).starts_with("sink.brokers"));
        let cleared =
            parse(&json!({"type": "kafka", "brokers": "k.example.com:9092", "topic": "t", "sasl": null}), false)
                .expect("valid");
        assert_eq!(cleared.credentials, Credentials::Cleared);
    }

    /// A stored SASL password never follows the destination to other brokers or off TLS; the
    /// refusal names where the password is given.
    #[test]
    fn a_kafka_password_stays_with_its_brokers() {
        let stored = parse(
            &json!({"type": "kafka", "brokers": "k1.example.com:9093", "topic": "t", "tls": true,
                    "sasl": {"mechanism": "PLAIN", "username": "hub", "password": "p"}}),
            false,
        )
        .expect("valid")
        .public;
        let change = |sink: Value| parse(&sink, false).expect("valid");
        let same = change(json!({"type": "kafka", "brokers": "k1.example.com:9093", "topic": "other", "tls": true,
                                 "sasl": {"mechanism": "PLAIN", "username": "hub"}}));
        assert_eq!(credentials_follow(&stored, &same), Ok(()), "another topic on the same brokers");
        for moved in [
            json!({"type": "kafka", "brokers": "k2.example.com:9093", "topic": "t", "tls": true,
                   "sasl": {"mechanism": "PLAIN", "username": "hub"}}),
            json!({"type": "kafka", "brokers": "k1.example.com:9094", "topic": "t", "tls": true,
                   "sasl": {"mechanism": "PLAIN", "username": "hub"}}),
        ] {
            let e = credentials_follow(&stored, &change(moved.clone())).expect_err("moved");
            assert_eq!(e.field, "sink.sasl", "{moved}");
        }
        let with_password =
            change(json!({"type": "kafka", "brokers": "k2.example.com:9093", "topic": "t", "tls": true,
                                          "sasl": {"mechanism": "PLAIN", "username": "hub", "password": "q"}}));
        assert_eq!(credentials_follow(&stored, &with_password), Ok(()), "given again");
        let sns = parse(
            &json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "region": "us-east-1",
                    "endpoint_url": "https://sns.example.com/", "credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "s"}}),
            false,
        )
        .expect("valid")
        .public;
        let elsewhere = change(json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t",
                                      "region": "us-east-1", "endpoint_url": "https://evil.example.com/"}));
        assert_eq!(credentials_follow(&sns, &elsewhere).expect_err("moved").field, "sink.credentials");
    }

    #[test]
    fn aws_sink_names_are_checked() {
        let ok = |v: Value| parse(&v, false).unwrap_or_else(|e| panic!("{v}: {e}"));
        ok(
            json!({"type": "sns", "topic_arn": "arn:aws:sns:eu-west-1:123456789012:events.fifo", "region": "eu-west-1"}),
        );
        ok(json!({"type": "kinesis", "stream_name": "lerian.events-1", "region": "us-east-1"}));
        let s3 = ok(json!({"type": "s3", "bucket": "lerian-archive", "region": "us-east-1"}));
        assert_eq!(s3.public["prefix"], "", "no prefix by default");
        for (sink, field) in [
            (
                json!({"type": "sns", "topic_arn": "arn:aws:sqs:us-east-1:123456789012:q", "region": "us-east-1"}),
                "sink.topic_arn",
            ),
            (
                json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:events", "region": "eu-west-1"}),
                "sink.topic_arn",
            ),
            (
                json!({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:1234:events", "region": "us-east-1"}),
                "sink.topic_arn",
            ),
            (json!({"type": "sns", "region": "us-east-1"}), "sink.topic_arn"),
            (json!({"type": "kinesis", "stream_name": "a/b", "region": "us-east-1"}), "sink.stream_name"),
            (json!({"type": "kinesis", "stream_name": "s"}), "sink.region"),
            (json!({"type": "s3", "bucket": "Upper", "region": "us-east-1"}), "sink.bucket"),
            (json!({"type": "s3", "bucket": "ab", "region": "us-east-1"}), "sink.bucket"),
            (json!({"type": "s3", "bucket": "10.0.0.1", "region": "us-east-1"}), "sink.bucket"),
            (json!({"type": "s3", "bucket": "-bucket", "region": "us-east-1"}), "sink.bucket"),
            (json!({"type": "s3", "bucket": "bkt", "prefix": "/abs", "region": "us-east-1"}), "sink.prefix"),
            (json!({"type": "s3", "bucket": "bkt", "prefix": "a\nb", "region": "us-east-1"}), "sink.prefix"),
            (json!({"type": "s3", "bucket": "bkt", "region": "us-east-1", "queue_url": "x"}), "sink.queue_url"),
        ] {
            let e = err(sink.clone(), false);
            assert!(e.starts_with(field), "{sink}: {e}");
        }
    }

    #[test]
    fn rabbitmq_password_is_a_credential() {
        let d = parse(
            &json!({"type": "rabbitmq", "url": "amqps://hub:s%40cret@mq.example.com:5671/vh", "exchange": "events",
                    "routing_key": "{source}.{resource}.{event}"}),
            false,
        )
        .expect("valid");
        assert_eq!(d.public["url"], "amqps://hub@mq.example.com:5671/vh");
        assert_eq!(d.credentials, Credentials::Set(json!({"password": "s@cret"})));
        let plus = parse(
            &json!({"type": "rabbitmq", "url": "amqps://hub:a+b%2Bc@mq.example.com/vh", "exchange": "events"}),
            false,
        )
        .expect("valid");
        assert_eq!(plus.credentials, Credentials::Set(json!({"password": "a+b+c"})), "+ is not a space");
        assert!(
            err(json!({"type": "rabbitmq", "url": "amqp://mq.example.com", "exchange": "e"}), false)
                .starts_with("sink.url")
        );
        assert!(err(json!({"type": "rabbitmq", "url": "amqps://mq.example.com", "exchange": "e", "routing_key": "{tenant}"}), false)
            .starts_with("sink.routing_key"));
        assert!(err(json!({"type": "rabbitmq", "url": "amqps://mq.example.com"}), false).starts_with("sink.exchange"));
    }

    /// A field of the wrong shape is named down to the innermost (inside a tagged or untagged
    /// choice of shapes too), in the API's words, and its value is never repeated.
    #[test]
    fn shape_errors_name_the_innermost_field_and_never_repeat_the_value() {
        let hook = |extra: Value| {
            let mut v = json!({"type": "webhook", "url": "https://e.example.com/h"});
            v.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
            v
        };
        let sqs = |credentials: Value| {
            json!({"type": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q", "region": "us-east-1",
                   "credentials": credentials})
        };
        for (sink, expected) in [
            (
                hook(json!({"auth": {"type": "basic", "username": "u", "password": 31337}})),
                "sink.auth.password: must be a string",
            ),
            (hook(json!({"auth": {"type": "basic", "username": ["s3cret"]}})), "sink.auth.username: must be a string"),
            (
                hook(json!({"auth": {"type": 7}})),
                "sink.auth.type: must be one of basic, oauth2_client_credentials, mtls",
            ),
            (
                hook(json!({"auth": {"type": "mtls", "certificate_pem": "x", "s3cret": 1}})),
                "sink.auth.s3cret: is not a field of this sink type",
            ),
            (hook(json!({"auth": "s3cret"})), "sink.auth: must be an object"),
            (hook(json!({"headers": {"X-Team": 1}})), "sink.headers.X-Team: must be a string"),
            (hook(json!({"headers": "s3cret"})), "sink.headers: must be an object"),
            (hook(json!({"timeout_ms": "5000"})), "sink.timeout_ms: must be a whole number"),
            (hook(json!({"timeout_ms": -1})), "sink.timeout_ms: must be a whole number"),
            (hook(json!({"timeout_ms": 50})), "sink.timeout_ms: must be a whole number from 100 to 60000"),
            (hook(json!({"signature": 1})), "sink.signature: must be a string"),
            (hook(json!({"tls": {"ca_pem": null}})), "sink.tls.ca_pem: is required"),
            (hook(json!({"url": null})), "sink.url: is required"),
            (hook(json!({"url": " "})), "sink.url: is required"),
            (hook(json!({"url": "https://e.example.com/\u{7}"})), "sink.url: must not contain control characters"),
            (
                sqs(json!({"web_identity": {"role_arn": ["s3cret"]}})),
                "sink.credentials.web_identity.role_arn: must be a string",
            ),
            (sqs(json!({"web_identity": "s3cret"})), "sink.credentials.web_identity: must be an object"),
            (
                sqs(json!({"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": false})),
                "sink.credentials.secret_access_key: must be a string",
            ),
            (sqs(json!("s3cret")), "sink.credentials: must be an object"),
            (
                json!({"type": "nats", "servers": "tls://n.example.com", "subject": "a", "credentials": {"username": "u", "password": 7}}),
                "sink.credentials.password: must be a string",
            ),
            (
                json!({"type": "kafka", "brokers": "k.example.com:9093", "topic": "t", "tls": true,
                       "sasl": {"mechanism": "PLAIN", "username": "u", "password": false}}),
                "sink.sasl.password: must be a string",
            ),
            (
                json!({"type": "kafka", "brokers": "k.example.com:9093", "topic": "t", "tls": "s3cret"}),
                "sink.tls: must be true or false",
            ),
            (json!({"type": "s3", "bucket": "bkt", "region": 5}), "sink.region: must be a string"),
            (json!({"type": "pull", "s3cret": true}), "sink.s3cret: is not a field of this sink type"),
        ] {
            let refused = err(sink.clone(), false);
            assert_eq!(refused, expected, "{sink}");
            assert!(!refused.contains("31337") && !refused.contains("\"s3cret\""), "{refused}");
        }
    }

    #[test]
    fn type_is_required_and_known() {
        assert!(err(json!({}), false).starts_with("sink.type: is required"));
        assert!(err(json!({"type": "ftp"}), false).starts_with("sink.type"));
        assert!(err(json!("pull"), false).starts_with("sink: must be an object"));
        assert!(err(json!({"type": "pull", "url": "x"}), false).starts_with("sink.url"));
    }
}
