//! [`Broken`]: the one answer of every rule check (`rules.rs`, `bounds.rs`,
//! `text.rs`) to a value that breaks it, saying which rule and how.

/// A rule broken by a value: which (`string.min_len`) and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    pub(crate) rule: String,
    pub(crate) message: String,
}

pub(super) fn broken(rule: &str, message: impl Into<String>) -> Result<(), Broken> {
    Err(Broken {
        rule: rule.to_owned(),
        message: message.into(),
    })
}
