pub mod patterns;
pub mod store;
