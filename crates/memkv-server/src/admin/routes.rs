//! The `/v1` handlers.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::StatusSource;
use super::model::{HealthStatus, Readiness};

type Source = super::drives::AdminState;

/// The admin API as an axum router, for embedding or for tests.
pub fn router(source: Arc<dyn StatusSource>) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/ready", get(ready))
        .route("/v1/status", get(status))
        .route("/v1/metrics", get(metrics))
        .route("/v1/drives/remove", post(super::drives::remove))
        .route("/v1/drives/add", post(super::drives::add))
        .with_state(super::drives::AdminState::new(source))
}

async fn health(State(source): State<Source>) -> Response {
    let report = source.health();
    let code = match report.status {
        HealthStatus::Unhealthy => StatusCode::SERVICE_UNAVAILABLE,
        HealthStatus::Healthy | HealthStatus::Degraded => StatusCode::OK,
    };
    (code, Json(report)).into_response()
}

async fn ready(State(source): State<Source>) -> Response {
    let readiness = source.readiness();
    let code = match readiness {
        Readiness::Ready => StatusCode::OK,
        Readiness::Starting | Readiness::Draining => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, readiness.as_str()).into_response()
}

async fn status(State(source): State<Source>) -> Response {
    Json(source.status()).into_response()
}

async fn metrics(State(source): State<Source>) -> Response {
    source.sync_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(),
    )
        .into_response()
}
