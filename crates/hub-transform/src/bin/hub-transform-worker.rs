//! A transform worker on its own, for this crate's tests of the pool (the hub runs its own
//! executable as `streaming-hub transform-worker`).

fn main() -> std::process::ExitCode {
    match hub_transform::worker::Settings::from_args(std::env::args().skip(1)) {
        Ok(settings) => hub_transform::worker::serve(settings),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
