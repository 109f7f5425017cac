//! `memkv drive list | status | add | remove`: a running drive-backed server's drives through
//! its admin API (data port + 1). `list` and `status` read `/v1/status`; `remove` and `add`
//! POST to `/v1/drives/{remove,add}`, signed with the auth key (the client's: `--auth-key`,
//! `MEMKV_AUTH_KEY` or the key file) for the server instance its `/v1/status` shows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use memkv_proto::AuthKey;
use memkv_proto::admin_auth::{
    ADMIN_AUTH_HEADER, ADMIN_NONCE_LEN, is_admin_instance_id, sign_admin_request,
};
use memkv_server::admin::{DeviceStatus, DriveChangeReport, DriveChangeRequest, StatusReport};
use serde_json::Value;

use crate::admin::admin_address;
use crate::exit::{self, Exit};
use crate::http::{AdminClient, TlsOptions};

#[derive(Debug, Subcommand)]
pub enum DriveCommand {
    /// One line per drive: state (online, failed, removed), capacity, use, read errors.
    List {
        #[command(flatten)]
        target: Target,
        /// JSON (the server's drive objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One drive (as the server's config names it) in detail. Exit 3 if there is no such drive.
    Status {
        media: String,
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        json: bool,
    },
    /// Take a drive out of service on a running server: no new values go to it, and its values
    /// read as misses until it is added back. Not the first drive (it holds the journal) nor
    /// the last in service.
    Remove {
        media: String,
        #[command(flatten)]
        target: Target,
    },
    /// Put a drive of this store back into service (one removed, or one that failed and was
    /// repaired): its superblock must name this store and the drive's slot. Its values are
    /// served again, each verified against its checksum.
    Add {
        media: String,
        #[command(flatten)]
        target: Target,
    },
}

/// Which server, and how to reach its admin API.
#[derive(Debug, Args)]
pub struct Target {
    /// The server's data address HOST:PORT (default: the client's one server; with several,
    /// name one).
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// Speak HTTPS to the admin API. Implied by --tls-ca and --insecure.
    #[arg(long)]
    pub https: bool,
    /// HTTPS, trusting the certificates in this PEM file.
    #[arg(long, value_name = "PATH", conflicts_with = "insecure")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// HTTPS without verifying the server's certificate.
    #[arg(long)]
    pub insecure: bool,
}

impl DriveCommand {
    pub fn target(&self) -> &Target {
        match self {
            Self::List { target, .. }
            | Self::Status { target, .. }
            | Self::Remove { target, .. }
            | Self::Add { target, .. } => target,
        }
    }
}

/// Runs `command` against `server` (its data address); `key` gives the key that signs
/// changes, asked for only by them: `list` and `status` work without one.
pub async fn run(
    command: DriveCommand,
    server: &str,
    key: &dyn Fn() -> Result<AuthKey, Exit>,
    deadline: Duration,
) -> Result<(), Exit> {
    let target = command.target();
    let tls = TlsOptions {
        https: target.https,
        ca: target.tls_ca.clone(),
        insecure: target.insecure,
    };
    let client = AdminClient::new(&tls).map_err(|e| Exit::with(exit::USAGE, e))?;
    let admin = admin_address(server).map_err(|e| Exit::with(exit::USAGE, e))?;
    match command {
        DriveCommand::List { json, .. } => {
            let drives = drives(&client, &admin, deadline).await?;
            if json {
                print_json(&drives);
            } else {
                out!("{}", table(&drives));
            }
            Ok(())
        }
        DriveCommand::Status { media, json, .. } => {
            let drives = drives(&client, &admin, deadline).await?;
            // By path, as the server finds the drive that `drive remove` names: `dir/d1/` and
            // `dir//d1` are the configured `dir/d1`.
            let wanted = std::path::Path::new(&media);
            let found = drives
                .into_iter()
                .find(|d| std::path::Path::new(&d.media) == wanted);
            let Some(drive) = found else {
                return Err(Exit::with(
                    exit::NOT_FOUND,
                    format!("server {server} has no drive {media}"),
                ));
            };
            if json {
                print_json(&drive);
            } else {
                out!("{}", detail(&drive));
            }
            Ok(())
        }
        DriveCommand::Remove { media, .. } => {
            change(&client, &admin, server, &key()?, "remove", &media, deadline).await
        }
        DriveCommand::Add { media, .. } => {
            change(&client, &admin, server, &key()?, "add", &media, deadline).await
        }
    }
}

fn print_json(value: &impl serde::Serialize) {
    outln!(
        "{}",
        serde_json::to_string_pretty(value).expect("drive reports serialize")
    );
}

fn unreachable(e: String) -> Exit {
    Exit::with(exit::UNREACHABLE, e)
}

/// The error text of an admin API refusal: its `error` field, else the body.
fn refusal_text(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(200).collect())
}

