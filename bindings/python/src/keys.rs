//! Keys from Python: `str` (UTF-8) or `bytes`.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

pub fn key(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    named_key(obj, None)
}

/// A key of a batch: errors say where it is (`keys[3]`, `items[1] key`), since a batch may hold
/// thousands of keys.
pub fn named_key(obj: &Bound<'_, PyAny>, what: Option<&str>) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        // A lone surrogate ("\ud800") has no UTF-8 form; say which key of a batch holds it.
        return match s.to_str() {
            Ok(text) => Ok(text.as_bytes().to_vec()),
            Err(e) => Err(PyValueError::new_err(format!(
                "{}a str key must be valid Unicode to be sent as UTF-8: {}",
                what.map(|w| format!("{w}: ")).unwrap_or_default(),
                e.value(obj.py())
            ))),
        };
    }
    let why = format!("a key must be str or bytes, not {}", obj.get_type().name()?);
    Err(PyTypeError::new_err(match what {
        Some(what) => format!("{what}: {why}"),
        None => why,
    }))
}

/// Keys from any iterable of keys. A lone `str` or `bytes` is refused: iterating it would
/// silently make one key per character.
pub fn keys(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err(
            "keys: expected a list of keys, not a single str or bytes",
        ));
    }
    obj.try_iter()?
        .enumerate()
        .map(|(i, k)| named_key(&k?, Some(&format!("keys[{i}]"))))
        .collect()
}

/// A key as an error message shows it: text when it is UTF-8, else escaped bytes.
pub fn shown(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) => format!("{text:?}"),
        Err(_) => format!("b\"{}\"", key.escape_ascii()),
    }
}
