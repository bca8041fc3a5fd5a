/// mimalloc rather than glibc's malloc: the request path allocates and frees small buffers on
/// every worker thread, and glibc's per-arena locking and consolidation cost a measured share
/// of a round trip's CPU (the elicitation bench prints the figures).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    switchboard_node::run_cli()
}
