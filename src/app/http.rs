//! The one HTTP server: `/metrics`, `/healthz`, `/readyz`.

use std::{future::Future, net::SocketAddr, sync::Arc};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::net::TcpListener;

use crate::{app::health::Readiness, metrics::Metrics};

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The router, separate from the listener so tests can call it in-process.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(AppState { metrics, readiness })
}

async fn render_metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([("content-type", "text/plain; version=0.0.4")], state.metrics.render())
}

async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    let pending = state.readiness.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches of: {}", pending.join(", ")),
        )
    }
}

/// Bind `addr` and return the listener, so a bad address fails start-up rather than later.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serve until `shutdown` resolves.
///
/// # Errors
/// When the server fails while accepting connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}
