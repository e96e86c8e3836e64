//! `--extra-type` and `[[extra-type]]`: the resource types beyond Envoy's
//! an operator adds, as written ([`ExtraTypeSpec`]). What they mean, and
//! the checks that keep a name or type URL from two meanings, are the
//! vocabulary's (`xds::extra_types`); `app` registers each at start-up.

use serde::Deserialize;

/// One extra type as configured.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ExtraTypeSpec {
    /// The REST name (`/v3/discovery:<name>`): lowercase letters, digits,
    /// `-` and `_`.
    pub name: String,
    /// `type.googleapis.com/<fully qualified message name>`.
    pub type_url: String,
    /// The type's own gRPC service (fully qualified), for the per-type
    /// transports and fetch mode; without one it travels over ADS only.
    #[serde(default)]
    pub service: Option<String>,
    /// What the service's methods are named after [default: the message's
    /// short name and an `s`: `MonitoringAssignments`].
    #[serde(default)]
    pub stem: Option<String>,
    /// Whether each SotW response holds the type's whole state, so that a
    /// resource it leaves out is gone [default: true, as go-control-plane's
    /// and Kuma's servers send every type].
    #[serde(default = "yes")]
    pub complete_state: bool,
    /// Whether an empty name list asks for every resource [default: true].
    #[serde(default = "yes")]
    pub wildcard_when_unnamed: bool,
    /// The numbers of the string fields whose values, joined with `/`,
    /// name a resource (a SotW response names none but by its content)
    /// [default: `[1]`, the `name` of most xDS resources; Kuma's
    /// `MonitoringAssignment` is named by mesh and service, `[2, 3]`]. A
    /// resource with none of them is named by its content
    /// (`sha256:<16 hex digits>`); a delta upstream's wrapper names it.
    #[serde(default = "first_field")]
    pub name_fields: Vec<u32>,
    /// How answers name fields unless the client asks (`?field-names=`):
    /// `json` (lowerCamelCase, proto3 JSON's default) or `proto`
    /// (`version_info`, `metrics_path`), for clients that decode with a
    /// plain JSON decoder and cannot ask [default: json].
    #[serde(default)]
    pub field_names: FieldNames,
}

/// The field names of an answer's JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FieldNames {
    /// lowerCamelCase (`versionInfo`): proto3 JSON's, and Envoy's.
    #[default]
    Json,
    /// As the .proto spells them (`version_info`).
    Proto,
}

fn yes() -> bool {
    true
}

fn first_field() -> Vec<u32> {
    vec![1]
}

impl ExtraTypeSpec {
    /// `NAME=TYPE_URL` (the flag's form), with the defaults.
    pub fn parse_flag(text: &str) -> Result<ExtraTypeSpec, String> {
        let (name, type_url) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?} is not NAME=TYPE_URL"))?;
        Ok(ExtraTypeSpec {
            name: name.trim().to_owned(),
            type_url: type_url.trim().to_owned(),
            service: None,
            stem: None,
            complete_state: true,
            wildcard_when_unnamed: true,
            name_fields: first_field(),
            field_names: FieldNames::Json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_name_equals_type_url() {
        let spec = ExtraTypeSpec::parse_flag("things = type.googleapis.com/acme.Thing").unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.type_url.as_str(), spec.name_fields),
            ("things", "type.googleapis.com/acme.Thing", vec![1])
        );
        assert!(ExtraTypeSpec::parse_flag("no-equals").is_err());
    }

    #[test]
    fn a_table_sets_the_rest() {
        let spec: ExtraTypeSpec = toml::from_str(
            "name = \"m\"\ntype-url = \"type.googleapis.com/k.M\"\nservice = \"k.S\"\nname-fields = [2, 3]\ncomplete-state = false\n",
        )
        .unwrap();
        assert_eq!(spec.service.as_deref(), Some("k.S"));
        assert_eq!(spec.name_fields, [2, 3]);
        assert!(!spec.complete_state && spec.wildcard_when_unnamed);
    }
}
