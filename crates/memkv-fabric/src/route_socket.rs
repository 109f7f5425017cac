//! A NETLINK_ROUTE socket with one request sent, read without blocking by its caller (dcbnl
//! queries and the neighbour-table dump share it).

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// Opens a route socket, sends `request` to the kernel and leaves the socket non-blocking.
/// Errors name the step that failed.
pub(crate) fn send_route_request(request: &[u8]) -> Result<Socket, String> {
    let io = |what: &str, e: std::io::Error| format!("netlink {what}: {e}");
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| io("socket", e))?;
    socket.bind_auto().map_err(|e| io("bind", e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| io("connect", e))?;
    socket.send(request, 0).map_err(|e| io("send", e))?;
    socket
        .set_non_blocking(true)
        .map_err(|e| io("set non-blocking", e))?;
    Ok(socket)
}
