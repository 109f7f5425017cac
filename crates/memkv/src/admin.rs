//! `memkv admin status`: `/v1/status` from each server's admin API (data port + 1), over
//! HTTP or HTTPS.

use std::sync::Arc;
use std::time::Duration;

use memkv_server::admin::StatusReport;
use serde_json::{Value, json};

use crate::exit::{self, Exit};
use crate::http::{AdminClient, TlsOptions};

/// The admin address of a data address: same host, port + 1. A server that is not
/// `host:port` is refused here, before any server is asked, rather than sent to a resolver
/// that fails later with a less helpful error (`http://h:9900` would be asked as
/// `http://http://h:9901`).
pub fn admin_address(server: &str) -> Result<String, String> {
    const EXPECTED: &str =
        "expected HOST:PORT, the data address (e.g. 10.0.0.1:9900, memkv1:9900 or [fd00::1]:9900)";
    if let Some(why) = memkv_client::config::server_address_problem(server) {
        return Err(format!(
            "server {server:?} is not host:port: {why}; {EXPECTED}"
        ));
    }
    let (host, port) = server.rsplit_once(':').expect("checked: HOST:PORT");
    let port: u16 = port.parse().expect("checked: a port below 65535");
    Ok(format!("{host}:{}", port + 1))
}

/// One server's answer.
struct Answer {
    server: String,
    admin: String,
    outcome: Result<Value, String>,
}

async fn query(client: Arc<AdminClient>, server: String, deadline: Duration) -> Answer {
    let admin = match admin_address(&server) {
        Ok(a) => a,
        Err(e) => {
            return Answer {
                server,
                admin: String::new(),
                outcome: Err(e),
            };
        }
    };
    let outcome = match client.get(&admin, "/v1/status", deadline).await {
        Ok(r) if r.status == 200 => serde_json::from_slice::<Value>(&r.body)
            .map_err(|e| format!("/v1/status is not JSON: {e}")),
        Ok(r) => Err(format!(
            "/v1/status answered HTTP {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
                .chars()
                .take(200)
                .collect::<String>()
        )),
        Err(e) => Err(e),
    };
    Answer {
        server,
        admin,
        outcome,
    }
}

pub async fn status(
    servers: Vec<String>,
    json_out: bool,
    deadline: Duration,
    tls: &TlsOptions,
) -> Result<(), Exit> {
    let client = Arc::new(AdminClient::new(tls).map_err(|e| Exit::with(exit::USAGE, e))?);
    let tasks: Vec<_> = servers
        .into_iter()
        .map(|s| tokio::spawn(query(Arc::clone(&client), s, deadline)))
        .collect();
    let mut answers = Vec::with_capacity(tasks.len());
    for t in tasks {
        answers.push(
            t.await
                .map_err(|e| Exit::with(exit::FAILURE, e.to_string()))?,
        );
    }
    let failed = answers.iter().filter(|a| a.outcome.is_err()).count();
    if json_out {
        let array: Vec<Value> = answers
            .iter()
            .map(|a| match &a.outcome {
                Ok(status) => {
                    json!({"server": a.server, "admin": a.admin, "ok": true, "status": status})
                }
                Err(e) => json!({"server": a.server, "admin": a.admin, "ok": false, "error": e}),
            })
            .collect();
        let text = serde_json::to_string_pretty(&array).expect("JSON values serialize");
        outln!("{text}");
    } else {
        out!("{}", table(&answers));
    }
    if failed > 0 {
        return Err(Exit::silent(exit::UNREACHABLE));
    }
    Ok(())
}

fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}

