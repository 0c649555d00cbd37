//! Firmware command trace: one line per command in the shape of Linux's `mlx5_cmd`
//! tracepoint (drivers/net/ethernet/mellanox/mlx5/core/diag/cmd_tracepoint.h: command name and
//! opcode, op_mod, status name and value, syndrome, errno), plus the input and output lengths;
//! with [`TraceMode::Full`] also the hex of the input and output in the row shape of mlx5_core's
//! command data dump (cmd.c `dump_command` with the `MLX5_CMD_DATA` debug bit: a header line,
//! then rows of an offset and four big-endian dwords, offsets running across the inline part
//! and the mailbox data as one message). Linux traces failures only; this trace prints every
//! command (successes say `ok`), so a run on a real card can be diffed against Linux's own
//! failures and dynamic-debug dump of the same card.
//!
//! ```text
//! mlx5_cmd: cmd[0]: QUERY_HCA_CAP(0x100) op_mod(0x1) ok, status OK(0x0), syndrome (0x0), ilen 16, olen 4112
//! mlx5_cmd: cmd[0]: CREATE_QP(0x500) op_mod(0x0) failed, status BAD_PARAM(0x3), syndrome (0x1a2b3c), err(-22), ilen 272, olen 16
//! mlx5_cmd: cmd[0]: dump command data CREATE_QP(0x500) INPUT
//! mlx5_cmd: cmd[0]: 000: 05000000 00000000 00000000 00000000
//! ```
//!
//! Off ([`TraceMode::Off`], the default) it costs one compare per command; nothing on the data
//! path goes through here.

use core::fmt;

use crate::cmd::opcode_name;
use crate::error::{delivery_name, status_name, Error};

/// How much of each firmware command is printed (`mlx5.trace=1|full` on the image's command
/// line, `emu-runner --trace 1|full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceMode {
    /// Nothing.
    #[default]
    Off,
    /// One line per command.
    Commands,
    /// The line plus the input and output in hex.
    Full,
}

impl TraceMode {
    /// Parse the command-line value: `0`/`off`, `1`, `full`.
    pub fn parse(v: &str) -> Option<TraceMode> {
        match v {
            "0" | "off" => Some(TraceMode::Off),
            "1" => Some(TraceMode::Commands),
            "full" => Some(TraceMode::Full),
            _ => None,
        }
    }
}

/// The errno Linux's mlx5_core returns for a command status (cmd.c `cmd_status_to_err`), so
/// the `err(..)` field reads as Linux's does.
pub fn linux_errno(status: u8) -> i32 {
    const EIO: i32 = 5;
    const EAGAIN: i32 = 11;
    const ENOMEM: i32 = 12;
    const EBUSY: i32 = 16;
    const EINVAL: i32 = 22;
    match status {
        0x00 => 0,
        0x02 | 0x03 | 0x05 | 0x09 | 0x0a | 0x10 | 0x30 | 0x40 => -EINVAL,
        0x06 => -EBUSY,
        0x07 | 0x0f => -EAGAIN,
        0x08 => -ENOMEM,
        _ => -EIO,
    }
}

/// The summary line of one command (without the `mlx5_cmd: ` prefix the logger adds).
pub struct Line<'a> {
    pub slot: usize,
    pub input: &'a [u8],
    pub olen: usize,
    pub result: &'a Result<(), Error>,
}

fn header(input: &[u8]) -> (u16, u16) {
    let w = |i: usize| input.get(i..i + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).unwrap_or(0);
    // mbox_in: opcode at bytes 0-1, op_mod at bytes 6-7 (mlx5_ifc.h mlx5_ifc_mbox_in_bits).
    (w(0), w(6))
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (opcode, op_mod) = header(self.input);
        write!(f, "cmd[{}]: {}(0x{opcode:x}) op_mod(0x{op_mod:x}) ", self.slot, opcode_name(opcode))?;
        match *self.result {
            Ok(()) => write!(f, "ok, status OK(0x0), syndrome (0x0)")?,
            Err(Error::Command { status, syndrome, .. }) => write!(
                f,
                "failed, status {}(0x{status:x}), syndrome (0x{syndrome:x}), err({})",
                status_name(status),
                linux_errno(status)
            )?,
            Err(Error::Delivery { status, .. }) => {
                write!(f, "failed, delivery status {}(0x{status:x})", delivery_name(status))?
            }
            Err(Error::CmdTimeout { .. }) => write!(f, "failed, no completion (timeout)")?,
            Err(ref e) => write!(f, "failed, {e}")?,
        }
        write!(f, ", ilen {}, olen {}", self.input.len(), self.olen)
    }
}

/// One row of a hex dump: offset and up to four big-endian dwords (a short tail is zero-padded,
/// as the dump of a 16-byte-granular mailbox reads).
pub struct Row<'a> {
    pub slot: usize,
    pub offset: usize,
    pub bytes: &'a [u8],
}

