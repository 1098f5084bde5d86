pub mod accounting;
pub mod patterns;
pub mod schedule;
pub mod serve;
pub mod store;
