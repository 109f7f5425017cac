//! ARP flux between rails on one layer-2 domain (RoCE runbook "Prevent ARP flux on multi-rail
//! hosts"): the effective arp_ignore / arp_announce per rail, static neighbour entries that
//! `ip neigh flush` leaves behind, and the comparison the runbook says matters most: every rail
//! address must resolve to the MAC of the rail that owns it.

use super::finding::Finding;
use super::host::HostRoot;
use super::neigh::Neighbour;
use super::rails::Rail;

/// What arp_ignore and arp_announce must be on every rail.
const WANT_IGNORE: u8 = 1;
const WANT_ANNOUNCE: u8 = 2;

const FLUX_SYMPTOM: &str = "a rail answers ARP for its sibling's address, so a peer can cache \
    one rail's address against another rail's MAC; RDMA to it then fails with \
    IBV_WC_RETRY_EXC_ERR while ping, SSH and TCP keep working";

/// A server's rails, as its `/v1/status` reports them (or why they could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerRails {
    /// The server as given to `--server` (HOST:PORT).
    pub server: String,
    pub rails: Result<Vec<Rail>, String>,
}

/// Effective values: the larger of `conf.all.X` and `conf.<rail>.X`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RailSysctls {
    pub netdev: String,
    pub all_ignore: Option<u8>,
    pub rail_ignore: Option<u8>,
    pub all_announce: Option<u8>,
    pub rail_announce: Option<u8>,
}

impl RailSysctls {
    pub fn read(root: &HostRoot, netdev: &str) -> Self {
        let get = |dev: &str, key: &str| {
            root.read(&format!("/proc/sys/net/ipv4/conf/{dev}/{key}"))
                .and_then(|t| t.parse::<u8>().ok())
        };
        Self {
            netdev: netdev.to_owned(),
            all_ignore: get("all", "arp_ignore"),
            rail_ignore: get(netdev, "arp_ignore"),
            all_announce: get("all", "arp_announce"),
            rail_announce: get(netdev, "arp_announce"),
        }
    }

    fn effective(all: Option<u8>, rail: Option<u8>) -> Option<u8> {
        Some(all?.max(rail?))
    }

    pub fn ignore(&self) -> Option<u8> {
        Self::effective(self.all_ignore, self.rail_ignore)
    }

    pub fn announce(&self) -> Option<u8> {
        Self::effective(self.all_announce, self.rail_announce)
    }

    pub fn good(&self) -> bool {
        self.ignore().is_some_and(|v| v >= WANT_IGNORE)
            && self.announce().is_some_and(|v| v >= WANT_ANNOUNCE)
    }

    fn describe(&self) -> String {
        let v = |x: Option<u8>| x.map_or("?".to_owned(), |x| x.to_string());
        format!(
            "{} arp_ignore {} (all {}, {} {}) arp_announce {} (all {}, {} {})",
            self.netdev,
            v(self.ignore()),
            v(self.all_ignore),
            self.netdev,
            v(self.rail_ignore),
            v(self.announce()),
            v(self.all_announce),
            self.netdev,
            v(self.rail_announce)
        )
    }
}

/// The runbook's /etc/sysctl.d stanza for these rails, then the flush that applies it.
pub fn sysctl_stanza(netdevs: &[&str]) -> String {
    let mut out = String::from("sudo tee /etc/sysctl.d/99-rdma-arp.conf >/dev/null <<'EOF'\n");
    for n in netdevs {
        // sysctl splits a dotted key at every dot, so a VLAN rail's dots are written as slashes
        // (sysctl.d(5)); `ip neigh` below takes the real name.
        let key = n.replace('.', "/");
        out.push_str(&format!(
            "net.ipv4.conf.{key}.arp_ignore = {WANT_IGNORE}\nnet.ipv4.conf.{key}.arp_announce = {WANT_ANNOUNCE}\n"
        ));
    }
    out.push_str("EOF\nsudo sysctl --system");
    for n in netdevs {
        out.push_str(&format!("\nsudo ip neigh flush dev {n}"));
    }
    out
}

/// Evidence, from this host's neighbour cache, that rails share a layer-2 domain.
fn shared_domain_evidence(rails: &[&Rail], neighbours: &[Neighbour]) -> Vec<String> {
    let mut evidence = Vec::new();
    for n in neighbours {
        for other in rails.iter().filter(|r| r.netdev != n.dev) {
            if !rails.iter().any(|r| r.netdev == n.dev) {
                continue;
            }
            if other.ipv4.contains(&n.ip) || (n.mac.is_some() && n.mac == other.mac) {
                evidence.push(format!(
                    "{}'s neighbour cache holds {}'s address or MAC ({n})",
                    n.dev, other.netdev
                ));
            }
        }
    }
    for (i, a) in rails.iter().enumerate() {
        for b in &rails[i + 1..] {
            let on = |dev: &str| -> Vec<&str> {
                neighbours
                    .iter()
                    .filter(|n| n.dev == dev)
                    .filter_map(|n| n.mac.as_deref())
                    .collect()
            };
            let (ma, mb) = (on(&a.netdev), on(&b.netdev));
            if let Some(mac) = ma.iter().find(|m| mb.contains(m)) {
                evidence.push(format!("{} and {} both reach {mac}", a.netdev, b.netdev));
            }
        }
    }
    evidence.dedup();
    evidence
}

