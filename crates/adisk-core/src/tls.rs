//! TLS of the cluster's links (rustls through tonic, no OpenSSL): the cluster's own
//! certificate authority, and each member's certificate and key signed by it.
//!
//! **Identity.** Every member's certificate names [`MEMBER_NAME`] among its subject
//! alternative names, and a member checks its peer against that name and the cluster's CA
//! only: a member is whoever holds a key the cluster's CA signed, whatever its address (disks
//! move between addresses; several machines need no certificate per address). A server asks
//! every client for a certificate and refuses one the cluster's CA did not sign; a client
//! without a certificate is let through TLS (a user's client reaching a per-disk endpoint) and
//! is then authenticated by the cluster's tokens or tickets, as without TLS.
use std::path::{Path, PathBuf};

/// The name every member's certificate carries and every member checks its peer against.
pub const MEMBER_NAME: &str = "member.adisk.cluster";

/// Why TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("TLS: cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no PEM block of the expected kind.
    #[error("TLS: {path} holds no {what} in PEM form")]
    NotPem {
        /// The file.
        path: PathBuf,
        /// "certificate" or "private key".
        what: &'static str,
    },
}

/// A member's TLS material: the cluster's CA certificate, its own certificate and key (PEM).
#[derive(Clone)]
pub struct TlsMaterial {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial").finish_non_exhaustive()
    }
}

fn read_pem(path: &Path, what: &'static str, tag: &str) -> Result<String, TlsError> {
    let text = std::fs::read_to_string(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if text.contains("-----BEGIN ") && text.contains(tag) {
        Ok(text)
    } else {
        Err(TlsError::NotPem {
            path: path.to_path_buf(),
            what,
        })
    }
}

impl TlsMaterial {
    /// Material from PEM text.
    pub fn from_pem(ca_pem: String, cert_pem: String, key_pem: String) -> Self {
        TlsMaterial {
            ca_pem,
            cert_pem,
            key_pem,
        }
    }

    /// Reads the CA certificate, the member's certificate and its private key (PEM files).
    ///
    /// # Errors
    /// [`TlsError`]: a file missing, unreadable, or not PEM of the right kind.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Ok(TlsMaterial {
            ca_pem: read_pem(ca, "certificate", "CERTIFICATE")?,
            cert_pem: read_pem(cert, "certificate", "CERTIFICATE")?,
            key_pem: read_pem(key, "private key", "PRIVATE KEY")?,
        })
    }

    /// The CA certificate (PEM), for clients that only check servers.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A member's server side: its certificate, and client certificates checked against the
    /// cluster's CA when presented (a foreign one is refused; none is let through).
    pub fn server(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .client_ca_root(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .client_auth_optional(true)
            .timeout(std::time::Duration::from_secs(10))
    }

    /// A member's client side: it checks the server against the cluster's CA and
    /// [`MEMBER_NAME`], and shows its own certificate.
    pub fn client(&self) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .domain_name(MEMBER_NAME)
    }
}

/// The Flight SQL service's side of TLS: its certificate and key and, for mutual TLS, the CA
/// whose certificates clients must show.
#[derive(Clone)]
pub struct ServiceTls {
    cert_pem: String,
    key_pem: String,
    client_ca_pem: Option<String>,
}

