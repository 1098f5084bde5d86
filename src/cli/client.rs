//! CLI commands that talk to a running server as a WebSocket client:
//! `deploy`, `send`, `read`, and `identity` (the key they sign with).

use super::ClientArgs;
use crate::protocol::client::Client;
use crate::protocol::messages::{Deploy, ReadValue, SendEvent};
use crate::protocol::{ClientMessage, Identity, PathSegment, RequestId, ServerMessage};
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// Loads the client's identity, creating the key file on first use.
pub fn load_identity(path: &Path) -> anyhow::Result<Identity> {
    let (id, created) =
        Identity::load_or_create(path).with_context(|| format!("the key {}", path.display()))?;
    if created {
        eprintln!("created a new identity in {}", path.display());
    }
    Ok(id)
}

pub fn identity(c: &ClientArgs) -> anyhow::Result<ExitCode> {
    println!("{}", load_identity(&c.key)?.did());
    Ok(ExitCode::SUCCESS)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Opens a session on `c.space`; `create`: create the space (owned by this
/// identity) if it does not exist — only a deploy does, and only a deploy
/// makes a key file on first use (a new identity can read or send nowhere
/// until an owner grants it access).
async fn connect(c: &ClientArgs, create: bool) -> anyhow::Result<Client> {
    let id = if create || c.key.exists() {
        load_identity(&c.key)?
    } else {
        bail!(
            "there is no key at {}; `spacewake identity --key {}` makes one, and the space's \
             owner then grants its did access with `spacewake grant`",
            c.key.display(),
            c.key.display()
        );
    };
    let url = format!("ws://{}/ws", c.server_addr()?);
    let opts = crate::protocol::client::OpenOptions {
        create,
        ..Default::default()
    };
    match Client::connect_with(&url, &id, &c.space, opts).await {
        Ok((client, _)) => Ok(client),
        // In the CLI's words, not the protocol's.
        Err(crate::protocol::client::ClientError::Refused(e))
            if e.code == crate::protocol::messages::ErrorCode::UnknownSpace =>
        {
            bail!(
                "space {} does not exist on {}; create it with `spacewake spaces create --space {}` \
                 (a `spacewake deploy` into it creates it too)",
                c.space,
                c.server_addr()?,
                c.space
            )
        }
        Err(e) => Err(e).with_context(|| format!("opening space {} on {url}", c.space)),
    }
}

fn segments(dotted: &str) -> Vec<PathSegment> {
    crate::store::path::parse_dotted(dotted)
        .into_iter()
        .map(|s| match s {
            crate::store::PathSeg::Key(k) => PathSegment::Key(k),
            crate::store::PathSeg::Index(i) => PathSegment::Index(i as u64),
        })
        .collect()
}

/// Opens a session (`create`: creating the space) and sends the one
/// request `build` makes with a fresh id; returns the reply.
fn one_request(
    c: &ClientArgs,
    create: bool,
    build: impl FnOnce(RequestId) -> ClientMessage,
) -> anyhow::Result<ServerMessage> {
    runtime()?.block_on(async {
        let mut client = connect(c, create).await?;
        let id = client.fresh_id();
        Ok(client.request(build(id)).await?)
    })
}

fn fail(reply: ServerMessage) -> anyhow::Result<ExitCode> {
    match reply {
        ServerMessage::Error(e) => {
            eprintln!("error[{}]: {}", e.code.as_str(), e.message);
            if let Some(d) = e.details.and_then(|d| d.get("diagnostics").cloned()) {
                eprint!("{}", d.as_str().unwrap_or_default());
            }
            Ok(ExitCode::FAILURE)
        }
        other => bail!("unexpected reply: {}", other.to_text()),
    }
}

pub fn deploy(
    c: &ClientArgs,
    file: &Path,
    export: Option<String>,
    argument: &str,
) -> anyhow::Result<ExitCode> {
    let argument: serde_json::Value =
        serde_json::from_str(argument).context("--argument must be JSON")?;
    // Compile locally first: it finds the pattern's own imports and reports
    // problems without a round trip.
    let program = match crate::check::compile_file(file) {
        Ok(p) => p,
        Err(d) => {
            eprint!("{}", crate::compiler::render(&d));
            return Ok(ExitCode::FAILURE);
        }
    };
    // The program's modules and the data files it attaches (`dataFile`).
    let files: BTreeMap<String, String> = program
        .modules
        .iter()
        .map(|m| (m.name.as_str(), m.source.as_str()))
        .chain(
            program
                .data_files
                .iter()
                .map(|d| (d.name.as_str(), d.text.as_str())),
        )
        .map(|(name, text)| (name.trim_start_matches("./").to_string(), text.to_string()))
        .collect();
    let entry = program.entry().name.trim_start_matches("./").to_string();
    let reply = one_request(c, true, |id| {
        ClientMessage::Deploy(Deploy {
            id,
            entry,
            files,
            export,
            argument: Some(argument),
        })
    })?;
    match reply {
        ServerMessage::Deployed(d) => {
            println!("{}", d.piece);
            Ok(ExitCode::SUCCESS)
        }
        other => fail(other),
    }
}

pub fn send(
    c: &ClientArgs,
    piece: &str,
    stream: &str,
    payload: &str,
    event_id: Option<String>,
) -> anyhow::Result<ExitCode> {
    let payload: serde_json::Value =
        serde_json::from_str(payload).context("--payload must be JSON")?;
    let reply = one_request(c, false, |id| {
        ClientMessage::Send(SendEvent {
            id,
            piece: piece.to_string(),
            stream: segments(stream),
            payload,
            event_id,
        })
    })?;
    match reply {
        ServerMessage::Ack(a) => {
            let seq = a.seq.unwrap_or(0);
            if a.duplicate == Some(true) {
                println!(
                    "duplicate of seq {seq} (this event id was already sent; nothing appended)"
                );
            } else {
                println!("appended at seq {seq}");
            }
            Ok(ExitCode::SUCCESS)
        }
        other => fail(other),
    }
}

pub fn read(c: &ClientArgs, piece: &str, path: &str) -> anyhow::Result<ExitCode> {
    let reply = one_request(c, false, |id| {
        ClientMessage::Read(ReadValue {
            id,
            piece: Some(piece.to_string()),
            doc: None,
            path: Some(segments(path)),
        })
    })?;
    match reply {
        ServerMessage::Value(v) => {
            println!("{}", serde_json::to_string_pretty(&v.value)?);
            Ok(ExitCode::SUCCESS)
        }
        other => fail(other),
    }
}
