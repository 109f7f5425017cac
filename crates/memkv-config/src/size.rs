//! Byte sizes written as human strings ("2 MiB", "247 GiB", "4096").
//!
//! Accepted forms (documented for operators in `config.example.yaml`):
//! - a plain integer: bytes (`4096`, or a YAML integer);
//! - a number followed by a unit, with or without a space: `B`, binary `KiB` `MiB` `GiB`
//!   `TiB` (powers of 1024), their one-letter forms `K` `M` `G` `T` (also powers of 1024, as in
//!   fio and redis-benchmark), or decimal `KB` `MB` `GB` `TB` (powers of 1000). Units are
//!   matched case-insensitively; `KB` always means 1000, never 1024;
//! - a decimal fraction with a unit (`1.5 GiB`) as long as the result is a whole number of
//!   bytes.
//!
//! Anything else, including negative numbers, overflow past `u64::MAX` and fractional byte
//! counts, is refused with a [`SizeError`].

use std::fmt;
use std::str::FromStr;

/// One-line description of what the parser accepts, used in every error message.
pub const ACCEPTED_SIZE_FORMS: &str = "accepted forms: integer bytes (4096), or a number with a unit \
B, KiB, MiB, GiB, TiB or K, M, G, T (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. \"2 MiB\", \"1.5 GiB\", \"4K\"";

const UNITS: [(&str, u64); 13] = [
    ("b", 1),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// Binary units used when formatting, largest first.
const FORMAT_UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// Bounds the fixed-point arithmetic below; no real size needs more fraction digits.
const MAX_FRACTION_DIGITS: usize = 18;

/// A number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn bytes(self) -> u64 {
        self.0
    }

    pub const fn kib(n: u64) -> Self {
        Self(n << 10)
    }

    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }

    pub const fn gib(n: u64) -> Self {
        Self(n << 30)
    }
}

/// Why a size string was refused. Display gives the reason only; callers add the key and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {text:?}: {reason}; {ACCEPTED_SIZE_FORMS}")]
pub struct SizeError {
    pub text: String,
    pub reason: &'static str,
}

/// Parses a size string; see the module documentation for the accepted forms.
pub fn parse_size(text: &str) -> Result<ByteSize, SizeError> {
    let fail = |reason| SizeError {
        text: text.to_owned(),
        reason,
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(fail("it is empty"));
    }
    let number_end = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, rest) = trimmed.split_at(number_end);
    let unit = rest.trim_start();
    if number.is_empty() {
        return Err(fail(if trimmed.starts_with('-') {
            "sizes cannot be negative"
        } else {
            "it does not start with a number"
        }));
    }
    let multiplier = if unit.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(unit))
            .map(|&(_, m)| m)
            .ok_or_else(|| fail("unknown unit"))?
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return Err(fail("the number is malformed"));
    }
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > MAX_FRACTION_DIGITS {
        return Err(fail("too many fraction digits"));
    }
    let whole: u128 = whole.parse().map_err(|_| fail("the number is too large"))?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction
            .parse()
            .map_err(|_| fail("the number is malformed"))?
    };
    let multiplier = u128::from(multiplier);
    let scaled = whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(fraction_value))
        .and_then(|v| v.checked_mul(multiplier))
        .ok_or_else(|| fail("it is larger than 2^64 - 1 bytes"))?;
    if scaled % scale != 0 {
        return Err(fail("it is not a whole number of bytes"));
    }
    u64::try_from(scaled / scale)
        .map(ByteSize)
        .map_err(|_| fail("it is larger than 2^64 - 1 bytes"))
}

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_size(text)
    }
}

/// Exact, shortest binary form: `2 MiB`, `1536 MiB`, `4097 B`, `0 B`.
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (name, unit) in FORMAT_UNITS {
            if bytes != 0 && bytes % unit == 0 {
                return write!(f, "{} {name}", bytes / unit);
            }
        }
        write!(f, "{bytes} B")
    }
}

impl serde::Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = SizeText::deserialize(deserializer)?;
        parse_size(&text.0).map_err(serde::de::Error::custom)
    }
}

/// The unparsed text of a size field: a YAML string, or an integer turned into its digits.
/// Parsing is deferred so the error can name the key and line (see `config::validate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeText(pub String);

impl<'de> serde::Deserialize<'de> for SizeText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SizeText;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"2 MiB\" or an integer number of bytes")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SizeText, E> {
                Ok(SizeText(v.to_owned()))
            }

            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }

            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }

            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<SizeText, E> {
                Ok(SizeText(v.to_string()))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_documented_forms() {
        let cases: &[(&str, u64)] = &[
            ("4096", 4096),
            ("0", 0),
            ("2 MiB", 2 << 20),
            ("2MiB", 2 << 20),
            ("4KiB", 4096),
            ("247 GiB", 247 << 30),
            ("1 TiB", 1 << 40),
            ("1.5 GiB", 3 << 29),
            ("1.50 GiB", 3 << 29),
            ("10 B", 10),
            ("4 kb", 4000),
            ("4 KB", 4000),
            ("1 MB", 1_000_000),
            ("3 GB", 3_000_000_000),
            ("2 TB", 2_000_000_000_000),
            ("  8 mib ", 8 << 20),
            ("0.5 KiB", 512),
            ("4K", 4096),
            ("16m", 16 << 20),
            ("1 G", 1 << 30),
        ];
        for &(text, bytes) in cases {
            assert_eq!(parse_size(text), Ok(ByteSize(bytes)), "{text}");
        }
    }

    #[test]
    fn refuses_bad_forms_with_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("MiB", "does not start with a number"),
            ("-1 MiB", "negative"),
            ("2 MB/s", "unknown unit"),
            ("2 Mi", "unknown unit"),
            ("1.5", "whole number of bytes"),
            ("0.1 KiB", "whole number of bytes"),
            ("1. MiB", "malformed"),
            (".5 MiB", "malformed"),
            ("1.2.3 MiB", "malformed"),
            ("16777216 TiB", "larger than"),
            ("99999999999999999999999999999999999999999", "too large"),
        ];
        for &(text, reason) in cases {
            let err = parse_size(text).unwrap_err();
            let message = err.to_string();
            assert!(message.contains(reason), "{text}: {message}");
            assert!(message.contains("accepted forms"), "{message}");
        }
    }

    #[test]
    fn formats_exactly() {
        assert_eq!(ByteSize(0).to_string(), "0 B");
        assert_eq!(ByteSize(4097).to_string(), "4097 B");
        assert_eq!(ByteSize::mib(2).to_string(), "2 MiB");
        assert_eq!(ByteSize(3 << 29).to_string(), "1536 MiB");
        assert_eq!(ByteSize(u64::MAX).to_string(), format!("{} B", u64::MAX));
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(bytes in any::<u64>()) {
            prop_assert_eq!(parse_size(&ByteSize(bytes).to_string()), Ok(ByteSize(bytes)));
        }

        #[test]
        fn unit_multiples_round_trip(n in 0u64..1 << 20, unit in 0usize..UNITS.len()) {
            let (name, multiplier) = UNITS[unit];
            let text = format!("{n} {}", name.to_uppercase());
            prop_assert_eq!(parse_size(&text), Ok(ByteSize(n * multiplier)));
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC*") {
            let _ = parse_size(&text);
        }

        #[test]
        fn number_like_text_never_panics(text in "[0-9. ]{0,30}[a-zA-Z]{0,4}") {
            let _ = parse_size(&text);
        }
    }
}
