//! Durations written as human strings: "500ms", "10s", "2m", "1h 30m" (humantime's forms), or a
//! bare number in a unit the caller names (a client deadline counts milliseconds, a bench run
//! seconds).

use std::time::Duration;

/// What a number without a unit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BareNumber {
    Milliseconds,
    Seconds,
}

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration such as \"500ms\", \"10s\" or \"2m\" ({reason})")]
pub struct DurationError {
    pub text: String,
    pub reason: String,
}

/// Parses a duration; a bare number is read as `bare`.
pub fn parse_duration(text: &str, bare: BareNumber) -> Result<Duration, DurationError> {
    let t = text.trim();
    let fail = |reason: String| DurationError {
        text: t.to_owned(),
        reason,
    };
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = t
            .parse()
            .map_err(|_| fail("the number is too large".into()))?;
        return Ok(match bare {
            BareNumber::Milliseconds => Duration::from_millis(n),
            BareNumber::Seconds => Duration::from_secs(n),
        });
    }
    humantime::parse_duration(t).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_numbers() {
        let ms = BareNumber::Milliseconds;
        let s = BareNumber::Seconds;
        assert_eq!(parse_duration("250ms", ms), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 10s ", ms), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m", s), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2min", s), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m", s), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1500", ms), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("10", s), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn refusals_name_the_text() {
        for bad in [
            "",
            "s",
            "-1s",
            "10 parsecs",
            "1.5.2s",
            "99999999999999999999999",
        ] {
            let e = parse_duration(bad, BareNumber::Seconds).unwrap_err();
            assert!(e.to_string().contains(&format!("{:?}", bad.trim())), "{e}");
        }
    }
}
