//! Pieces of one space cannot forge, spy or tamper: writes, sends and
//! references outside what an action was given are refused host-side, the
//! engine's intrinsics and the authoring API are frozen, and handler entropy
//! is keyed so a sender cannot choose it. Real store, real engine, real
//! patterns (`fixtures/runtime/`).

mod common;

use common::{fire, runtime_fixture as program};

use serde_json::{json, Value};
use spacewake::metrics::Counter;
use spacewake::runtime::{EntropyKey, RuntimeConfig, SpaceRuntime, PIECES_DOC};
use spacewake::store::path::parse_dotted;
use std::path::Path;

fn raw(rt: &mut SpaceRuntime, doc: &str) -> Value {
    rt.read_doc(doc).unwrap().0.unwrap_or(Value::Null)
}

#[test]
fn writes_sends_and_references_outside_what_was_given_are_refused() {
    let t = common::store();
    let mut rt = t.runtime("forge");
    let victim = rt
        .create_piece(&program("victim.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    let victim_stream = raw(&mut rt, &victim)["add"]["$stream"]
        .as_str()
        .unwrap()
        .to_string();
    // The deployer links `target` at the piece list: a cell that resolves
    // there must still not be writable.
    let forger = rt
        .create_piece(
            &program("forger.tsx"),
            None,
            &json!({"target": {"$link": {"doc": PIECES_DOC, "path": []}}}),
        )
        .unwrap();
    rt.flush().unwrap();
    let pieces_before = raw(&mut rt, PIECES_DOC);
    let victim_arg_before = raw(&mut rt, &format!("{victim}/argument"));
    let refused = |t: &common::TestStore| t.counters.host().get(Counter::ActionsRefused);
    let failed = |t: &common::TestStore| t.counters.host().get(Counter::ActionsFailed);

    // Forged references and streams written as data: refused host-side.
    let doc = format!("{victim}/argument");
    fire(&mut rt, &forger, "forgeLink", "e1", json!({ "doc": doc }));
    assert_eq!(refused(&t), 1);
    fire(
        &mut rt,
        &forger,
        "forgeStream",
        "e2",
        json!({ "stream": victim_stream }),
    );
    assert_eq!(refused(&t), 2);
    // Through a deployer's link to a protected document: refused.
    fire(&mut rt, &forger, "writeTarget", "e3", json!({"value": {}}));
    assert_eq!(refused(&t), 3);
    let errors: Vec<String> = rt.failures().iter().map(|f| f.error.clone()).collect();
    assert!(errors[0].contains("was not given"), "{errors:?}");
    assert!(errors[2].contains("cannot be written"), "{errors:?}");

    // Cell handles are opaque and frozen: retargeting, minting and
    // patching the class all throw inside the handler.
    for (i, path) in ["retarget", "mint", "patchClass"].iter().enumerate() {
        fire(&mut rt, &forger, path, &format!("x{i}"), json!({}));
    }
    assert_eq!(failed(&t), 3, "{:?}", rt.failures());
    assert_eq!(refused(&t), 3);

    // A derivation returning a reference it was not given: refused.
    assert_eq!(
        rt.read(&forger, &parse_dotted("stolen")).unwrap(),
        json!(null)
    );
    assert_eq!(refused(&t), 4);

    // Nothing of any of it applied; the honest handler still works.
    assert_eq!(raw(&mut rt, PIECES_DOC), pieces_before);
    assert_eq!(
        raw(&mut rt, &format!("{victim}/argument")),
        victim_arg_before
    );
    assert_eq!(rt.read(&forger, &parse_dotted("box")).unwrap(), json!(""));
    fire(&mut rt, &forger, "fill", "ok", json!({"value": "honest"}));
    assert_eq!(
        rt.read(&forger, &parse_dotted("box")).unwrap(),
        json!("honest")
    );
    assert_eq!(refused(&t), 4);
    // The victim's stream received nothing from the forger.
    assert_eq!(rt.read(&victim, &parse_dotted("items")).unwrap(), json!([]));
}

#[test]
fn a_cell_linked_to_another_piece_result_or_a_program_is_not_writable() {
    let t = common::store();
    let mut rt = t.runtime("protected");
    let victim = rt
        .create_piece(&program("victim.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    let hash = raw(&mut rt, PIECES_DOC)[&victim]["program"]
        .as_str()
        .unwrap()
        .to_string();
    for (i, doc) in [victim.clone(), format!("program/{hash}")]
        .iter()
        .enumerate()
    {
        let forger = rt
            .create_piece(
                &program("forger.tsx"),
                None,
                &json!({"target": {"$link": {"doc": doc, "path": []}}}),
            )
            .unwrap();
        rt.flush().unwrap();
        let before = raw(&mut rt, doc);
        fire(
            &mut rt,
            &forger,
            "writeTarget",
            &format!("w{i}"),
            json!({"value": {"$SCHEDULE": []}}),
        );
        assert_eq!(raw(&mut rt, doc), before, "{doc}");
    }
    assert_eq!(t.counters.host().get(Counter::ActionsRefused), 2);
}

#[test]
fn a_pattern_body_returning_a_forged_reference_is_refused() {
    let t = common::store();
    let mut rt = t.runtime("body");
    let err = rt
        .create_piece(&program("forged-body.tsx"), None, &json!({}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("refers outside what it was given"), "{err}");
    assert_eq!(t.counters.host().get(Counter::ActionsRefused), 1);
    rt.flush().unwrap();
    assert_eq!(rt.pieces(), Vec::<String>::new(), "nothing was created");
}

#[test]
fn a_piece_sees_and_changes_nothing_of_another_piece() {
    let t = common::store();
    let mut rt = t.runtime("realm");
    let snoop = rt
        .create_piece(&program("snoop.tsx"), None, &json!({}))
        .unwrap();
    let victim = rt
        .create_piece(&program("victim.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    for (i, path) in ["wrapJson", "wrapPush", "leak", "defineGetter"]
        .iter()
        .enumerate()
    {
        fire(&mut rt, &snoop, path, &format!("s{i}"), json!({}));
    }
    // Every tampering attempt threw: the intrinsics and the global object
    // are frozen.
    assert_eq!(
        t.counters.host().get(Counter::ActionsFailed),
        4,
        "{:?}",
        rt.failures()
    );
    let errors: Vec<String> = rt.failures().iter().map(|f| f.error.clone()).collect();
    assert!(errors.iter().all(|e| e.contains("TypeError")), "{errors:?}");
    fire(&mut rt, &victim, "add", "v1", json!({"item": "secret"}));
    fire(&mut rt, &victim, "add", "v2", json!({"item": "another"}));
    assert_eq!(
        rt.read(&victim, &parse_dotted("items")).unwrap(),
        json!(["secret", "another"]),
        "the victim's writes are its own"
    );
    assert_eq!(
        rt.read(&victim, &parse_dotted("globals")).unwrap(),
        json!("undefined"),
        "nothing left on the global object"
    );
    assert_eq!(
        rt.read(&snoop, &parse_dotted("seen")).unwrap(),
        json!([]),
        "the snoop saw nothing"
    );
}

#[test]
fn pieces_of_one_program_share_no_module_state() {
    let t = common::store();
    let mut rt = t.runtime("neighbours");
    let alice = rt
        .create_piece(&program("neighbour.tsx"), None, &json!({}))
        .unwrap();
    let mallory = rt
        .create_piece(&program("neighbour.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    let found =
        |rt: &mut SpaceRuntime, piece: &str| rt.read(piece, &parse_dotted("found")).unwrap();
    fire(
        &mut rt,
        &alice,
        "note",
        "a1",
        json!({"value": "alice-secret"}),
    );
    assert_eq!(found(&mut rt, &alice), json!(["notes:1"]));
    // Mallory's piece runs the same code: it finds neither alice's counter
    // nor her entry in the imported module's memo table.
    fire(&mut rt, &mallory, "note", "m1", json!({"value": "poison"}));
    assert_eq!(found(&mut rt, &mallory), json!(["notes:1"]));
    // And alice's state is hers, untouched by mallory's.
    fire(&mut rt, &alice, "note", "a2", json!({"value": "again"}));
    assert_eq!(
        found(&mut rt, &alice),
        json!(["notes:2", "last=alice-secret"])
    );
    rt.flush().unwrap();
    rt.stop().unwrap();
    // Next tenure: module state lived for the tenure only, and each piece
    // is instantiated apart again.
    let mut rt = t.runtime("neighbours");
    fire(
        &mut rt,
        &mallory,
        "note",
        "m2",
        json!({"value": "poison-2"}),
    );
    fire(&mut rt, &alice, "note", "a3", json!({"value": "third"}));
    assert_eq!(found(&mut rt, &alice), json!(["notes:1"]));
    assert_eq!(found(&mut rt, &mallory), json!(["notes:1"]));
    assert_eq!(t.counters.host().get(Counter::ActionsFailed), 0);
}

#[test]
fn pieces_a_piece_makes_share_its_module_state_and_no_one_else_does() {
    let t = common::store();
    let mut rt = t.runtime("family");
    let parent = rt
        .create_piece(&program("family.tsx"), None, &json!({}))
        .unwrap();
    let stranger = rt
        .create_piece(&program("family.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    let at = |rt: &mut SpaceRuntime, piece: &str, path: &str| {
        rt.read(piece, &parse_dotted(path)).unwrap()
    };
    fire(&mut rt, &parent, "note", "p1", json!({}));
    assert_eq!(at(&mut rt, &parent, "count"), json!(1));
    fire(&mut rt, &parent, "spawn", "p2", json!({}));
    let child = rt
        .pieces()
        .into_iter()
        .find(|p| *p != parent && *p != stranger)
        .expect("the spawned piece");
    // The child runs its maker's code in its maker's instance.
    fire(&mut rt, &child, "look", "c1", json!({}));
    assert_eq!(at(&mut rt, &child, "seen"), json!(2));
    // The other deployment of the program counts on its own.
    fire(&mut rt, &stranger, "note", "s1", json!({}));
    assert_eq!(at(&mut rt, &stranger, "count"), json!(1));
    rt.flush().unwrap();
    rt.stop().unwrap();
    // Next tenure: the family is found again from the piece list.
    let mut rt = t.runtime("family");
    fire(&mut rt, &child, "look", "c2", json!({}));
    fire(&mut rt, &parent, "note", "p3", json!({}));
    fire(&mut rt, &stranger, "note", "s2", json!({}));
    assert_eq!(at(&mut rt, &child, "seen"), json!(1));
    assert_eq!(at(&mut rt, &parent, "count"), json!(2));
    assert_eq!(at(&mut rt, &stranger, "count"), json!(1));
}

fn roll(t: &common::TestStore, space: &str, key: [u8; 32], event_id: &str) -> f64 {
    let cfg = RuntimeConfig {
        entropy_key: EntropyKey(key),
        ..RuntimeConfig::default()
    };
    let mut rt = t.runtime_with(space, cfg);
    let piece = match rt.pieces().first() {
        Some(p) => p.clone(),
        None => {
            let p = rt
                .create_piece(&program("dice.tsx"), None, &json!({}))
                .unwrap();
            rt.flush().unwrap();
            p
        }
    };
    fire(&mut rt, &piece, "roll", event_id, json!({}));
    let rolls = rt.read(&piece, &parse_dotted("rolls")).unwrap();
    rt.stop().unwrap();
    rolls.as_array().unwrap().last().unwrap().as_f64().unwrap()
}

#[test]
fn handler_entropy_is_keyed_and_reproducible() {
    let key = [7; 32];
    let t = common::store();
    let a = roll(&t, "space-a", key, "e1");
    let b = roll(&t, "space-b", key, "e1");
    assert_ne!(a, b, "the same event id draws differently in two spaces");
    // The same event in the same space under the same key (a replay after a
    // crash is exactly this computation) draws the same.
    let again = common::store();
    assert_eq!(roll(&again, "space-a", key, "e1"), a);
    // Without the key the draw cannot be predicted: another key differs.
    let other = common::store();
    assert_ne!(roll(&other, "space-a", [8; 32], "e1"), a);
}

#[test]
fn a_scheduled_pattern_instantiated_inside_another_is_refused_by_the_compiler() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/invalid/schedule-nested.tsx");
    let diags = spacewake::check::compile_file(&path).unwrap_err();
    assert_eq!(diags.len(), 1, "{}", spacewake::compiler::render(&diags));
    assert_eq!(diags[0].code, "SCHEDULE_NESTED");
    // Through an import too.
    let mut src = spacewake::compiler::MemorySource::new();
    src.insert(
        "ticker.tsx",
        "import { pattern, handler, SCHEDULE, Cell, Default } from \"commonfabric\";\n\
         const tick = handler<{}, { n: Cell<number> }>((_e, { n }) => { n.set(1); });\n\
         export const Ticker = pattern<{ n: Default<number, 0> }>(({ n }) => ({\n\
           n, [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ n }) }],\n\
         }));\n",
    );
    src.insert(
        "main.tsx",
        "import { pattern } from \"commonfabric\";\n\
         import { Ticker } from \"./ticker.tsx\";\n\
         export default pattern<{}>(() => ({ inner: <Ticker /> }));\n",
    );
    let diags = spacewake::compiler::compile("main.tsx", &src).unwrap_err();
    assert_eq!(diags.len(), 1, "{}", spacewake::compiler::render(&diags));
    assert_eq!(
        (diags[0].code, diags[0].file.as_str(), diags[0].line),
        ("SCHEDULE_NESTED", "main.tsx", 3)
    );
    // Deployed as a piece of its own, the same pattern is fine.
    assert!(spacewake::compiler::compile("ticker.tsx", &src).is_ok());
}

/// Deploys a fixture of `fixtures/runtime/` over the wire; its piece.
async fn deploy_fixture(
    c: &mut spacewake::protocol::client::Client,
    name: &str,
    argument: Value,
) -> String {
    match common::wire::deploy_runtime_fixture(c, name, argument).await {
        spacewake::protocol::ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_refuses_and_counts_forged_writes_and_keeps_pieces_apart() {
    use common::server::{wait_for, Server};
    use common::wire::{connect, send};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = spacewake::protocol::Identity::generate();
    let (mut c, _) = connect(&server, &me, "shared").await;
    let victim = deploy_fixture(&mut c, "victim.tsx", json!({})).await;
    let forger = deploy_fixture(
        &mut c,
        "forger.tsx",
        json!({"target": {"$link": {"doc": PIECES_DOC, "path": []}}}),
    )
    .await;
    let snoop = deploy_fixture(&mut c, "snoop.tsx", json!({})).await;
    let doc = format!("{victim}/argument");
    send(&mut c, &forger, "forgeLink", json!({ "doc": doc })).await;
    send(&mut c, &forger, "writeTarget", json!({"value": {}})).await;
    send(&mut c, &snoop, "wrapJson", json!({})).await;
    send(&mut c, &snoop, "leak", json!({})).await;
    send(&mut c, &victim, "add", json!({"item": "secret"})).await;
    wait_for("the refusals counted", || {
        server.space_counter("shared", "actions", "refused") == 2
            && server.space_counter("shared", "actions", "failed") == 2
            && server.space_counter("shared", "actions", "handlerRuns") == 5
    });
    assert_eq!(server.host_counter("actions", "refused"), 2);
    // What the victim holds is its own; the snoop saw nothing.
    let items = read_path(&mut c, &victim, "items").await;
    assert_eq!(items, json!(["secret"]));
    assert_eq!(
        read_path(&mut c, &victim, "globals").await,
        json!("undefined")
    );
    assert_eq!(read_path(&mut c, &snoop, "seen").await, json!([]));
    assert_eq!(read_path(&mut c, &forger, "box").await, json!(""));
}

async fn read_path(c: &mut spacewake::protocol::client::Client, piece: &str, path: &str) -> Value {
    use spacewake::protocol::messages::ReadValue;
    use spacewake::protocol::{ClientMessage, ServerMessage};
    let id = c.fresh_id();
    match c
        .request(ClientMessage::Read(ReadValue {
            id,
            piece: Some(piece.into()),
            doc: None,
            path: Some(common::wire::key(path)),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Value(v) => v.value,
        other => panic!("read: {other:?}"),
    }
}

#[test]
fn a_schedule_the_compiler_did_not_validate_is_never_indexed() {
    let t = common::store();
    indexed(&t);
    let mut rt = t.runtime("forged-schedule");
    let piece = rt
        .create_piece(&program("forged-schedule.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    assert_eq!(rt.space().schedule_count().unwrap(), 0);
    assert!(raw(&mut rt, &piece).get("$SCHEDULE").is_none());
    assert_eq!(t.counters.host().get(Counter::ScheduleUnvalidated), 1);
    // A validated declaration is indexed as before.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/schedule-two.tsx");
    let validated = spacewake::check::compile_file(&path).unwrap();
    rt.create_piece(&validated, None, &json!({})).unwrap();
    rt.flush().unwrap();
    assert_eq!(rt.space().schedule_count().unwrap(), 2);
    assert_eq!(t.counters.host().get(Counter::ScheduleUnvalidated), 1);
}

#[test]
fn a_new_piece_whose_schedule_entry_is_no_stream_is_refused_and_nothing_stored() {
    let t = common::store();
    indexed(&t);
    let mut rt = t.runtime("unbound-schedule");
    let err = rt
        .create_piece(&program("unbound-schedule.tsx"), None, &json!({"count": 0}))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[SCHEDULE] entry 0 could never fire"), "{err}");
    rt.flush().unwrap();
    assert_eq!(rt.space().schedule_count().unwrap(), 0);
    assert!(rt.pieces().is_empty());
    assert_eq!(t.counters.host().get(Counter::ScheduleRefusedEntries), 1);
}

/// Registers the schedule index hook, as a host does.
fn indexed(t: &common::TestStore) {
    use spacewake::schedule::{Jitter, ScheduleIndexHook};
    t.store
        .add_hook(std::sync::Arc::new(ScheduleIndexHook::new(Jitter::keyed(
            [1; 32],
        ))));
}

/// Tenure after tenure of different spaces on one thread, each on the
/// engine the previous one used (restored to its start-up heap image):
/// every tenant tampers with what it can reach and stashes its secret, and
/// none ever finds another's. Within a tenure the probe does find its own
/// module state, so finding nothing is not a blind probe.
#[test]
fn tenants_of_a_reused_engine_never_observe_each_other() {
    let t = common::store();
    let reused_before = t.counters.host().get(Counter::EngineImagesReused);
    let tenure = |space: &str, round: usize| {
        let mut rt = t.runtime(space);
        let piece = if round == 0 {
            let p = rt
                .create_piece(&program("tenant.tsx"), None, &json!({}))
                .unwrap();
            rt.flush().unwrap();
            p
        } else {
            rt.pieces()[0].clone()
        };
        let secret = format!("{space}-{round}");
        let a = format!("{secret}-a");
        fire(&mut rt, &piece, "probe", &a, json!({ "secret": a }));
        let first = rt.read(&piece, &parse_dotted("seen")).unwrap();
        let b = format!("{secret}-b");
        fire(&mut rt, &piece, "probe", &b, json!({ "secret": b }));
        let second = rt.read(&piece, &parse_dotted("seen")).unwrap();
        rt.flush().unwrap();
        rt.stop().unwrap();
        (first, second, secret)
    };
    for round in 0..2 {
        for space in ["tenant-a", "tenant-b", "tenant-c"] {
            let (first, second, secret) = tenure(space, round);
            assert_eq!(first, json!([]), "{space} round {round} found {first}");
            assert_eq!(
                second,
                json!([format!("module:{secret}-a"), format!("bag:{secret}-a")]),
                "within a tenure the module state is the tenant's own"
            );
        }
    }
    let reused = t.counters.host().get(Counter::EngineImagesReused) - reused_before;
    assert!(
        reused >= 5,
        "every tenure after the first reused the engine ({reused})"
    );
}
