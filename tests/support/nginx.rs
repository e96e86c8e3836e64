//! A real nginx (Debian's package) in front of a gateway, started on a free
//! loopback port with `deploy/nginx/xds-gateway-cache.conf` (its gateway
//! address, listen port and cache path replaced) inside a generated
//! `nginx.conf` whose pid, logs and temp paths are all in a temp directory.
//! Killed by pid when dropped (`ChildGuard`).
//!
//! Include it with `#[path = "support/nginx.rs"] mod nginx;` beside
//! `process`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::process::{eventually, free_port, http_get, ChildGuard};

/// The example the test runs, relative to the crate root.
pub const EXAMPLE: &str = "deploy/nginx/xds-gateway-cache.conf";

/// nginx on PATH, else Debian's /usr/sbin/nginx; panics saying how to
/// install it (`scripts/test` does).
pub fn nginx_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()))
        .expect("nginx is not installed: apt-get install -y nginx (scripts/test installs it)")
}

/// A running nginx.
pub struct Nginx {
    pub port: u16,
    _child: ChildGuard,
}

impl Nginx {
    /// Starts nginx in `dir` in front of the gateway on 127.0.0.1:`gateway`
    /// and waits (bounded) until it answers.
    pub async fn start(dir: &Path, gateway: u16) -> Nginx {
        let port = free_port();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let example = std::fs::read_to_string(root.join(EXAMPLE)).expect("read the nginx example");
        let d = dir.display();
        let site = example
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{gateway}"))
            .replace("127.0.0.1:8081", &format!("127.0.0.1:{port}"))
            .replace("/var/cache/nginx/xds-gateway", &format!("{d}/cache"));
        assert_ne!(
            site, example,
            "the example's addresses moved: update this harness"
        );
        std::fs::write(dir.join("site.conf"), site).expect("write site.conf");
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log info;\nevents {{ worker_connections 1024; }}\n\
             http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/client_body;\n\
             proxy_temp_path {d}/proxy_temp;\n  fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  include {d}/site.conf;\n}}\n"
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let log = dir.join("stderr.log");
        let stderr = std::fs::File::create(&log).expect("create nginx's stderr log");
        let child = Command::new(nginx_bin())
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start nginx");
        let mut child = ChildGuard::new("nginx", child).with_log(dir.join("error.log"));
        let up = eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            child.assert_running();
            async move { http_get(port, "/").await.ok() }
        })
        .await;
        assert!(
            up.is_some(),
            "nginx did not answer on 127.0.0.1:{port} within 10 s"
        );
        Nginx {
            port,
            _child: child,
        }
    }
}
