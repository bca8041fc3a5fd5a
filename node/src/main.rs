fn main() -> std::process::ExitCode {
    switchboard_node::cli::main()
}