impl std::fmt::Debug for ServiceTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceTls")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl ServiceTls {
    /// The service's certificate and key (PEM files), and the clients' CA when clients must
    /// show a certificate (mutual TLS).
    ///
    /// # Errors
    /// [`TlsError`]: a file missing, unreadable, or not PEM of the right kind.
    pub fn load(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Self, TlsError> {
        Ok(ServiceTls {
            cert_pem: read_pem(cert, "certificate", "CERTIFICATE")?,
            key_pem: read_pem(key, "private key", "PRIVATE KEY")?,
            client_ca_pem: client_ca
                .map(|p| read_pem(p, "certificate", "CERTIFICATE"))
                .transpose()?,
        })
    }

    /// Whether clients must show a certificate.
    pub fn mutual(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// The server's configuration: its identity and, for mutual TLS, client certificates
    /// required and checked against the clients' CA.
    pub fn server(&self) -> tonic::transport::ServerTlsConfig {
        let config = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .timeout(std::time::Duration::from_secs(10));
        match &self.client_ca_pem {
            Some(ca) => config
                .client_ca_root(tonic::transport::Certificate::from_pem(ca))
                .client_auth_optional(false),
            None => config,
        }
    }
}

/// A user's client of the Flight SQL service (and of the per-disk endpoints it hands out): the
/// CA it trusts and, for a service that asks (mutual TLS), its own certificate. The server's
/// certificate is checked against the host name or address of the URL.
#[derive(Clone, Default)]
pub struct ClientTls {
    ca_pem: Option<String>,
    identity: Option<(String, String)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca_pem.is_some())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

impl ClientTls {
    /// Trusting the CA certificate in `ca` (PEM), showing `cert` and `key` when given.
    ///
    /// # Errors
    /// [`TlsError`]: a file missing, unreadable, or not PEM of the right kind.
    pub fn load(ca: Option<&Path>, identity: Option<(&Path, &Path)>) -> Result<Self, TlsError> {
        Ok(ClientTls {
            ca_pem: ca
                .map(|p| read_pem(p, "certificate", "CERTIFICATE"))
                .transpose()?,
            identity: identity
                .map(|(cert, key)| {
                    Ok::<_, TlsError>((
                        read_pem(cert, "certificate", "CERTIFICATE")?,
                        read_pem(key, "private key", "PRIVATE KEY")?,
                    ))
                })
                .transpose()?,
        })
    }

    /// Whether a CA to check servers against was given.
    pub fn has_ca(&self) -> bool {
        self.ca_pem.is_some()
    }

    /// The channel's configuration (servers checked against the given CA).
    pub fn config(&self) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &self.ca_pem {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config
    }
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
#[error("TLS: cannot make {what}: {why}")]
pub struct CertError {
    what: String,
    why: String,
}

fn cert_err(what: &str) -> impl Fn(rcgen::Error) -> CertError + '_ {
    move |e| CertError {
        what: what.to_string(),
        why: e.to_string(),
    }
}

/// A certificate and its private key, PEM.
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// Its private key (keep it readable by its owner only).
    pub key: String,
}

/// Makes a cluster's certificate authority (ECDSA P-256, self-signed, valid until the 1st of
/// January 10 years on).
///
/// # Errors
/// [`CertError`] if the key or the certificate cannot be made.
pub fn make_authority(cluster: &str) -> Result<Pem, CertError> {
    let what = "the cluster's certificate authority";
    let key = rcgen::KeyPair::generate().map_err(cert_err(what))?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(cert_err(what))?;
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("ActiveDisk cluster {cluster} CA"),
    );
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    set_validity(&mut params, 10);
    let cert = params.self_signed(&key).map_err(cert_err(what))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// Issues member `name`'s certificate (valid until the 1st of January 2 years on) under the authority `ca`: it names
/// [`MEMBER_NAME`] and `names` (host names or IP addresses clients outside the cluster reach
/// it by, e.g. the Flight SQL service's), for serving and for connecting.
///
/// # Errors
/// [`CertError`]: `ca` not a CA certificate and key in PEM, or a name that is not a valid DNS
/// name or IP address.
pub fn issue(ca: &Pem, name: &str, names: &[String]) -> Result<Pem, CertError> {
    let what = format!("the certificate of {name}");
    if let Some(bad) = names.iter().find(|n| !host_name_or_address(n)) {
        return Err(CertError {
            what,
            why: format!("`{bad}` is neither a host name nor an IP address"),
        });
    }
    let ca_key = rcgen::KeyPair::from_pem(&ca.key).map_err(cert_err(&what))?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(cert_err(&what))?;
    let key = rcgen::KeyPair::generate().map_err(cert_err(&what))?;
    let mut sans = vec![MEMBER_NAME.to_string()];
    sans.extend(names.iter().cloned());
    let mut params = rcgen::CertificateParams::new(sans).map_err(cert_err(&what))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name.to_string());
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    set_validity(&mut params, 2);
    let cert = params.signed_by(&key, &issuer).map_err(cert_err(&what))?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// An IP address, or a DNS name: dot-separated labels of letters, digits and inner hyphens.
