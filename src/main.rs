//! `xds-gateway`: parse the command line, set up logging, run the app; or,
//! as `xds-gateway descriptors ...`, write the descriptors an upstream
//! serves by gRPC server reflection to a file for `--descriptor-set`.
//! Exit codes: 0 after a clean shutdown (or a file written), 1 on a
//! start-up, serving or reflection error, 2 on a bad command line (clap's).

use anyhow::Context;
use clap::Parser;
use xds_gateway::config::{Config, LogFormat, Settings};

/// mimalloc, not glibc's malloc: a SotW update allocates and frees every
/// resource of every session it reaches, and glibc's malloc spends much of the
/// gateway's CPU on that (`malloc_consolidate`, `unlink_chunk`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    xds_gateway::app::transparent_huge_pages_off();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The whole cause chain on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// `xds-gateway descriptors`: asks an upstream, by gRPC server reflection,
/// for the files that define the types named, and writes those that
/// Envoy's API lacks as one FileDescriptorSet: what `--descriptor-set`
/// reads, for an upstream that serves no reflection in production.
#[derive(Debug, clap::Parser)]
#[command(name = "xds-gateway descriptors")]
struct DescriptorsArgs {
    /// The control plane, as `--upstream` takes it (grpc://HOST:PORT, grpcs://, http://, https://).
    #[arg(long)]
    upstream: String,
    /// A type to ask for: a message name or a type URL, as `/readyz` names one (repeatable).
    #[arg(long = "type", required = true)]
    types: Vec<String>,
    /// Where to write the FileDescriptorSet.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Metadata sent on the call, as `name: value` (repeatable).
    #[arg(long = "upstream-header")]
    headers: Vec<String>,
    /// CA bundle to verify the upstream with (TLS).
    #[arg(long)]
    upstream_ca: Option<std::path::PathBuf>,
    /// Client certificate (mTLS).
    #[arg(long)]
    upstream_cert: Option<std::path::PathBuf>,
    /// Client key (mTLS).
    #[arg(long)]
    upstream_key: Option<std::path::PathBuf>,
    /// Server name to verify in the upstream's certificate.
    #[arg(long)]
    upstream_tls_server_name: Option<String>,
}

async fn descriptors(args: DescriptorsArgs) -> anyhow::Result<()> {
    let spec = xds_gateway::config::UpstreamSpec::for_command(
        &args.upstream,
        xds_gateway::config::UpstreamTls {
            ca: args.upstream_ca,
            cert: args.upstream_cert,
            key: args.upstream_key,
            server_name: args.upstream_tls_server_name,
        },
        args.headers,
    )?;
    let (set, files) = xds_gateway::app::descriptor_set(&spec, &args.types).await?;
    std::fs::write(&args.out, set).with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "wrote {files} descriptor files to {}: start the gateway with --descriptor-set {}",
        args.out.display(),
        args.out.display()
    );
    Ok(())
}

async fn run() -> anyhow::Result<()> {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|first| first == "descriptors") {
        let rest = std::iter::once(std::ffi::OsString::from("xds-gateway descriptors"))
            .chain(std::env::args_os().skip(2));
        return descriptors(DescriptorsArgs::parse_from(rest)).await;
    }
    let config = Config::from_settings(Settings::parse())?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().init(),
    }
    let (listen, admin_addr) = (config.listen, config.admin);
    // Bound once the gateway can serve (see `app::prepare`): until then a
    // balancer's connection is refused, not held.
    let prepared = xds_gateway::app::prepare(config)?;
    let listener = xds_gateway::app::bind_listener(listen)
        .with_context(|| format!("binding the REST listener {listen}"))?;
    let admin = xds_gateway::app::bind_listener(admin_addr)
        .with_context(|| format!("binding the admin listener {admin_addr}"))?;
    prepared.serve(listener, admin, shutdown_signal()).await?;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
