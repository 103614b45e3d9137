//! Placeholder: being written.

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {}

pub fn run(_args: ReplayArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
