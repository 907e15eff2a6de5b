//! A private CA made on the spot, with a server certificate for loopback and a client
//! certificate, and an HTTPS server for an axum router that may require the client certificate:
//! what tests and benchmarks of mutual TLS and private CAs run against.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA, a server certificate for `127.0.0.1` and `localhost` it issued, and a client
/// certificate it issued, all PEM where a hub takes them.
pub struct Pki {
    pub ca_pem: String,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    pub client_pem: String,
    pub client_key_pem: String,
    /// A key that does not belong to `client_pem`.
    pub other_key_pem: String,
}

impl Pki {
    pub fn new() -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "streaming-hub test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
        let server_key = KeyPair::generate().expect("key");
        let server = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("params")
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        let client_key = KeyPair::generate().expect("key");
        let mut client = CertificateParams::new(Vec::<String>::new()).expect("params");
        client.distinguished_name.push(DnType::CommonName, "streaming-hub");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client = client.signed_by(&client_key, &ca).expect("client certificate");
        Self {
            ca_pem: ca.pem(),
            server: (server.der().clone(), PrivateKeyDer::Pkcs8(server_key.serialize_der().into())),
            client_pem: client.pem(),
            client_key_pem: client_key.serialize_pem(),
            other_key_pem: KeyPair::generate().expect("key").serialize_pem(),
        }
    }

    /// Serves `app` over HTTPS on a loopback port with the server certificate, requiring a
    /// client certificate issued by the CA when `client_certificates`; its base URL
    /// (`https://127.0.0.1:<port>`). A connection whose handshake fails is dropped.
    pub async fn serve(&self, app: axum::Router, client_certificates: bool) -> String {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("protocol versions");
        let builder = if client_certificates {
            let mut roots = rustls::RootCertStore::empty();
            let ca = rustls::pki_types::pem::PemObject::from_pem_slice(self.ca_pem.as_bytes()).expect("ca");
            roots.add(ca).expect("root");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config =
            builder.with_single_cert(vec![self.server.0.clone()], self.server.1.clone_key()).expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("https://127.0.0.1:{}", listener.local_addr().expect("addr").port());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                            .await;
                    }
                });
            }
        });
        base
    }
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}
