//! `spacewake test`: pattern tests in the reference's format, run through the
//! real binary on the fixtures of `fixtures/tests/`.

mod common;

use std::path::Path;

fn run(files: &[&str]) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tests");
    let out = common::server::spacewake()
        .arg("test")
        .args(files.iter().map(|f| root.join(f)))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn passing_tests_report_each_assertion_in_order_and_exit_zero() {
    let (ok, out) = run(&["list-push.test.tsx", "counter-child.test.tsx"]);
    assert!(ok, "{out}");
    let lines: Vec<&str> = out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(lines[0].ends_with("list-push.test.tsx"), "{out}");
    assert_eq!(
        &lines[1..6],
        [
            "✓ assertion_1",
            "✓ assertion_2",
            "✓ assertion_3 (after action_1)",
            "✓ assertion_4 (after action_2)",
            "⊘ assertion_5 (after action_2) (skipped)",
        ]
    );
    assert!(lines[6].ends_with("counter-child.test.tsx"), "{out}");
    assert_eq!(lines.last(), Some(&"7 passed, 0 failed, 1 skipped"));
}

#[test]
fn a_failed_assertion_shows_its_source_and_operands_and_exits_one() {
    let (ok, out) = run(&["failing.test.tsx"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "  ✗ assertion_2 (after action_1)\n      c.value + 1 === 2\n        c.value + 1 = 3\n"
        ),
        "{out}"
    );
    assert!(out.contains("  ✓ assertion_3 (after action_1)"), "{out}");
    assert_eq!(out.lines().last(), Some("2 passed, 1 failed"));
}

#[test]
fn a_file_that_is_not_a_test_is_one_failure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/list-push.tsx");
    let out = common::server::spacewake()
        .arg("test")
        .arg(&root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("✗ Error: the default export's result has no [TESTS] list"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("0 passed, 1 failed"));
}

#[test]
fn expect_non_idempotent_passes_only_when_the_check_finds_a_derivation() {
    let (ok, out) = run(&["non-idempotent.test.tsx"]);
    assert!(ok, "{out}");
    assert!(out.contains("✓ expectNonIdempotent (1 found: "), "{out}");
    assert_eq!(out.lines().last(), Some("2 passed, 0 failed"));

    let (ok, out) = run(&["idempotent-claimed.test.tsx"]);
    assert!(!ok, "{out}");
    assert!(out.contains("✓ assertion_1"), "{out}");
    assert!(
        out.contains("✗ expectNonIdempotent\n      the test expects a derivation that changes"),
        "{out}"
    );
    assert_eq!(out.lines().last(), Some("1 passed, 1 failed"));
}

#[test]
fn pieces_in_a_list_are_held_by_link_and_compared_removed_and_written_through_as_pieces() {
    let (ok, out) = run(&["linked-pieces.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("8 passed, 0 failed"));
}

#[test]
fn wishes_for_the_space_home_share_one_registry_and_add_piece_registers_once() {
    let (ok, out) = run(&["space-home.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("5 passed, 0 failed"));
}

#[test]
fn cells_follow_their_types_and_the_reference_cell_surface_works() {
    let (ok, out) = run(&["cell-types.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("12 passed, 0 failed"));
}

#[test]
fn elements_a_handler_pushes_are_entities_found_and_followed_by_identity() {
    let (ok, out) = run(&["element-identity.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("4 passed, 0 failed"));
}

#[test]
fn pieces_reading_the_list_that_holds_them_never_run_on_nothing() {
    let (ok, out) = run(&["readers-list.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("1 passed, 0 failed"));
}

#[test]
fn fetch_mocks_answer_the_brokers_builtins_and_settle_waits_for_them() {
    let (ok, out) = run(&["fetch-mocks.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("7 passed, 0 failed"));
}

#[test]
fn a_derivation_reads_the_fields_it_uses_and_steps_run_when_reached() {
    let (ok, out) = run(&["reads-what-it-uses.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("5 passed, 0 failed"));
}

#[test]
fn a_handlers_cells_hand_out_the_cells_their_type_names_and_keep_them_when_moved() {
    let (ok, out) = run(&["handler-cells.test.tsx"]);
    assert!(ok, "{out}");
    assert_eq!(out.lines().last(), Some("5 passed, 0 failed"));
}

#[test]
fn expect_runtime_errors_tolerates_the_failures_it_counts() {
    let (ok, out) = run(&["runtime-errors.test.tsx"]);
    assert!(ok, "{out}");
    assert!(!out.contains("✗"), "{out}");
    assert!(out.contains("✓ expectRuntimeErrors (2 seen)"), "{out}");
    assert_eq!(out.lines().last(), Some("2 passed, 0 failed"));
}
