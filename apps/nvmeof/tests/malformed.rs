//! Malformed capsules, SGLs and lengths get NVMe error statuses on that command while the
//! queue keeps serving; bounded-time fuzz of the capsule/SGL/Fabrics parsing paths.

use crate::common;
use common::raw::*;
use common::*;

use hal::{DmaRegion, DmaSlice};
use nvmeof::host::{cm_req_private, property_get_sqe, property_set_sqe, HostEnv};
use nvmeof::nvmet::{Core, DataIn, QueueState, TargetConfig};
use nvmeof::wire::*;
use nvmeof::Status;
use proptest::prelude::*;
use testbed::soft::SoftFabric;
use rdma::*;
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

#[test]
fn malformed_admin_and_io_capsules_get_statuses() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 1024, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);

    // Before Connect: anything else is a sequence error.
    let mut pre = Raw::connect(&mut hd, &mut w, 0, 32);
    let mut id = sqe(admin_op::IDENTIFY, 5);
    id.cdw10 = U32::new(1);
    id.dptr = pre.keyed(4096);
    assert_eq!(st(&pre.xchg(&mut hd, &mut w, id.as_bytes())), Status::CMD_SEQ_ERROR);

    let (mut a, cntlid) = setup(&mut hd, &mut w);
    let cases: Vec<(Vec<u8>, Status, &str)> = {
        let mut v = Vec::new();
        // Short capsule.
        let s = sqe(admin_op::KEEP_ALIVE, 10);
        v.push((s.as_bytes()[..32].to_vec(), Status::INVALID_FIELD, "short capsule"));
        // SGL type 0x00 / reserved subtype.
        let mut s = sqe(admin_op::IDENTIFY, 11);
        s.dptr.typ = 0x00;
        v.push((s.as_bytes().to_vec(), Status::SGL_INVALID_TYPE, "sgl type 0"));
        let mut s = sqe(admin_op::IDENTIFY, 12);
        s.dptr.typ = 0x42;
        v.push((s.as_bytes().to_vec(), Status::SGL_INVALID_TYPE, "keyed subtype 2"));
        // PRP instead of SGL.
        let mut s = sqe(admin_op::KEEP_ALIVE, 13);
        s.flags = 0;
        v.push((s.as_bytes().to_vec(), Status::INVALID_FIELD, "PSDT PRP"));
        // Unknown opcodes.
        v.push((sqe(0x7E, 14).as_bytes().to_vec(), Status::INVALID_OPCODE, "unknown admin opcode"));
        let mut s = sqe(FABRICS_OPCODE, 15);
        s.set_fctype(0x33);
        v.push((s.as_bytes().to_vec(), Status::INVALID_OPCODE, "unknown fctype"));
        // Identify with a too-short and a too-long SGL.
        let mut s = sqe(admin_op::IDENTIFY, 16);
        s.cdw10 = U32::new(1);
        s.dptr = a.keyed(100);
        v.push((s.as_bytes().to_vec(), Status::SGL_INVALID_DATA, "identify short sgl"));
        let mut s = sqe(admin_op::IDENTIFY, 17);
        s.dptr = a.keyed(60_000);
        v.push((s.as_bytes().to_vec(), Status::SGL_INVALID_DATA, "sgl beyond MDTS"));
        // In-capsule data on the admin queue.
        let mut s = sqe(admin_op::SET_FEATURES, 18);
        s.dptr = Sgl::Inline { offset: 0, len: 16 }.encode();
        v.push((s.as_bytes().to_vec(), Status::INVALID_FIELD, "inline on admin (len says 16, capsule 64)"));
        // Bad CNS, bad log page, bad property, bad feature.
        let mut s = sqe(admin_op::IDENTIFY, 19);
        s.cdw10 = U32::new(0x55);
        s.dptr = a.keyed(4096);
        v.push((s.as_bytes().to_vec(), Status::INVALID_FIELD, "bad CNS"));
        let mut s = sqe(admin_op::IDENTIFY, 20);
        s.nsid = U32::new(77);
        s.dptr = a.keyed(4096);
        v.push((s.as_bytes().to_vec(), Status::INVALID_NS, "identify unknown nsid"));
        let mut s = sqe(admin_op::GET_LOG_PAGE, 21);
        s.cdw10 = U32::new(0xC0 | (127 << 16));
        s.dptr = a.keyed(512);
        v.push((s.as_bytes().to_vec(), Status::INVALID_LOG_PAGE, "bad LID"));
        let mut s = sqe(admin_op::GET_LOG_PAGE, 22);
        s.cdw10 = U32::new(0x02 | (1023 << 16));
        s.dptr = a.keyed(512);
        v.push((s.as_bytes().to_vec(), Status::SGL_INVALID_DATA, "NUMD > SGL"));
        let mut p = property_get_sqe(0x44, false);
        p.cid = U16::new(23);
        v.push((p.as_bytes().to_vec(), Status::INVALID_FIELD, "bad property"));
        let mut s = sqe(admin_op::SET_FEATURES, 24);
        s.cdw10 = U32::new(0x7F);
        v.push((s.as_bytes().to_vec(), Status::INVALID_FIELD, "bad feature"));
        let mut s = sqe(admin_op::SET_FEATURES, 25);
        s.cdw10 = U32::new(fid::NUM_QUEUES as u32);
        s.cdw11 = U32::new(0xFFFF_FFFF);
        v.push((s.as_bytes().to_vec(), Status::INVALID_FIELD, "num queues 65536"));
        // Second Connect on a connected queue.
        let mut s = connect_sqe(0, 31, 26);
        s.dptr = a.keyed(1024);
        v.push((s.as_bytes().to_vec(), Status::CMD_SEQ_ERROR, "reconnect on live queue"));
        // I/O opcode on the admin queue (0x01 is not an admin opcode we serve).
        v.push((sqe(io_op::WRITE, 27).as_bytes().to_vec(), Status::INVALID_OPCODE, "write on admin queue"));
        v
    };
    for (cap, want, what) in &cases {
        let c = a.xchg(&mut hd, &mut w, cap);
        let cid = if cap.len() >= 4 { u16::from_le_bytes([cap[2], cap[3]]) } else { 0 };
        assert_eq!(c.cid.get(), cid, "{what}");
        assert_eq!(st(&c), *want, "{what}");
        assert!(st(&c).dnr, "{what}: DNR");
        assert_eq!(c.sqid.get(), 0);
    }
    // The admin queue still works and the errors are logged.
    let mut gl = sqe(admin_op::GET_LOG_PAGE, 30);
    gl.cdw10 = U32::new(lid::ERROR as u32 | (15 << 16));
    gl.dptr = a.keyed(64);
    assert!(st(&a.xchg(&mut hd, &mut w, gl.as_bytes())).is_success());
    let mut e = [0u8; 64];
    a.data.read(0, &mut e);
    let e = ErrorLogEntry::read_from_bytes(&e).unwrap();
    assert!(e.error_count.get() >= cases.len() as u64);
    assert_eq!(e.cmdid.get(), 27);

    // I/O queue.
    let mut q = io_queue(&mut hd, &mut w, cntlid);
    read_ok(&mut q, &mut hd, &mut w, 40);
    let io_cases: Vec<(Vec<u8>, Status, &str)> = {
        let mut v = Vec::new();
        let mut s = sqe(io_op::WRITE, 41);
        s.nsid = U32::new(1);
        s.dptr = Sgl::Inline { offset: 100, len: 512 }.encode();
        let mut cap = s.as_bytes().to_vec();
        cap.extend_from_slice(&[0xAB; 512]);
        v.push((cap, Status::SGL_INVALID_OFFSET, "inline offset past the capsule"));
        let mut s = sqe(io_op::WRITE, 42);
        s.nsid = U32::new(1);
        s.dptr = Sgl::Inline { offset: 0, len: 1024 }.encode();
        let mut cap = s.as_bytes().to_vec();
        cap.extend_from_slice(&[0xAB; 512]);
        v.push((cap, Status::SGL_INVALID_OFFSET, "inline length past the capsule"));
        let mut s = sqe(io_op::READ, 43);
        s.nsid = U32::new(1);
        s.dptr = Sgl::Inline { offset: 0, len: 512 }.encode();
        let mut cap = s.as_bytes().to_vec();
        cap.extend_from_slice(&[0; 512]);
        v.push((cap, Status::INVALID_FIELD, "inline data on a read"));
        let mut s = sqe(io_op::WRITE, 44);
        s.nsid = U32::new(1);
        s.cdw12 = U32::new(1); // 2 blocks but 512 bytes
        s.dptr = Sgl::Inline { offset: 0, len: 512 }.encode();
        let mut cap = s.as_bytes().to_vec();
        cap.extend_from_slice(&[0xAB; 512]);
        v.push((cap, Status::SGL_INVALID_DATA, "NLB vs SGL length"));
        let mut s = sqe(io_op::READ, 45);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(1024);
        s.dptr = q.keyed(512);
        v.push((s.as_bytes().to_vec(), Status::LBA_RANGE, "LBA past the end"));
        let mut s = sqe(io_op::READ, 46);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(u32::MAX);
        s.cdw11 = U32::new(u32::MAX);
        s.dptr = q.keyed(512);
        v.push((s.as_bytes().to_vec(), Status::LBA_RANGE, "LBA overflow"));
        let mut s = sqe(io_op::READ, 47);
        s.nsid = U32::new(9);
        s.dptr = q.keyed(512);
        v.push((s.as_bytes().to_vec(), Status::INVALID_NS, "unknown nsid"));
        // NSIDs outside the namespace table: none, past the largest allowed, all-ones.
        for (cid, nsid, what) in [(51, 0, "nsid 0"), (52, nvmeof::nvmet::MAX_NSID + 1, "nsid past MAX_NSID"), (53, u32::MAX, "nsid FFFFFFFFh")] {
            let mut s = sqe(io_op::READ, cid);
            s.nsid = U32::new(nsid);
            s.dptr = q.keyed(512);
            v.push((s.as_bytes().to_vec(), Status::INVALID_NS, what));
        }
        let mut s = sqe(admin_op::IDENTIFY, 48);
        s.dptr = q.keyed(4096);
        v.push((s.as_bytes().to_vec(), Status::INVALID_OPCODE, "admin opcode on I/O queue"));
        let mut p = property_get_sqe(nvmeof::wire::prop::CAP, true);
        p.cid = U16::new(49);
        v.push((p.as_bytes().to_vec(), Status::INVALID_OPCODE, "property get on I/O queue"));
        let mut s = sqe(io_op::DSM, 50);
        s.nsid = U32::new(1);
        s.cdw10 = U32::new(3); // 4 ranges, only 16 bytes
        s.cdw11 = U32::new(DSM_ATTR_DEALLOCATE);
        s.dptr = Sgl::Inline { offset: 0, len: 16 }.encode();
        let mut cap = s.as_bytes().to_vec();
        cap.extend_from_slice(&[0; 16]);
        v.push((cap, Status::SGL_INVALID_DATA, "DSM ranges vs SGL"));
        v
    };
    for (cap, want, what) in &io_cases {
        let c = q.xchg(&mut hd, &mut w, cap);
        assert_eq!(c.cid.get(), u16::from_le_bytes([cap[2], cap[3]]), "{what}");
        assert_eq!(st(&c), *want, "{what}");
        assert_eq!(c.sqid.get(), 1);
        read_ok(&mut q, &mut hd, &mut w, 60);
    }
    // A valid DSM deallocate and an inline write still work.
    let mut s = sqe(io_op::DSM, 61);
    s.nsid = U32::new(1);
    s.cdw11 = U32::new(DSM_ATTR_DEALLOCATE);
    s.dptr = Sgl::Inline { offset: 0, len: 16 }.encode();
    let r = DsmRange { cattr: U32::new(0), nlb: U32::new(8), slba: zerocopy::byteorder::little_endian::U64::new(16) };
    let mut cap = s.as_bytes().to_vec();
    cap.extend_from_slice(r.as_bytes());
    assert!(st(&q.xchg(&mut hd, &mut w, &cap)).is_success());
    assert_eq!(w.target.core.live_ctrls(), 1);
    assert!(w.target.stats().bad_capsules >= 8);
    // The subsystem counts each I/O error by its status, as the core does overall.
    let (_, sub) = w.target.subsystem_stats().find(|(n, _)| *n == SUBNQN).expect("subsystem");
    let lba_range = sub.by_status.iter().find(|&(sct, sc, _)| (sct, sc) == (Status::LBA_RANGE.sct, Status::LBA_RANGE.sc)).map(|e| e.2);
    assert_eq!(lba_range, Some(2), "{:?}", sub.by_status);
    assert_eq!(sub.by_status.iter().map(|e| e.2).sum::<u64>() + sub.by_status.other, sub.errors);
}

