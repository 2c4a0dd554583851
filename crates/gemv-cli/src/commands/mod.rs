//! One module per subcommand.

pub mod bench;
pub mod check;
pub mod info;
pub mod progress;
pub mod quantize;
pub mod routed;
pub mod run;
