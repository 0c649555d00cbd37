//! RoCEv2 frames into the emulated adapter's engine (emu-roce), as a peer on the wire sends them.
//! The engine holds a UD QP and RC QPs in RTS, RTR and INIT with receives and sends posted and a
//! 64 KiB registration (key 0x42) over real memory, so requests execute, data lands, and ACKs,
//! NAKs and retries run. Each record either becomes a well-formed frame built from its fields
//! (correct lengths, IP checksum and ICRC, so the fuzzer gets past the integrity checks) or, when
//! its flag says so, goes on the wire as raw bytes. Afterwards the engine must still answer ARP,
//! and every memory access it made must have stayed inside the registration.
#![no_main]

use emu_roce::wire::{build_arp, build_frame, op_info, Aeth, AtomicEth, Deth, PacketSpec, Reth, ARP_REQUEST, GSI_QKEY, MASK24, OPCODES};
use emu_roce::*;

const KEY: u32 = 0x42;
const MEM: usize = 64 * 1024;

/// The registration's memory; an access outside it is a bug the target reports.
struct Ram(Vec<u8>);
impl Memory for Ram {
    fn read(&mut self, pa: u64, b: &mut [u8]) -> Result<(), MemError> {
        let s = usize::try_from(pa).ok().filter(|s| s.checked_add(b.len()).is_some_and(|e| e <= MEM));
        let s = s.unwrap_or_else(|| panic!("engine read outside its registration: {pa:#x}+{}", b.len()));
        b.copy_from_slice(&self.0[s..s + b.len()]);
        Ok(())
    }
    fn write(&mut self, pa: u64, d: &[u8]) -> Result<(), MemError> {
        let s = usize::try_from(pa).ok().filter(|s| s.checked_add(d.len()).is_some_and(|e| e <= MEM));
        let s = s.unwrap_or_else(|| panic!("engine wrote outside its registration: {pa:#x}+{}", d.len()));
        self.0[s..s + d.len()].copy_from_slice(d);
        Ok(())
    }
}

/// One key (0x42) for `[0, MEM)` with every access right, identity-mapped in 4 KiB extents.
struct OneKey;
impl Keys for OneKey {
    fn translate(&mut self, _: Qpn, key: KeyRef, va: u64, len: u64, _: Access) -> Result<Extent, KeyError> {
        let k = match key {
            KeyRef::Local(l) => l.0,
            KeyRef::Remote(r) => r.0,
        };
        if k != KEY {
            return Err(KeyError::InvalidKey);
        }
        let end = va.checked_add(len).ok_or(KeyError::OutOfBounds)?;
        if end > MEM as u64 {
            return Err(KeyError::OutOfBounds);
        }
        Ok(Extent { pa: va, len: len.min(4096 - va % 4096) })
    }
    fn invalidate(&mut self, _: Qpn, r: Rkey) -> Result<(), KeyError> {
        if r.0 == KEY {
            Ok(())
        } else {
            Err(KeyError::InvalidKey)
        }
    }
}

fn engine() -> Engine {
    let mut eng = Engine::new(PortConfig { mac: [2, 0, 0, 0, 0, 1], ip: [10, 0, 0, 1], ..Default::default() });
    eng.create_qp(Qpn(1), QpType::Ud).unwrap();
    let a = QpAttrs { access: Access::ALL, remote_ip: [10, 0, 0, 2], remote_qpn: Qpn(0x11), pmtu: 256, ..Default::default() };
    for (q, st) in [(1, QpState::Rts), (2, QpState::Rts), (3, QpState::Rtr), (4, QpState::Init)] {
        if q != 1 {
            eng.create_qp(Qpn(q), QpType::Rc).unwrap();
        }
        eng.modify_qp(Qpn(q), QpState::Init, &a).unwrap();
        if st != QpState::Init {
            eng.modify_qp(Qpn(q), QpState::Rtr, &a).unwrap();
        }
        if st == QpState::Rts {
            eng.modify_qp(Qpn(q), QpState::Rts, &a).unwrap();
        }
        for i in 0..4u64 {
            let sge = Sge { addr: i * 4096, len: 2000, lkey: Lkey(KEY) };
            eng.post_recv(Qpn(q), RecvWr { wr_id: i, sges: vec![sge] }).unwrap();
        }
    }
    let ops = [SendOp::Send, SendOp::RdmaRead { remote_va: 0, rkey: Rkey(9) }, SendOp::RdmaWrite { remote_va: 0, rkey: Rkey(9) }];
    for (i, op) in ops.into_iter().enumerate() {
        let sge = Sge { addr: 0x8000, len: 3000, lkey: Lkey(KEY) };
        let wr = SendWr { wr_id: i as u64, op, data: Gather::Sges(vec![sge]), signaled: true, solicited: false, fence: false, ud: None };
        eng.post_send(Qpn(2), wr).unwrap();
    }
    eng
}

