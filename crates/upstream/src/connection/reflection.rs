//! gRPC server reflection toward the upstream: the descriptor files that
//! define one symbol, and the files they depend on ([`files_defining`]).
//!
//! It asks `grpc.reflection.v1.ServerReflection` first and, where that is
//! UNIMPLEMENTED, `v1alpha` (the two are the same messages on the wire), on
//! the upstream's own channel with its metadata (credentials). One
//! `file_containing_symbol` request; grpc-go answers with the file and its
//! transitive dependencies, and a dependency that is missing from the answer
//! and from the pool is asked for by `file_by_filename` on the same stream.
//! Every answer is bounded by what the pool admits (`xds::learned`'s
//! `MAX_BYTES` and `MAX_FILES`) and by [`REFLECTION_WAIT`];
//! what the files say is checked when they join the pool
//! (`xds::learned`), not here.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use prost::Message as _;
use prost_types::FileDescriptorProto;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic_reflection::pb::v1::{
    server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    ServerReflectionRequest, ServerReflectionResponse,
};

use super::UpstreamContext;
use crate::xds::learned::{MAX_BYTES, MAX_FILES};

/// The reflection methods, newest first.
const METHODS: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];
/// How long one symbol's exchange may take, all of it.
pub(crate) const REFLECTION_WAIT: Duration = Duration::from_secs(10);

/// Why the upstream gave no descriptors for a symbol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReflectionError {
    #[error("the upstream does not serve gRPC server reflection")]
    NotServed,
    #[error("reflection failed: {0}")]
    Failed(String),
    #[error("the upstream could not be reached: {0}")]
    Unreachable(String),
    #[error("the upstream's reflection does not know {symbol}: {message}")]
    Unknown { symbol: String, message: String },
    #[error("reflection sent more than {MAX_FILES} files or {MAX_BYTES} bytes")]
    TooMuch,
    #[error("reflection took longer than {REFLECTION_WAIT:?}")]
    TimedOut,
}

/// The serialized `FileDescriptorProto`s that define `symbol` and those
/// it depends on that the upstream sent or that `known` (a file name the
/// pool has) says are needed, as the upstream sent them.
pub(crate) async fn files_defining(
    ctx: &UpstreamContext,
    symbol: &str,
    known: impl Fn(&str) -> bool,
) -> Result<Vec<Vec<u8>>, ReflectionError> {
    let exchange = async {
        for method in METHODS {
            match exchange(ctx, method, symbol, &known).await {
                Err(ReflectionError::NotServed) => {}
                other => return other,
            }
        }
        Err(ReflectionError::NotServed)
    };
    tokio::time::timeout(REFLECTION_WAIT, exchange)
        .await
        .unwrap_or(Err(ReflectionError::TimedOut))
}

/// One reflection stream on `method`: the symbol's files, then each
/// missing dependency by name.
async fn exchange(
    ctx: &UpstreamContext,
    method: &str,
    symbol: &str,
    known: &impl Fn(&str) -> bool,
) -> Result<Vec<Vec<u8>>, ReflectionError> {
    let (tx, rx) = mpsc::channel::<ServerReflectionRequest>(4);
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    // The receiver is held by the call: a send fails only once it ended,
    // which the next read reports.
    let _ = tx
        .send(ask(MessageRequest::FileContainingSymbol(symbol.to_owned())))
        .await;
    let mut inbound = ctx
        .streaming::<_, ServerReflectionResponse>(method, ReceiverStream::new(rx))
        .await
        .map_err(classify)?;
    let mut files: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    let mut have: BTreeSet<String> = BTreeSet::new();
    let mut wanted: VecDeque<String> = VecDeque::new();
    let mut asked: BTreeSet<String> = BTreeSet::new();
    let ended = || ReflectionError::Failed("the stream ended early".into());
    loop {
        let response = inbound
            .message()
            .await
            .map_err(classify)?
            .ok_or_else(ended)?;
        match response.message_response {
            Some(MessageResponse::FileDescriptorResponse(answer)) => {
                for raw in answer.file_descriptor_proto {
                    bytes += raw.len();
                    if files.len() >= MAX_FILES || bytes > MAX_BYTES {
                        return Err(ReflectionError::TooMuch);
                    }
                    // Undecodable bytes are kept: the pool refuses them
                    // with the reason.
                    if let Ok(file) = FileDescriptorProto::decode(raw.as_slice()) {
                        have.insert(file.name().to_owned());
                        wanted.extend(file.dependency);
                    }
                    files.push(raw);
                }
            }
            Some(MessageResponse::ErrorResponse(error)) if asked.is_empty() => {
                return Err(ReflectionError::Unknown {
                    symbol: symbol.to_owned(),
                    message: error.error_message,
                });
            }
            // A dependency the upstream does not have: the pool says
            // which when the files are admitted.
            Some(MessageResponse::ErrorResponse(_)) => {}
            _ => return Err(ReflectionError::Failed("an answer of another kind".into())),
        }
        let next = std::iter::from_fn(|| wanted.pop_front())
            .find(|name| !have.contains(name) && !known(name) && !asked.contains(name));
        let Some(name) = next else {
            return Ok(files);
        };
        if asked.len() >= MAX_FILES {
            return Err(ReflectionError::TooMuch);
        }
        asked.insert(name.clone());
        tx.send(ask(MessageRequest::FileByFilename(name)))
            .await
            .map_err(|_| ended())?;
    }
}

fn classify(status: tonic::Status) -> ReflectionError {
    match status.code() {
        Code::Unimplemented => ReflectionError::NotServed,
        Code::Unavailable => ReflectionError::Unreachable(status.message().to_owned()),
        _ => ReflectionError::Failed(format!("{}: {}", status.code(), status.message())),
    }
}
