//! The command line, as clap sees it.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit;

/// memkv: a distributed KV-cache block store for LLM inference.
#[derive(Debug, Parser)]
#[command(name = "memkv", version, about, after_help = exit::HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Client settings; each overrides its environment variable, which overrides MEMKV_CONFIG.
#[derive(Debug, Args, Default)]
pub struct GlobalArgs {
    /// Servers as host:port,host:port (overrides MEMKV_SERVERS).
    #[arg(long, global = true, value_name = "HOST:PORT,...")]
    pub servers: Option<String>,
    /// Auth key, 64 hex characters (overrides MEMKV_AUTH_KEY). Visible to other local users
    /// in the process list: prefer MEMKV_AUTH_KEY or the key file.
    #[arg(long, global = true, value_name = "HEX")]
    pub auth_key: Option<String>,
    /// Deadline of each operation in milliseconds (overrides MEMKV_TIMEOUT_MS).
    #[arg(long, global = true, value_name = "MS")]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a server until SIGTERM or SIGINT.
    Start {
        /// Server configuration (default: /etc/memkv/config.yaml if present, else built-in).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Store a value: from FILE, or from standard input when FILE is `-` or absent.
    Put {
        /// The key (bytes as given).
        key: OsString,
        /// Where the value comes from.
        #[arg(value_name = "FILE|-")]
        file: Option<PathBuf>,
    },
    /// Fetch a value: to FILE, or to standard output when FILE is `-` or absent.
    Get {
        /// The key (bytes as given).
        key: OsString,
        /// Where the value goes.
        #[arg(value_name = "FILE|-")]
        file: Option<PathBuf>,
    },
    /// Remove a key (exit 3 if it did not exist).
    Delete { key: OsString },
    /// Check a key (exit 0 if it exists, 3 if not).
    Exists { key: OsString },
    /// Admin API queries (HTTP or HTTPS on each server's port + 1).
    #[command(subcommand)]
    Admin(AdminCommand),
    /// A running drive-backed server's drives, through its admin API (port + 1): list,
    /// status, and remove / add (signed with the auth key).
    #[command(subcommand)]
    Drive(crate::drive::DriveCommand),
    /// Print a fresh random auth key (64 hex characters).
    Keygen,
    /// Check drives, format them as one direct-mode store and write the server's config.
    Setup(crate::setup::SetupArgs),
    /// RDMA fabric diagnostics.
    #[command(subcommand)]
    Net(NetCommand),
    /// Measure throughput and latency over a sweep of block sizes (--local: in-process server).
    Bench(crate::bench::BenchArgs),
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// GET /v1/status from each server: a table, or a JSON array with --json.
    Status {
        /// Print a JSON array (one object per server) instead of a table.
        #[arg(long)]
        json: bool,
        /// Speak HTTPS to the admin APIs (servers with network.tls_cert / tls_key), trusting
        /// the system's certificate authorities. Implied by --tls-ca and --insecure.
        #[arg(long)]
        https: bool,
        /// HTTPS, trusting the certificates in this PEM file (a self-signed server
        /// certificate, or the CA that issued the servers') instead of the system's.
        #[arg(long, value_name = "PATH", conflicts_with = "insecure")]
        tls_ca: Option<std::path::PathBuf>,
        /// HTTPS without verifying the servers' certificates (encrypted, not authenticated:
        /// for self-signed certificates on a trusted network only).
        #[arg(long)]
        insecure: bool,
        /// Servers as host:port (data port; default: the client's server list).
        // Not named `servers`: an argument of that name here would shadow the global
        // --servers flag inside this subcommand (`admin status --servers a:1` was refused).
        #[arg(value_name = "SERVER")]
        targets: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Show each RDMA port and how memkv would use it.
    Show {
        /// Only this device (e.g. mlx5_0).
        #[arg(long, value_name = "DEV")]
        device: Option<String>,
        /// Only this port number.
        #[arg(long, value_name = "N")]
        port: Option<u8>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// The server's configuration, whose rdma.* settings (pkey_index, mtu, service_level,
        /// traffic_class, gid_index) are checked (default: /etc/memkv/config.yaml if present).
        /// The client's pkey_index, mtu, traffic_class, service_level and gid_index
        /// (MEMKV_CONFIG, MEMKV_RDMA_*) are read too.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Prove the RDMA data path to a server end to end: connect, authenticate, report the
    /// transport negotiated (RC, or TCP and why RDMA was not used), write a random block, read
    /// it back and compare. Prints a VERIFIED line only when the block's own bytes crossed an
    /// RDMA rail both ways; otherwise NOT VERIFIED (stderr, exit 8) says which way did not and
    /// why. Never uses shared memory with a server on this host: it tests the fabric.
    Verify {
        /// The server, HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        server: String,
        /// The local RDMA device to use (default: any usable one). A block that then moves
        /// over TCP still makes its round trip, reported as NOT VERIFIED with the reason.
        #[arg(long, value_name = "DEV")]
        device: Option<String>,
        /// The auth key, 64 hex characters (default: MEMKV_AUTH_KEY, then the local key file).
        #[arg(long, value_name = "HEX")]
        auth_key: Option<String>,
        /// Block size in bytes (at least 1).
        #[arg(long, default_value_t = 1 << 20)]
        size: usize,
        /// Use RDMA only: any RDMA problem (no rail, a refused Connect, a Busy server) is the
        /// command's error, by name, instead of a round trip over TCP.
        #[arg(long)]
        require_rdma: bool,
    },
    /// Check this host against the RDMA fabric runbooks, read-only: RDMA stack, RoCE
    /// losslessness (PFC, DSCP, traffic class, ECN), counters under load, ARP flux between
    /// rails and GPUDirect/ACS. One line per check (OK / WARN / FAIL) with what was read, the
    /// symptom it explains and the fix. Exit 0 all OK, 10 warnings, 11 failures.
    Doctor {
        /// Only this RDMA device (its ports, rails and PCI function).
        #[arg(long, value_name = "DEV")]
        device: Option<String>,
        /// Read NIC and RDMA counters twice, SECONDS apart (run it under load).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
        watch: Option<u64>,
        /// A memkv server (data HOST:PORT): compare its rails' IPv4 addresses and MACs, from
        /// its /v1/status, with this host's neighbour cache.
        #[arg(long, value_name = "HOST:PORT")]
        server: Option<String>,
        /// JSON instead of text (the same content).
        #[arg(long)]
        json: bool,
        /// The server's configuration, whose rdma.* settings (pkey_index, mtu, service_level,
        /// traffic_class, gid_index) are checked (default: /etc/memkv/config.yaml if present).
        /// The client's pkey_index, mtu, traffic_class, service_level and gid_index
        /// (MEMKV_CONFIG, MEMKV_RDMA_*) are read too.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// TEST DOUBLE: read a fixture tree laid out like / instead of this host (tests only).
        #[arg(long, hide = true, value_name = "DIR")]
        fixture_root: Option<PathBuf>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "memkv",
            "get",
            "k",
            "--servers",
            "a:1,b:2",
            "--timeout-ms",
            "50",
        ])
        .unwrap();
        assert_eq!(cli.global.servers.as_deref(), Some("a:1,b:2"));
        assert_eq!(cli.global.timeout_ms, Some(50));
        assert!(matches!(cli.command, Command::Get { .. }));
    }

    #[test]
    fn admin_status_takes_servers_as_arguments_or_the_global_flag_anywhere() {
        for args in [
            &["memkv", "admin", "status", "--servers", "a:1"][..],
            &["memkv", "--servers", "a:1", "admin", "status"],
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            assert_eq!(cli.global.servers.as_deref(), Some("a:1"), "{args:?}");
            let Command::Admin(AdminCommand::Status { targets, .. }) = cli.command else {
                panic!("{args:?}");
            };
            assert!(targets.is_empty(), "{args:?}");
        }
        let cli = Cli::try_parse_from(["memkv", "admin", "status", "a:1", "b:2"]).unwrap();
        let Command::Admin(AdminCommand::Status { targets, .. }) = cli.command else {
            panic!("not admin status");
        };
        assert_eq!(targets, ["a:1", "b:2"]);
    }
}
