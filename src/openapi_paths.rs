//! Test builds only: the `(path, method)` pairs an OpenAPI document lists,
//! for the tests that check a router against its document (the REST
//! listener's `openapi/xds-gateway.yaml`, the admin listener's
//! `openapi/admin.yaml`).

/// Every `(path, method)` under `paths` of the OpenAPI document `yaml`,
/// sorted.
pub(crate) fn documented_routes(yaml: &str) -> Vec<(String, String)> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).expect("the document is YAML");
    let mut documented = Vec::new();
    for (path, item) in doc["paths"].as_mapping().expect("paths is a mapping") {
        for method in item.as_mapping().expect("a path item is a mapping").keys() {
            documented.push((
                path.as_str().expect("a path is a string").to_owned(),
                method.as_str().expect("a method is a string").to_owned(),
            ));
        }
    }
    documented.sort();
    documented
}
