//! DH-HMAC-CHAP wire facts: identifiers, the authentication messages and the Fabrics
//! Authentication Send / Receive commands, declared once as little-endian layouts.
//!
//! Sources (facts only): NVMe Base 2.0 §5.x Authentication Send/Receive (Fabrics command
//! types 0x05/0x06), §8.13 DH-HMAC-CHAP (Figures "AUTH_Negotiate", "DH-HMAC-CHAP_Challenge",
//! "_Reply", "_Success1", "_Success2", "AUTH_Failure1/2"), cross-checked with Linux
//! `include/linux/nvme.h` (`nvmf_auth_send_command`, `nvmf_auth_receive_command`,
//! `nvmf_auth_dhchap_*_data`, `NVME_AUTH_*`, `NVME_CONNECT_AUTHREQ_*`, `NVME_SC_AUTH_REQUIRED`).
//! Every size is asserted at compile time by `nvme_spec::layout!`.

use nvme_spec::layout;
use zerocopy::byteorder::little_endian::{U16, U32};

/// SECP of Authentication Send/Receive for NVMe in-band authentication.
pub const SECP_NVME: u8 = 0xE9;
/// SPSP0 and SPSP1 the host sets (and the controller requires).
pub const SPSP0: u8 = 0x01;
pub const SPSP1: u8 = 0x01;

/// Connect response DW0 bits (Base 2.0 Figure "Connect Response"): authentication
/// transaction required (ATR) and authentication with secure channel required (ASCR).
pub const AUTHREQ_ATR: u32 = 1 << 17;
pub const AUTHREQ_ASCR: u32 = 1 << 18;

/// Message `auth_type`.
pub mod auth_type {
    /// AUTH_Negotiate and the failure messages.
    pub const COMMON: u8 = 0x00;
    /// The DH-HMAC-CHAP protocol messages.
    pub const DHCHAP: u8 = 0x01;
}

/// Message `auth_id`.
pub mod auth_id {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// The protocol identifier in an AUTH_Negotiate descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;
/// Secure channel concatenation: none (the only value this implementation speaks).
pub const SC_C_NONE: u8 = 0x00;

/// Failure reason code and explanations (AUTH_Failure1/2 `rescode`, `rescode_exp`).
pub mod failure {
    pub const REASON_FAILED: u8 = 0x01;
    pub const FAILED: u8 = 0x01;
    pub const NOT_USABLE: u8 = 0x02;
    pub const CONCAT_MISMATCH: u8 = 0x03;
    pub const HASH_UNUSABLE: u8 = 0x04;
    pub const DHGROUP_UNUSABLE: u8 = 0x05;
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    pub const INCORRECT_MESSAGE: u8 = 0x07;
}

/// Largest message any side sends or accepts: a Challenge or Reply with SHA-512 and
/// ffdhe8192 is 16 + 2 × 64 + 1024 = 1168 bytes; Linux sizes its buffer 4096.
pub const MAX_MESSAGE: usize = 4096;

layout! {
    /// Authentication Send (64 B). Src: nvme.h `struct nvmf_auth_send_command`.
    terse pub struct AuthSendCmd [64] {
        pub opcode: u8,
        pub rsvd1: u8,
        pub cid: U16,
        pub fctype: u8,
        pub rsvd2: [u8; 19],
        pub dptr: [u8; 16],
        pub rsvd3: u8,
        pub spsp0: u8,
        pub spsp1: u8,
        pub secp: u8,
        /// Transfer length in bytes.
        pub tl: U32,
        pub rsvd4: [u8; 16],
    }
}

layout! {
    /// Authentication Receive (64 B). Src: nvme.h `struct nvmf_auth_receive_command`.
    terse pub struct AuthRecvCmd [64] {
        pub opcode: u8,
        pub rsvd1: u8,
        pub cid: U16,
        pub fctype: u8,
        pub rsvd2: [u8; 19],
        pub dptr: [u8; 16],
        pub rsvd3: u8,
        pub spsp0: u8,
        pub spsp1: u8,
        pub secp: u8,
        /// Allocation length in bytes.
        pub al: U32,
        pub rsvd4: [u8; 16],
    }
}

layout! {
    /// AUTH_Negotiate header (8 B), followed by `napd` protocol descriptors.
    /// Src: nvme.h `struct nvmf_auth_dhchap_negotiate_data`.
    pub struct NegotiateHdr [8] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd: U16,
        pub t_id: U16,
        pub sc_c: u8,
        pub napd: u8,
    }
}

