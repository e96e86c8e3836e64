//! The `config_toml` fuzz target (`crate::fuzz` lists them all): a
//! `--config` TOML file, read, laid over the defaults (as with no flags)
//! and validated, as start-up does.
//!
//! Properties, each a panic when broken: nothing panics, in reading,
//! validating or in what start-up derives from a valid config (the write
//! stall timeout); and validation is idempotent: a valid config validates
//! again, unchanged (the upstream URI is normalised once).

use super::{Config, Settings};

/// Reads `data` as a `--config` file; a valid config is checked again.
/// Accepted: valid.
pub fn config_toml(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(file) = Settings::from_toml(text) else {
        return false;
    };
    let Ok(config) = Config::from_layers(Some(file), Settings::default()) else {
        return false;
    };
    let _ = config.write_stall_timeout();
    let again = config
        .clone()
        .validate()
        .unwrap_or_else(|e| panic!("a valid config is refused the second time: {e}"));
    assert_eq!(
        format!("{:?}", without_warnings(again)),
        format!("{:?}", without_warnings(config)),
        "validating again changed the config"
    );
    true
}

fn without_warnings(mut config: Config) -> Config {
    config.warnings.clear();
    config
}
