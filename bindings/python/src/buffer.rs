//! Python buffers borrowed in place: a value is read from, or written into, the memory of the
//! caller's object (bytes, bytearray, memoryview, numpy array, ...) with no copy into Python
//! `bytes`. This module holds the package's only `unsafe` code.

use std::ptr::NonNull;
use std::sync::Arc;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;

/// One exported buffer (`PyObject_GetBuffer`), released when dropped. While it lives, the
/// exporting object is kept alive and its memory stays where it is (a bytearray cannot be
/// resized while exported), so the bytes can be used with the GIL released.
pub struct ByteBuffer {
    // Boxed: the exporter may keep pointers into the `Py_buffer` it filled in.
    view: Box<ffi::Py_buffer>,
    writable: bool,
    /// Dropped just after the buffer is released, to tell whoever watches (`Self::watch`).
    released: Option<tokio::sync::watch::Receiver<()>>,
}

/// Resolves once every watched buffer has been released ([`ByteBuffer::watch`]). Clones
/// watch the same buffers: the operation that lent them, and a caller that gave up on it.
#[derive(Clone)]
pub struct Released(Arc<tokio::sync::watch::Sender<()>>);

impl Released {
    pub async fn all(self) {
        // Each watched buffer holds a receiver until it is released.
        self.0.closed().await;
    }
}

// SAFETY: a `Py_buffer` is plain data describing memory that stays valid until released;
// releasing it takes the GIL (see `Drop`), so moving or sharing it across threads is sound.
unsafe impl Send for ByteBuffer {}
// SAFETY: as above; shared access only reads the descriptor.
unsafe impl Sync for ByteBuffer {}

impl ByteBuffer {
    /// A read-only view of `obj`'s bytes. `what` names the argument in errors.
    pub fn readable(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<ByteBuffer> {
        ByteBuffer::export(obj, false, what)
    }

    /// A writable view of `obj`'s bytes.
    pub fn writable(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<ByteBuffer> {
        ByteBuffer::export(obj, true, what)
    }

    fn export(obj: &Bound<'_, PyAny>, writable: bool, what: &str) -> PyResult<ByteBuffer> {
        let need = if writable {
            "a writable, C-contiguous buffer (bytearray, memoryview, numpy array, ...)"
        } else {
            "a C-contiguous buffer (bytes, bytearray, memoryview, numpy array, ...)"
        };
        // SAFETY: `obj` is a live object and we hold the GIL; the call only reads its type.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            // Not a buffer at all: a wrong argument type, not an unusable buffer.
            return Err(PyTypeError::new_err(format!(
                "{what}: expected {need}, got {}",
                obj.get_type().name()?
            )));
        }
        // PyBUF_C_CONTIGUOUS: one C-contiguous run of `len` bytes from `buf`, whatever the
        // item type (a numpy float array or a tensor's memory is moved as its bytes);
        // exporters refuse it for non-contiguous memory. PyBUF_FORMAT as well, to refuse
        // items that are Python objects: their bytes are pointers, and writing a value over
        // them (or storing them) would corrupt the interpreter. Not PyBUF_SIMPLE: a
        // memoryview refuses SIMPLE with FORMAT (a view cast to bytes has no item format),
        // and taken without the format its objects went unseen.
        let contiguous = if writable {
            ffi::PyBUF_C_CONTIGUOUS | ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_C_CONTIGUOUS
        };
        let view = match get_buffer(obj, contiguous | ffi::PyBUF_FORMAT) {
            Ok(view) => view,
            // Some exporters cannot describe their item type (numpy's datetime64 and
            // user-defined dtypes such as bfloat16): taken as bytes, once numpy's dtype says
            // it holds no objects (below).
            Err(_) => get_buffer(obj, contiguous).map_err(|cause| {
                let name = obj
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_owned(), |n| n.to_string());
                PyBufferError::new_err(format!("{what}: expected {need}, got {name}: {cause}"))
            })?,
        };
        let buffer = ByteBuffer {
            view,
            writable,
            released: None,
        };
        let objects = match buffer.format() {
            Some(format) => holds_objects(&format).then(|| format!("format {format:?}")),
            None => dtype_with_objects(obj).map(|dtype| format!("dtype {dtype}")),
        };
        if let Some(items) = objects {
            // Dropping `buffer` releases the export.
            return Err(PyBufferError::new_err(format!(
                "{what}: expected {need}, got {} of Python objects ({items}): their bytes \
                 are object pointers",
                obj.get_type().name()?,
            )));
        }
        Ok(buffer)
    }

    /// The item format the exporter gave (struct module syntax), if any.
    fn format(&self) -> Option<String> {
        if self.view.format.is_null() {
            return None;
        }
        // SAFETY: a non-null `format` is a NUL-terminated string owned by the exporter, valid
        // until the buffer is released (only `Drop` releases it; `self` is borrowed).
        let format = unsafe { std::ffi::CStr::from_ptr(self.view.format) };
        Some(format.to_string_lossy().into_owned())
    }

