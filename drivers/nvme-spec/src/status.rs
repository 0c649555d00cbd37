//! nvme-spec status: the Status field of a completion (Base §4.6.1, Figure 92) as typed
//! values, with the named statuses the NVMe-oF target returns.
//!
//! Every (SCT, SC) pair maps to a [`StatusCode`]; codes without a name keep their raw value
//! in `Other`, so nothing is lost.

use bitfield_struct::bitfield;

/// The 16-bit phase + status halfword of a CQE (Figure 90 DW3 bits 31:16).
#[bitfield(u16)]
#[derive(PartialEq, Eq)]
pub struct StatusField {
    /// Phase Tag.
    pub phase: bool,
    /// Status Code.
    #[bits(8)]
    pub sc: u8,
    /// Status Code Type.
    #[bits(3)]
    pub sct: u8,
    /// Command Retry Delay.
    #[bits(2)]
    pub crd: u8,
    /// More.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

/// An NVMe completion status: Status Code Type, Status Code, Do Not Retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    pub sct: u8,
    pub sc: u8,
    pub dnr: bool,
}

/// Named statuses (Base §4.6.1.2 Figures 94-97, NVM Command Set §4.1.1; Fabrics Connect
/// values from Base 2.0 / NVMe-oF 1.1, Linux `NVME_SC_CONNECT_*`). DNR as a target sets it.
impl Status {
    pub const SUCCESS: Status = Status { sct: 0, sc: 0, dnr: false };
    const fn g(sc: u8) -> Status {
        Status { sct: 0, sc, dnr: true }
    }
    const fn cs(sc: u8) -> Status {
        Status { sct: 1, sc, dnr: true }
    }
    // Generic (SCT 0).
    pub const INVALID_OPCODE: Status = Status::g(0x01);
    pub const INVALID_FIELD: Status = Status::g(0x02);
    pub const DATA_XFER_ERROR: Status = Status::g(0x04);
    pub const INTERNAL: Status = Status { sct: 0, sc: 0x06, dnr: false };
    pub const ABORT_SQ_DELETED: Status = Status { sct: 0, sc: 0x08, dnr: false };
    pub const INVALID_NS: Status = Status::g(0x0B);
    pub const CMD_SEQ_ERROR: Status = Status::g(0x0C);
    pub const SGL_INVALID_DATA: Status = Status::g(0x0F);
    pub const SGL_INVALID_TYPE: Status = Status::g(0x11);
    pub const SGL_INVALID_OFFSET: Status = Status::g(0x16);
    pub const KA_EXPIRED: Status = Status::g(0x19);
    pub const KA_INVALID: Status = Status::g(0x1A);
    pub const LBA_RANGE: Status = Status::g(0x80);
    pub const CAP_EXCEEDED: Status = Status::g(0x81);
    // Command specific (SCT 1).
    pub const QID_INVALID: Status = Status::cs(0x01);
    pub const ASYNC_LIMIT: Status = Status::cs(0x05);
    pub const INVALID_LOG_PAGE: Status = Status::cs(0x09);
    pub const FEATURE_NOT_SAVEABLE: Status = Status::cs(0x0D);
    // Fabrics Connect (SCT 1, 0x80..).
    pub const CONNECT_FORMAT: Status = Status::cs(0x80);
    pub const CONNECT_CTRL_BUSY: Status = Status::cs(0x81);
    pub const CONNECT_INVALID_PARAM: Status = Status::cs(0x82);
    pub const CONNECT_RESTART_DISC: Status = Status::cs(0x83);
    pub const CONNECT_INVALID_HOST: Status = Status::cs(0x84);
    /// Authentication required (Base 2.0; Linux `NVME_SC_AUTH_REQUIRED` 0x191).
    pub const AUTH_REQUIRED: Status = Status::cs(0x91);

    /// The CQE status halfword with phase 0 (Fabrics leaves the phase bit 0).
    pub const fn to_field(self) -> u16 {
        StatusField::new().with_sc(self.sc).with_sct(self.sct & 7).with_dnr(self.dnr).into_bits()
    }
    /// Decode a CQE status halfword (the phase bit, CRD and More are ignored).
    pub const fn from_field(v: u16) -> Status {
        let f = StatusField::from_bits(v);
        Status { sct: f.sct(), sc: f.sc(), dnr: f.dnr() }
    }
    pub const fn is_success(self) -> bool {
        self.sct == 0 && self.sc == 0
    }
}

