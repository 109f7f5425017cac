//! `POST /v1/drives/remove` and `/v1/drives/add`: the drive changes `memkv drive` makes on a
//! running server. State-changing, so each request must be signed with the server's auth key
//! (`memkv_proto::admin_auth`: header `x-memkv-auth`, for this server's instance, within 60 s
//! of the server's clock, each signature accepted once). Signing rather than loopback-only: operators run `memkv drive`
//! from wherever they hold the key, and HTTP through a proxy or a port-forward cannot pass for
//! a local caller.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use memkv_proto::admin_auth::{
    ADMIN_AUTH_HEADER, ADMIN_AUTH_WINDOW_SECS, AdminSignature, verify_admin_request,
};

use super::StatusSource;
use super::model::{DriveAction, DriveChangeError, DriveChangeRequest};

/// The admin API's state: the server's report source, and the signatures accepted lately.
#[derive(Clone)]
pub struct AdminState {
    source: Arc<dyn StatusSource>,
    /// Accepted signatures and their times, kept for the signature window to refuse replays.
    seen: Arc<Mutex<HashMap<AdminSignature, u64>>>,
}

impl AdminState {
    pub fn new(source: Arc<dyn StatusSource>) -> Self {
        Self {
            source,
            seen: Arc::default(),
        }
    }

    /// Records `signature` at `now`; `false` when it was accepted before (a replay).
    fn first_use(&self, signature: AdminSignature, now: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.retain(|_, at| now.saturating_sub(*at) <= 2 * ADMIN_AUTH_WINDOW_SECS);
        seen.insert(signature, now).is_none()
    }
}

impl std::ops::Deref for AdminState {
    type Target = dyn StatusSource;
    fn deref(&self) -> &Self::Target {
        &*self.source
    }
}

fn refusal(code: StatusCode, message: impl std::fmt::Display) -> Response {
    (
        code,
        Json(serde_json::json!({ "error": message.to_string() })),
    )
        .into_response()
}

pub(super) async fn remove(state: State<AdminState>, headers: HeaderMap, body: Bytes) -> Response {
    change(state, headers, body, DriveAction::Remove).await
}

pub(super) async fn add(state: State<AdminState>, headers: HeaderMap, body: Bytes) -> Response {
    change(state, headers, body, DriveAction::Add).await
}

async fn change(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: Bytes,
    action: DriveAction,
) -> Response {
    let (Some(key), Some(instance)) = (state.admin_key(), state.instance()) else {
        return refusal(
            StatusCode::FORBIDDEN,
            "this server accepts no state-changing admin requests",
        );
    };
    let path = format!("/v1/drives/{}", action.as_str());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let header = headers.get(ADMIN_AUTH_HEADER).and_then(|v| v.to_str().ok());
    let signature = match verify_admin_request(&key, &instance, header, "POST", &path, now, &body) {
        Ok(signature) => signature,
        Err(e) => {
            tracing::warn!(%path, error = %e, "admin request refused");
            return refusal(StatusCode::UNAUTHORIZED, e);
        }
    };
    if !state.first_use(signature, now) {
        tracing::warn!(%path, "admin request refused: a replayed signature");
        return refusal(
            StatusCode::UNAUTHORIZED,
            "this signature was used before (a replayed request); sign each request afresh",
        );
    }
    let request: DriveChangeRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                format!("the body must be {{\"media\": \"<drive>\"}}: {e}"),
            );
        }
    };
    let source = Arc::clone(&state.source);
    let done =
        tokio::task::spawn_blocking(move || source.change_drive(action, &request.media)).await;
    match done {
        Ok(Ok(report)) => (StatusCode::OK, Json(report)).into_response(),
        Ok(Err(e @ DriveChangeError::UnknownDrive(_))) => refusal(StatusCode::NOT_FOUND, e),
        Ok(Err(e @ DriveChangeError::Refused(_))) => refusal(StatusCode::CONFLICT, e),
        Ok(Err(e @ DriveChangeError::Io(_))) => refusal(StatusCode::INTERNAL_SERVER_ERROR, e),
        Err(e) => refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("drive change failed: {e}"),
        ),
    }
}
