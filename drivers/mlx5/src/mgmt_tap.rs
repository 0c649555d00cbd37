//! mgmt_tap: the frames of the raw Ethernet queue a management network stack takes (anything
//! that is not RoCE for us: IPv4 ICMP/TCP/UDP, and copies of ARP), kept in a bounded ring
//! allocated once; when it is full further frames are dropped and counted (their senders
//! retry). [`crate::Mlx5Verbs::enable_mgmt_frames`] turns it on.

use alloc::vec;
use alloc::vec::Vec;

/// Largest frame kept (a standard Ethernet frame without FCS; the raw RQ's buffers are larger).
pub const FRAME_MAX: usize = 1514;

/// A ring of `slots` frames.
pub struct FrameTap {
    buf: Vec<u8>,
    lens: Vec<u16>,
    head: usize,
    len: usize,
    /// Frames queued / dropped because the ring was full / longer than [`FRAME_MAX`].
    pub queued: u64,
    pub dropped: u64,
    pub too_long: u64,
}

impl FrameTap {
    pub fn new(slots: usize) -> FrameTap {
        let slots = slots.max(1);
        FrameTap { buf: vec![0; slots * FRAME_MAX], lens: vec![0; slots], head: 0, len: 0, queued: 0, dropped: 0, too_long: 0 }
    }

    /// Keep a copy of `frame` (dropped and counted when full or too long).
    pub fn push(&mut self, frame: &[u8]) {
        if frame.len() > FRAME_MAX {
            self.too_long += 1;
            return;
        }
        if self.len == self.lens.len() {
            self.dropped += 1;
            return;
        }
        let i = (self.head + self.len) % self.lens.len();
        self.buf[i * FRAME_MAX..i * FRAME_MAX + frame.len()].copy_from_slice(frame);
        self.lens[i] = frame.len() as u16;
        self.len += 1;
        self.queued += 1;
    }

    /// The oldest frame copied into `out` (cut to its length); its length, or `None`.
    pub fn pop(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let i = self.head;
        let n = (self.lens[i] as usize).min(out.len());
        out[..n].copy_from_slice(&self.buf[i * FRAME_MAX..i * FRAME_MAX + n]);
        self.head = (self.head + 1) % self.lens.len();
        self.len -= 1;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fifo() {
        let mut t = FrameTap::new(2);
        t.push(&[1; 60]);
        t.push(&[2; 70]);
        t.push(&[3; 80]);
        t.push(&[4; FRAME_MAX + 1]);
        assert_eq!((t.queued, t.dropped, t.too_long), (2, 1, 1));
        let mut b = [0u8; 2048];
        assert_eq!(t.pop(&mut b), Some(60));
        assert_eq!(b[0], 1);
        assert_eq!(t.pop(&mut b[..10]), Some(10));
        assert_eq!(b[0], 2);
        assert_eq!(t.pop(&mut b), None);
    }
}