/// Status codes by type (Base §4.6.1.2, Figures 94-97; NVM Command Set §4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCode {
    // Generic Command Status (SCT 0).
    InvalidOpcode,
    InvalidField,
    CommandIdConflict,
    DataTransferError,
    AbortedPowerLoss,
    InternalError,
    AbortRequested,
    AbortedSqDeleted,
    AbortedFailedFused,
    AbortedMissingFused,
    InvalidNamespaceOrFormat,
    CommandSequenceError,
    InvalidSglSegment,
    InvalidSglCount,
    DataSglLengthInvalid,
    MetadataSglLengthInvalid,
    SglTypeInvalid,
    InvalidCmbUse,
    PrpOffsetInvalid,
    AtomicWriteUnitExceeded,
    OperationDenied,
    SglOffsetInvalid,
    HostIdInconsistent,
    KeepAliveExpired,
    KeepAliveInvalid,
    AbortedPreemptAbort,
    SanitizeFailed,
    SanitizeInProgress,
    SglGranularityInvalid,
    NotSupportedForCmbQueue,
    NamespaceWriteProtected,
    CommandInterrupted,
    TransientTransportError,
    LbaOutOfRange,
    CapacityExceeded,
    NamespaceNotReady,
    ReservationConflict,
    FormatInProgress,
    // Command Specific Status (SCT 1).
    CompletionQueueInvalid,
    InvalidQueueId,
    InvalidQueueSize,
    AbortLimitExceeded,
    AsyncEventLimitExceeded,
    InvalidFirmwareSlot,
    InvalidFirmwareImage,
    InvalidInterruptVector,
    InvalidLogPage,
    InvalidFormat,
    InvalidQueueDeletion,
    FeatureNotSaveable,
    FeatureNotChangeable,
    FeatureNotNamespaceSpecific,
    ConflictingAttributes,
    InvalidProtectionInfo,
    WriteToReadOnlyRange,
    // Media and Data Integrity Errors (SCT 2).
    WriteFault,
    UnrecoveredReadError,
    GuardCheckError,
    AppTagCheckError,
    RefTagCheckError,
    CompareFailure,
    AccessDenied,
    DeallocatedOrUnwritten,
    /// Path Related Status (SCT 3), raw SC.
    PathRelated(u8),
    /// Vendor Specific (SCT 7), raw SC.
    VendorSpecific(u8),
    /// Any other (SCT, SC).
    Other { sct: u8, sc: u8 },
}

impl StatusField {
    /// `None` on success (SCT 0 / SC 0), else the status.
    pub fn status(self) -> Option<Status> {
        if self.sct() == 0 && self.sc() == 0 {
            None
        } else {
            Some(Status { sct: self.sct(), sc: self.sc(), dnr: self.dnr() })
        }
    }
}

