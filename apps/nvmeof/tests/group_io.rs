//! A poll group's own I/O handles of the namespaces (`Core::group_io`, SPDK's io_channel per
//! poller) over the mlx5 driver and the emulated ConnectX: with 2 and 4 groups every Read and
//! Write executes and completes on the handle of the group that received it (none on the
//! core's store, whose owner's poll takes none of them), timed per group and folded into the
//! namespace's device latency; a handle that fails in one group takes the namespace out of
//! service for every group; a failed command's error log entry, noted by its group and written
//! by the owner, reads as before.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use blockdev::{BlockDevice, BlockDone, BlockError, BlockIo, RamNamespace};
use nvmeof::host::{Host, IoDone, IoKind};
use nvmeof::Status;
use rdma::Control;
use testbed::{Node, SimHal};

use crate::emu_pair::*;
use crate::poll_groups::verified_spread;

/// What the test reads of a [`Tracked`] store and its handles, by handle number (0: the store
/// the core holds; 1.. the handles in the order the poll groups made them).
#[derive(Default)]
struct Board {
    submitted: Vec<u64>,
    completed: Vec<u64>,
    /// The handle reports failed, and completes everything with a device error.
    fail: Vec<bool>,
    /// The store offers no direct memory: Reads and Writes go through the queues' buffers,
    /// a keyed Write submitted once its data is in (`write_fetched`).
    no_direct: bool,
}

/// A RAM namespace whose handles are numbered and counted and may each fail on its own. It
/// never carries an I/O out at once (`execute_direct`: none), so every I/O is submitted and
/// polled back.
struct Tracked {
    ram: RamNamespace<SimHal>,
    id: usize,
    board: Arc<Mutex<Board>>,
}

impl Tracked {
    fn new(t: &Node, board: &Arc<Mutex<Board>>) -> Tracked {
        let mut b = board.lock().unwrap();
        b.submitted.push(0);
        b.completed.push(0);
        b.fail.push(false);
        Tracked { ram: RamNamespace::new(t.hal.clone(), NS_BYTES, 512).expect("namespace memory"), id: 0, board: board.clone() }
    }
}

impl BlockDevice for Tracked {
    ram_geometry!();
    fn submit(&mut self, io: &BlockIo) -> Result<(), BlockError> {
        self.ram.submit(io)?;
        self.board.lock().unwrap().submitted[self.id] += 1;
        Ok(())
    }
    fn poll(&mut self, out: &mut [BlockDone]) -> usize {
        let n = self.ram.poll(out);
        let mut b = self.board.lock().unwrap();
        b.completed[self.id] += n as u64;
        if b.fail[self.id] {
            for d in &mut out[..n] {
                d.result = Err(BlockError::Device { sct: 0, sc: 0x06, dnr: true });
            }
        }
        n
    }
    fn direct(&self, lba: u64, blocks: u32) -> Option<hal::DmaSlice> {
        self.ram.direct(lba, blocks).filter(|_| !self.board.lock().unwrap().no_direct)
    }
    fn direct_region(&self) -> Option<hal::DmaSlice> {
        self.ram.direct_region().filter(|_| !self.board.lock().unwrap().no_direct)
    }
    fn failed(&self) -> bool {
        self.board.lock().unwrap().fail[self.id]
    }
    fn io_handle(&mut self) -> Result<Self, BlockError> {
        let ram = self.ram.io_handle()?;
        let mut b = self.board.lock().unwrap();
        b.submitted.push(0);
        b.completed.push(0);
        b.fail.push(false);
        Ok(Tracked { ram, id: b.submitted.len() - 1, board: self.board.clone() })
    }
}

/// A device clock for the test: each reading 100 ns after the last.
fn tick() -> u64 {
    static T: AtomicU64 = AtomicU64::new(0);
    T.fetch_add(100, Ordering::Relaxed)
}

