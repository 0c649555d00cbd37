//! port: where the management stack's Ethernet frames come from and go to. The mlx5 driver's
//! raw Ethernet queue implements it ([`mlx5::Mlx5Verbs`] keeps a bounded queue of the frames
//! that are not RoCE for it); tests use an in-memory pair.

use hal::{Hal, Mmio};

/// A source and sink of whole Ethernet frames (no FCS).
pub trait FramePort {
    /// The next received frame copied into `buf` (its length), or `None` when none waits.
    fn recv_frame(&mut self, buf: &mut [u8]) -> Option<usize>;
    /// Send one frame; false when it could not be queued (the stack's protocols retry).
    fn send_frame(&mut self, frame: &[u8]) -> bool;
    /// The port's Ethernet address.
    fn mac(&self) -> [u8; 6];
    /// The largest frame `send_frame` takes (Ethernet header included, FCS excluded).
    fn max_frame(&self) -> usize;
}

impl<H: Hal, M: Mmio> FramePort for mlx5::Mlx5Verbs<H, M> {
    fn recv_frame(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.mgmt_recv(buf)
    }
    fn send_frame(&mut self, frame: &[u8]) -> bool {
        self.mgmt_send(frame)
    }
    fn mac(&self) -> [u8; 6] {
        rdma::Neighbours::local_mac(self)
    }
    fn max_frame(&self) -> usize {
        mlx5::MAX_FRAME
    }
}