impl Status {
    /// The typed code. Context-free: SCT 1 codes 0x80.. are read as the NVM command set's
    /// (Conflicting Attributes...); after a Fabrics Connect the same values are the
    /// `CONNECT_*` constants.
    pub fn code(&self) -> StatusCode {
        use StatusCode::*;
        match (self.sct, self.sc) {
            (0, 0x01) => InvalidOpcode,
            (0, 0x02) => InvalidField,
            (0, 0x03) => CommandIdConflict,
            (0, 0x04) => DataTransferError,
            (0, 0x05) => AbortedPowerLoss,
            (0, 0x06) => InternalError,
            (0, 0x07) => AbortRequested,
            (0, 0x08) => AbortedSqDeleted,
            (0, 0x09) => AbortedFailedFused,
            (0, 0x0A) => AbortedMissingFused,
            (0, 0x0B) => InvalidNamespaceOrFormat,
            (0, 0x0C) => CommandSequenceError,
            (0, 0x0D) => InvalidSglSegment,
            (0, 0x0E) => InvalidSglCount,
            (0, 0x0F) => DataSglLengthInvalid,
            (0, 0x10) => MetadataSglLengthInvalid,
            (0, 0x11) => SglTypeInvalid,
            (0, 0x12) => InvalidCmbUse,
            (0, 0x13) => PrpOffsetInvalid,
            (0, 0x14) => AtomicWriteUnitExceeded,
            (0, 0x15) => OperationDenied,
            (0, 0x16) => SglOffsetInvalid,
            (0, 0x18) => HostIdInconsistent,
            (0, 0x19) => KeepAliveExpired,
            (0, 0x1A) => KeepAliveInvalid,
            (0, 0x1B) => AbortedPreemptAbort,
            (0, 0x1C) => SanitizeFailed,
            (0, 0x1D) => SanitizeInProgress,
            (0, 0x1E) => SglGranularityInvalid,
            (0, 0x1F) => NotSupportedForCmbQueue,
            (0, 0x20) => NamespaceWriteProtected,
            (0, 0x21) => CommandInterrupted,
            (0, 0x22) => TransientTransportError,
            (0, 0x80) => LbaOutOfRange,
            (0, 0x81) => CapacityExceeded,
            (0, 0x82) => NamespaceNotReady,
            (0, 0x83) => ReservationConflict,
            (0, 0x84) => FormatInProgress,
            (1, 0x00) => CompletionQueueInvalid,
            (1, 0x01) => InvalidQueueId,
            (1, 0x02) => InvalidQueueSize,
            (1, 0x03) => AbortLimitExceeded,
            (1, 0x05) => AsyncEventLimitExceeded,
            (1, 0x06) => InvalidFirmwareSlot,
            (1, 0x07) => InvalidFirmwareImage,
            (1, 0x08) => InvalidInterruptVector,
            (1, 0x09) => InvalidLogPage,
            (1, 0x0A) => InvalidFormat,
            (1, 0x0C) => InvalidQueueDeletion,
            (1, 0x0D) => FeatureNotSaveable,
            (1, 0x0E) => FeatureNotChangeable,
            (1, 0x0F) => FeatureNotNamespaceSpecific,
            (1, 0x80) => ConflictingAttributes,
            (1, 0x81) => InvalidProtectionInfo,
            (1, 0x82) => WriteToReadOnlyRange,
            (2, 0x80) => WriteFault,
            (2, 0x81) => UnrecoveredReadError,
            (2, 0x82) => GuardCheckError,
            (2, 0x83) => AppTagCheckError,
            (2, 0x84) => RefTagCheckError,
            (2, 0x85) => CompareFailure,
            (2, 0x86) => AccessDenied,
            (2, 0x87) => DeallocatedOrUnwritten,
            (3, sc) => PathRelated(sc),
            (7, sc) => VendorSpecific(sc),
            (sct, sc) => Other { sct, sc },
        }
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?} (sct {:#x} sc {:#04x}{})", self.code(), self.sct, self.sc, if self.dnr { ", dnr" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_field_decodes() {
        // phase 1, SC 0x80, SCT 0, DNR: LBA out of range.
        let raw: u16 = 1 | (0x80 << 1) | (1 << 15);
        let f = StatusField::from_bits(raw);
        assert!(f.phase());
        let s = f.status().unwrap();
        assert_eq!(s.code(), StatusCode::LbaOutOfRange);
        assert!(s.dnr);
        assert_eq!(StatusField::from_bits(1).status(), None);
        let s = StatusField::from_bits((2 << 9) | (0x81 << 1)).status().unwrap();
        assert_eq!(s.code(), StatusCode::UnrecoveredReadError);
        let s = StatusField::from_bits((5 << 9) | (0x11 << 1)).status().unwrap();
        assert_eq!(s.code(), StatusCode::Other { sct: 5, sc: 0x11 });
    }

    #[test]
    fn field_roundtrip_matches_linux_values() {
        // Linux NVME_SC_CONNECT_INVALID_HOST = 0x184 (SCT 1 << 8 | SC 0x84), DNR = 0x4000 in
        // Linux's status>>1 form, so bit 15 of the halfword.
        let s = Status::CONNECT_INVALID_HOST;
        assert_eq!(s.to_field(), (0x184 << 1) | 0x8000);
        assert_eq!(Status::from_field(s.to_field()), s);
        assert_eq!(Status::from_field(Status::LBA_RANGE.to_field() | 1), Status::LBA_RANGE);
        assert_eq!(Status::LBA_RANGE.code(), StatusCode::LbaOutOfRange);
        assert!(Status::from_field(1).is_success());
        // sct wider than 3 bits is cut as before.
        assert_eq!(Status { sct: 9, sc: 2, dnr: false }.to_field(), (1 << 9) | (2 << 1));
    }
}