fn fuzz_world() -> (SoftFabric, World, TDev, Raw, Raw) {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 256, &[HOSTNQN]);
    let mut hd = host_dev(&fabric);
    let (a, cntlid) = setup(&mut hd, &mut w);
    let q = io_queue(&mut hd, &mut w, cntlid);
    (fabric, w, hd, a, q)
}

/// Keep keyed SGLs inside our registered buffer so data movement cannot hit a NAK (which
/// is an RDMA-level connection error, not an NVMe one); everything else stays random.
fn tame(mut cap: Vec<u8>, r: &Raw) -> Vec<u8> {
    if cap.len() >= 40 && (cap[39] == 0x40 || cap[39] == 0x4F) {
        let len = u32::from_le_bytes([cap[32], cap[33], cap[34], 0]) % (DATA_LEN as u32 + 1);
        let d = Sgl::Keyed { addr: r.data.paddr(), len, key: r.rkey.0, invalidate: false }.encode();
        cap[24..40].copy_from_slice(d.as_bytes());
    }
    cap
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, max_shrink_iters: 50, .. ProptestConfig::default() })]

    /// Random capsules (raw bytes, and valid templates with random mutations) on the admin
    /// and an I/O queue: every one is answered with its CID, and both queues keep working.
    #[test]
    fn fuzz_capsules_over_rdma(caps in proptest::collection::vec(
        (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200), 0usize..6, any::<u8>(), any::<[u8; 24]>()), 1..24)) {
        let (_f, mut w, mut hd, mut a, mut q) = fuzz_world();
        let mut dead = [false; 2];
        for (admin, raw, template, opcode, tail) in caps {
            if dead[admin as usize] {
                continue;
            }
            let r: &mut Raw = if admin { &mut a } else { &mut q };
            let mut cap = match template {
                0 => raw.clone(),
                _ => {
                    let mut s = sqe([opcode, io_op::READ, io_op::WRITE, FABRICS_OPCODE, admin_op::GET_LOG_PAGE][template - 1], 0);
                    s.nsid = U32::new(1);
                    let mut b = s.as_bytes().to_vec();
                    b[40..64].copy_from_slice(&tail);
                    b.extend_from_slice(&raw);
                    b
                }
            };
            let max = if admin { 64 } else { 64 + 4096 };
            cap.truncate(max);
            if cap.is_empty() {
                cap.push(0);
            }
            // Never a second Connect on purpose from the fuzzer's side: keep CID recognisable.
            let cap = tame(cap, r);
            let is_disconnect = cap.len() >= 5 && cap[0] == FABRICS_OPCODE && cap[4] == fctype::DISCONNECT;
            let is_aer = cap.len() >= 1 && cap[0] == admin_op::ASYNC_EVENT && admin;
            if is_aer {
                continue; // held by design: no immediate answer
            }
            match r.try_xchg(&mut hd, &mut w, &cap) {
                Some(c) => {
                    if cap.len() >= 4 {
                        prop_assert_eq!(c.cid.get(), u16::from_le_bytes([cap[2], cap[3]]));
                    }
                    if is_disconnect && nvmeof::Status::from_field(c.status.get()).is_success() {
                        dead[admin as usize] = true;
                    }
                }
                None => prop_assert!(false, "queue died on capsule {:02x?}", cap),
            }
        }
        // Whatever the fuzzer did to its own controller, a fresh host is served normally.
        let c = nvmeof::host::HostConfig { hostnqn: HOSTNQN.into(), io_queues: 1, io_depth: 4, max_io_bytes: 4096, ..Default::default() };
        let mut h = nvmeof::host::Host::connect(&mut hd, &mut w, c, SUBNQN).expect("fresh host connects");
        let slot = h.alloc_slot(1).unwrap();
        h.submit(&mut hd, 1, slot, nvmeof::host::IoKind::Read, 1, 3, 1, w.now).unwrap();
        let mut done = [nvmeof::host::IoDone { queue: 0, slot: 0, status: Status::SUCCESS, dw0: 0, latency_ns: 0 }; 2];
        let mut n = 0;
        for _ in 0..100 {
            w.idle(&mut hd);
            n = h.poll(&mut hd, w.now, &mut done).unwrap();
            if n > 0 { break; }
        }
        prop_assert_eq!(n, 1);
        prop_assert!(done[0].status.is_success());
    }

    /// Core parsers directly: random SQE + payload on connected admin and I/O queue state.
    #[test]
    fn fuzz_core_execute(cmds in proptest::collection::vec((any::<bool>(), any::<[u8; 64]>(), proptest::collection::vec(any::<u8>(), 0..2048), any::<u32>()), 1..64)) {
        let mem = MemMap::default();
        let cfg = TargetConfig { ports: vec![], ..TargetConfig::default() };
        let subs = vec![nvmeof::nvmet::SubsystemConfig {
            nqn: SUBNQN.into(), serial: "s".into(), model: "m".into(), hosts: vec![HOSTNQN.into()], allow_any_host: false,
            namespaces: vec![nvmeof::nvmet::NamespaceConfig { nsid: 1, dev: RamDisk::new(mem.clone(), 64, 512), nguid: [1; 16] }],
        }];
        let mut core = Core::new(cfg, subs).unwrap();
        let mut aq = QueueState::new(0);
        let cd = connect_data(0xFFFF);
        let mut s = connect_sqe(0, 31, 1);
        s.dptr = Sgl::Keyed { addr: 0, len: 1024, key: 0, invalidate: false }.encode();
        let d = DataIn { bytes: cd.as_bytes(), buf: DmaSlice::EMPTY, sgl_len: 1024, tag: 0, fetched: true };
        let ok = matches!(core.execute(&mut aq, &s, &d, 0), nvmeof::nvmet::Action::Respond { status: Status::SUCCESS, .. });
        prop_assert!(ok);
        let en = property_set_sqe(nvmeof::wire::prop::CC, 0x0046_0001);
        core.execute(&mut aq, &en, &DataIn { bytes: &[], buf: DmaSlice::EMPTY, sgl_len: 0, tag: 0, fetched: true }, 0);
        let mut iq = QueueState::new(1);
        let mut iq_data = connect_data(aq.cntlid.unwrap());
        iq_data.cntlid = U16::new(aq.cntlid.unwrap());
        let s = connect_sqe(1, 31, 2);
        core.execute(&mut iq, &s, &DataIn { bytes: iq_data.as_bytes(), buf: DmaSlice::EMPTY, sgl_len: 1024, tag: 0, fetched: true }, 0);
        let (_mem, buf) = unmapped_buf(4096);
        for (admin, raw, payload, sgl_len) in cmds {
            let sqe = Sqe::read_from_bytes(&raw).unwrap();
            let q = if admin { &mut aq } else { &mut iq };
            // `buf` is not mapped: a namespace access fails as a device error, never a panic.
            let d = DataIn { bytes: &payload, buf, sgl_len: sgl_len % 70_000, tag: 0, fetched: true };
            let _ = core.execute(q, &sqe, &d, 0);
            while core.poll_block(64, |_, _| {}) == 64 {}
        }
    }

    #[test]
    fn fuzz_sgl_and_wire_decoders(b in any::<[u8; 16]>(), page in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let d = SglDesc::read_from_bytes(&b).unwrap();
        match Sgl::decode(&d) {
            Ok(s) => prop_assert_eq!(Sgl::decode(&s.encode()), Ok(s)),
            Err(e) => prop_assert_eq!(e, Status::SGL_INVALID_TYPE),
        }
        let _ = ConnectData::read_from_bytes(&page);
        let _ = RdmaCmReq::read_from_bytes(&page);
        let _ = DiscLogEntry::read_from_bytes(&page);
        let _ = get_str(&page);
    }

    /// CM private data: anything malformed is a REJ with an NVMe-RDMA status, never a panic.
    #[test]
    fn fuzz_cm_private(p in proptest::collection::vec(any::<u8>(), 0..40)) {
        let fabric = SoftFabric::new();
        let mut w = make_world(&fabric, 16, &[HOSTNQN]);
        let r = w.target.accept(&mut w.tdev, &p, &attrs(Qpn(0x99), HOST_IP));
        if let Err(rej) = r {
            prop_assert!((1..=8).contains(&rej.sts.get()));
        }
    }
}

