//! Placeholder: being written.

#[derive(clap::Args, Debug)]
pub struct MrcArgs {}

pub fn run(_args: MrcArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
