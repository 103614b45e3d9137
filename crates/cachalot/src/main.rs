fn main() {
    std::process::exit(cachalot_server::main_with_args(std::env::args_os().collect()));
}
