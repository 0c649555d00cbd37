//! Local NVMe driver, polled: controller bring-up, admin queue, Identify, I/O queue pairs,
//! PRPs, and [`blockdev::BlockDevice`] for a namespace. Only the platform [`hal`] traits
//! underneath; no interrupts, no allocation after bring-up.
//!
//! Use: [`Controller::init`] over the BAR0 window, [`Controller::active_namespaces`] +
//! [`Controller::identify_namespace`], [`Controller::create_io_queue_pair`] per namespace,
//! then [`NvmeNamespace::new`]; more queue pairs of a namespace for other pollers with
//! `BlockDevice::io_handle`.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod ctrl;
pub mod flush;
pub mod ns;
pub mod prp;
pub mod queue;
pub mod regs;
pub mod ring;
pub mod spec;
pub mod status;

pub use ctrl::{Config, Controller, ControllerInfo, MetadataLayout, NamespaceInfo};
pub use ns::NvmeNamespace;
pub use status::{Status, StatusCode};

/// Why bring-up or an admin command failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// BAR0 reads as all ones: nothing there.
    NoDevice,
    /// BAR0 smaller than the register file plus doorbells.
    BarTooSmall(usize),
    /// CAP.CSS lacks the NVM command set.
    NoNvmCommandSet,
    /// The controller cannot use 4 KiB pages.
    PageSizeUnsupported { mpsmin: u8 },
    /// The controller did not answer in time.
    Timeout { what: &'static str },
    /// CSTS.CFS set during enable.
    ControllerFatal,
    /// The admin queue is full (should not happen: admin commands are synchronous).
    AdminQueueFull,
    /// An admin command completed with an error status.
    Status { opcode: u8, admin: bool, status: Status },
    /// Identify data is inconsistent.
    BadIdentify,
    /// NSID 0 or broadcast given where one namespace is meant.
    BadNamespace(u32),
    /// The namespace's metadata format cannot be served: extended LBA (metadata interleaved
    /// in the data buffer, so the I/O buffer could not be the caller's plain data) other than
    /// 8-byte protection information the controller inserts/strips, or a reserved PI type.
    MetadataUnsupported { nsid: u32, ms: u16, layout: MetadataLayout, pi_type: u8 },
    /// Every I/O queue the controller granted is in use.
    NoQueuesLeft,
    /// The platform had no DMA memory.
    Hal(hal::HalError),
}

impl From<hal::HalError> for Error {
    fn from(e: hal::HalError) -> Self {
        Error::Hal(e)
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Status { opcode, admin, status } => {
                write!(f, "{} opcode {:#04x} failed: {}", if *admin { "admin" } else { "I/O" }, opcode, status)
            }
            Error::Timeout { what } => write!(f, "controller not answering: {what} timed out"),
            Error::Hal(e) => write!(f, "{e}"),
            Error::MetadataUnsupported { nsid, ms, layout, pi_type } => write!(
                f,
                "nsid {nsid}: {ms} B metadata per block, {}, PI type {pi_type}: not served (supported: no metadata; separate metadata; 8-byte PI-only metadata in either layout, inserted/stripped by the controller)",
                match layout {
                    MetadataLayout::Extended => "extended LBA (interleaved with the data)",
                    MetadataLayout::Separate => "separate buffer",
                }
            ),
            other => write!(f, "{other:?}"),
        }
    }
}
