fn main() -> std::process::ExitCode {
    switchboard_node::run_cli()
}