#[test]
fn cm_private_data_checks() {
    let fabric = SoftFabric::new();
    let mut w = make_world(&fabric, 16, &[HOSTNQN]);
    let a = attrs(Qpn(0x99), HOST_IP);
    let rej = |w: &mut World, p: &[u8]| w.target.accept(&mut w.tdev, p, &a).err().map(|r| r.sts.get());
    assert_eq!(rej(&mut w, &[0; 8]), Some(cm_rej::INVALID_LEN));
    let mut p = cm_req_private(0, 32);
    p[0] = 1;
    assert_eq!(rej(&mut w, &p), Some(cm_rej::INVALID_RECFMT));
    assert_eq!(rej(&mut w, &cm_req_private(9, 32)), Some(cm_rej::INVALID_QID));
    assert_eq!(rej(&mut w, &cm_req_private(0, 64)), Some(cm_rej::INVALID_HSQSIZE));
    assert_eq!(rej(&mut w, &cm_req_private(1, 65)), Some(cm_rej::INVALID_HSQSIZE));
    let ok = w.target.accept(&mut w.tdev, &cm_req_private(0, 32), &a).unwrap();
    assert_eq!(ok.rep.crqsize.get(), 32);
    assert_eq!(w.target.stats().conns_rejected, 5);
}

/// Controller enable/reset/shutdown state machine, features, and I/O-queue Connect rules,
/// straight on the core.
#[test]
fn core_cc_state_machine_features_and_connect_rules() {
    use nvmeof::nvmet::Action;
    let mem = MemMap::default();
    let cfg = TargetConfig { ports: vec![], max_io_queues: 2, ..TargetConfig::default() };
    let subs = vec![nvmeof::nvmet::SubsystemConfig {
        nqn: SUBNQN.into(),
        serial: "s".into(),
        model: "m".into(),
        hosts: vec![HOSTNQN.into()],
        allow_any_host: false,
        namespaces: vec![nvmeof::nvmet::NamespaceConfig { nsid: 1, dev: RamDisk::new(mem.clone(), 64, 512), nguid: [1; 16] }],
    }];
    let mut core = Core::new(cfg, subs).unwrap();
    let none = DataIn { bytes: &[], buf: DmaSlice::EMPTY, sgl_len: 0, tag: 0, fetched: true };
    let resp = |a: Action| match a {
        Action::Respond { status, dw0, dw1, .. } => (status, dw0 as u64 | (dw1 as u64) << 32),
        other => panic!("{other:?}"),
    };
    let mut aq = QueueState::new(0);
    let cd = connect_data(0xFFFF);
    let s = connect_sqe(0, 31, 1);
    let (st0, cntlid) = resp(core.execute(&mut aq, &s, &DataIn { bytes: cd.as_bytes(), sgl_len: 1024, ..none }, 0));
    assert!(st0.is_success());
    let get = |core: &mut Core<RamDisk>, aq: &mut QueueState, off, eight| resp(core.execute(aq, &property_get_sqe(off, eight), &none, 0));
    let set = |core: &mut Core<RamDisk>, aq: &mut QueueState, v| resp(core.execute(aq, &property_set_sqe(nvmeof::wire::prop::CC, v), &none, 0)).0;
    let cap = get(&mut core, &mut aq, nvmeof::wire::prop::CAP, true).1;
    assert_eq!(cap & 0xFFFF, 127);
    assert_eq!((cap >> 24) & 0xFF, 15);
    assert_eq!(cap >> 37 & 1, 1);
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::VS, false).1, 0x10300);
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, false).1, 0);
    // Admin commands before enable: sequence error.
    let ka = sqe(admin_op::KEEP_ALIVE, 3);
    assert_eq!(resp(core.execute(&mut aq, &ka, &none, 0)).0, Status::CMD_SEQ_ERROR);
    // Bad IOSQES: controller fatal status.
    assert!(set(&mut core, &mut aq, 0x0045_0001).is_success());
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, false).1, 2);
    assert_eq!(resp(core.execute(&mut aq, &ka, &none, 0)).0, Status::CMD_SEQ_ERROR);
    // Reset, then a good enable.
    assert!(set(&mut core, &mut aq, 0).is_success());
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, false).1, 0);
    assert!(set(&mut core, &mut aq, 0x0046_0001).is_success());
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, false).1, 1);
    assert!(resp(core.execute(&mut aq, &ka, &none, 0)).0.is_success());
    // 8-byte read of a 4-byte property and writes to read-only ones are invalid.
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, true).0, Status::INVALID_FIELD);
    let mut ps = property_set_sqe(nvmeof::wire::prop::CSTS, 1);
    ps.cid = U16::new(9);
    assert_eq!(resp(core.execute(&mut aq, &ps, &none, 0)).0, Status::INVALID_FIELD);
    // Features: number of queues is clamped to 2; KATO and AEC round-trip.
    let mut sf = sqe(admin_op::SET_FEATURES, 4);
    sf.cdw10 = U32::new(fid::NUM_QUEUES as u32);
    sf.cdw11 = U32::new(7 | 7 << 16);
    assert_eq!(resp(core.execute(&mut aq, &sf, &none, 0)).1, 1 | 1 << 16);
    sf.cdw10 = U32::new(fid::KEEP_ALIVE_TIMER as u32);
    sf.cdw11 = U32::new(30_000);
    assert!(resp(core.execute(&mut aq, &sf, &none, 0)).0.is_success());
    let mut gf = sqe(admin_op::GET_FEATURES, 5);
    gf.cdw10 = U32::new(fid::KEEP_ALIVE_TIMER as u32);
    assert_eq!(resp(core.execute(&mut aq, &gf, &none, 0)).1, 30_000);
    // I/O queue Connect rules.
    let io_connect = |core: &mut Core<RamDisk>, qid: u16, cntlid: u16, host: &str| {
        let mut q = QueueState::new(qid);
        let mut d = connect_data(cntlid);
        put_str(&mut d.hostnqn, host, 0);
        let s = connect_sqe(qid, 31, 6);
        resp(core.execute(&mut q, &s, &DataIn { bytes: d.as_bytes(), sgl_len: 1024, ..none }, 0))
    };
    let id = cntlid as u16;
    assert!(io_connect(&mut core, 1, id, HOSTNQN).0.is_success());
    assert_eq!(io_connect(&mut core, 1, id, HOSTNQN).0, Status::CONNECT_CTRL_BUSY, "qid 1 twice");
    assert_eq!(io_connect(&mut core, 3, id, HOSTNQN), (Status::CONNECT_INVALID_PARAM, 42), "qid beyond granted");
    assert_eq!(io_connect(&mut core, 2, id + 1, HOSTNQN), (Status::CONNECT_INVALID_PARAM, (1 << 16) | 16), "unknown cntlid");
    assert_eq!(io_connect(&mut core, 2, id, "nqn.other"), (Status::CONNECT_INVALID_HOST, (1 << 16) | 512), "other host");
    // Shutdown: CSTS.SHST = complete, RDY cleared.
    assert!(set(&mut core, &mut aq, 0x0046_4001).is_success());
    assert_eq!(get(&mut core, &mut aq, nvmeof::wire::prop::CSTS, false).1, 0x8);
    // Keep-alive: 30 s KATO set above.
    assert_eq!(core.expired_ctrl(29_000_000_000), None);
    assert_eq!(core.expired_ctrl(31_000_000_000), Some(id));
}

