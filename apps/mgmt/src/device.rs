//! device: the smoltcp `Device` the interface polls: two bounded frame rings (received frames
//! waiting for the stack, frames the stack produced waiting for the port), allocated once. The
//! stack moves frames between these rings and the [`crate::FramePort`] itself, a budget's worth
//! per turn, so the device holds no borrow of the port.

use alloc::vec;
use alloc::vec::Vec;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// A fixed ring of `slots` frames of at most `slot_len` bytes.
pub struct Ring {
    buf: Vec<u8>,
    lens: Vec<usize>,
    slot_len: usize,
    head: usize,
    len: usize,
}

impl Ring {
    pub fn new(slots: usize, slot_len: usize) -> Ring {
        let slots = slots.max(1);
        Ring { buf: vec![0; slots * slot_len], lens: vec![0; slots], slot_len, head: 0, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.lens.len()
    }

    /// Fill the next free slot with `fill(slot) -> length`; false when the ring is full.
    pub fn push_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> bool {
        let Some(slot) = self.free_slot() else { return false };
        let n = fill(slot);
        self.commit(n);
        true
    }

    /// The next free slot (whole), to be filled and then [`Ring::commit`]ted.
    pub fn free_slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let i = (self.head + self.len) % self.lens.len();
        Some(&mut self.buf[i * self.slot_len..(i + 1) * self.slot_len])
    }

    /// Make the slot [`Ring::free_slot`] gave a frame of `n` bytes.
    pub fn commit(&mut self, n: usize) {
        if self.is_full() {
            return;
        }
        let i = (self.head + self.len) % self.lens.len();
        self.lens[i] = n.min(self.slot_len);
        self.len += 1;
    }

    /// Hand the oldest frame to `f` and free its slot.
    pub fn pop_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        if self.len == 0 {
            return None;
        }
        let i = self.head;
        let n = self.lens[i];
        let r = f(&mut self.buf[i * self.slot_len..i * self.slot_len + n]);
        self.head = (self.head + 1) % self.lens.len();
        self.len -= 1;
        Some(r)
    }
}

/// The device: `rx` is filled from the port, `tx` drained to it.
pub struct RingDevice {
    pub rx: Ring,
    pub tx: Ring,
    mtu: usize,
    /// Frames the stack wanted to send while `tx` was full (it retries; counted).
    pub tx_full: u64,
}

impl RingDevice {
    /// Rings of `rx_slots` frames of up to `rx_len` bytes and `tx_slots` frames of up to `mtu`
    /// bytes (Ethernet header included; the interface's MTU).
    pub fn new(rx_slots: usize, tx_slots: usize, rx_len: usize, mtu: usize) -> RingDevice {
        RingDevice { rx: Ring::new(rx_slots, rx_len), tx: Ring::new(tx_slots, mtu), mtu, tx_full: 0 }
    }
}

pub struct RxToken<'a>(&'a mut Ring);
pub struct TxToken<'a>(&'a mut Ring, usize);

impl phy::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        // `receive` hands a token out only when a frame waits; an empty frame is dropped
        // by the interface as malformed otherwise.
        let mut f = Some(f);
        let r = self.0.pop_with(|b| f.take().map(|f| f(b)));
        match (r.flatten(), f) {
            (Some(r), _) => r,
            (None, Some(f)) => f(&[]),
            (None, None) => unreachable!("the frame closure ran and returned"),
        }
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let len = len.min(self.1);
        match self.0.free_slot() {
            Some(slot) => {
                let r = f(&mut slot[..len]);
                self.0.commit(len);
                r
            }
            // `transmit`/`receive` hand a token out only when a slot is free and the token
            // borrows the ring, so this is not reached; the frame would go nowhere.
            None => f(&mut vec![0u8; len]),
        }
    }
}

impl phy::Device for RingDevice {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _t: Instant) -> Option<(RxToken<'_>, TxToken<'_>)> {
        if self.rx.is_empty() {
            return None;
        }
        if self.tx.is_full() {
            // A received frame may need an answer: keep it until there is room.
            self.tx_full += 1;
            return None;
        }
        let mtu = self.mtu;
        Some((RxToken(&mut self.rx), TxToken(&mut self.tx, mtu)))
    }

    fn transmit(&mut self, _t: Instant) -> Option<TxToken<'_>> {
        if self.tx.is_full() {
            self.tx_full += 1;
            return None;
        }
        let mtu = self.mtu;
        Some(TxToken(&mut self.tx, mtu))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = self.mtu;
        c.max_burst_size = Some(self.tx.lens.len());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_fifo() {
        let mut r = Ring::new(2, 8);
        assert!(r.push_with(|s| {
            s[0] = 1;
            1
        }));
        assert!(r.push_with(|s| {
            s[..2].copy_from_slice(&[2, 2]);
            2
        }));
        assert!(!r.push_with(|_| 1), "third frame refused");
        assert_eq!(r.pop_with(|b| b.to_vec()), Some(alloc::vec![1]));
        assert_eq!(r.pop_with(|b| b.to_vec()), Some(alloc::vec![2, 2]));
        assert_eq!(r.pop_with(|b| b.len()), None);
        // An oversized length is clipped to the slot.
        assert!(r.push_with(|_| 100));
        assert_eq!(r.pop_with(|b| b.len()), Some(8));
    }
}
