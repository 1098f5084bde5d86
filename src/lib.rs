//! spacewake: a space-serving runtime that stores spaces in SQLite, runs
//! patterns as pieces, serves sessions over WebSocket, and wakes parked
//! spaces on the schedules their patterns declare.
//!
//! See `ARCHITECTURE.md` for the code map.

pub mod accounting;
pub mod allocator;
pub mod bench;
pub mod check;
pub mod cli;
pub mod clock;
pub mod compiler;
pub mod console;
pub mod debug;
pub mod effects;
pub mod host;
pub mod http;
pub mod http_client;
pub mod human;
pub mod metrics;
pub mod operator;
pub mod pattern_test;
pub mod pg_cluster;
pub mod protocol;
pub mod relay;
pub mod runtime;
pub mod sandbox;
pub mod scenario;
pub mod schedule;
pub mod session;
pub mod store;
pub mod telemetry;
pub mod types;
