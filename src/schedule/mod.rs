//! Scheduled wakes (being built).
