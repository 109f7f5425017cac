//! The whole `memkv net doctor` result: findings in check order, rendered as text or JSON, and
//! the exit code scripts branch on.

use super::finding::{Finding, Status};
use serde::Serialize;
use std::fmt::Write as _;

/// Exit code when every check is OK.
pub const EXIT_DOCTOR_OK: i32 = 0;
/// Exit code when at least one check warns and none fails.
pub const EXIT_DOCTOR_WARNINGS: i32 = 10;
/// Exit code when at least one check fails.
pub const EXIT_DOCTOR_FAILURES: i32 = 11;

/// Width of the check column, so subjects line up.
const CHECK_WIDTH: usize = 22;
/// Indent of the symptom and fix lines under their check.
const DETAIL_INDENT: &str = "      ";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    pub checks: Vec<Finding>,
    /// Seconds between the two counter readings, when `--watch` was given.
    pub watch_seconds: Option<u64>,
}

impl DoctorReport {
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for f in &self.checks {
            match f.status {
                Status::Ok => s.ok += 1,
                Status::Warn => s.warn += 1,
                Status::Fail => s.fail += 1,
            }
        }
        s
    }

    pub fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// [`EXIT_DOCTOR_OK`], [`EXIT_DOCTOR_WARNINGS`] or [`EXIT_DOCTOR_FAILURES`].
    pub fn exit_code(&self) -> i32 {
        match self.worst() {
            Status::Ok => EXIT_DOCTOR_OK,
            Status::Warn => EXIT_DOCTOR_WARNINGS,
            Status::Fail => EXIT_DOCTOR_FAILURES,
        }
    }

    /// One line per check; WARN and FAIL add indented `symptom:` and `fix:` lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.checks {
            let _ = writeln!(
                out,
                "{:<4}  {:<CHECK_WIDTH$} {}: {}",
                f.status.to_string(),
                f.check,
                f.subject,
                f.read
            );
            if let Some(symptom) = &f.symptom {
                let _ = writeln!(out, "{DETAIL_INDENT}symptom: {symptom}");
            }
            for (i, line) in f.fix.iter().enumerate() {
                let label = if i == 0 { "fix:    " } else { "        " };
                let _ = writeln!(out, "{DETAIL_INDENT}{label} {line}");
            }
        }
        let s = self.summary();
        let _ = writeln!(
            out,
            "{} checks: {} OK, {} WARN, {} FAIL",
            self.checks.len(),
            s.ok,
            s.warn,
            s.fail
        );
        out
    }

    /// The same content as [`Self::text`]: `{"checks": [...], "summary": {...}, ...}`.
    pub fn json(&self) -> String {
        #[derive(Serialize)]
        struct Doc<'a> {
            checks: &'a [Finding],
            summary: Summary,
            #[serde(skip_serializing_if = "Option::is_none")]
            watch_seconds: Option<u64>,
            exit_code: i32,
        }
        let doc = Doc {
            checks: &self.checks,
            summary: self.summary(),
            watch_seconds: self.watch_seconds,
            exit_code: self.exit_code(),
        };
        let mut text = serde_json::to_string_pretty(&doc)
            .unwrap_or_else(|e| format!("{{\"error\": \"cannot serialise report: {e}\"}}"));
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(statuses: &[Status]) -> DoctorReport {
        DoctorReport {
            checks: statuses
                .iter()
                .map(|s| Finding::new("x.y", "host", *s).read("r"))
                .collect(),
            watch_seconds: None,
        }
    }

    #[test]
    fn exit_codes_are_distinct_per_worst_status() {
        assert_eq!(report(&[]).exit_code(), EXIT_DOCTOR_OK);
        assert_eq!(report(&[Status::Ok]).exit_code(), EXIT_DOCTOR_OK);
        assert_eq!(
            report(&[Status::Ok, Status::Warn]).exit_code(),
            EXIT_DOCTOR_WARNINGS
        );
        assert_eq!(
            report(&[Status::Fail, Status::Warn]).exit_code(),
            EXIT_DOCTOR_FAILURES
        );
    }

    #[test]
    fn text_puts_symptom_and_fix_under_the_check() {
        let r = DoctorReport {
            checks: vec![
                Finding::fail("arp.rail-mac", "vethA", "bad")
                    .symptom("IBV_WC_RETRY_EXC_ERR")
                    .fix("line one\nline two"),
            ],
            watch_seconds: None,
        };
        assert_eq!(
            r.text(),
            "FAIL  arp.rail-mac           vethA: bad\n      symptom: IBV_WC_RETRY_EXC_ERR\n      \
             fix:     line one\n               line two\n1 checks: 0 OK, 0 WARN, 1 FAIL\n"
        );
    }
}
