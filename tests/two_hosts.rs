//! Two hosts (two real processes) on one data directory contend for one
//! space's lease: at no moment do both hold it.

use std::process::{Command, Stdio};

#[derive(Debug, Clone, Copy)]
struct Held {
    start: u64,
    end: u64,
}

#[test]
fn two_processes_on_one_data_directory_never_hold_a_lease_at_the_same_time() {
    let dir = tempfile::tempdir().unwrap();
    // Create the space first so both contenders race only for the lease.
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_spacewake"))
            .args([
                "debug",
                "lease-contender",
                "--space",
                "shared",
                "--millis",
                "2500",
                "--ttl-ms",
                "200",
                "--data",
            ])
            .arg(dir.path())
            .env("SPACEWAKE_LOG", "error")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn();
    let b = spawn();
    let parse = |out: std::process::Output| -> Vec<Held> {
        assert!(out.status.success(), "contender failed: {out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let mut it = l.strip_prefix("held ")?.split(' ');
                Some(Held {
                    start: it.next()?.parse().ok()?,
                    end: it.next()?.parse().ok()?,
                })
            })
            .collect()
    };
    // A process that re-acquires its own lease starts a new tenure, which
    // ends the previous one: cap each interval at the process's next start.
    let cap = |mut v: Vec<Held>| {
        v.sort_by_key(|h| h.start);
        for i in 1..v.len() {
            v[i - 1].end = v[i - 1].end.min(v[i].start);
        }
        v
    };
    let ha = cap(parse(a.wait_with_output().unwrap()));
    let hb = cap(parse(b.wait_with_output().unwrap()));
    assert!(
        !ha.is_empty() && !hb.is_empty(),
        "both hosts held the lease at some point: {ha:?} {hb:?}"
    );
    for x in &ha {
        for y in &hb {
            let overlap = x.start < y.end && y.start < x.end;
            assert!(!overlap, "both held the lease at once: A {x:?}, B {y:?}");
        }
    }
}
