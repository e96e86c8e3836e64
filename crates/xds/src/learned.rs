//! Descriptor files an upstream sent by gRPC server reflection, checked
//! before they join the pool (`admit`). They are untrusted input: a control
//! plane must not change how the types the pool has render, nor make the
//! gateway spend unbounded memory or stack on them. The rules, each a
//! [`LearnError`]:
//! - at most [`MAX_BYTES`] in at most [`MAX_FILES`] files, messages nested at
//!   most `MAX_DEPTH` deep;
//! - a file whose name the pool has is not taken: the pool's copy stands;
//! - a new file may not define a name the pool or another new file defines;
//! - it may extend only its own messages and `google.protobuf.*Options`
//!   (an extension of one of Envoy's messages would render as a new field);
//! - its dependencies resolve, in the pool or the new files, with no cycle.
//!
//! Nothing joins unless every file is admitted. No I/O.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use prost_reflect::DescriptorPool;
use prost_types::{DescriptorProto, FileDescriptorProto};

/// Bytes of descriptor files taken for one symbol.
pub const MAX_BYTES: usize = 4 << 20;
/// Files taken for one symbol (itself and its dependencies).
pub const MAX_FILES: usize = 256;
/// How deep messages may nest inside a learned message.
pub(crate) const MAX_DEPTH: usize = 32;

/// Why files an upstream sent were not added to the pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("{bytes} bytes of descriptors, more than {MAX_BYTES}")]
    TooLarge { bytes: usize },
    #[error("{files} descriptor files, more than {MAX_FILES}")]
    TooManyFiles { files: usize },
    #[error("a descriptor file does not decode: {reason}")]
    Undecodable { reason: String },
    #[error("{file}: messages nested deeper than {MAX_DEPTH}")]
    TooDeep { file: String },
    #[error("{file} redefines {name}, which the gateway already has")]
    Redefines { file: String, name: String },
    #[error("{file} extends {extendee}, a message the gateway already has")]
    ExtendsKnown { file: String, extendee: String },
    #[error("{file} depends on {dependency}, which was not sent")]
    MissingDependency { file: String, dependency: String },
    #[error("{file} is part of a dependency cycle")]
    Cycle { file: String },
    #[error("{file}: two different files of that name were sent")]
    Conflicting { file: String },
    #[error("the descriptors do not build: {reason}")]
    Rejected { reason: String },
}

/// The files not in the pool yet, by name.
type NewFiles = BTreeMap<String, FileDescriptorProto>;

/// What admitting files makes: the grown pool, and how many files joined.
#[derive(Debug)]
pub(crate) struct Grown {
    pub(crate) pool: DescriptorPool,
    pub(crate) added: usize,
}

/// `pool` with `files` (serialized `FileDescriptorProto`s) added, if every
/// rule of this module holds.
pub(crate) fn admit(pool: &DescriptorPool, files: &[Vec<u8>]) -> Result<Grown, LearnError> {
    let bytes: usize = files.iter().map(Vec::len).sum();
    if bytes > MAX_BYTES {
        return Err(LearnError::TooLarge { bytes });
    }
    if files.len() > MAX_FILES {
        return Err(LearnError::TooManyFiles { files: files.len() });
    }
    let mut new = NewFiles::new();
    for raw in files {
        let file =
            FileDescriptorProto::decode(raw.as_slice()).map_err(|e| LearnError::Undecodable {
                reason: e.to_string(),
            })?;
        let name = file.name().to_owned();
        if pool.get_file_by_name(&name).is_some() {
            continue;
        }
        if new.get(&name).is_some_and(|seen| *seen != file) {
            return Err(LearnError::Conflicting { file: name });
        }
        new.entry(name).or_insert(file);
    }
    let defined = check_names(pool, &new)?;
    check_extensions(pool, &new, &defined)?;
    let order = dependency_order(pool, &new)?;
    let added = order.len();
    let mut grown = pool.clone();
    grown
        .add_file_descriptor_protos(order.into_iter().filter_map(|name| new.remove(&name)))
        .map_err(|e| LearnError::Rejected {
            reason: e.to_string(),
        })?;
    Ok(Grown { pool: grown, added })
}

/// Every name the new files define, each new and defined once.
fn check_names(pool: &DescriptorPool, new: &NewFiles) -> Result<BTreeSet<String>, LearnError> {
    let mut defined = BTreeSet::new();
    for (file, proto) in new {
        let mut names = Vec::new();
        let package = proto.package();
        for message in &proto.message_type {
            message_names(file, package, message, 1, &mut names)?;
        }
        let enums = proto.enum_type.iter().map(|e| e.name());
        let services = proto.service.iter().map(|s| s.name());
        let extensions = proto.extension.iter().map(|x| x.name());
        let defines = enums.chain(services).chain(extensions);
        names.extend(defines.map(|n| qualified(package, n)));
        for name in names {
            let known = pool.get_message_by_name(&name).is_some()
                || pool.get_enum_by_name(&name).is_some()
                || pool.get_service_by_name(&name).is_some()
                || pool.get_extension_by_name(&name).is_some();
            if known || !defined.insert(name.clone()) {
                return Err(LearnError::Redefines {
                    file: file.clone(),
                    name,
                });
            }
        }
    }
    Ok(defined)
}

