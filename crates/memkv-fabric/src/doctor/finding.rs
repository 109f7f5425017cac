//! One result line of `memkv net doctor`: what was checked, what was read, why it matters and
//! how to fix it.

use serde::Serialize;
use std::fmt;

/// Outcome of one check. Ordered so that the worst status of a report is its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ok => "OK",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
        })
    }
}

/// One check's result for one subject (the host, a port, a rail, a bridge).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Check identifier, e.g. `arp.sysctl`; listed in [`super::CHECKS`] with its runbook source.
    pub check: &'static str,
    /// What the check looked at: `host`, `rxe0 port 1`, `vethA`, `0000:03:00.0`.
    pub subject: String,
    pub status: Status,
    /// What was read, in the terms the runbook uses.
    pub read: String,
    /// The failure this state explains (the error an operator sees), for WARN and FAIL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symptom: Option<String>,
    /// Commands that fix it, filled in with this host's names; one entry per line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fix: Vec<String>,
}

impl Finding {
    pub fn new(check: &'static str, subject: impl Into<String>, status: Status) -> Self {
        Self {
            check,
            subject: subject.into(),
            status,
            read: String::new(),
            symptom: None,
            fix: Vec::new(),
        }
    }

    pub fn ok(check: &'static str, subject: impl Into<String>, read: impl Into<String>) -> Self {
        Self::new(check, subject, Status::Ok).read(read)
    }

    pub fn warn(check: &'static str, subject: impl Into<String>, read: impl Into<String>) -> Self {
        Self::new(check, subject, Status::Warn).read(read)
    }

    pub fn fail(check: &'static str, subject: impl Into<String>, read: impl Into<String>) -> Self {
        Self::new(check, subject, Status::Fail).read(read)
    }

    pub fn read(mut self, read: impl Into<String>) -> Self {
        self.read = read.into();
        self
    }

    pub fn symptom(mut self, symptom: impl Into<String>) -> Self {
        self.symptom = Some(symptom.into());
        self
    }

    /// Appends fix lines (a multi-line string becomes several lines).
    pub fn fix(mut self, lines: impl AsRef<str>) -> Self {
        self.fix.extend(lines.as_ref().lines().map(str::to_owned));
        self
    }
}
