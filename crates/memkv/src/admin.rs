//! `memkv admin status`: `/v1/status` from each server's admin API (data port + 1).

use std::time::Duration;

use memkv_server::admin::StatusReport;
use serde_json::{Value, json};

use crate::exit::{self, Exit};
use crate::http;

/// The admin address of a data address: same host, port + 1.
pub fn admin_address(server: &str) -> Result<String, String> {
    let (host, port) = server
        .rsplit_once(':')
        .ok_or_else(|| format!("server {server:?} is not host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("server {server:?} has no valid port"))?;
    let admin = port
        .checked_add(1)
        .ok_or_else(|| format!("server {server:?}: port {port} has no port + 1"))?;
    Ok(format!("{host}:{admin}"))
}

/// One server's answer.
struct Answer {
    server: String,
    admin: String,
    outcome: Result<Value, String>,
}

async fn query(server: String, deadline: Duration) -> Answer {
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
    let outcome = match http::get(&admin, "/v1/status", deadline).await {
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

pub async fn status(servers: Vec<String>, json_out: bool, deadline: Duration) -> Result<(), Exit> {
    let tasks: Vec<_> = servers
        .into_iter()
        .map(|s| tokio::spawn(query(s, deadline)))
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
        println!("{text}");
    } else {
        print!("{}", table(&answers));
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
        "CONNS",
        "RDMA",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    let mut errors = Vec::new();
    for a in answers {
        match &a.outcome {
            Ok(value) => {
                let s: StatusReport = serde_json::from_value(value.clone()).unwrap_or_default();
                rows.push(vec![
                    a.server.clone(),
                    "up".into(),
                    s.version,
                    format!("{}s", s.uptime_secs),
                    s.storage.mode,
                    gib(s.storage.used_bytes_total),
                    gib(s.storage.usable_bytes_total),
                    s.storage.blocks.to_string(),
                    s.connections.current.to_string(),
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
    let widths: Vec<usize> = (0..header.len())
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
    for e in errors {
        out.push_str(&e);
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
        assert!(admin_address("host").is_err());
        assert!(admin_address("host:65535").is_err());
    }

    #[test]
    fn the_table_has_a_row_per_server_and_lists_errors() {
        let answers = vec![
            Answer {
                server: "a:1".into(),
                admin: "a:2".into(),
                outcome: Ok(
                    json!({"version": "0.1.0", "storage": {"mode": "memory", "blocks": 7}}),
                ),
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
            lines[1].starts_with("a:1") && lines[1].contains("memory") && lines[1].contains(" 7 ")
        );
        assert!(lines[2].starts_with("b:1") && lines[2].contains("ERROR"));
        assert_eq!(lines[3], "b:1: cannot connect: refused");
    }
}