/// The names `message` (in `scope`) and what it nests define.
fn message_names(
    file: &str,
    scope: &str,
    message: &DescriptorProto,
    depth: usize,
    names: &mut Vec<String>,
) -> Result<(), LearnError> {
    if depth > MAX_DEPTH {
        return Err(LearnError::TooDeep {
            file: file.to_owned(),
        });
    }
    let name = qualified(scope, message.name());
    for nested in &message.nested_type {
        message_names(file, &name, nested, depth + 1, names)?;
    }
    let enums = message.enum_type.iter().map(|e| e.name());
    let extensions = message.extension.iter().map(|x| x.name());
    names.extend(enums.chain(extensions).map(|n| qualified(&name, n)));
    names.push(name);
    Ok(())
}

fn qualified(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_owned()
    } else {
        format!("{scope}.{name}")
    }
}

/// Extensions of a message the pool has are refused, but for options.
fn check_extensions(
    pool: &DescriptorPool,
    new: &NewFiles,
    defined: &BTreeSet<String>,
) -> Result<(), LearnError> {
    for (file, proto) in new {
        let mut extensions: Vec<&str> = proto.extension.iter().map(|x| x.extendee()).collect();
        let mut stack: Vec<&DescriptorProto> = proto.message_type.iter().collect();
        while let Some(message) = stack.pop() {
            extensions.extend(message.extension.iter().map(|x| x.extendee()));
            stack.extend(message.nested_type.iter());
        }
        for extendee in extensions {
            let name = extendee.trim_start_matches('.');
            let options = name.starts_with("google.protobuf.") && name.ends_with("Options");
            if !options && !defined.contains(name) && pool.get_message_by_name(name).is_some() {
                return Err(LearnError::ExtendsKnown {
                    file: file.clone(),
                    extendee: name.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// The new files' names, each after the new files it depends on.
fn dependency_order(pool: &DescriptorPool, new: &NewFiles) -> Result<Vec<String>, LearnError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    let mut order = Vec::with_capacity(new.len());
    for start in new.keys() {
        // Iterative depth-first walk: (file, index of its next dependency).
        let mut stack: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        while let Some((file, next)) = stack.pop() {
            if next == 0 {
                match marks.get(file) {
                    Some(Mark::Done) => continue,
                    Some(Mark::Visiting) => {
                        return Err(LearnError::Cycle {
                            file: file.to_owned(),
                        })
                    }
                    None => {
                        marks.insert(file, Mark::Visiting);
                    }
                }
            }
            let proto = &new[file];
            match proto.dependency.get(next) {
                None => {
                    marks.insert(file, Mark::Done);
                    order.push(file.to_owned());
                }
                Some(dependency) => {
                    stack.push((file, next + 1));
                    // A new file is visited next: marked `Visiting`, it is a cycle.
                    if let Some((name, _)) = new.get_key_value(dependency.as_str()) {
                        stack.push((name.as_str(), 0));
                    } else if pool.get_file_by_name(dependency).is_none() {
                        return Err(LearnError::MissingDependency {
                            file: file.to_owned(),
                            dependency: dependency.clone(),
                        });
                    }
                }
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_types::{field_descriptor_proto, FieldDescriptorProto};

    fn embedded() -> DescriptorPool {
        crate::Codec::embedded().pool()
    }

    fn message(name: &str) -> DescriptorProto {
        DescriptorProto {
            name: Some(name.to_owned()),
            field: vec![FieldDescriptorProto {
                name: Some("value".into()),
                number: Some(1),
                label: Some(field_descriptor_proto::Label::Optional as i32),
                r#type: Some(field_descriptor_proto::Type::String as i32),
                json_name: Some("value".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn file(name: &str, package: &str, messages: Vec<DescriptorProto>, deps: &[&str]) -> Vec<u8> {
        FileDescriptorProto {
            name: Some(name.to_owned()),
            package: Some(package.to_owned()),
            dependency: deps.iter().map(|d| (*d).to_owned()).collect(),
            message_type: messages,
            syntax: Some("proto3".into()),
            ..Default::default()
        }
        .encode_to_vec()
    }

    #[test]
    fn a_new_type_joins_and_files_the_pool_has_are_kept_as_they_are() {
        let pool = embedded();
        let base = pool
            .get_file_by_name("envoy/config/core/v3/base.proto")
            .unwrap();
        // The upstream's copy of a file the pool has, with a different body.
        let their_base = file(
            "envoy/config/core/v3/base.proto",
            "envoy.config.core.v3",
            vec![message("Evil")],
            &[],
        );
        let ours = file(
            "acme/v1/filter.proto",
            "acme.v1",
            vec![message("Filter")],
            &["envoy/config/core/v3/base.proto"],
        );
        let grown = admit(&pool, &[their_base, ours]).expect("admitted");
        assert_eq!(grown.added, 1);
        assert!(grown.pool.get_message_by_name("acme.v1.Filter").is_some());
        assert!(grown
            .pool
            .get_message_by_name("envoy.config.core.v3.Evil")
            .is_none());
        assert_eq!(
            grown
                .pool
                .get_file_by_name("envoy/config/core/v3/base.proto")
                .unwrap()
                .file_descriptor_proto(),
            base.file_descriptor_proto()
        );
        assert!(
            pool.get_message_by_name("acme.v1.Filter").is_none(),
            "the old pool is untouched"
        );
    }

    #[test]
    fn a_file_redefining_an_envoy_type_is_refused() {
        let evil = file(
            "evil/cluster.proto",
            "envoy.config.cluster.v3",
            vec![message("Cluster")],
            &[],
        );
        assert_eq!(
            admit(&embedded(), &[evil]).unwrap_err(),
            LearnError::Redefines {
                file: "evil/cluster.proto".into(),
                name: "envoy.config.cluster.v3.Cluster".into()
            }
        );
        let twice = [
            file("a.proto", "acme", vec![message("M")], &[]),
            file("b.proto", "acme", vec![message("M")], &[]),
        ];
        assert!(matches!(
            admit(&embedded(), &twice),
            Err(LearnError::Redefines { .. })
        ));
    }

    #[test]
    fn an_extension_of_an_envoy_message_is_refused_options_are_not() {
        let extending = |extendee: &str| {
            FileDescriptorProto {
                name: Some("ext.proto".into()),
                package: Some("acme".into()),
                dependency: vec![
                    "envoy/config/cluster/v3/cluster.proto".into(),
                    "google/protobuf/descriptor.proto".into(),
                ],
                extension: vec![FieldDescriptorProto {
                    name: Some("shadow".into()),
                    number: Some(99_999),
                    label: Some(field_descriptor_proto::Label::Optional as i32),
                    r#type: Some(field_descriptor_proto::Type::String as i32),
                    extendee: Some(extendee.to_owned()),
                    json_name: Some("shadow".into()),
                    ..Default::default()
                }],
                syntax: Some("proto2".into()),
                ..Default::default()
            }
            .encode_to_vec()
        };
        assert!(matches!(
            admit(
                &embedded(),
                &[extending(".envoy.config.cluster.v3.Cluster")]
            ),
            Err(LearnError::ExtendsKnown { .. })
        ));
        let options = admit(&embedded(), &[extending(".google.protobuf.FieldOptions")]);
        assert!(options.is_ok(), "{options:?}");
    }

    #[test]
    fn a_dependency_cycle_and_a_missing_dependency_are_refused() {
        let cycle = [
            file("a.proto", "acme.a", vec![message("A")], &["b.proto"]),
            file("b.proto", "acme.b", vec![message("B")], &["a.proto"]),
        ];
        assert!(matches!(
            admit(&embedded(), &cycle),
            Err(LearnError::Cycle { .. })
        ));
        let itself = [file("a.proto", "acme.a", vec![message("A")], &["a.proto"])];
        assert!(matches!(
            admit(&embedded(), &itself),
            Err(LearnError::Cycle { .. })
        ));
        let missing = [file(
            "a.proto",
            "acme.a",
            vec![message("A")],
            &["nowhere.proto"],
        )];
        assert_eq!(
            admit(&embedded(), &missing).unwrap_err(),
            LearnError::MissingDependency {
                file: "a.proto".into(),
                dependency: "nowhere.proto".into()
            }
        );
    }

    #[test]
    fn oversized_too_many_and_too_deep_are_refused() {
        let big = vec![0u8; MAX_BYTES + 1];
        assert!(matches!(
            admit(&embedded(), &[big]),
            Err(LearnError::TooLarge { .. })
        ));
        let many: Vec<Vec<u8>> = (0..=MAX_FILES)
            .map(|i| {
                file(
                    &format!("f{i}.proto"),
                    &format!("p{i}"),
                    vec![message("M")],
                    &[],
                )
            })
            .collect();
        assert!(matches!(
            admit(&embedded(), &many),
            Err(LearnError::TooManyFiles { .. })
        ));
        let mut deep = message("L0");
        for level in 1..=MAX_DEPTH {
            let mut outer = message(&format!("L{level}"));
            outer.nested_type.push(deep);
            deep = outer;
        }
        let deep = file("deep.proto", "acme", vec![deep], &[]);
        assert!(matches!(
            admit(&embedded(), &[deep]),
            Err(LearnError::TooDeep { .. })
        ));
        assert!(matches!(
            admit(&embedded(), &[vec![0xff, 0xff]]),
            Err(LearnError::Undecodable { .. })
        ));
    }

    #[test]
    fn two_different_files_of_one_name_are_refused() {
        let files = [
            file("a.proto", "acme", vec![message("A")], &[]),
            file("a.proto", "acme", vec![message("B")], &[]),
        ];
        assert!(matches!(
            admit(&embedded(), &files),
            Err(LearnError::Conflicting { .. })
        ));
    }
}