/// One 4 KiB I/O of `kind` at `lba` on queue `q`, its answer's status.
fn one_io(w: &mut World<Tracked>, h: &mut Node, host: &mut Host<V>, q: u16, kind: IoKind, lba: u64) -> Status {
    let slot = host.alloc_slot(q).expect("slot");
    host.submit(&mut h.v, q, slot, kind, 1, lba, 8, w.clock.now_ns()).expect("submit");
    let mut done = [IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 8];
    for _ in 0..1_000_000 {
        h.v.poll();
        let got = host.poll(&mut h.v, w.clock.now_ns(), &mut done).unwrap_or(0);
        if let Some(d) = done[..got].iter().find(|d| d.queue == q && d.slot == slot) {
            return d.status;
        }
        w.turn();
    }
    panic!("I/O on queue {q} never answered");
}

/// 2 and 4 poll groups, 4 I/O queues at QD32: every Read and Write the store is given goes to
/// the handle of the group holding its queue and comes back from it (the core's store and the
/// owner's poll see none), each group's handle timed on its own, the namespace's device
/// latency folding them. With 2 groups the namespace's memory is direct (Writes land by RDMA
/// READ and reach no store); with 4 it is not (each Write is submitted once its data is in).
#[test]
fn reads_and_writes_complete_on_their_groups_own_handle_timed_per_group() {
    for groups in [2usize, 4] {
        let board = Arc::new(Mutex::new(Board { no_direct: groups == 4, ..Board::default() }));
        let (mut w, mut h) = setup_on(4, groups, |t| Tracked::new(t, &board));
        assert!(w.target.core.set_device_clock(tick));
        let mut host = Host::connect(&mut h.v, &mut w, four_queues(32), SUBNQN).expect("connect");
        let n = verified_spread(&mut w, &mut h, &mut host, &[1, 2, 3, 4], 2_000, 32, 11 + groups as u64, |_, _| None);
        assert_eq!(n, 4_000);
        let b = board.lock().unwrap();
        assert_eq!(b.submitted.len(), groups + 1, "one handle per group");
        assert_eq!((b.submitted[0], b.completed[0]), (0, 0), "the core's store took none of the groups' I/O");
        // Each group's handle took exactly its queues' Reads (and, without direct memory,
        // Writes) and gave every one back.
        let qs: Vec<_> = w.target.queue_reports().collect();
        let stored = |q: &nvmeof::nvmet::rdma::QueueReport| (q.bytes_read + if groups == 4 { q.bytes_written } else { 0 }) / 4096;
        let mut total = 0;
        for g in 0..groups {
            let io: u64 = qs.iter().filter(|q| q.qid != 0 && q.group as usize == g).map(stored).sum();
            total += io;
            assert_eq!((b.submitted[g + 1], b.completed[g + 1]), (io, io), "group {g}'s handle: {qs:?}");
        }
        assert!(b.submitted[1..].iter().filter(|&&k| k > 0).count() >= 2, "I/O spread over the groups' handles");
        assert_eq!((w.target.block_inflight_count(), w.target.core.block_inflight_count()), (0, 0));
        assert_eq!(total, if groups == 4 { 4_000 } else { 2_000 });
        // Every I/O the store was given timed once, by its group's handle; none outstanding.
        let ns: Vec<_> = w.target.namespace_stats().collect();
        assert_eq!(ns[0].device_latency.as_ref().expect("timed").count(), total);
        assert_eq!(ns[0].in_flight, Some(0));
        assert_eq!((ns[0].stats.reads, ns[0].stats.writes), (2_000, 2_000));
    }
}

/// 2 poll groups: the handle of the group serving queue 1 fails; the I/O it answers fails, the
/// namespace goes out of service for every group (another group's queue is answered Invalid
/// Namespace, its handle never asked), announced once.
#[test]
fn a_failing_handle_in_one_group_fails_the_namespace_for_every_group() {
    let board = Arc::new(Mutex::new(Board::default()));
    let (mut w, mut h) = setup_on(4, 2, |t| Tracked::new(t, &board));
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(32), SUBNQN).expect("connect");
    assert_eq!(one_io(&mut w, &mut h, &mut host, 1, IoKind::Write, 64), Status::SUCCESS);
    let qs: Vec<_> = w.target.queue_reports().collect();
    let group_of = |qid: u16| qs.iter().find(|q| q.qid == qid).expect("queue").group as usize;
    let g1 = group_of(1);
    let other = (2..=4).find(|&q| group_of(q) != g1).expect("a queue in the other group");
    board.lock().unwrap().fail[g1 + 1] = true;
    let st = one_io(&mut w, &mut h, &mut host, 1, IoKind::Read, 64);
    assert!(!st.is_success(), "the failed handle's Read: {st:?}");
    assert!(w.target.namespace_stats().next().expect("namespace").stats.failed, "out of service");
    let asked = board.lock().unwrap().submitted.clone();
    assert_eq!(one_io(&mut w, &mut h, &mut host, other, IoKind::Read, 64), Status::INVALID_NS);
    assert_eq!(one_io(&mut w, &mut h, &mut host, 1, IoKind::Write, 64), Status::INVALID_NS);
    assert_eq!(board.lock().unwrap().submitted, asked, "no handle asked once the namespace is out of service");
}

