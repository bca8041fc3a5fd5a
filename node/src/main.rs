use switchboard_node::allocator::Allocator;

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

fn main() -> std::process::ExitCode {
    switchboard_node::allocator::tune();
    switchboard_node::run_cli()
}
