//! The manager's one Kubernetes client, built as kube's default stack is but with a bounded
//! pool of idle connections.
//!
//! kube's client speaks HTTP/1.1, so a burst of N concurrent requests (1000 windows opening at
//! once) opens N connections, and its pool keeps every one of them for 90 s afterwards: about
//! 30 KB each of buffers and channels, 30 MB after such a burst. Between bursts the manager
//! needs a handful, since watches hold their own. So the pool keeps [`MAX_IDLE_CONNECTIONS`]
//! and closes the rest as they come back.
//!
//! The one layer of kube's stack left out is its per-request `debug` trace span: the
//! controllers' own errors and conditions name the request that failed.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt as _;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Idle connections kept per API server: enough for the controllers' steady reads and writes.
pub const MAX_IDLE_CONNECTIONS: usize = 16;

/// How long an idle connection is kept before it is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A client for `config`. A kubeconfig naming a proxy or an exec credential plugin gets kube's
/// own stack, which knows how to tunnel through a proxy and when a plugin's certificate expires.
///
/// # Errors
/// When the TLS settings or credentials in `config` are invalid.
pub fn build(config: Config) -> kube::Result<Client> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(pool);
    Ok(Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::sync::Barrier;

    const BURST: usize = 40;

    /// An HTTP/1.1 server on loopback that answers each request only once `BURST` requests
    /// wait, so the burst needs `BURST` connections; it counts the connections it accepted and
    /// those still open.
    async fn server() -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (accepted, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let barrier = Arc::new(Barrier::new(BURST));
        let (accepts, counter) = (accepted.clone(), open.clone());
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (open, barrier) = (counter.clone(), barrier.clone());
                accepts.fetch_add(1, Ordering::SeqCst);
                open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    // One request per read is enough for these bodiless GETs.
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                        barrier.wait().await;
                        let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(answer.as_bytes()).await.is_err() {
                            break;
                        }
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (url, accepted, open)
    }

    #[tokio::test]
    async fn a_burst_leaves_at_most_the_idle_cap_of_connections_open() {
        let (url, accepted, open) = server().await;
        let client = build(Config::new(url.parse().unwrap())).unwrap();
        let burst = (0..BURST).map(|_| {
            let client = client.clone();
            async move {
                let request = http::Request::get("/version").body(Vec::new()).unwrap();
                client.request_text(request).await
            }
        });
        for answer in futures::future::join_all(burst).await {
            assert_eq!(answer.unwrap(), "{}");
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            BURST,
            "each request of the burst has its own connection"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while open.load(Ordering::SeqCst) > MAX_IDLE_CONNECTIONS {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} connections still open, the cap is {MAX_IDLE_CONNECTIONS}",
                open.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