/// A namespace's NSID is 1..=`MAX_NSID` (the core's NSID table is at most that long); the core
/// refuses a configuration beyond it.
#[test]
fn namespace_ids_past_max_nsid_are_refused() {
    let mem = MemMap::default();
    let subs = |nsid: u32| {
        vec![nvmeof::nvmet::SubsystemConfig {
            nqn: SUBNQN.into(),
            serial: "s".into(),
            model: "m".into(),
            hosts: vec![HOSTNQN.into()],
            allow_any_host: false,
            namespaces: vec![nvmeof::nvmet::NamespaceConfig { nsid, dev: RamDisk::new(mem.clone(), 64, 512), nguid: [1; 16] }],
        }]
    };
    let cfg = || TargetConfig { ports: vec![], ..TargetConfig::default() };
    let mut core = Core::new(cfg(), subs(nvmeof::nvmet::MAX_NSID)).expect("the largest NSID");
    assert!(core.namespace_dev(SUBNQN, nvmeof::nvmet::MAX_NSID).is_some());
    assert!(core.namespace_dev(SUBNQN, 1).is_none());
    for nsid in [0, nvmeof::nvmet::MAX_NSID + 1, u32::MAX] {
        assert!(Core::new(cfg(), subs(nsid)).is_err(), "nsid {nsid}");
    }
}
