pub mod patterns;
pub mod serve;
pub mod store;