impl fmt::Display for Row<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cmd[{}]: {:03x}:", self.slot, self.offset)?;
        for d in 0..4 {
            let mut w = [0u8; 4];
            for (i, b) in w.iter_mut().enumerate() {
                *b = self.bytes.get(d * 4 + i).copied().unwrap_or(0);
            }
            write!(f, " {:08x}", u32::from_be_bytes(w))?;
        }
        Ok(())
    }
}

fn dump(slot: usize, opcode: u16, what: &str, msg: &[u8]) {
    log::info!("mlx5_cmd: cmd[{slot}]: dump command data {}(0x{opcode:x}) {what}", opcode_name(opcode));
    for (i, chunk) in msg.chunks(16).enumerate() {
        log::info!("mlx5_cmd: {}", Row { slot, offset: i * 16, bytes: chunk });
    }
}

/// Before the doorbell: in full mode, the input.
#[inline]
pub fn before(mode: TraceMode, slot: usize, input: &[u8]) {
    if mode == TraceMode::Full {
        dump(slot, header(input).0, "INPUT", input);
    }
}

/// After the command ended (completed, failed or timed out): the line, and in full mode the
/// output the firmware wrote (only when it completed).
#[inline]
pub fn after(mode: TraceMode, slot: usize, input: &[u8], output: &[u8], result: &Result<(), Error>) {
    if mode == TraceMode::Off {
        return;
    }
    log::info!("mlx5_cmd: {}", Line { slot, input, olen: output.len(), result });
    if mode == TraceMode::Full && matches!(result, Ok(()) | Err(Error::Command { .. })) {
        dump(slot, header(input).0, "OUTPUT", output);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn input(opcode: u16, op_mod: u16, len: usize) -> alloc::vec::Vec<u8> {
        let mut v = alloc::vec![0u8; len];
        v[0..2].copy_from_slice(&opcode.to_be_bytes());
        v[6..8].copy_from_slice(&op_mod.to_be_bytes());
        v
    }

    #[test]
    fn line_shapes() {
        let i = input(0x100, 1, 16);
        let ok = Ok(());
        assert_eq!(
            format!("{}", Line { slot: 0, input: &i, olen: 4112, result: &ok }),
            "cmd[0]: QUERY_HCA_CAP(0x100) op_mod(0x1) ok, status OK(0x0), syndrome (0x0), ilen 16, olen 4112"
        );
        let i = input(0x500, 0, 272);
        let bad = Err(Error::Command { opcode: 0x500, op_mod: 0, status: 3, syndrome: 0x1a2b3c });
        assert_eq!(
            format!("{}", Line { slot: 0, input: &i, olen: 16, result: &bad }),
            "cmd[0]: CREATE_QP(0x500) op_mod(0x0) failed, status BAD_PARAM(0x3), syndrome (0x1a2b3c), err(-22), ilen 272, olen 16"
        );
        let del = Err(Error::Delivery { opcode: 0x102, op_mod: 0, status: 2 });
        let i = input(0x102, 0, 16);
        assert!(format!("{}", Line { slot: 31, input: &i, olen: 16, result: &del })
            .starts_with("cmd[31]: INIT_HCA(0x102) op_mod(0x0) failed, delivery status TOKEN_ERR(0x2), ilen 16"));
        let to = Err(Error::CmdTimeout { opcode: 0x102, op_mod: 0 });
        assert!(format!("{}", Line { slot: 0, input: &i, olen: 16, result: &to }).contains("failed, no completion (timeout)"));
    }

    #[test]
    fn rows_are_big_endian_dwords_with_offsets() {
        let b: [u8; 20] = core::array::from_fn(|i| i as u8);
        assert_eq!(format!("{}", Row { slot: 0, offset: 0, bytes: &b[..16] }), "cmd[0]: 000: 00010203 04050607 08090a0b 0c0d0e0f");
        assert_eq!(format!("{}", Row { slot: 0, offset: 0x210, bytes: &b[16..] }), "cmd[0]: 210: 10111213 00000000 00000000 00000000");
    }

    #[test]
    fn errno_follows_linux() {
        assert_eq!(linux_errno(0), 0);
        assert_eq!(linux_errno(0x03), -22);
        assert_eq!(linux_errno(0x06), -16);
        assert_eq!(linux_errno(0x08), -12);
        assert_eq!(linux_errno(0x0f), -11);
        assert_eq!(linux_errno(0x01), -5);
        assert_eq!(linux_errno(0x50), -5);
    }

    #[test]
    fn parse_words() {
        assert_eq!(TraceMode::parse("1"), Some(TraceMode::Commands));
        assert_eq!(TraceMode::parse("full"), Some(TraceMode::Full));
        assert_eq!(TraceMode::parse("0"), Some(TraceMode::Off));
        assert_eq!(TraceMode::parse("yes"), None);
    }
}
