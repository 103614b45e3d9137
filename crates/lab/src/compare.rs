//! Placeholder: being written.

#[derive(clap::Args, Debug)]
pub struct CompareArgs {}

pub fn run(_args: CompareArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
