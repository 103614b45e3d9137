//! Placeholder: being written.

#[derive(clap::Args, Debug)]
pub struct GenArgs {}

pub fn run_gen(_args: GenArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
