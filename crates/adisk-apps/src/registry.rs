//! The applications' native disklets, registered with each disk's DiskOS.

use crate::{cluster, conv, datacube, disklet_util, dmine, earth, fft, join, sort};
use adisk_diskos::apps::{AppDisklets, AppStage};
use adisk_diskos::disklet::Disklet;

/// The applications' native disklets, registered with each disk's DiskOS.
pub struct Disklets;

impl AppDisklets for Disklets {
    fn build(&self, stage: AppStage<'_>) -> adisk_diskos::Result<Box<dyn Disklet>> {
        match stage.app {
            "sort" => sort::disklets::build(&stage),
            "fft" => fft::disklets::build(&stage),
            "dmine" => dmine::disklets::build(&stage),
            "join" => join::disklets::build(&stage),
            "conv" => conv::disklets::build(&stage),
            "earth" => earth::build(&stage),
            "cluster" => cluster::build(&stage),
            "datacube" => datacube::disklets::build(&stage),
            other => Err(disklet_util::invalid(format!(
                "this disk has no application `{other}`"
            ))),
        }
    }
}
