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
use memkv_client::{Client, ConfigSources, Setting};

use cli::{AdminCommand, Cli, Command, GlobalArgs, NetCommand};
use exit::Exit;

/// Deadline of an admin API request unless the client's settings give one.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

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
        Command::Net(NetCommand::Show {
            device,
            port,
            json,
            config,
        }) => net::show(device, port, json, config.as_deref()),
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
            config,
            fixture_root,
        }) => {
            let args = net::doctor::DoctorArgs {
                device,
                watch,
                server,
                json,
                config,
                fixture_root,
            };
            let flags = flags(&cli.global);
            net::doctor::run(args, admin_deadline(&ConfigSources::load(&flags)?)?)
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

/// The CLI flags, standing in for their environment variables under their own names: an
/// error about `--timeout-ms 0` must not blame a MEMKV_TIMEOUT_MS the user never set.
pub(crate) fn flags(global: &GlobalArgs) -> impl Fn(&str) -> Option<Setting> + '_ {
    move |name| match name {
        "MEMKV_SERVERS" => global.servers.clone().map(|v| Setting::new(v, "--servers")),
        "MEMKV_AUTH_KEY" => global
            .auth_key
            .clone()
            .map(|v| Setting::new(v, "--auth-key")),
        "MEMKV_TIMEOUT_MS" => global
            .timeout_ms
            .map(|ms| Setting::new(ms.to_string(), "--timeout-ms")),
        _ => None,
    }
}

async fn client_command(global: &GlobalArgs, command: Command) -> Result<(), Exit> {
    let flags = flags(global);
    let sources = ConfigSources::load(&flags)?;
    if let Command::Admin(AdminCommand::Status {
        json,
        targets,
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
        let servers = if targets.is_empty() {
            sources.servers()?
        } else {
            for server in &targets {
                admin::admin_address(server).map_err(|e| Exit::with(exit::USAGE, e))?;
            }
            targets
        };
        return admin::status(servers, json, admin_deadline(&sources)?, &tls).await;
    }
    if let Command::Drive(drive) = command {
        let server = match &drive.target().server {
            Some(server) => server.clone(),
            None => match sources.servers()?.as_slice() {
                [only] => only.clone(),
                servers => {
                    return Err(Exit::with(
                        exit::USAGE,
                        format!(
                            "memkv drive acts on one server; name it with --server (the client's list has {})",
                            servers.len()
                        ),
                    ));
                }
            },
        };
        let deadline = admin_deadline(&sources)?;
        return drive::run(drive, &server, &|| Ok(sources.auth_key()?), deadline).await;
    }
    let client = Client::connect(sources.config()?).await?;
    match command {
        Command::Put { key, file } => kv::put(&client, &key, file.as_deref()).await,
        Command::Get { key, file } => kv::get(&client, &key, file.as_deref()).await,
        Command::Delete { key } => kv::delete(&client, &key).await,
        Command::Exists { key } => kv::exists(&client, &key).await,
        _ => unreachable!("handled in run"),
    }
}

/// The admin API's deadline: the client's (flag, environment, MEMKV_CONFIG), else 5 s.
fn admin_deadline(sources: &ConfigSources<'_>) -> Result<Duration, Exit> {
    Ok(sources.timeout()?.unwrap_or(ADMIN_TIMEOUT))
}

fn keygen() -> Result<(), Exit> {
    let mut bytes = [0u8; memkv_proto::AUTH_KEY_LEN];
    getrandom::fill(&mut bytes)
        .map_err(|e| Exit::with(exit::FAILURE, format!("no random source: {e}")))?;
    outln!("{}", memkv_proto::AuthKey::from_bytes(bytes).to_hex());
    Ok(())
}