layout! {
    /// One protocol descriptor (64 B): `idlist[0..30]` hash IDs, `idlist[30..60]` DH group IDs.
    /// Src: nvme.h `struct nvmf_auth_dhchap_protocol_descriptor`.
    terse pub struct ProtocolDesc [64] {
        pub authid: u8,
        pub rsvd: u8,
        pub halen: u8,
        pub dhlen: u8,
        pub idlist: [u8; 60],
    }
}
/// Where the DH group IDs start in [`ProtocolDesc::idlist`].
pub const IDLIST_DH_OFFSET: usize = 30;

layout! {
    /// DH-HMAC-CHAP_Challenge header (16 B), followed by `cval[hl]` and `dhv[dhvlen]`.
    /// Src: nvme.h `struct nvmf_auth_dhchap_challenge_data`.
    pub struct ChallengeHdr [16] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd1: U16,
        pub t_id: U16,
        pub hl: u8,
        pub rsvd2: u8,
        pub hashid: u8,
        pub dhgid: u8,
        pub dhvlen: U16,
        pub seqnum: U32,
    }
}

layout! {
    /// DH-HMAC-CHAP_Reply header (16 B), followed by `rval[hl]`, `cval[hl]` (the host's
    /// challenge when `cvalid`, else zeros) and `dhv[dhvlen]`.
    /// Src: nvme.h `struct nvmf_auth_dhchap_reply_data`.
    pub struct ReplyHdr [16] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd1: U16,
        pub t_id: U16,
        pub hl: u8,
        pub rsvd2: u8,
        pub cvalid: u8,
        pub rsvd3: u8,
        pub dhvlen: U16,
        pub seqnum: U32,
    }
}

layout! {
    /// DH-HMAC-CHAP_Success1 header (16 B), followed by `rval[hl]` (valid when `rvalid`).
    /// Src: nvme.h `struct nvmf_auth_dhchap_success1_data`.
    pub struct Success1Hdr [16] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd1: U16,
        pub t_id: U16,
        pub hl: u8,
        pub rsvd2: u8,
        pub rvalid: u8,
        pub rsvd3: [u8; 7],
    }
}

layout! {
    /// DH-HMAC-CHAP_Success2 (16 B). Src: nvme.h `struct nvmf_auth_dhchap_success2_data`.
    pub struct Success2 [16] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd1: U16,
        pub t_id: U16,
        pub rsvd2: [u8; 10],
    }
}

layout! {
    /// AUTH_Failure1 / AUTH_Failure2 (8 B). Src: nvme.h `struct nvmf_auth_dhchap_failure_data`.
    pub struct Failure [8] {
        pub auth_type: u8,
        pub auth_id: u8,
        pub rsvd1: U16,
        pub t_id: U16,
        pub rescode: u8,
        pub rescode_exp: u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    #[test]
    fn offsets_match_spec() {
        assert_eq!(offset_of!(AuthSendCmd, spsp0), 41);
        assert_eq!(offset_of!(AuthSendCmd, secp), 43);
        assert_eq!(offset_of!(AuthSendCmd, tl), 44);
        assert_eq!(offset_of!(AuthRecvCmd, al), 44);
        assert_eq!(offset_of!(ChallengeHdr, hashid), 8);
        assert_eq!(offset_of!(ChallengeHdr, dhvlen), 10);
        assert_eq!(offset_of!(ChallengeHdr, seqnum), 12);
        assert_eq!(offset_of!(ReplyHdr, cvalid), 8);
        assert_eq!(offset_of!(Success1Hdr, rvalid), 8);
        assert_eq!(offset_of!(Failure, rescode), 6);
    }
}
