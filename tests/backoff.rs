//! Back-off of useless schedules, through the real host: an entry whose
//! output nobody reads doubles its effective interval every 3 unread fires
//! (2x, then 4x, ... up to 16x), and the first session read restores 1x.

mod common;

use serde_json::json;
use spacewake::clock::ManualClock;
use spacewake::host::Trigger;
use spacewake::metrics::Counter;
use spacewake::store::path::parse_dotted;
use std::sync::Arc;

const PATTERN: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const tick = handler<{}, { count: Cell<number> }>((_e, { count }) => { count.set(count.get() + 1); });
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count }) }],
  count,
}));
"#;

#[test]
fn unread_output_backs_the_entry_off_and_a_session_read_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = common::manual_host(dir.path(), clock.clone(), |cfg| {
        cfg.schedule.jitter_window_ms = 0
    });
    let piece = common::deploy_source(&h, "s", PATTERN);
    let c = |k: Counter| h.counters().space_value("s", k);
    let parked = || common::settled(&h, "s");
    common::park(&h, &clock, "s");
    let row = || h.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();

    let mut factors = Vec::new();
    for i in 1..=15 {
        let due = row().next_due_ms;
        clock.set_ms(due);
        common::wait("delivery", || c(Counter::ScheduleDelivered) == i);
        common::wait("park", parked);
        let r = row();
        factors.push(r.backoff_factor);
        // The next due is one effective interval away.
        assert_eq!(
            r.next_due_ms - due,
            60 * 60_000 * u64::from(r.backoff_factor),
            "fire {i}"
        );
    }
    // Unread fires are counted from the second delivery on (the first has
    // no earlier output to judge): 3 unread → 2x, 6 → 4x, 9 → 8x, 12 → 16x.
    assert_eq!(factors, [1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16]);
    assert_eq!(c(Counter::ScheduleBackedOff), 4);

    // A session reads the output: back to the declared interval at once.
    let read = h
        .ask_blocking(
            "s",
            Trigger::Session,
            spacewake::host::Read {
                piece: Some(piece),
                doc: None,
                path: parse_dotted("count"),
            },
        )
        .unwrap();
    assert_eq!(read.value, json!(15));
    let r = row();
    assert_eq!(
        (r.backoff_factor, r.unread_fires, r.output_read),
        (1, 0, true)
    );
    assert_eq!(c(Counter::ScheduleBackoffRestored), 1);
}
