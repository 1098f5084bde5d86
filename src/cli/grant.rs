//! `spacewake grant`: a principal's access to a space. Through the running
//! server when there is one (open sessions learn of it within 100 ms), else
//! on the data directory ([`super::remote`]).

use super::remote::{OperatorArgs, Target};
use crate::operator::{self as op, GrantView};
use serde_json::json;
use std::process::ExitCode;

pub fn run(args: &OperatorArgs, space: &str, did: &str, access: &str) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "grant")?;
    let g: GrantView = match &target {
        Target::Server(r) => r.post(
            &format!("/api/operator/spaces/{space}/grants"),
            &json!({ "did": did, "access": access }),
        )?,
        Target::Directory(l) => op::grant(&l.store, space, did, access)?,
    };
    let level = if g.access == "none" {
        "no access"
    } else {
        g.access.as_str()
    };
    println!("{}: {level} on {}", g.did, g.space);
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}
