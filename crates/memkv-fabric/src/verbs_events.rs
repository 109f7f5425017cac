//! The verbs implementation of [`AsyncEventSource`]: `ibv_get_async_event` on the device's
//! `async_fd`, switched to O_NONBLOCK and waited on with poll(2).

use crate::error::FabricError;
use crate::events::{AsyncEvent, AsyncEventKind, AsyncEventSource};
use rdma_mummy_sys::{
    ibv_ack_async_event, ibv_async_event, ibv_async_event_element_t, ibv_get_async_event,
};
use sideway::ibverbs::device_context::DeviceContext;
use std::sync::Arc;
use std::time::Duration;

/// `struct ibv_async_event` with the event type read as a plain integer: the binding's Rust
/// enum would be undefined behaviour for a code a newer library adds.
#[repr(C)]
struct RawAsyncEvent {
    element: ibv_async_event_element_t,
    event_type: u32,
}

const _: () = assert!(
    std::mem::size_of::<RawAsyncEvent>() == std::mem::size_of::<ibv_async_event>()
        && std::mem::align_of::<RawAsyncEvent>() == std::mem::align_of::<ibv_async_event>()
);

// ibv_event_type codes (infiniband/verbs.h).
const PORT_ACTIVE: u32 = 9;
const PORT_ERR: u32 = 10;
const LID_CHANGE: u32 = 11;
const PKEY_CHANGE: u32 = 12;
const SM_CHANGE: u32 = 13;
const CLIENT_REREGISTER: u32 = 17;
const GID_CHANGE: u32 = 18;
const DEVICE_FATAL: u32 = 8;

/// Maps a verbs event code to what memkv acts on; `None` port for non-port events.
pub fn classify(code: u32) -> (AsyncEventKind, bool) {
    match code {
        LID_CHANGE => (AsyncEventKind::LidChange, true),
        SM_CHANGE => (AsyncEventKind::SmChange, true),
        CLIENT_REREGISTER => (AsyncEventKind::ClientReregister, true),
        PORT_ACTIVE => (AsyncEventKind::PortActive, true),
        PORT_ERR => (AsyncEventKind::PortError, true),
        PKEY_CHANGE => (AsyncEventKind::PkeyChange, true),
        GID_CHANGE => (AsyncEventKind::GidChange, true),
        DEVICE_FATAL => (AsyncEventKind::DeviceFatal, false),
        other => (AsyncEventKind::Other(other), false),
    }
}

/// Reads one device's async event queue.
pub struct VerbsEventSource {
    device: String,
    ctx: Arc<DeviceContext>,
    fd: i32,
}

impl VerbsEventSource {
    /// Takes an open context (see [`crate::verbs::VerbsReader::context`]) and makes its
    /// async_fd non-blocking, so a read with nothing pending returns EAGAIN.
    pub fn new(device: &str, ctx: Arc<DeviceContext>) -> Result<Self, FabricError> {
        let err = |call, e: std::io::Error| FabricError::Verbs {
            call,
            device: device.to_owned(),
            reason: e.to_string(),
        };
        // SAFETY: `ctx` owns an open ibv_context for as long as this source lives; async_fd
        // is a plain int field set by ibv_open_device.
        let fd = unsafe { (*ctx.context().as_ptr()).async_fd };
        // SAFETY: fcntl on the context's own descriptor with F_GETFL/F_SETFL has no memory
        // effects; the descriptor stays open while `ctx` lives.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(err(
                "fcntl(async_fd, F_GETFL)",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(err(
                "fcntl(async_fd, F_SETFL)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Self {
            device: device.to_owned(),
            ctx,
            fd,
        })
    }

    fn wait_readable(&self, timeout: Duration) -> Result<bool, FabricError> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `pfd` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(FabricError::Verbs {
                call: "poll(async_fd)",
                device: self.device.clone(),
                reason: e.to_string(),
            });
        }
        Ok(rc > 0)
    }
}

impl AsyncEventSource for VerbsEventSource {
    fn device(&self) -> &str {
        &self.device
    }

    fn next_event(&mut self, timeout: Duration) -> Result<Option<AsyncEvent>, FabricError> {
        if !timeout.is_zero() && !self.wait_readable(timeout)? {
            return Ok(None);
        }
        let mut raw = std::mem::MaybeUninit::<RawAsyncEvent>::uninit();
        // SAFETY: the context is open (held by `self.ctx`); `raw` has the layout of
        // ibv_async_event (checked at compile time above) and is written by the call on success.
        let rc = unsafe {
            ibv_get_async_event(
                self.ctx.context().as_ptr(),
                raw.as_mut_ptr().cast::<ibv_async_event>(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(FabricError::Verbs {
                call: "ibv_get_async_event",
                device: self.device.clone(),
                reason: e.to_string(),
            });
        }
        // SAFETY: ibv_get_async_event returned 0, so it filled the event.
        let mut raw = unsafe { raw.assume_init() };
        let (kind, is_port_event) = classify(raw.event_type);
        let port = if is_port_event {
            // SAFETY: for port events the union holds port_num (verbs.h documents this).
            u8::try_from(unsafe { raw.element.port_num }).ok()
        } else {
            None
        };
        // SAFETY: every event returned by ibv_get_async_event must be acknowledged exactly
        // once; `raw` is that event, unchanged.
        unsafe { ibv_ack_async_event(std::ptr::from_mut(&mut raw).cast::<ibv_async_event>()) };
        Ok(Some(AsyncEvent { port, kind }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_lid_events_and_port_events_are_classified() {
        assert_eq!(classify(11), (AsyncEventKind::LidChange, true));
        assert_eq!(classify(13), (AsyncEventKind::SmChange, true));
        assert_eq!(classify(17), (AsyncEventKind::ClientReregister, true));
        assert_eq!(classify(9), (AsyncEventKind::PortActive, true));
        assert_eq!(classify(10), (AsyncEventKind::PortError, true));
        assert_eq!(classify(1), (AsyncEventKind::Other(1), false));
        assert_eq!(classify(4242), (AsyncEventKind::Other(4242), false));
    }
}
