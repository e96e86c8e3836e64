//! Reading one layer of [`Settings`] (declared in `fields.rs`): what the
//! `--config` TOML file says (read by serde: the same keys as the long
//! flags, unknown keys refused, durations written like `5s` or `250ms`).
//! The command line is read by clap; `Config::from_settings` lays it over
//! the file over the defaults.

use std::path::Path;

use super::{ConfigError, Settings};

impl Settings {
    pub(super) fn read_file(path: &Path) -> Result<Settings, ConfigError> {
        let fail = |reason: String| ConfigError::File {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Settings::from_toml(&text).map_err(fail)
    }

    pub(super) fn from_toml(text: &str) -> Result<Settings, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}