fn host_name_or_address(name: &str) -> bool {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// Valid from the start of last year (clocks differ between machines) to `years` years on.
fn set_validity(params: &mut rcgen::CertificateParams, years: i32) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // The mean Gregorian year: off by at most a day near New Year, which the year's margin
    // before covers.
    let year = 1970 + (secs / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + years, 1, 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(ca: &Pem, name: &str) -> TlsMaterial {
        let own = issue(ca, name, &[]).unwrap();
        TlsMaterial::from_pem(ca.cert.clone(), own.cert, own.key)
    }

    /// Serves no gRPC service over a member's TLS (every call: Unimplemented, once TLS let
    /// it through).
    async fn server(tls: &TlsMaterial) -> std::net::SocketAddr {
        serve_nothing(tls.server()).await
    }

    /// Serves no gRPC service with `config`.
    async fn serve_nothing(config: tonic::transport::ServerTlsConfig) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let router = tonic::transport::Server::builder()
            .tls_config(config)
            .unwrap()
            .add_routes(tonic::service::Routes::default());
        tokio::spawn(router.serve_with_incoming(incoming));
        address
    }

    /// Messages as they are (the test's calls carry nothing).
    #[derive(Default)]
    struct RawCodec;

    impl tonic::codec::Codec for RawCodec {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = RawCodec;
        type Decoder = RawCodec;
        fn encoder(&mut self) -> RawCodec {
            RawCodec
        }
        fn decoder(&mut self) -> RawCodec {
            RawCodec
        }
    }

    impl tonic::codec::Encoder for RawCodec {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(
            &mut self,
            item: Vec<u8>,
            dst: &mut tonic::codec::EncodeBuf<'_>,
        ) -> Result<(), tonic::Status> {
            use bytes::BufMut;
            dst.put_slice(&item);
            Ok(())
        }
    }

    impl tonic::codec::Decoder for RawCodec {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn decode(
            &mut self,
            src: &mut tonic::codec::DecodeBuf<'_>,
        ) -> Result<Option<Vec<u8>>, tonic::Status> {
            use bytes::Buf;
            Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
        }
    }

    /// One call from `client` (None: plaintext) to `address`; its status code.
    async fn call(
        address: std::net::SocketAddr,
        client: Option<tonic::transport::ClientTlsConfig>,
    ) -> Result<tonic::Code, String> {
        let scheme = if client.is_some() { "https" } else { "http" };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))
            .unwrap()
            .timeout(std::time::Duration::from_secs(5));
        if let Some(c) = client {
            endpoint = endpoint.tls_config(c).unwrap();
        }
        let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.map_err(|e| format!("{e:?}"))?;
        let path = http::uri::PathAndQuery::from_static("/adisk.Test/Nothing");
        let r = grpc
            .unary(tonic::Request::new(Vec::new()), path, RawCodec)
            .await;
        match r {
            Ok(_) => Ok(tonic::Code::Ok),
            Err(s) => Ok(s.code()),
        }
    }

    #[tokio::test]
    async fn members_meet_strangers_do_not() {
        let ca = make_authority("test").unwrap();
        let address = server(&member(&ca, "disk-0")).await;
        // A member (its certificate from the cluster's CA) gets through to the service.
        assert_eq!(
            call(address, Some(member(&ca, "host").client())).await,
            Ok(tonic::Code::Unimplemented)
        );
        // A client with a certificate from another CA is refused.
        let other = make_authority("other").unwrap();
        let stranger = {
            let p = issue(&other, "intruder", &[]).unwrap();
            TlsMaterial::from_pem(ca.cert.clone(), p.cert, p.key)
        };
        let refused = call(address, Some(stranger.client())).await;
        assert!(
            !matches!(refused, Ok(tonic::Code::Unimplemented)),
            "a foreign client certificate got through: {refused:?}"
        );
        // A client that trusts another CA refuses the server.
        let wary = {
            let p = issue(&other, "wary", &[]).unwrap();
            TlsMaterial::from_pem(other.cert.clone(), p.cert, p.key)
        };
        let refused = call(address, Some(wary.client())).await;
        assert!(
            !matches!(refused, Ok(tonic::Code::Unimplemented)),
            "a server with a foreign certificate was trusted: {refused:?}"
        );
        // A plaintext client does not get through either.
        let plain = call(address, None).await;
        assert!(
            !matches!(plain, Ok(tonic::Code::Unimplemented)),
            "a plaintext client got through: {plain:?}"
        );
    }

    /// Serves no gRPC service with the Flight SQL service's TLS.
    async fn service(tls: &ServiceTls) -> std::net::SocketAddr {
        serve_nothing(tls.server()).await
    }

    fn service_tls(dir: &Path, ca: &Pem, client_ca: Option<&Pem>) -> ServiceTls {
        let own = issue(ca, "host", &["127.0.0.1".into()]).unwrap();
        std::fs::write(dir.join("s.pem"), &own.cert).unwrap();
        std::fs::write(dir.join("s.key"), &own.key).unwrap();
        if let Some(c) = client_ca {
            std::fs::write(dir.join("clients.pem"), &c.cert).unwrap();
        }
        ServiceTls::load(
            &dir.join("s.pem"),
            &dir.join("s.key"),
            client_ca.map(|_| dir.join("clients.pem")).as_deref(),
        )
        .unwrap()
    }

    /// A user's client: trusting `ca`, showing `identity` if given.
    fn user(dir: &Path, ca: &Pem, identity: Option<&Pem>) -> tonic::transport::ClientTlsConfig {
        std::fs::write(dir.join("trusted.pem"), &ca.cert).unwrap();
        if let Some(p) = identity {
            std::fs::write(dir.join("me.pem"), &p.cert).unwrap();
            std::fs::write(dir.join("me.key"), &p.key).unwrap();
        }
        let me = (dir.join("me.pem"), dir.join("me.key"));
        ClientTls::load(
            Some(&dir.join("trusted.pem")),
            identity.map(|_| (me.0.as_path(), me.1.as_path())),
        )
        .unwrap()
        .config()
    }

    #[tokio::test]
    async fn the_service_is_checked_by_its_address_and_checks_clients_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let ca = make_authority("test").unwrap();
        // Server-only TLS: a client trusting the CA reaches it at the address its certificate
        // names; one trusting another CA, or a plaintext one, does not.
        let open = service(&service_tls(dir.path(), &ca, None)).await;
        let ok = Ok(tonic::Code::Unimplemented);
        assert_eq!(call(open, Some(user(dir.path(), &ca, None))).await, ok);
        let other = make_authority("other").unwrap();
        assert_ne!(call(open, Some(user(dir.path(), &other, None))).await, ok);
        assert_ne!(call(open, None).await, ok);
        // Mutual TLS: only a client showing a certificate of the clients' CA gets through.
        let clients = make_authority("clients").unwrap();
        let mutual = service(&service_tls(dir.path(), &ca, Some(&clients))).await;
        let alice = issue(&clients, "alice", &[]).unwrap();
        let mallory = issue(&other, "mallory", &[]).unwrap();
        assert_eq!(
            call(mutual, Some(user(dir.path(), &ca, Some(&alice)))).await,
            ok
        );
        assert_ne!(call(mutual, Some(user(dir.path(), &ca, None))).await, ok);
        assert_ne!(
            call(mutual, Some(user(dir.path(), &ca, Some(&mallory)))).await,
            ok
        );
    }

    #[test]
    fn load_names_the_file_it_cannot_use() {
        let dir = tempfile::tempdir().unwrap();
        let ca = make_authority("test").unwrap();
        let own = issue(&ca, "disk-0", &["10.7.0.11".into(), "disk0.example".into()]).unwrap();
        std::fs::write(dir.path().join("ca.pem"), &ca.cert).unwrap();
        std::fs::write(dir.path().join("own.pem"), &own.cert).unwrap();
        std::fs::write(dir.path().join("own.key"), &own.key).unwrap();
        let p = |n: &str| dir.path().join(n);
        assert!(TlsMaterial::load(&p("ca.pem"), &p("own.pem"), &p("own.key")).is_ok());
        let e = TlsMaterial::load(&p("ca.pem"), &p("own.key"), &p("own.pem")).unwrap_err();
        assert!(
            e.to_string().contains("own.key holds no certificate"),
            "{e}"
        );
        let e = TlsMaterial::load(&p("nope.pem"), &p("own.pem"), &p("own.key")).unwrap_err();
        assert!(e.to_string().contains("nope.pem"), "{e}");
        assert!(issue(&ca, "x", &["not a name!".into()]).is_err());
    }
}