    /// Watches `buffers` for their release. A get lends its buffers to the client's reader,
    /// which may still hold one when the call ends (a deadline passed while its value was
    /// arriving; it lets go at once, `memkv_client::ReadDestination`): the call must not
    /// return to Python, which may then free or reuse the memory, before they are released.
    pub fn watch(buffers: &mut [ByteBuffer]) -> Released {
        let (tx, rx) = tokio::sync::watch::channel(());
        for b in buffers {
            b.released = Some(rx.clone());
        }
        Released(Arc::new(tx))
    }

    /// Stops watching: a buffer that came back is the caller's, released or not.
    pub fn unwatch(&mut self) {
        self.released.take();
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }

    /// The address and length of the bytes, to find the registered region they lie in.
    pub fn span(&self) -> (usize, usize) {
        (self.view.buf as usize, self.len())
    }

    fn data(&self) -> Option<NonNull<u8>> {
        NonNull::new(self.view.buf.cast::<u8>()).filter(|_| self.len() > 0)
    }

    /// The bytes. Python code that writes into the same object while an operation is in
    /// flight races with it, exactly as with `socket.sendall` on a released GIL.
    pub fn as_slice(&self) -> &[u8] {
        match self.data() {
            // SAFETY: the exporter guarantees `len` contiguous bytes at `buf` until
            // PyBuffer_Release, which only `Drop` calls; `self` borrows the view for as long
            // as the slice lives.
            Some(ptr) => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.len()) },
            None => &[],
        }
    }

    /// The bytes, for writing. Only for buffers exported writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        assert!(self.writable, "as_mut_slice on a read-only buffer");
        match self.data() {
            // SAFETY: as in `as_slice`, and the exporter granted PyBUF_WRITABLE; `&mut self`
            // makes this the only Rust reference to the bytes while it lives.
            Some(ptr) => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len()) },
            None => &mut [],
        }
    }
}

/// Whether any item of `format` is a Python object (`O`), in a plain format or inside a
/// struct (`T{O:name:}`); field names (between colons) are not item codes.
fn holds_objects(format: &str) -> bool {
    let mut in_name = false;
    format.chars().any(|c| {
        if c == ':' {
            in_name = !in_name;
        }
        !in_name && c == 'O'
    })
}

/// numpy's word on an array exported without its item format: its dtype, when that holds
/// Python objects. A structured dtype may hold an object field beside a field the buffer
/// protocol cannot describe (a datetime64, a bfloat16), and numpy then exports it only
/// without the format.
fn dtype_with_objects(obj: &Bound<'_, PyAny>) -> Option<String> {
    let py = obj.py();
    let dtype = obj.getattr(pyo3::intern!(py, "dtype")).ok()?;
    let has = dtype.getattr(pyo3::intern!(py, "hasobject")).ok()?;
    has.is_truthy().ok()?.then(|| {
        dtype
            .str()
            .map_or_else(|_| "?".to_owned(), |s| s.to_string())
    })
}

/// One `PyObject_GetBuffer` with `flags`; the exporter's error when it refuses.
fn get_buffer(
    obj: &Bound<'_, PyAny>,
    flags: std::ffi::c_int,
) -> Result<Box<ffi::Py_buffer>, String> {
    // SAFETY: an all-zero Py_buffer is a valid "not yet filled" value (pointers null,
    // lengths 0); PyObject_GetBuffer fills it in or fails leaving nothing to release.
    let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: `obj` is a live object (we hold a reference and the GIL); `view` points to
    // writable, stable memory of the right type.
    let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
    if rc != 0 {
        return Err(PyErr::take(obj.py())
            .map(|e| e.to_string())
            .unwrap_or_else(|| "the object refused to export a buffer".into()));
    }
    Ok(view)
}

impl AsRef<[u8]> for ByteBuffer {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for ByteBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

// SAFETY: the buffer was exported writable (`register` only passes such buffers) and stays
// exported, so its `len` bytes stay valid and in place (a bytearray cannot be resized, nor a
// numpy array reshaped in place, while exported) until the value is dropped. That Python code
// leaves the bytes of an operation in flight alone is the documented contract of
// `Client.register` (docs/python.md), as with any buffer the GIL-released I/O uses.
unsafe impl memkv_client::CallerMemory for ByteBuffer {
    fn as_ptr(&self) -> *mut u8 {
        self.view.buf.cast::<u8>()
    }
    fn len(&self) -> usize {
        ByteBuffer::len(self)
    }
}

impl Drop for ByteBuffer {
    fn drop(&mut self) {
        // Releasing a buffer runs the exporter's code: it needs the interpreter. Once Python is
        // exiting (`crate::shutdown`) the export is kept instead: the object stays alive and
        // exported, and its memory goes with the process. Only a release would read the
        // descriptor, so it is freed with `self` all the same.
        crate::shutdown::attach(|_| {
            // SAFETY: `view` was filled by a successful PyObject_GetBuffer and is released at
            // most once, here.
            unsafe { ffi::PyBuffer_Release(&mut *self.view) }
        });
        self.released.take();
    }
}

/// Values are read from the socket straight into the exported memory. Only writable exports
/// reach the get paths (`ByteBuffer::writable`).
impl memkv_client::ReadDestination for ByteBuffer {
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}