/// 2 poll groups: a Read past the namespace's end on each I/O queue is answered LBA Out of
/// Range; each group notes it and the owner writes it into the controller's error log, which
/// the host reads with every entry (newest first, its queue, command, status and NSID) and the
/// error count, as when the turn wrote the log itself.
#[test]
fn io_errors_noted_by_the_groups_reach_the_controllers_error_log() {
    let board = Arc::new(Mutex::new(Board::default()));
    let (mut w, mut h) = setup_on(4, 2, |t| Tracked::new(t, &board));
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(32), SUBNQN).expect("connect");
    let end = NS_BYTES / 512;
    let mut cids = vec![];
    for q in 1..=4u16 {
        assert_eq!(one_io(&mut w, &mut h, &mut host, q, IoKind::Read, end - 4), Status::LBA_RANGE);
        cids.push(q);
    }
    assert!(w.target.queue_reports().map(|q| q.group).collect::<std::collections::BTreeSet<_>>().len() == 2, "both groups serve");
    let mut log = [0u8; 64 * 4];
    host.get_log(&mut h.v, &mut w, nvmeof::wire::lid::ERROR, false, 0, &mut log).expect("Error Information log");
    for (k, e) in log.chunks(64).enumerate() {
        let (count, sqid, status, nsid) = (u64::from_le_bytes(e[0..8].try_into().unwrap()), u16::from_le_bytes([e[8], e[9]]), u16::from_le_bytes([e[12], e[13]]), u32::from_le_bytes(e[24..28].try_into().unwrap()));
        // Newest first: queue 4's error is entry 0, with error count 4.
        assert_eq!((count, sqid, nsid), (4 - k as u64, 4 - k as u16, 1), "entry {k}");
        assert_eq!(status >> 1 & 0xFF, Status::LBA_RANGE.sc as u16, "entry {k}: status field {status:#x}");
    }
    assert_eq!(w.target.core_stats().errors, 4);
}


/// 2 poll groups: the namespace change that a failing handle in one group raises (the
/// namespace out of service) completes the controller's AER, which sits on its admin queue in
/// the other group: the owner sends it to that group on its ring, and the group answers it in
/// its turn (none lost).
#[test]
fn an_event_raised_by_io_in_one_group_completes_the_aer_in_the_admin_queues_group() {
    let board = Arc::new(Mutex::new(Board::default()));
    let (mut w, mut h) = setup_on(4, 2, |t| Tracked::new(t, &board));
    let mut host = Host::connect(&mut h.v, &mut w, four_queues(32), SUBNQN).expect("connect");
    let qs: Vec<_> = w.target.queue_reports().collect();
    let group_of = |qid: u16| qs.iter().find(|q| q.qid == qid).expect("queue").group as usize;
    let q = (1..=4).find(|&q| group_of(q) != group_of(0)).expect("an I/O queue outside the admin queue's group");
    board.lock().unwrap().fail[group_of(q) + 1] = true;
    assert!(!one_io(&mut w, &mut h, &mut host, q, IoKind::Read, 64).is_success(), "the failed handle's Read");
    for _ in 0..10_000 {
        if host.stats.aens > 0 {
            break;
        }
        h.v.poll();
        host.tick(&mut h.v, w.clock.now_ns()).expect("admin queue");
        w.turn();
    }
    assert_eq!(host.stats.aens, 1, "the AER completed");
    assert_eq!(host.last_aen, Some(nvmeof::wire::AEN_NS_CHANGED));
    assert_eq!(w.target.stats().aers_lost, 0);
}
