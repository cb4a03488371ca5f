//! Where a target URL points: its host and port as the one URL parser reads them, the address
//! it resolves to, and the TLS connector of a `wss` target.

use super::error::SetupError;
use rustls::pki_types::ServerName;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use tokio_rustls::TlsConnector;
use wsload_spec::{LoadTestSpec, TargetUrl};

/// Where a target URL points.
pub(super) struct Endpoint {
    /// As the URL writes it (an IPv6 address in brackets), for messages.
    host: String,
    /// Without brackets: what is looked up, and the name TLS verifies.
    lookup_host: String,
    port: u16,
    tls: bool,
}

impl Endpoint {
    /// From the one parser `wsload validate` and the API server agree with: the host and port
    /// dialled are the URL's, never a default standing in for a port it could not read.
    pub(super) fn of(url: &str) -> Result<Endpoint, SetupError> {
        let url = TargetUrl::parse(url).map_err(|e| SetupError::field("spec.target.url", e))?;
        Ok(Endpoint {
            lookup_host: url.lookup_host().to_string(),
            host: url.host,
            port: url.port,
            tls: url.tls,
        })
    }

    /// The first address the name resolves to (once: every connection of the run goes there).
    pub(super) fn resolve(&self) -> Result<SocketAddr, SetupError> {
        let (host, port) = (self.host.clone(), self.port);
        match (self.lookup_host.as_str(), port).to_socket_addrs() {
            Ok(mut addrs) => addrs.next().ok_or(SetupError::NoAddress { host, port }),
            Err(source) => Err(SetupError::Unresolvable { host, port, source }),
        }
    }

    /// The TLS connector and server name of a `wss` target; `None` for `ws`.
    pub(super) fn tls(
        &self,
        spec: &LoadTestSpec,
        url: &str,
    ) -> Result<Option<(TlsConnector, ServerName<'static>)>, SetupError> {
        if !self.tls {
            return Ok(None);
        }
        let config = Arc::new(crate::connect::tls::client_config(spec.tls.as_ref())?);
        let name = ServerName::try_from(self.lookup_host.clone())
            .map_err(|e| SetupError::field(format!("spec.target.url {url:?}"), e))?;
        Ok(Some((TlsConnector::from(config), name)))
    }
}
