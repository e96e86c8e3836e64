//! `xds-gateway`: parse the command line, set up logging, run the app.
//! Exit codes: 0 after a clean shutdown, 1 on a start-up or serving error,
//! 2 on a bad command line (clap's).

use anyhow::Context;
use clap::Parser;
use xds_gateway::config::{Config, LogFormat, Settings};

/// mimalloc, not glibc's malloc: a SotW update allocates and frees every
/// resource of every session it reaches, and glibc's malloc spent about a
/// third of the gateway's CPU on it (`malloc_consolidate`, `unlink_chunk`;
/// bench/RESULTS.md, "Issue 13").
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

async fn run() -> anyhow::Result<()> {
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
