//! The reactive runtime on a real store and the real QuickJS sandbox:
//! laziness, persistence of freshness across activations, and the sandbox's
//! bounds as seen through pieces.

mod common;

use common::runtime_fixture as program;

use serde_json::json;
use spacewake::clock::Clock;
use spacewake::metrics::Counter;
use spacewake::runtime::SpaceRuntime;
use spacewake::store::path::parse_dotted;
use spacewake::store::Author;

fn start(t: &common::TestStore, space: &str) -> SpaceRuntime {
    t.runtime(space)
}

fn runs(rt: &SpaceRuntime, piece: &str, label: &str) -> u64 {
    rt.nodes(piece)
        .iter()
        .filter(|n| n.label == label)
        .map(|n| n.runs)
        .sum()
}

fn user() -> Author {
    Author::principal("did:key:user")
}

#[test]
fn an_undemanded_derivation_never_runs_until_it_is_demanded() {
    let t = common::store();
    let mut rt = start(&t, "lazy");
    let piece = rt
        .create_piece(&program("lazy.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    assert_eq!(
        runs(&rt, &piece, "doubled"),
        0,
        "instantiation computes nothing"
    );
    assert_eq!(runs(&rt, &piece, "expensiveLabel"), 0);

    rt.demand(&piece, &parse_dotted("doubled"));
    rt.run_wave().unwrap();
    assert_eq!(runs(&rt, &piece, "doubled"), 1);
    assert_eq!(
        runs(&rt, &piece, "expensiveLabel"),
        0,
        "the [UI] derivation stays dirty"
    );
    assert_eq!(t.counters.host().get(Counter::DerivationRuns), 1);

    rt.demand(&piece, &parse_dotted("$UI"));
    rt.run_wave().unwrap();
    assert_eq!(
        runs(&rt, &piece, "expensiveLabel"),
        1,
        "demanded once, ran once"
    );
    rt.run_wave().unwrap();
    assert_eq!(runs(&rt, &piece, "expensiveLabel"), 1, "fresh: not re-run");
    assert_eq!(
        rt.read(&piece, &parse_dotted("$UI.children.0.children.0"))
            .unwrap(),
        json!("value is 1 (2997)")
    );

    // An event changes the input: both demanded derivations run again, once.
    rt.send(
        &piece,
        &parse_dotted("bump"),
        "e1",
        json!({"by": 4}),
        &user(),
    )
    .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(
        rt.read(&piece, &parse_dotted("doubled")).unwrap(),
        json!(10)
    );
    assert_eq!(runs(&rt, &piece, "doubled"), 2);
    assert_eq!(runs(&rt, &piece, "expensiveLabel"), 2);
}

#[test]
fn reactivating_a_space_does_not_recompute_derivations_whose_inputs_did_not_change() {
    let t = common::store();
    let mut rt = start(&t, "warm");
    let piece = rt
        .create_piece(&program("lazy.tsx"), None, &json!({"value": 3}))
        .unwrap();
    rt.demand(&piece, &parse_dotted("doubled"));
    rt.demand(&piece, &parse_dotted("$UI"));
    rt.run_wave().unwrap();
    assert_eq!(t.counters.host().get(Counter::DerivationRuns), 2);
    rt.stop().unwrap(); // park: the runtime and its sandbox are gone

    let mut rt = start(&t, "warm");
    assert_eq!(rt.pieces(), vec![piece.clone()]);
    rt.demand(&piece, &parse_dotted("doubled"));
    rt.demand(&piece, &parse_dotted("$UI"));
    rt.run_wave().unwrap();
    assert_eq!(
        t.counters.host().get(Counter::DerivationRuns),
        2,
        "nothing re-ran"
    );
    assert_eq!(t.counters.host().get(Counter::DerivationsSkippedFresh), 2);
    assert_eq!(rt.read(&piece, &parse_dotted("doubled")).unwrap(), json!(6));

    rt.send(&piece, &parse_dotted("bump"), "e1", json!({}), &user())
        .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(rt.read(&piece, &parse_dotted("doubled")).unwrap(), json!(8));
    assert_eq!(t.counters.host().get(Counter::DerivationRuns), 4);
}

#[test]
fn a_runaway_handler_is_preempted_its_writes_discarded_and_the_next_event_served() {
    let t = common::store();
    let mut rt = start(&t, "bad");
    let piece = rt
        .create_piece(&program("misbehaving.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    for (i, stream) in ["spin", "inc", "bomb", "inc", "boom", "inc"]
        .iter()
        .enumerate()
    {
        rt.send(
            &piece,
            &parse_dotted(stream),
            &format!("e{i}"),
            json!({}),
            &user(),
        )
        .unwrap();
    }
    rt.settle(10).unwrap();
    assert_eq!(
        rt.read(&piece, &parse_dotted("count")).unwrap(),
        json!(3),
        "only the three incs wrote"
    );
    let c = t.counters.host();
    assert_eq!(
        c.get(Counter::ActionsPreempted),
        1,
        "while(true) was preempted"
    );
    assert_eq!(
        c.get(Counter::ActionsOutOfMemory),
        1,
        "the allocation bomb hit the memory limit"
    );
    assert_eq!(
        c.get(Counter::ActionsFailed),
        1,
        "the throwing handler was reported"
    );
    assert_eq!(c.get(Counter::HandlerRuns), 6);
    assert_eq!(
        c.get(Counter::EventsProcessed),
        6,
        "failed events are consumed, not retried forever"
    );
    let failures = rt.failures();
    assert!(
        failures.iter().any(|f| f.error.contains("handler blew up")),
        "{failures:?}"
    );
    let mut space = rt.stop().unwrap();
    assert!(!space.has_undelivered().unwrap());
}

#[test]
fn reactive_code_is_denied_the_clock_and_entropy_while_handlers_get_the_event_time() {
    let t = common::store();
    let mut rt = start(&t, "caps");
    let piece = rt
        .create_piece(&program("misbehaving.tsx"), None, &json!({}))
        .unwrap();
    for path in ["clock", "random", "newDate"] {
        assert_eq!(
            rt.read(&piece, &parse_dotted(path)).unwrap(),
            json!(null),
            "{path}"
        );
    }
    assert_eq!(t.counters.host().get(Counter::ActionsCapabilityDenied), 3);
    let errors: Vec<_> = rt.failures().iter().map(|f| f.error.clone()).collect();
    assert!(errors.iter().any(|e| e.contains("Date.now")), "{errors:?}");
    assert!(
        errors.iter().any(|e| e.contains("Math.random")),
        "{errors:?}"
    );
    assert_eq!(
        rt.read(&piece, &parse_dotted("fixed")).unwrap(),
        json!("1970-01-02T00:00:00.000Z")
    );

    t.clock.advance_ms(1_234);
    let sent_at = t.clock.now_ms();
    rt.send(&piece, &parse_dotted("stamp"), "s1", json!({}), &user())
        .unwrap();
    t.clock.advance_ms(9_000); // the handler runs later (within the lease TTL); it sees the event time
    rt.settle(10).unwrap();
    assert_eq!(
        rt.read(&piece, &parse_dotted("stamped")).unwrap(),
        json!(sent_at / 1000 * 1000)
    );
    assert_eq!(
        rt.read(&piece, &parse_dotted("rolled")).unwrap(),
        json!(true)
    );
}

#[test]
fn lowered_expressions_are_lazy_derivations_recomputed_only_when_an_input_changed() {
    let t = common::store();
    let derivations = || t.counters.host().get(Counter::DerivationRuns);
    let mut rt = start(&t, "lowered");
    let piece = rt
        .create_piece(&program("lowered.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    assert_eq!(derivations(), 0, "instantiation computes nothing");

    assert_eq!(rt.read(&piece, &parse_dotted("doubled")).unwrap(), json!(2));
    assert_eq!(derivations(), 1, "only what was read ran");
    assert_eq!(rt.read(&piece, &parse_dotted("doubled")).unwrap(), json!(2));
    assert_eq!(derivations(), 1, "fresh: not re-run");

    // A write to an input the node does not read leaves it fresh.
    rt.send(
        &piece,
        &parse_dotted("rename"),
        "e1",
        json!({"name": "b"}),
        &user(),
    )
    .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(rt.read(&piece, &parse_dotted("doubled")).unwrap(), json!(2));
    assert_eq!(derivations(), 1);
    assert_eq!(
        rt.read(&piece, &parse_dotted("greeting")).unwrap(),
        json!("hello b")
    );
    assert_eq!(derivations(), 2);

    // A write to its input: recomputed once, when read.
    rt.send(
        &piece,
        &parse_dotted("bump"),
        "e2",
        json!({"by": 20}),
        &user(),
    )
    .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(derivations(), 2, "nothing demanded, nothing ran");
    assert_eq!(
        rt.read(&piece, &parse_dotted("doubled")).unwrap(),
        json!(42)
    );
    assert_eq!(
        rt.read(&piece, &parse_dotted("label")).unwrap(),
        json!("big")
    );
    assert_eq!(derivations(), 4);

    // A rendering map: one sub-pattern per element, rebuilt after a park.
    rt.set_path(
        &piece,
        &parse_dotted("items"),
        json!([{"title": "x", "done": false}, {"title": "y", "done": true}]),
    )
    .unwrap();
    rt.flush().unwrap();
    assert_eq!(rt.read(&piece, &parse_dotted("open")).unwrap(), json!(1));
    assert_eq!(
        rt.read(&piece, &parse_dotted("rows.length")).unwrap(),
        json!(2)
    );
    assert_eq!(
        rt.read(&piece, &parse_dotted("rows.1.children")).unwrap(),
        json!([2, ". ", "y"])
    );
    rt.flush().unwrap();
    rt.stop().unwrap();

    let before = derivations();
    let mut rt = start(&t, "lowered");
    assert_eq!(
        rt.read(&piece, &parse_dotted("doubled")).unwrap(),
        json!(42)
    );
    assert_eq!(
        derivations(),
        before,
        "unchanged inputs: not recomputed after a park"
    );
    assert_eq!(
        rt.read(&piece, &parse_dotted("rows.0.children")).unwrap(),
        json!([1, ". ", "x"])
    );
    assert!(
        t.counters.host().get(Counter::DerivationsSkippedFresh) >= 1,
        "the rows' own derivations were fresh by hash"
    );
}

#[test]
fn pieces_a_handler_makes_outlive_the_tenure() {
    let t = common::store();
    let mut rt = start(&t, "spawner");
    let piece = rt
        .create_piece(&program("spawner.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    let before = t.counters.host().get(Counter::PiecesCreated);
    rt.send(
        &piece,
        &parse_dotted("spawn"),
        "s1",
        json!({"start": 5}),
        &user(),
    )
    .unwrap();
    rt.send(
        &piece,
        &parse_dotted("bind"),
        "b1",
        json!({"step": 10}),
        &user(),
    )
    .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(
        t.counters.host().get(Counter::PiecesCreated),
        before + 2,
        "a child piece and a binding piece"
    );
    assert_eq!(rt.pieces().len(), 3);
    assert_eq!(
        rt.read(&piece, &parse_dotted("kids.0.value")).unwrap(),
        json!(5)
    );
    rt.flush().unwrap();
    rt.stop().unwrap(); // park: the sandbox and every graph are gone

    let mut rt = start(&t, "spawner");
    assert_eq!(
        rt.pieces().len(),
        3,
        "the made pieces were listed and come back"
    );
    rt.send(
        &piece,
        &parse_dotted("kids.0.inc"),
        "i1",
        json!({}),
        &user(),
    )
    .unwrap();
    rt.send(&piece, &parse_dotted("buttons.0"), "a1", json!({}), &user())
        .unwrap();
    rt.settle(10).unwrap();
    assert_eq!(
        rt.read(&piece, &parse_dotted("kids.0.value")).unwrap(),
        json!(6)
    );
    assert_eq!(rt.read(&piece, &parse_dotted("total")).unwrap(), json!(10));
}

#[test]
fn a_program_may_import_modules_above_its_entry_and_the_reference_spellings_load() {
    let t = common::store();
    let mut rt = start(&t, "nested");
    let piece = rt
        .create_piece(&program("nested/entry.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    assert_eq!(
        rt.read(&piece, &parse_dotted("greeting")).unwrap(),
        json!("HELLO!")
    );
    // `new Writable(v)` is a cell; `equals` compares values.
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(2));
    assert_eq!(rt.read(&piece, &parse_dotted("same")).unwrap(), json!(true));
}

/// A brief tenure's last wave gives the lease back in its own commit (on
/// a file held exclusively), and work that comes after all takes it again.
#[test]
fn a_wave_that_leaves_nothing_to_deliver_gives_the_lease_back_and_later_work_takes_it_again() {
    use spacewake::store::FileAccess;
    let t = common::store();
    let piece = {
        let mut rt = t.runtime("fold");
        let p = rt
            .create_piece(&program("neighbour.tsx"), None, &json!({}))
            .unwrap();
        rt.flush().unwrap();
        rt.stop().unwrap();
        p
    };
    let count = |c: Counter| t.counters.host().get(c);
    let ttl = t.store.config().lease_ttl_ms;
    let sp = t
        .store
        .open_space_with("fold", FileAccess::Exclusive)
        .unwrap();
    let mut rt = SpaceRuntime::start(sp, t.clock.clone(), ttl, Default::default()).unwrap();
    rt.release_with_last_wave(true);
    common::fire(&mut rt, &piece, "note", "e1", json!({"value": "a"}));
    assert!(rt.lease_released());
    assert_eq!(count(Counter::LeaseReleasedWithWave), 1);
    let on_disk = |rt: &mut SpaceRuntime| rt.space().current_lease().unwrap().unwrap();
    assert_eq!(
        on_disk(&mut rt).expires_at_ms,
        0,
        "released in the wave's commit"
    );
    // Work after all: the next wave takes the lease again before it commits.
    let acquired = count(Counter::LeaseAcquired);
    rt.release_with_last_wave(false);
    common::fire(&mut rt, &piece, "note", "e2", json!({"value": "b"}));
    assert!(!rt.lease_released());
    assert_eq!(count(Counter::LeaseAcquired), acquired + 1);
    assert!(on_disk(&mut rt).expires_at_ms > t.clock.now_ms());
    assert_eq!(
        rt.read(&piece, &parse_dotted("found")).unwrap(),
        json!(["notes:2", "last=a"])
    );
    let mut space = rt.stop().unwrap();
    assert_eq!(space.current_lease().unwrap().unwrap().expires_at_ms, 0);
    drop(space);
    // On a shared file the lease is kept: another writer could move the
    // directory between the commit and its settling.
    let mut rt = t.runtime("fold");
    rt.release_with_last_wave(true);
    common::fire(&mut rt, &piece, "note", "e3", json!({"value": "c"}));
    assert!(!rt.lease_released());
    assert_eq!(count(Counter::LeaseReleasedWithWave), 1);
    rt.stop().unwrap();
}

#[test]
fn a_handler_stopped_by_the_wall_time_net_fails_its_wave_and_its_event_is_retried_not_consumed() {
    // A host that stalls mid-handler (a SIGSTOP, a starved machine) trips
    // the CPU-time safety net; that says nothing about the event, so it
    // must not be consumed as if its handler had failed on its own.
    let t = common::store();
    let mut rt = start(&t, "stall");
    let piece = rt
        .create_piece(&program("misbehaving.tsx"), None, &json!({}))
        .unwrap();
    rt.flush().unwrap();
    for (id, stream) in [("a", "inc"), ("b", "spin")] {
        rt.send(&piece, &parse_dotted(stream), id, json!({}), &user())
            .unwrap();
    }
    rt.stop().unwrap();

    // A tenure whose budget never runs out: only the CPU-time net can
    // stop `while (true) {}`.
    let mut cfg = spacewake::runtime::RuntimeConfig {
        action_budget: Some(u64::MAX / 4),
        ..Default::default()
    };
    cfg.sandbox.cpu_limit = Some(std::time::Duration::from_millis(300));
    let mut rt = t.runtime_with("stall", cfg);
    let err = rt.run_wave().unwrap_err();
    assert!(err.to_string().contains("CPU-time"), "{err}");
    let _ = rt.stop();
    let c = t.counters.host();
    assert_eq!(c.get(Counter::ActionsPreempted), 1);
    assert_eq!(c.get(Counter::EventsInFailedWaves), 2, "both events noted");

    let mut space = t.store.open_space("stall").unwrap();
    assert!(space.has_undelivered().unwrap(), "nothing consumed");
    let failures = space.event_failures().unwrap();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert!(failures.iter().all(|f| f.attempts == 1), "{failures:?}");
    drop(space);

    // The next tenure (the ordinary budget) delivers the inc on its own
    // retry; the spin is then stopped by the budget and consumed, as any
    // runaway handler is.
    let mut rt = start(&t, "stall");
    rt.settle(10).unwrap();
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(1));
    assert_eq!(c.get(Counter::ActionsPreempted), 2);
    let mut space = rt.stop().unwrap();
    assert!(!space.has_undelivered().unwrap());
    assert!(space.dead_letters().unwrap().is_empty());
}
