//! One line of the doctor's report: a check's name, how it went, and what to do about it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but something will be missing or may go wrong.
    Warn,
    /// planwright cannot work until this is fixed.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    /// What was found and, unless it is fine, what to do.
    pub detail: String,
}

impl Check {
    pub(super) fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Ok,
            detail: detail.into(),
        }
    }

    pub(super) fn warn(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Warn,
            detail: detail.into(),
        }
    }

    pub(super) fn fail(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Fail,
            detail: detail.into(),
        }
    }

    /// The report line: status, name, detail.
    pub fn line(&self) -> String {
        let mark = match self.status {
            Status::Ok => "ok  ",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        format!("{mark} {:<16} {}", self.name, self.detail)
    }
}
