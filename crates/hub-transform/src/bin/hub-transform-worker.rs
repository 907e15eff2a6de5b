//! A transform worker on its own, for this crate's tests of the pool (the hub runs its own
//! executable as `streaming-hub transform-worker`).

fn main() -> std::process::ExitCode {
    hub_transform::worker::main(std::env::args().skip(1))
}
