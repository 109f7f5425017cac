//! `memkv`: run a server, use one as a client, query admin APIs, inspect the RDMA fabric.
//! Exit codes: see [`exit`] and `memkv --help`.

#![forbid(unsafe_code)]

#[macro_use]
mod stdout;
mod admin;
mod bench;
mod cli;
mod drive;
mod exit;
mod http;
mod kv;
mod net;
mod progress;
mod setup;
mod start;

use std::time::Duration;

use clap::Parser;
use memkv_client::{Client, ClientConfig};

use cli::{AdminCommand, Cli, Command, GlobalArgs, NetCommand};
use exit::Exit;

fn main() {
    let cli = Cli::parse();
    let code = match run(cli) {
        Ok(()) => exit::OK,
        Err(Exit { code, message }) => {
            if let Some(m) = message {
                eprintln!("memkv: {m}");
            }
            code
        }
    };
    std::process::exit(code);
}

fn run(cli: Cli) -> Result<(), Exit> {
    match cli.command {
        Command::Start { config } => start::start(config.as_deref()),
        Command::Keygen => keygen(),
        Command::Setup(args) => setup::run(args),
        Command::Net(NetCommand::Show { device, port, json }) => net::show(device, port, json),
        Command::Net(NetCommand::Verify {
            server,
            device,
            auth_key,
            size,
            require_rdma,
        }) => {
            start::init_client_logging();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let args = net::VerifyArgs {
                server,
                device,
                auth_key: auth_key.or_else(|| cli.global.auth_key.clone()),
                size,
                require_rdma,
            };
            runtime.block_on(net::verify(args))
        }
        Command::Net(NetCommand::Doctor {
            device,
            watch,
            server,
            json,
            fixture_root,
        }) => {
            let args = net::doctor::DoctorArgs {
                device,
                watch,
                server,
                json,
                fixture_root,
            };
            net::doctor::run(args, admin_deadline(&cli.global)?)
        }
        Command::Bench(args) => bench::run(&cli.global, args),
        command => {
            start::init_client_logging();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(client_command(&cli.global, command))
        }
    }
}

/// The CLI flags as overrides of the matching environment variables.
fn overrides(global: &GlobalArgs) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| match name {
        "MEMKV_SERVERS" => global.servers.clone(),
        "MEMKV_AUTH_KEY" => global.auth_key.clone(),
        "MEMKV_TIMEOUT_MS" => global.timeout_ms.map(|ms| ms.to_string()),
        _ => None,
    }
}

async fn client_command(global: &GlobalArgs, command: Command) -> Result<(), Exit> {
    if let Command::Admin(AdminCommand::Status {
        json,
        servers,
        https,
        tls_ca,
        insecure,
    }) = command
    {
        let tls = http::TlsOptions {
            https,
            ca: tls_ca,
            insecure,
        };
        let servers = if servers.is_empty() {
            ClientConfig::servers_from_env_with(&overrides(global))?
        } else {
            servers
        };
        return admin::status(servers, json, admin_deadline(global)?, &tls).await;
    }
    let config = ClientConfig::from_env_with(&overrides(global))?;
    if let Command::Drive(drive) = command {
        let server = match (&drive.target().server, config.servers.as_slice()) {
            (Some(server), _) => server.clone(),
            (None, [only]) => only.clone(),
            (None, servers) => {
                return Err(Exit::with(
                    exit::USAGE,
                    format!(
                        "memkv drive acts on one server; name it with --server (the client's list has {})",
                        servers.len()
                    ),
                ));
            }
        };
        return drive::run(drive, &server, &config.auth_key, admin_deadline(global)?).await;
    }
    let client = Client::connect(config).await?;
    match command {
        Command::Put { key, file } => kv::put(&client, &key, file.as_deref()).await,
        Command::Get { key, file } => kv::get(&client, &key, file.as_deref()).await,
        Command::Delete { key } => kv::delete(&client, &key).await,
        Command::Exists { key } => kv::exists(&client, &key).await,
        _ => unreachable!("handled in run"),
    }
}

/// `--timeout-ms`, else `MEMKV_TIMEOUT_MS`, else 5 s: the same precedence as client commands.
fn admin_deadline(global: &GlobalArgs) -> Result<Duration, Exit> {
    let ms = match (global.timeout_ms, std::env::var("MEMKV_TIMEOUT_MS")) {
        (Some(ms), _) => ms,
        (None, Ok(text)) => text
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|ms| (1..=3_600_000).contains(ms))
            .ok_or_else(|| {
                Exit::with(
                    exit::USAGE,
                    format!("MEMKV_TIMEOUT_MS: {text:?} is not an integer in 1..=3600000"),
                )
            })?,
        (None, Err(_)) => 5000,
    };
    Ok(Duration::from_millis(ms))
}

fn keygen() -> Result<(), Exit> {
    let mut bytes = [0u8; memkv_proto::AUTH_KEY_LEN];
    getrandom::fill(&mut bytes)
        .map_err(|e| Exit::with(exit::FAILURE, format!("no random source: {e}")))?;
    outln!("{}", memkv_proto::AuthKey::from_bytes(bytes).to_hex());
    Ok(())
}