fn table(answers: &[Answer]) -> String {
    let header = [
        "SERVER",
        "STATE",
        "VERSION",
        "UPTIME",
        "MODE",
        "USED GiB",
        "USABLE GiB",
        "BLOCKS",
        "INDEX MiB",
        "CONNS",
        "CLIENTS BY TRANSPORT",
        "RDMA",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    let mut errors = Vec::new();
    for a in answers {
        match &a.outcome {
            Ok(value) => {
                let s: StatusReport = serde_json::from_value(value.clone()).unwrap_or_default();
                let mix = transport_mix(&s);
                rows.push(vec![
                    a.server.clone(),
                    "up".into(),
                    s.version,
                    format!("{}s", s.uptime_secs),
                    s.storage.mode,
                    gib(s.storage.used_bytes_total),
                    gib(s.storage.usable_bytes_total),
                    s.storage.blocks.to_string(),
                    format!("{:.1}", s.storage.index_bytes as f64 / (1u64 << 20) as f64),
                    s.connections.current.to_string(),
                    mix,
                    if s.rdma.active { "active" } else { "off" }.into(),
                ]);
            }
            Err(e) => {
                let mut row = vec![a.server.clone(), "ERROR".into()];
                row.resize(header.len(), "-".into());
                rows.push(row);
                errors.push(format!("{}: {e}", a.server));
            }
        }
    }
    let mut out = align(&rows);
    let clients = client_rows(answers);
    if clients.len() > 1 {
        out.push('\n');
        out.push_str(&align(&clients));
    }
    for e in errors {
        out.push_str(&e);
        out.push('\n');
    }
    out
}

/// `tcp=2 rdma-rc=1`: the server's clients counted by transport; `-` with none.
fn transport_mix(s: &StatusReport) -> String {
    let mut counts: std::collections::BTreeMap<&str, u64> = Default::default();
    for c in &s.clients {
        *counts.entry(c.transport.as_str()).or_default() += 1;
    }
    if counts.is_empty() {
        return "-".into();
    }
    counts
        .iter()
        .map(|(t, n)| format!("{t}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One row per connected client of every server that answered (the header row first).
fn client_rows(answers: &[Answer]) -> Vec<Vec<String>> {
    let header = [
        "SERVER",
        "CLIENT",
        "TRANSPORT",
        "DEVICE",
        "OPS",
        "MiB IN",
        "MiB OUT",
        "CONNECTED",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for a in answers {
        let Ok(value) = &a.outcome else { continue };
        let s: StatusReport = serde_json::from_value(value.clone()).unwrap_or_default();
        for c in s.clients {
            rows.push(vec![
                a.server.clone(),
                c.peer,
                c.transport,
                c.device.unwrap_or_else(|| "-".into()),
                c.ops.to_string(),
                mib(c.bytes_in),
                mib(c.bytes_out),
                format!("{}s", c.connected_secs),
            ]);
        }
    }
    rows
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// Left-aligned columns two spaces apart.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_is_data_port_plus_one() {
        assert_eq!(admin_address("10.0.0.1:9900").unwrap(), "10.0.0.1:9901");
        assert_eq!(admin_address("[::1]:9900").unwrap(), "[::1]:9901");
        assert_eq!(
            admin_address("memkv-1.rack_2:9900").unwrap(),
            "memkv-1.rack_2:9901"
        );
        assert!(admin_address("host").is_err());
        assert!(admin_address("host:65535").is_err());
    }

    #[test]
    fn a_server_that_is_not_host_port_is_named_with_what_is_wrong() {
        for (server, says) in [
            ("http://10.0.0.1:9900", "drop the \"http://\""),
            (":9900", "the host is empty"),
            ("bad host:9900", "holds ' '"),
            ("10.0.0.1:9900/v1", "is not a number"),
            ("10.0.0.1:+9900", "is not a number"),
            ("10.0.0.1:0", "is not a number"),
            ("::1:9900", "in brackets"),
            ("[::g]:9900", "bracketed IPv6"),
        ] {
            let e = admin_address(server).unwrap_err();
            assert!(
                e.contains(says) && e.contains(&format!("{server:?}")) && e.contains("HOST:PORT"),
                "{server}: {e}"
            );
        }
    }

    #[test]
    fn the_table_has_a_row_per_server_and_lists_errors() {
        let answers = vec![
            Answer {
                server: "a:1".into(),
                admin: "a:2".into(),
                outcome: Ok(json!({"version": "0.1.0",
                           "storage": {"mode": "memory", "blocks": 7, "index_bytes": 3145728}})),
            },
            Answer {
                server: "b:1".into(),
                admin: "b:2".into(),
                outcome: Err("cannot connect: refused".into()),
            },
        ];
        let text = table(&answers);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("SERVER"));
        assert!(
            lines[1].starts_with("a:1")
                && lines[1].contains("memory")
                && lines[1].contains(" 7 ")
                && lines[1].contains(" 3.0 ")
        );
        assert!(lines[2].starts_with("b:1") && lines[2].contains("ERROR"));
        assert_eq!(lines[3], "b:1: cannot connect: refused");
    }

    #[test]
    fn clients_and_the_transport_mix_are_shown() {
        let answers = vec![Answer {
            server: "a:1".into(),
            admin: "a:2".into(),
            outcome: Ok(json!({"version": "0.1.0", "clients": [
                {"peer": "10.0.0.9:4000", "transport": "tcp", "ops": 3, "bytes_in": 1048576},
                {"peer": "10.0.0.8:4001", "transport": "rdma-rc", "device": "rxe0", "ops": 5},
                {"peer": "10.0.0.8:4002", "transport": "rdma-rc", "device": "rxe0"}
            ]})),
        }];
        let text = table(&answers);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("CLIENTS BY TRANSPORT"), "{text}");
        assert!(lines[1].contains("rdma-rc=2 tcp=1"), "{text}");
        assert_eq!(lines[2], "");
        assert!(lines[3].starts_with("SERVER") && lines[3].contains("TRANSPORT"));
        assert!(
            lines[4].contains("10.0.0.9:4000")
                && lines[4].contains(" tcp ")
                && lines[4].contains(" 1.0 "),
            "{text}"
        );
        assert!(
            lines[5].contains("rdma-rc") && lines[5].contains("rxe0"),
            "{text}"
        );
        assert_eq!(lines.len(), 7);
    }
}
