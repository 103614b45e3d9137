//! Placeholder: being written.

#[derive(clap::Args, Debug)]
pub struct PlotArgs {}

pub fn run(_args: PlotArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
