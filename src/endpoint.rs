//! Checking that a control plane endpoint accepts TCP connections, behind a trait so tests and
//! the sandbox answer without dialling the addresses manifests name.

use std::time::Duration;

use async_trait::async_trait;
use tokio::net::TcpStream;

/// Why an endpoint did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The connection did not complete in time.
    #[error("no answer from {endpoint} within {timeout:?}")]
    Timeout {
        /// `host:port`.
        endpoint: String,
        /// The probe's time limit.
        timeout: Duration,
    },
    /// The connection failed (refused, unresolvable, unreachable).
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// `host:port`.
        endpoint: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Something that can tell whether `host:port` answers.
#[async_trait]
pub trait EndpointProbe: Send + Sync {
    /// Ok when the endpoint accepts a connection.
    async fn probe(&self, host: &str, port: u16) -> Result<(), ProbeError>;
}

/// Opens a real TCP connection, bounded by a timeout.
#[derive(Clone, Debug)]
pub struct TcpProbe {
    /// Limit on one connection attempt (DNS lookup included).
    pub timeout: Duration,
}

#[async_trait]
impl EndpointProbe for TcpProbe {
    async fn probe(&self, host: &str, port: u16) -> Result<(), ProbeError> {
        let endpoint = format!("{host}:{port}");
        match tokio::time::timeout(self.timeout, TcpStream::connect((host, port))).await {
            Err(_) => Err(ProbeError::Timeout {
                endpoint,
                timeout: self.timeout,
            }),
            Ok(Err(source)) => Err(ProbeError::Connect { endpoint, source }),
            Ok(Ok(_stream)) => Ok(()),
        }
    }
}

/// Answers every probe as reachable without any network traffic; used by the sandbox, whose
/// manifests name hosts that must never be dialled.
#[derive(Clone, Copy, Debug, Default)]
pub struct AlwaysReachable;

#[async_trait]
impl EndpointProbe for AlwaysReachable {
    async fn probe(&self, _host: &str, _port: u16) -> Result<(), ProbeError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listening_loopback_port_is_reachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        TcpProbe {
            timeout: Duration::from_secs(5),
        }
        .probe("127.0.0.1", port)
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_closed_loopback_port_is_a_connect_error() {
        let port = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            listener.local_addr().unwrap().port()
        };
        let err = TcpProbe {
            timeout: Duration::from_secs(5),
        }
        .probe("127.0.0.1", port)
        .await
        .unwrap_err();
        assert!(matches!(err, ProbeError::Connect { .. }), "{err}");
        assert!(err.to_string().contains(&format!("127.0.0.1:{port}")));
    }
}