/// Reads little-endian fields off the front of the input.
struct Input<'a>(&'a [u8]);
impl Input<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (h, t) = self.0.split_first_chunk::<N>()?;
        self.0 = t;
        Some(*h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (h, t) = self.0.split_at(n.min(self.0.len()));
        self.0 = t;
        h
    }
}

/// One frame from the input: raw bytes, or a well-formed frame built from fields.
fn next_frame(inp: &mut Input, out: &mut Vec<u8>) -> Option<()> {
    let flags = inp.u8()?;
    let plen = (inp.u16()? % 1500) as usize;
    if flags & 1 != 0 {
        out.clear();
        out.extend_from_slice(inp.bytes(plen));
        return Some(());
    }
    let op = OPCODES[inp.u8()? as usize % OPCODES.len()].opcode;
    let info = op_info(op)?;
    let (qp, psn, va, key, len, syn) = (inp.u8()?, inp.u32()?, inp.u32()?, inp.u32()?, inp.u32()?, inp.u8()?);
    let key = if flags & 2 == 0 { KEY } else { key };
    let spec = PacketSpec {
        src_mac: [2, 0, 0, 0, 0, 2],
        dst_mac: [2, 0, 0, 0, 0, 1],
        src_ip: [10, 0, 0, 2],
        dst_ip: [10, 0, 0, 1],
        ip_id: 0,
        ttl: 64,
        udp_sport: 0xc000 | u16::from(qp),
        opcode: op,
        solicited: flags & 4 != 0,
        pkey: 0xFFFF,
        dest_qp: u32::from(qp % 6),
        ack_req: flags & 8 != 0,
        // Mostly PSNs near the expected ones, so requests execute; sometimes anything.
        psn: if flags & 16 == 0 { psn & 7 } else { psn & MASK24 },
        reth: info.reth.then(|| Reth { va: u64::from(va % (2 * MEM as u32)).into(), rkey: key.into(), len: (len % 70_000).into() }),
        aeth: info.aeth.then(|| Aeth::new(syn, len)),
        deth: info.deth.then(|| Deth::new(if flags & 32 == 0 { GSI_QKEY } else { key }, u32::from(qp) >> 2)),
        imm: info.imm.then_some(key),
        ieth: info.ieth.then_some(key),
        atomic: info.atomic.then(AtomicEth::default),
        atomic_ack: info.atomic_ack.then_some(u64::from(va)),
    };
    let payload = if info.payload { inp.bytes(plen) } else { &[] };
    build_frame(&spec, payload, out).ok()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut eng = engine();
    let (mut l1, mut l2) = MemLink::pair(Impairments::default(), 0);
    let (mut mem, mut keys) = (Ram(vec![0; MEM]), OneKey);
    let mut now = 0;
    let mut inp = Input(data);
    let mut f = Vec::new();
    for _ in 0..64 {
        if next_frame(&mut inp, &mut f).is_none() {
            break;
        }
        l2.send(&f);
        now += 1_000_000;
        l1.set_now(now);
        eng.poll(now, &mut l1, &mut mem, &mut keys);
        while l2.poll().is_some() {}
        while eng.pop_completion().is_some() {}
        while eng.pop_raw_frame().is_some() {}
    }
    // Let retries and timers run out.
    for _ in 0..50 {
        now += 100_000_000;
        l1.set_now(now);
        eng.poll(now, &mut l1, &mut mem, &mut keys);
        while l2.poll().is_some() {}
        while eng.pop_completion().is_some() {}
    }
    // Still answers ARP.
    let mut req = Vec::new();
    build_arp(ARP_REQUEST, [2, 0, 0, 0, 0, 9], [10, 0, 0, 9], [0; 6], [10, 0, 0, 1], [0xFF; 6], &mut req);
    l2.send(&req);
    eng.poll(now, &mut l1, &mut mem, &mut keys);
    assert!(l2.poll().is_some(), "engine stopped answering ARP");
});
