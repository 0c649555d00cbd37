//! The crate's one error type: every failure carries the raw status the adapter reported.

use crate::cmd::opcode_name;
use crate::health::HealthReport;
use hal::HalError;

/// Everything that can go wrong talking to an mlx5 adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The platform could not provide DMA memory.
    Hal(HalError),
    /// The BAR is too small to hold the initialization segment.
    BarTooSmall(usize),
    /// Command interface revision other than 5.
    BadCmdifRev(u16),
    /// The command queue geometry the firmware reports is unusable.
    BadCmdqGeometry { log_size: u8, log_stride: u8 },
    /// Firmware kept `initializing` set for longer than the configured timeout.
    InitTimeout { waited_ns: u64 },
    /// The firmware never handed a command entry back (ownership bit stayed set).
    CmdTimeout { opcode: u16, op_mod: u16 },
    /// An earlier command timed out; the queue slot is still owned by firmware.
    CmdQueueDead,
    /// Delivery status (entry byte 0x3f bits 7:1) was not OK.
    Delivery { opcode: u16, op_mod: u16, status: u8 },
    /// The command was delivered and failed: output status and syndrome.
    Command { opcode: u16, op_mod: u16, status: u8, syndrome: u32 },
    /// The output the firmware produced is inconsistent (e.g. a page count out of range).
    BadOutput { opcode: u16, what: &'static str },
    /// The health counter stopped advancing: the firmware is dead.
    HealthStalled(HealthReport),
    /// The health buffer reports a firmware assertion / syndrome.
    Firmware(HealthReport),
    /// The adapter reported an internal-error event (EQE type and sub-type): the device is dead.
    FatalEvent { event_type: u8, sub_type: u8 },
    /// The device failed (see [`crate::Mlx5::failed`]) and is not recovered yet: nothing can be
    /// posted or created until [`crate::Mlx5::recover`] has brought it up again.
    DeviceFailed,
    /// A capability the bring-up requires is missing.
    Unsupported(&'static str),
    /// A request the driver refuses (sizes, unknown handles).
    InvalidArgument(&'static str),
    /// No object with that number is live.
    NoSuchObject { kind: &'static str, id: u32 },
    /// Teardown finished but firmware still holds pages.
    PagesLeft(u64),
    /// A work completion with an error status (CQE vendor syndrome), in the self-test.
    WorkCompletion { qpn: u32, vendor_err: u8 },
    /// The self-test read back something else than it sent (`what`, at byte/count `at`).
    Verify { what: &'static str, at: u64 },
}

impl Error {
    /// Whether this error means the device is dead (a command never completed, the firmware
    /// reports a syndrome or stopped its health counter, a fatal event): only a reset helps.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Error::CmdTimeout { .. } | Error::CmdQueueDead | Error::HealthStalled(_) | Error::Firmware(_) | Error::FatalEvent { .. })
    }
}

impl From<HalError> for Error {
    fn from(e: HalError) -> Self {
        Error::Hal(e)
    }
}

/// Name of a command status code (output byte 0).
pub fn status_name(status: u8) -> &'static str {
    mlx5_ifc::status::name(status).unwrap_or("UNKNOWN")
}

/// Name of a delivery status code (status_own bits 7:1).
pub fn delivery_name(status: u8) -> &'static str {
    mlx5_ifc::delivery::name(status).unwrap_or("UNKNOWN")
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Error::Hal(e) => write!(f, "mlx5: {e}"),
            Error::BarTooSmall(n) => write!(f, "mlx5: BAR0 of {n} bytes cannot hold the init segment"),
            Error::BadCmdifRev(r) => write!(f, "mlx5: command interface revision {r}, need 5"),
            Error::BadCmdqGeometry { log_size, log_stride } => {
                write!(f, "mlx5: unusable command queue (log_size {log_size}, log_stride {log_stride})")
            }
            Error::InitTimeout { waited_ns } => {
                write!(f, "mlx5: firmware still initializing after {} ms", waited_ns / 1_000_000)
            }
            Error::CmdTimeout { opcode, op_mod } => write!(
                f,
                "mlx5: {}(0x{opcode:x}) op_mod {op_mod}: no completion (timeout)",
                opcode_name(opcode)
            ),
            Error::CmdQueueDead => write!(f, "mlx5: command queue unusable after a timeout"),
            Error::Delivery { opcode, op_mod, status } => write!(
                f,
                "mlx5: {}(0x{opcode:x}) op_mod {op_mod}: delivery status {} (0x{status:x})",
                opcode_name(opcode),
                delivery_name(status)
            ),
            Error::Command { opcode, op_mod, status, syndrome } => write!(
                f,
                "mlx5: {}(0x{opcode:x}) op_mod {op_mod}: status {} (0x{status:x}), syndrome 0x{syndrome:08x}",
                opcode_name(opcode),
                status_name(status)
            ),
            Error::BadOutput { opcode, what } => {
                write!(f, "mlx5: {}(0x{opcode:x}): bad output: {what}", opcode_name(opcode))
            }
            Error::HealthStalled(r) => write!(f, "mlx5: health counter stopped; {r}"),
            Error::Firmware(r) => write!(f, "mlx5: firmware error; {r}"),
            Error::FatalEvent { event_type, sub_type } => {
                write!(f, "mlx5: fatal event 0x{event_type:02x} (sub-type 0x{sub_type:02x})")
            }
            Error::DeviceFailed => write!(f, "mlx5: device failed, not recovered yet"),
            Error::Unsupported(w) => write!(f, "mlx5: adapter lacks {w}"),
            Error::InvalidArgument(w) => write!(f, "mlx5: invalid argument: {w}"),
            Error::NoSuchObject { kind, id } => write!(f, "mlx5: no live {kind} 0x{id:x}"),
            Error::PagesLeft(n) => write!(f, "mlx5: firmware still holds {n} pages after teardown"),
            Error::WorkCompletion { qpn, vendor_err } => {
                write!(f, "mlx5: QP 0x{qpn:x}: work completion error, vendor syndrome 0x{vendor_err:02x}")
            }
            Error::Verify { what, at } => write!(f, "mlx5: self-test: {what} wrong (at {at})"),
        }
    }
}
