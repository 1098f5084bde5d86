#!/usr/bin/env bash
# How fast apalis (apalis 1.0.0 with its SQLite storage, apalis-sqlite 1.0.0,
# from crates.io) drains a backlog of jobs: N jobs (default 10,000) pushed
# into a fresh file-backed SQLite database, then one worker of concurrency C
# (default 8) whose handler only bumps a counter; wall time and process CPU
# from the worker's start until every job has been handled, all of apalis's
# settings at their defaults (see the top of bench/apalis/src/main.rs: batch
# size 10, no poll interval while a backlog remains, each job marked Running
# then Done in the database). Prints
#   apalis-sqlite: N jobs drained in S s = R jobs/s (concurrency C, CPU X ms per job)
# to set beside the herd line of `spacewake bench schedule --only wakes`
# ("wakes: 10000 parked spaces due at once, R wakes/s end to end
# (max_scheduled 8, engine reuse on; ... X ms CPU per wake ...)"): the same
# 10,000 items due at once, 8 in flight, wall clock from start to the last
# one delivered, CPU per item from getrusage. Not like for like: a spacewake
# wake opens the space's own SQLite file, runs its handler in a JS engine and
# commits twice, where an apalis job here is a row in one shared table and an
# empty Rust handler, so the apalis rate is the floor of a queue's overhead
# alone.
#
# The crate (bench/apalis/) is a workspace of its own, no part of spacewake's
# build; it builds into target/apalis (APALIS_TARGET_DIR to change), at the
# lowest priority and one compile job at a time (BUILD_JOBS=n for more).
# Usage: bench/apalis.sh [--jobs N | N] [--concurrency C | C]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CARGO_TARGET_DIR=${APALIS_TARGET_DIR:-$here/../target/apalis}
nice -n 19 cargo build --release -j"${BUILD_JOBS:-1}" \
  --manifest-path "$here/apalis/Cargo.toml"
exec "$CARGO_TARGET_DIR/release/apalis-drain-bench" "$@"
