//! Protobuf's reference JSON mapping (`tests/support/json_reference.py`:
//! Python `json_format` with the `xds-protos` package), one process per call.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

/// The reference process is killed (and the test fails) past this.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends `requests` (one JSON line each) to json_reference.py and returns
/// its response lines, in order.
pub fn reference(python: &Path, requests: &[serde_json::Value]) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/json_reference.py");
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = thread::spawn(move || stdin.write_all(input.as_bytes()));
    let read_all = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = tx.send(pipe.read_to_string(&mut text).map(|_| text));
        });
        rx
    };
    let stdout = read_all(Box::new(child.stdout.take().unwrap()));
    let stderr = read_all(Box::new(child.stderr.take().unwrap()));

    // Its stdout closes when it exits (or is killed past the deadline).
    let Ok(stdout) = stdout.recv_timeout(PYTHON_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("json_reference.py ran past {PYTHON_TIMEOUT:?}; killed");
    };
    let stdout = stdout.unwrap();
    let status = child.wait().unwrap();
    let stderr = stderr.recv().unwrap().unwrap();
    writer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("writing to python: {e}\n{stderr}"));
    assert!(
        status.success(),
        "json_reference.py failed ({status}):\n{stderr}"
    );
    let responses: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        responses.len(),
        requests.len(),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    responses
}
