//! The `leaderd` binary: parses the command line and exits with the command's code.

fn main() {
    std::process::exit(leaderd::cli_main());
}