pub fn sysctls(
    root: &HostRoot,
    rails: &[Rail],
    neighbours: &Result<Vec<Neighbour>, String>,
) -> Finding {
    const CHECK: &str = "arp.sysctl";
    let with_ipv4: Vec<&Rail> = rails.iter().filter(|r| !r.ipv4.is_empty()).collect();
    let names: Vec<&str> = with_ipv4.iter().map(|r| r.netdev.as_str()).collect();
    if with_ipv4.len() < 2 {
        let what = match with_ipv4.first() {
            Some(r) => format!("one RoCE rail with IPv4 ({} {})", r.netdev, r.ipv4_text()),
            None => "no RoCE rail with IPv4".to_owned(),
        };
        return Finding::ok(
            CHECK,
            "host",
            format!("{what}: ARP flux needs two rails on one layer-2 domain"),
        );
    }
    let subject = names.join(",");
    let values: Vec<RailSysctls> = names.iter().map(|n| RailSysctls::read(root, n)).collect();
    let read = values
        .iter()
        .map(RailSysctls::describe)
        .collect::<Vec<_>>()
        .join("; ");
    if values.iter().all(RailSysctls::good) {
        return Finding::ok(
            CHECK,
            subject,
            format!("{read}: effective values are the larger of conf.all and conf.<rail>"),
        );
    }
    let evidence = match neighbours {
        Ok(n) => shared_domain_evidence(&with_ipv4, n),
        Err(_) => Vec::new(),
    };
    let domain = if evidence.is_empty() {
        "this host cannot tell whether the rails share a layer-2 domain (a VLAN trunked between switches counts); the runbook applies the settings in advance".to_owned()
    } else {
        format!("the rails share a layer-2 domain: {}", evidence.join("; "))
    };
    Finding::warn(
        CHECK,
        subject,
        format!(
            "{read}; need arp_ignore >= {WANT_IGNORE} and arp_announce >= {WANT_ANNOUNCE}; {domain}"
        ),
    )
    .symptom(FLUX_SYMPTOM)
    .fix(sysctl_stanza(&names))
}

/// Permanent and noarp entries on rails: `ip neigh flush` keeps them, so a wrong one stays.
pub fn static_entries(rails: &[Rail], neighbours: &Result<Vec<Neighbour>, String>) -> Vec<Finding> {
    const CHECK: &str = "arp.static-neigh";
    let neighbours = match neighbours {
        Ok(n) => n,
        Err(e) => {
            return vec![
                Finding::warn(
                    CHECK,
                    "host",
                    format!("cannot read the neighbour table: {e}"),
                )
                .fix("ip -4 neigh show"),
            ];
        }
    };
    let mut out = Vec::new();
    for rail in rails {
        let entries: Vec<&Neighbour> = neighbours
            .iter()
            .filter(|n| n.dev == rail.netdev && n.is_static())
            .collect();
        if entries.is_empty() {
            continue;
        }
        let mut f = Finding::warn(
            CHECK,
            &rail.netdev,
            format!("static entries survive `ip neigh flush`: {}", entries.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("; ")),
        )
        .symptom("a static mapping keeps pointing wherever it was set, even after the ARP sysctls are fixed; a wrong one fails RDMA with IBV_WC_RETRY_EXC_ERR")
        .fix(format!("ip neigh show dev {} nud permanent", rail.netdev));
        for n in entries {
            f = f.fix(format!("sudo ip neigh del {} dev {}", n.ip, rail.netdev));
        }
        out.push(f);
    }
    if out.is_empty() {
        let names: Vec<&str> = rails.iter().map(|r| r.netdev.as_str()).collect();
        let subject = if names.is_empty() {
            "host".to_owned()
        } else {
            names.join(",")
        };
        out.push(Finding::ok(
            CHECK,
            subject,
            "no permanent or noarp neighbour entries on the rails",
        ));
    }
    out
}

/// A rail known to doctor: this host's own, or one the server reported.
struct KnownRail<'a> {
    rail: &'a Rail,
    /// None for this host, the server's HOST:PORT for its rails.
    host: Option<&'a str>,
}

impl KnownRail<'_> {
    fn name(&self) -> String {
        match self.host {
            None => self.rail.netdev.clone(),
            Some(h) => format!("server {h}'s {}", self.rail.netdev),
        }
    }
}

