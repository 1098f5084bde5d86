//! The README's walkthrough, run exactly as written against a real server:
//! the shell block between its `<!-- walkthrough -->` markers, in a
//! directory laid out like the repository root (`fixtures/` and
//! `target/release/spacewake` linked in), with the server on
//! `./spacewake-data` as `cargo run --release -- serve` would have it. Only
//! the block's `cargo` lines are skipped (the binary is built already), and
//! the server listens on a free port: the commands find it through the data
//! directory's lock, as they do on a fresh clone.

mod common;

use common::server::Server;
use std::path::Path;
use std::process::Command;

/// The walkthrough's shell block, from the README.
fn walkthrough() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme
        .find("<!-- walkthrough -->")
        .expect("the README marks its walkthrough");
    let end = readme.find("<!-- /walkthrough -->").expect("and its end");
    let block = &readme[start..end];
    let code = block
        .split_once("```sh\n")
        .expect("a sh block")
        .1
        .split_once("```")
        .expect("closed")
        .0;
    code.to_string()
}

#[test]
fn the_readme_walkthrough_runs_as_written_against_a_real_server() {
    let root = tempfile::tempdir().unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::os::unix::fs::symlink(repo.join("fixtures"), root.path().join("fixtures")).unwrap();
    std::fs::create_dir_all(root.path().join("target/release")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_spacewake"),
        root.path().join("target/release/spacewake"),
    )
    .unwrap();
    let server = Server::start(&root.path().join("spacewake-data"), &[]);

    let code = walkthrough();
    let script: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("cargo "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(script.contains("schedules trigger"), "{script}");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{script}"))
        .current_dir(root.path())
        .env_remove("SPACEWAKE_SERVER")
        .env_remove("SPACEWAKE_DATA")
        .env_remove("SPACEWAKE_KEY")
        .env_remove("SPACEWAKE_SPACE")
        .env_remove("SPACEWAKE_OPERATOR_KEY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "the walkthrough failed:\n{stdout}\n{stderr}"
    );
    // What a newcomer sees, in order.
    let expected = [
        "did:key:z",
        "pc-",
        "appended at seq",
        "\n3\n",
        "2 entries in 1 space",
        "(via the running server at",
        "triggered space demo piece",
        "fires within milliseconds",
        "recent fires of space demo",
        " delivered ",
        "\n4\n",
        "space demo: scheduled budget the host default: unlimited",
        "scheduled",
        ": read on demo",
        "\n4\n",
        "refused, as it should be",
    ];
    let mut at = 0;
    for want in expected {
        match stdout[at..].find(want) {
            Some(i) => at += i + want.len(),
            None => panic!("{want:?} not found (in order) in:\n{stdout}\n{stderr}"),
        }
    }
    assert!(
        stderr.contains("forbidden"),
        "the friend may not write: {stderr}"
    );
    // The server agrees.
    assert_eq!(server.space_counter("demo", "schedule", "fired"), 1);
    assert_eq!(server.space_counter("demo", "events", "processed"), 2);
    assert_eq!(server.stats()["spacesRegistered"], 1);
}
