//! Local loopback: a frame the port transmits to its own MAC address comes back in on the same
//! port without touching the wire, as on a real ConnectX while the NIC vport context's
//! `disable_uc_local_lb` is 0 [mlx5_ifc.h nic_vport_context; Linux mlx5_ib turns it off and on
//! with `mlx5_nic_vport_update_local_lb`, rdma-core's loopback tests rely on it]. This is what
//! lets one adapter run RC traffic between two of its own QPs (the appliance's
//! `selftest=connectx`) with no cable or peer.
//!
//! Only unicast to the port's own MAC loops back here; broadcast and multicast frames (governed by
//! `disable_mc_local_lb` on hardware) go to the wire only, so the driver never receives its own
//! ARP requests. Looped frames are delivered on the next data-path turn, in order.
use std::collections::VecDeque;

use emu_roce::Link;

/// Most frames held for the next turn; beyond it a looped frame is dropped (counted), as a full
/// internal loopback buffer drops on hardware.
pub const QUEUE_MAX: usize = 4096;

/// Loopback state of the port (frames in flight and counters).
#[derive(Default)]
pub struct Loopback {
    queue: VecDeque<Vec<u8>>,
    /// Frames looped back / dropped because the queue was full.
    pub looped: u64,
    pub dropped: u64,
}

impl Loopback {
    /// A link for one turn: frames to `own_mac` (when `enabled`) are queued for this port,
    /// everything else goes to `wire` (dropped when there is none: no cable, port down); `poll`
    /// returns looped frames first, then the wire's.
    pub fn link<'a>(&'a mut self, wire: Option<&'a mut dyn Link>, own_mac: [u8; 6], enabled: bool) -> LoopLink<'a> {
        LoopLink { lb: self, wire, own_mac, enabled }
    }

    /// Frames waiting to come back in.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Forget frames in flight (the port's engine went away: teardown, reset).
    pub fn clear(&mut self) {
        self.queue.clear();
    }
}

/// The port as the engine sees it for one turn (see [`Loopback::link`]).
pub struct LoopLink<'a> {
    lb: &'a mut Loopback,
    wire: Option<&'a mut dyn Link>,
    own_mac: [u8; 6],
    enabled: bool,
}

impl Link for LoopLink<'_> {
    fn send(&mut self, frame: &[u8]) {
        if self.enabled && frame.get(..6) == Some(&self.own_mac[..]) {
            if self.lb.queue.len() >= QUEUE_MAX {
                self.lb.dropped += 1;
            } else {
                self.lb.queue.push_back(frame.to_vec());
                self.lb.looped += 1;
            }
            return;
        }
        if let Some(w) = self.wire.as_mut() {
            w.send(frame);
        }
    }

    fn poll(&mut self) -> Option<Vec<u8>> {
        if let Some(f) = self.lb.queue.pop_front() {
            return Some(f);
        }
        self.wire.as_mut().and_then(|w| w.poll())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Wire {
        sent: Vec<Vec<u8>>,
        rx: VecDeque<Vec<u8>>,
    }
    impl Link for Wire {
        fn send(&mut self, f: &[u8]) {
            self.sent.push(f.to_vec());
        }
        fn poll(&mut self) -> Option<Vec<u8>> {
            self.rx.pop_front()
        }
    }

    const ME: [u8; 6] = [2, 0, 0, 0, 0, 1];
    fn frame(dst: [u8; 6], tag: u8) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&ME);
        f.push(tag);
        f
    }

    #[test]
    fn own_mac_loops_back_before_wire_frames_others_go_out() {
        let mut lb = Loopback::default();
        let mut w = Wire::default();
        w.rx.push_back(frame(ME, 9));
        {
            let mut l = lb.link(Some(&mut w), ME, true);
            l.send(&frame(ME, 1));
            l.send(&frame([2, 0, 0, 0, 0, 2], 2));
            l.send(&frame([0xff; 6], 3));
            l.send(&frame(ME, 4));
            assert_eq!(l.poll(), Some(frame(ME, 1)));
            assert_eq!(l.poll(), Some(frame(ME, 4)));
            assert_eq!(l.poll(), Some(frame(ME, 9)));
            assert_eq!(l.poll(), None);
        }
        assert_eq!(w.sent, vec![frame([2, 0, 0, 0, 0, 2], 2), frame([0xff; 6], 3)]);
        assert_eq!((lb.looped, lb.dropped), (2, 0));
    }

    #[test]
    fn disabled_sends_own_mac_to_the_wire_and_no_wire_drops() {
        let mut lb = Loopback::default();
        let mut w = Wire::default();
        lb.link(Some(&mut w), ME, false).send(&frame(ME, 1));
        assert_eq!(w.sent.len(), 1);
        assert_eq!(lb.pending(), 0);
        // No cable: looped frames still come back, others vanish.
        let mut l = lb.link(None, ME, true);
        l.send(&frame(ME, 2));
        l.send(&frame([2, 0, 0, 0, 0, 2], 3));
        assert_eq!(l.poll(), Some(frame(ME, 2)));
        assert_eq!(l.poll(), None);
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let mut lb = Loopback::default();
        let mut l = lb.link(None, ME, true);
        for i in 0..QUEUE_MAX + 3 {
            l.send(&frame(ME, i as u8));
        }
        assert_eq!((lb.looped, lb.dropped, lb.pending()), (QUEUE_MAX as u64, 3, QUEUE_MAX));
        lb.clear();
        assert_eq!(lb.pending(), 0);
    }
}
