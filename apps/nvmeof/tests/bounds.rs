//! Target resource bounds over the soft verbs: no block completion is lost when many queues
//! or one many-range command finish at once.

mod common;
use common::raw::*;
use common::*;

use hal::DmaRegion;
use nvmeof::host::{Host, HostConfig, HostEnv, IoDone, IoKind};
use nvmeof::target::TargetConfig;
use nvmeof::wire::*;
use nvmeof::Status;
use rdma::soft::SoftFabric;
use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::IntoBytes;

/// Every bounded list of the target either applied back-pressure or counted an overflow.
fn assert_no_overflow(w: &World) {
    let t = &w.target.stats;
    assert_eq!((t.block_done_lost, t.closed_overflow, t.read_wait_overflow), (0, 0, 0), "{t:?}");
    let c = &w.target.core.stats;
    assert_eq!((c.aen_overflow, c.reset_overflow), (0, 0), "{c:?}");
}

fn four_queue_cfg() -> TargetConfig {
    TargetConfig { max_io_queues: 4, ..world_cfg() }
}

fn byte(lba: u64, i: usize) -> u8 {
    (lba.wrapping_mul(131) ^ (i as u64).wrapping_mul(7)) as u8
}

/// Fill every slot of every I/O queue (`queues` × 32) before the target runs, so all of them
/// complete in the same target turn; then read each back and check it.
fn all_slots_at_once(queues: u16) {
    let f = SoftFabric::new();
    let mut w = make_world_with(&f, 8192, &[HOSTNQN], four_queue_cfg(), 16);
    let mut hd = host_dev(&f);
    let cfg = HostConfig { hostnqn: HOSTNQN.into(), io_queues: queues, io_depth: 32, max_io_bytes: 4096, ..Default::default() };
    let mut host = Host::connect(&mut hd, &mut w, cfg, SUBNQN).expect("connect");
    assert_eq!(host.io_queues().0, queues);
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 256];
    for write in [true, false] {
        let mut sent = Vec::new();
        for q in 1..=queues {
            for _ in 0..32 {
                let slot = host.alloc_slot(q).expect("free slot");
                let lba = (q as u64 * 32 + slot as u64) * 8;
                let (buf, off, _) = host.slot_buf(q, slot);
                if write {
                    let data: Vec<u8> = (0..4096).map(|i| byte(lba, i)).collect();
                    buf.write(off, &data);
                } else {
                    buf.write(off, &[0u8; 4096]);
                }
                let kind = if write { IoKind::Write } else { IoKind::Read };
                host.submit(&mut hd, q, slot, kind, 1, lba, 8, w.now).expect("submit");
                sent.push((q, slot, lba));
            }
        }
        let total = sent.len();
        let mut got = 0;
        for _ in 0..2000 {
            if got == total {
                break;
            }
            w.idle(&mut hd);
            let n = host.poll(&mut hd, w.now, &mut done).expect("poll");
            for d in &done[..n] {
                assert!(d.status.is_success(), "{:?}", d.status);
                let i = sent.iter().position(|s| s.0 == d.queue && s.1 == d.slot).expect("known slot");
                let (q, slot, lba) = sent.swap_remove(i);
                if !write {
                    let (buf, off, _) = host.slot_buf(q, slot);
                    let mut data = vec![0u8; 4096];
                    buf.read(off, &mut data);
                    assert!(data.iter().enumerate().all(|(i, b)| *b == byte(lba, i)), "lba {lba} read back wrong");
                }
            }
            got += n;
        }
        assert_eq!(got, total, "{queues} queues x 32: {} commands never completed", total - got);
    }
    assert_no_overflow(&w);
}

#[test]
fn three_io_queues_at_qd32_complete() {
    all_slots_at_once(3);
}

#[test]
fn four_io_queues_at_qd32_complete() {
    all_slots_at_once(4);
}

/// One Dataset Management (deallocate) command with 256 ranges: 256 block completions for one
/// command in one turn, four times the transport's batch.
#[test]
fn dsm_with_256_ranges_completes() {
    let f = SoftFabric::new();
    let mut w = make_world(&f, 8192, &[HOSTNQN]);
    let mut hd = host_dev(&f);
    let (_admin, cntlid) = setup(&mut hd, &mut w);
    let mut q = io_queue(&mut hd, &mut w, cntlid);
    let mut ranges = Vec::new();
    for i in 0..256u64 {
        let r = DsmRange { cattr: U32::new(0), nlb: U32::new(4), slba: U64::new(i * 16) };
        ranges.extend_from_slice(r.as_bytes());
    }
    q.data.write(0, &ranges);
    for round in 0..3u16 {
        let mut s = sqe(io_op::DSM, 40 + round);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(255);
        s.cdw11 = U32::new(DSM_ATTR_DEALLOCATE);
        s.dptr = q.keyed(ranges.len() as u32);
        let c = q.try_xchg(&mut hd, &mut w, s.as_bytes()).expect("DSM answered");
        assert_eq!(c.cid.get(), 40 + round);
        assert!(st(&c).is_success(), "{:?}", st(&c));
        // The queue still serves.
        read_ok(&mut q, &mut hd, &mut w, 50 + round);
    }
    assert_no_overflow(&w);
}
