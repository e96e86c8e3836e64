//! The serde form of an optional duration setting, written like `5s` or
//! `250ms` (read by `humantime`), for `#[serde(default, with =
//! "opt_duration")]` on the `Settings` fields (`fields.rs`) and the
//! `[[upstream]]` tables (`upstreams.rs`).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Option<Duration>, D::Error> {
    let Some(text) = Option::<String>::deserialize(de)? else {
        return Ok(None);
    };
    humantime::parse_duration(&text).map(Some).map_err(|e| {
        serde::de::Error::custom(format!("{text:?} is not a duration like 5s or 250ms: {e}"))
    })
}
