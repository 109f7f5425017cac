//! The abstract Unix socket where a LocalAttach token is traded for the arena's memfd.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memkv_proto::local::{AttachAnswer, TOKEN_LEN};
use tokio::io::{AsyncReadExt, Interest};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::LocalTransport;
use super::tokens::MAX_OUTSTANDING;

/// How long a client connected to the socket has to send its token.
const TOKEN_WAIT: Duration = Duration::from_secs(5);

/// Binds a fresh abstract socket, `memkv/<pid>/<random>`: unique per server process, so
/// two servers on one host never share one, and one left by a crashed server cannot exist
/// (the kernel drops an abstract name with its last descriptor).
pub fn bind() -> std::io::Result<(Vec<u8>, UnixListener)> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("memkv/{}/{hex}", std::process::id()).into_bytes();
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name)?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    listener.set_nonblocking(true)?;
    Ok((name, UnixListener::from_std(listener)?))
}

/// Trades tokens for the memfd until `stop` turns true.
pub async fn serve(
    local: Arc<LocalTransport>,
    listener: UnixListener,
    mut stop: watch::Receiver<bool>,
) {
    // Anyone on the host can connect, key or not, and each waiting connection holds a
    // descriptor: no more wait than there can be tokens to trade. When that many wait, the
    // one waiting longest is closed for the newcomer: a client with a token sends it as it
    // connects, so the ones left waiting are those that never will, and turning the
    // newcomer away instead would let anyone on the host keep every client out.
    let mut waiting: VecDeque<AbortHandle> = VecDeque::with_capacity(MAX_OUTSTANDING);
    loop {
        tokio::select! {
            _ = crate::server::stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    waiting.retain(|t| !t.is_finished());
                    if waiting.len() >= MAX_OUTSTANDING
                        && let Some(oldest) = waiting.pop_front()
                    {
                        tracing::debug!("same-host socket: {MAX_OUTSTANDING} trades waiting; closing the oldest");
                        oldest.abort();
                    }
                    let local = Arc::clone(&local);
                    let trading = tokio::spawn(async move {
                        if let Err(e) = trade(&local, stream).await {
                            tracing::debug!(error = %e, "same-host attach failed");
                        }
                    });
                    waiting.push_back(trading.abort_handle());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "same-host socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn trade(local: &LocalTransport, mut stream: UnixStream) -> std::io::Result<()> {
    let mut token = [0u8; TOKEN_LEN];
    tokio::time::timeout(TOKEN_WAIT, stream.read_exact(&mut token))
        .await
        .map_err(|_| std::io::Error::other(format!("no token within {TOKEN_WAIT:?}")))??;
    let answer = match local.tokens.redeem(&token, Instant::now()) {
        Ok(()) => AttachAnswer::Granted,
        Err(why) => AttachAnswer::Refused(why.to_owned()),
    };
    let fd = match answer {
        AttachAnswer::Granted => local.arena.shared_file(),
        AttachAnswer::Refused(_) => None,
    };
    let message = answer.encode();
    stream
        .async_io(Interest::WRITABLE, || {
            memkv_shm::pass_fd::send(stream.as_fd(), &message, fd)
        })
        .await?;
    if let AttachAnswer::Refused(why) = answer {
        tracing::info!(reason = why, "same-host attach refused");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::{SocketAddr, UnixStream};

    /// Trades `token` on the socket as a client would: the answer and whether a descriptor came.
    fn trade_as_client(name: &[u8], token: &[u8]) -> (AttachAnswer, bool) {
        let addr = SocketAddr::from_abstract_name(name).unwrap();
        let mut s = UnixStream::connect_addr(&addr).unwrap();
        s.write_all(token).unwrap();
        let (message, fd) = memkv_shm::pass_fd::receive(&s).unwrap();
        (AttachAnswer::decode(&message).unwrap(), fd.is_some())
    }

    /// A shared-memory store's attach socket, served: its name, a token minted for it, and
    /// what keeps it up.
    fn serving() -> (
        Vec<u8>,
        crate::local::tokens::Token,
        (memkv_store::Store, watch::Sender<bool>),
    ) {
        let mut config = memkv_store::StoreConfig::memory(8 << 20);
        config.share_memory = true;
        let store = memkv_store::Store::open(config).unwrap();
        let (local, listener) = crate::local::start(store.arena_handle()).unwrap().unwrap();
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(Arc::clone(&local), listener, stopped));
        let token = local.tokens.mint(Instant::now()).unwrap();
        (local.socket_name.clone(), token, (store, stop))
    }

    #[tokio::test]
    async fn only_a_minted_token_gets_the_arena_and_only_once() {
        let (name, token, _serving) = serving();

        let client = tokio::task::spawn_blocking(move || {
            let forged = trade_as_client(&name, &[0x5a; TOKEN_LEN]);
            let granted = trade_as_client(&name, &token);
            let replayed = trade_as_client(&name, &token);
            (forged, granted, replayed)
        });
        let (forged, granted, replayed) = client.await.unwrap();
        assert!(
            matches!(&forged, (AttachAnswer::Refused(why), false) if why.contains("no such token")),
            "{forged:?}"
        );
        assert_eq!(granted, (AttachAnswer::Granted, true));
        assert!(
            matches!(&replayed, (AttachAnswer::Refused(why), false) if why.contains("already used")),
            "{replayed:?}"
        );
    }

    /// Anyone on the host can connect to the socket without the key. Connections that never
    /// send a token must not lock out a client that holds one: it used to be turned away
    /// while 256 such connections waited out their 5 seconds, again and again.
    #[tokio::test]
    async fn idle_connections_do_not_lock_out_a_client_with_a_token() {
        let (name, token, _serving) = serving();

        let client = tokio::task::spawn_blocking(move || {
            let addr = SocketAddr::from_abstract_name(&name).unwrap();
            let idle: Vec<UnixStream> = (0..MAX_OUTSTANDING + 8)
                .map(|_| UnixStream::connect_addr(&addr).unwrap())
                .collect();
            // Let the server accept them all before the client comes.
            std::thread::sleep(Duration::from_millis(200));
            let granted = trade_as_client(&name, &token);
            drop(idle);
            granted
        });
        assert_eq!(client.await.unwrap(), (AttachAnswer::Granted, true));
    }

    #[tokio::test]
    async fn a_private_arena_offers_no_socket() {
        let store = memkv_store::Store::open(memkv_store::StoreConfig::memory(8 << 20)).unwrap();
        assert!(crate::local::start(store.arena_handle()).unwrap().is_none());
    }
}