/// Every rail address in this host's neighbour cache must resolve to the MAC of the rail that
/// owns it. This host's rails are always compared; with `--server`, the server's too.
pub fn rail_macs(
    rails: &[Rail],
    neighbours: &Result<Vec<Neighbour>, String>,
    server: Option<&ServerRails>,
) -> Vec<Finding> {
    const CHECK: &str = "arp.rail-mac";
    let neighbours = match neighbours {
        Ok(n) => n,
        Err(e) => {
            return vec![
                Finding::warn(
                    CHECK,
                    "host",
                    format!("cannot read the neighbour table: {e}"),
                )
                .fix("ip -4 neigh show"),
            ];
        }
    };
    let mut known: Vec<KnownRail> = rails
        .iter()
        .map(|rail| KnownRail { rail, host: None })
        .collect();
    if let Some(ServerRails {
        server,
        rails: Ok(list),
    }) = server
    {
        known.extend(list.iter().map(|rail| KnownRail {
            rail,
            host: Some(server.as_str()),
        }));
    }
    let on_rails: Vec<&Neighbour> = neighbours
        .iter()
        .filter(|n| rails.iter().any(|r| r.netdev == n.dev))
        .collect();
    let mut out = Vec::new();
    let mut checked = 0usize;
    for n in &on_rails {
        let Some(mac) = n.mac.as_deref() else {
            continue;
        };
        let Some(owner) = known.iter().find(|k| k.rail.ipv4.contains(&n.ip)) else {
            continue;
        };
        checked += 1;
        if owner.rail.mac.as_deref().is_none_or(|m| m == mac) {
            continue;
        }
        let holder = known
            .iter()
            .find(|k| k.rail.mac.as_deref() == Some(mac))
            .map_or_else(
                || "a MAC no known rail has".to_owned(),
                |k| format!("the MAC of {}", k.name()),
            );
        let mut f = Finding::fail(
            CHECK,
            &n.dev,
            format!(
                "{}, the address of {} (MAC {}), resolves to {mac}, {holder} ({} entry on {})",
                n.ip,
                owner.name(),
                owner.rail.mac.as_deref().unwrap_or("?"),
                n.state_names(),
                n.dev
            ),
        )
        .symptom(format!(
            "RDMA to {} is delivered to {}'s port, whose GID does not match: the adapter drops it, nothing acknowledges it and the sender fails with IBV_WC_RETRY_EXC_ERR (TCP keeps working)",
            n.ip,
            if holder.starts_with("the MAC of ") { holder.trim_start_matches("the MAC of ").to_owned() } else { "another interface".to_owned() }
        ));
        f = if n.is_static() {
            f.fix(format!("sudo ip neigh del {} dev {}", n.ip, n.dev))
        } else {
            f.fix(format!("sudo ip neigh flush dev {}", n.dev))
        };
        f = f
            .fix(format!(
                "# on the host owning {}: install the arp_ignore/arp_announce stanza of arp.sysctl",
                n.ip
            ))
            .fix(format!("ping -4 -c1 -W2 -I {} {}", n.dev, n.ip))
            .fix(format!("ip neigh show dev {}", n.dev));
        out.push(f);
    }
    if out.is_empty() {
        let mut read = format!(
            "no rail address resolves to another rail's MAC ({checked} rail address entries in the neighbour cache, {} rails known",
            known.len()
        );
        match server {
            Some(s) => read.push_str(&format!(", including server {}'s", s.server)),
            None => read.push_str("; pass --server HOST:PORT to compare with a server's rails"),
        }
        read.push(')');
        let unresolved: Vec<String> = known
            .iter()
            .filter(|k| k.host.is_some())
            .flat_map(|k| k.rail.ipv4.iter())
            .filter(|ip| !on_rails.iter().any(|n| n.ip == **ip && n.mac.is_some()))
            .map(|ip| ip.to_string())
            .collect();
        if !unresolved.is_empty() {
            read.push_str(&format!(
                "; not in the cache yet: {} (ping -4 -c1 -W2 -I <rail> <address> to resolve, then rerun)",
                unresolved.join(", ")
            ));
        }
        out.push(Finding::ok(CHECK, "host", read));
    }
    out
}

/// What the server said about its rails.
pub fn server_report(server: &ServerRails) -> Finding {
    const CHECK: &str = "arp.server";
    match &server.rails {
        Ok(rails) if rails.is_empty() => Finding::warn(
            CHECK,
            &server.server,
            "the server reports no rails (no RoCE port, or a memkv release that does not report them)",
        )
        .fix(format!("memkv admin status {} --json", server.server)),
        Ok(rails) => Finding::ok(
            CHECK,
            &server.server,
            format!(
                "rails: {}",
                rails
                    .iter()
                    .map(|r| format!("{} {} {} {}", r.device, r.netdev, r.ipv4_text(), r.mac.as_deref().unwrap_or("no MAC")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        Err(e) => Finding::fail(CHECK, &server.server, format!("cannot read the server's rails: {e}"))
            .symptom("the comparison of the server's rail addresses and MACs with this host's neighbour cache could not run")
            .fix(format!("memkv admin status {} --json", server.server)),
    }
}
