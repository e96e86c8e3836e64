//! What the two HTTP faces share, the REST face (`http`) and the admin
//! listener (`admin`): the one error table ([`ApiError`], `error.rs`), a
//! request body read to its limits (`body.rs`), query parameters
//! ([`Params`], `query.rs`), the `Host` check against DNS rebinding
//! (`host.rs`) and the credentials a request presents (`credential.rs`).
//! Neither face names the other.

pub(crate) mod body;
pub(crate) mod credential;
mod error;
pub(crate) mod host;
mod query;

pub(crate) use error::ApiError;
pub(crate) use query::{switch, Params};
