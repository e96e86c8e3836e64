//! One SotW push as a session takes it, end to end, for the benchmarks:
//! the upstream's resources decoded (those `previous` holds under the same
//! bytes taken as they are), checked and rendered, published as a state,
//! and the wildcard answer's body assembled as a poll is served it. The
//! same functions the upstream streams and the poll path call; no copy.
//!
//! Bodies are not memoised here (a body memo of no bytes), so every push
//! assembles its answer, as the first poll after a real push does.

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::google::protobuf::Any;

use super::decode::decode_all;
use super::wire::Payload;
use crate::cache::{Answer, Assembler, Coverage, Intake, Names, TypeState};
use crate::xds::dynamic_parameters::Parameters;
use crate::xds::rewrite::RestTarget;
use crate::xds::{Codec, ResourceType};

/// The decoding and answering of pushes, with its own render memo.
pub struct Pipeline {
    intake: Intake,
    assembler: Assembler,
}

/// A pushed state, and what taking it cost.
pub struct Pushed {
    state: Arc<TypeState>,
    /// Resources decoded, checked and rendered (changed or new).
    pub decoded: usize,
    /// Resources taken from the previous state as they were.
    pub reused: usize,
}

impl Pipeline {
    /// A pipeline checking resources against Envoy's field rules, as the
    /// gateway does by default.
    pub fn new(codec: Codec) -> Pipeline {
        Pipeline {
            assembler: Assembler::with_body_capacity(codec.clone(), 0),
            intake: Intake::new(codec),
        }
    }

    /// Takes a push of `anys` (of `kind`, at `version`) after `previous`,
    /// and returns the state and the body a wildcard poll is served.
    pub fn push(
        &self,
        kind: ResourceType,
        version: &str,
        anys: Vec<Any>,
        previous: Option<&Pushed>,
    ) -> Result<(Pushed, Bytes), String> {
        let payloads: Vec<Payload<'_>> = anys.iter().map(Payload::of).collect();
        let decoded = decode_all(
            &self.intake,
            kind,
            &payloads,
            previous.map(|p| p.state.as_ref()),
            &Parameters::new(),
        )
        .map_err(|e| e.to_string())?;
        let pushed = Pushed {
            decoded: decoded.decoded,
            reused: decoded.reused,
            state: Arc::new(TypeState::new(
                kind,
                version.to_owned(),
                "n".to_owned(),
                decoded.resources,
                Coverage::default(),
            )),
        };
        let body = self.answer(&pushed, None)?;
        Ok((pushed, body))
    }

    /// The served version of `pushed` as the config history shows an
    /// event of it, worked out again: for a subscription to every name it
    /// holds when `named`, else for a wildcard one.
    pub fn served_version(pushed: &Pushed, named: bool) -> String {
        let names = if named {
            Names::Named(pushed.state.resources.map().keys().cloned().collect())
        } else {
            Names::Wildcard
        };
        pushed.state.served_version(&names, None)
    }

    /// The body a wildcard poll is served from `pushed`, with its config
    /// sources pointed at `target` when one is given (a REST Envoy's poll).
    /// This pipeline's rewrites of earlier answers are reused.
    pub fn answer(&self, pushed: &Pushed, target: Option<&RestTarget>) -> Result<Bytes, String> {
        let answer = pushed
            .state
            .answer(&self.assembler, &Names::Wildcard, "", target);
        match answer.map_err(|e| e.to_string())? {
            Answer::Body { json, .. } => Ok(json.to_bytes()),
            Answer::NotModified { .. } => Err("a 304 to a client holding nothing".into()),
        }
    }
}