async fn drives(
    client: &AdminClient,
    admin: &str,
    deadline: Duration,
) -> Result<Vec<DeviceStatus>, Exit> {
    let report = status(client, admin, deadline).await?;
    if report.storage.mode == "memory" {
        return Err(Exit::with(
            exit::FAILURE,
            format!("{admin}: storage.mode memory has no drives"),
        ));
    }
    Ok(report.storage.devices)
}

async fn status(
    client: &AdminClient,
    admin: &str,
    deadline: Duration,
) -> Result<StatusReport, Exit> {
    let r = client
        .get(admin, "/v1/status", deadline)
        .await
        .map_err(unreachable)?;
    if r.status != 200 {
        return Err(Exit::with(
            exit::FAILURE,
            format!(
                "{admin}/v1/status answered HTTP {}: {}",
                r.status,
                refusal_text(&r.body)
            ),
        ));
    }
    serde_json::from_slice(&r.body)
        .map_err(|e| Exit::with(exit::FAILURE, format!("/v1/status is not JSON: {e}")))
}

/// The instance id the server shows in `/v1/status`, which a signature must name: it makes
/// the signature good on this server until it restarts, and on no other.
async fn instance(
    client: &AdminClient,
    admin: &str,
    server: &str,
    deadline: Duration,
) -> Result<String, Exit> {
    let instance = status(client, admin, deadline).await?.instance;
    if !is_admin_instance_id(&instance) {
        return Err(Exit::with(
            exit::UNSUPPORTED_VERSION,
            format!(
                "server {server} shows no instance id in /v1/status (found {instance:?}): it is older than this memkv, whose drive changes are signed for one server instance; upgrade the server, or use a memkv of the server's version"
            ),
        ));
    }
    Ok(instance)
}

async fn change(
    client: &AdminClient,
    admin: &str,
    server: &str,
    key: &AuthKey,
    action: &str,
    media: &str,
    deadline: Duration,
) -> Result<(), Exit> {
    let path = format!("/v1/drives/{action}");
    let body = serde_json::to_vec(&DriveChangeRequest {
        media: media.to_owned(),
    })
    .expect("the request serializes");
    let instance = instance(client, admin, server, deadline).await?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut nonce = [0u8; ADMIN_NONCE_LEN];
    getrandom::fill(&mut nonce)
        .map_err(|e| Exit::with(exit::FAILURE, format!("no random source: {e}")))?;
    let signature = sign_admin_request(key, &instance, "POST", &path, now, nonce, &body);
    let r = client
        .post(
            admin,
            &path,
            &[(ADMIN_AUTH_HEADER, signature)],
            body,
            deadline,
        )
        .await
        .map_err(unreachable)?;
    let code = match r.status {
        200 => {
            let report: DriveChangeReport = serde_json::from_slice(&r.body).map_err(|e| {
                Exit::with(exit::FAILURE, format!("{path} answer is not JSON: {e}"))
            })?;
            let done = match (action, report.changed) {
                ("remove", true) => "removed from service",
                ("remove", false) => "was already out of service; nothing changed",
                (_, true) => "back in service",
                (_, false) => "was already in service; nothing changed",
            };
            outln!(
                "drive {media} on {server}: {done} (state {})",
                report.drive.state
            );
            return Ok(());
        }
        401 | 403 => exit::UNAUTHORIZED,
        404 => exit::NOT_FOUND,
        _ => exit::FAILURE,
    };
    Err(Exit::with(
        code,
        format!(
            "drive {action} {media} on {server} refused (HTTP {}): {}",
            r.status,
            refusal_text(&r.body)
        ),
    ))
}

fn gib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / (1u64 << 30) as f64)
}

fn table(drives: &[DeviceStatus]) -> String {
    let mut rows = vec![[
        "MEDIA".to_owned(),
        "STATE".to_owned(),
        "RAW GiB".to_owned(),
        "USABLE GiB".to_owned(),
        "USED GiB".to_owned(),
        "READ ERRORS".to_owned(),
    ]];
    for d in drives {
        rows.push([
            d.media.clone(),
            d.state.clone(),
            gib(d.raw_bytes),
            gib(d.usable_bytes),
            gib(d.used_bytes),
            d.read_errors.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn detail(d: &DeviceStatus) -> String {
    format!(
        "media        : {}\nstate        : {}\nraw bytes    : {}\nusable bytes : {}\nused bytes   : {}\nread errors  : {}\n",
        d.media, d.state, d.raw_bytes, d.usable_bytes, d.used_bytes, d.read_errors
    )
}
