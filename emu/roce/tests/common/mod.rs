//! Test harness: two engines over an in-process link, with page-scattered memory keys.
#![allow(dead_code)]

use std::collections::HashMap;

use emu_roce::*;

pub const PAGE: u64 = 4096;

/// Flat physical memory.
pub struct PhysMem(pub Vec<u8>);
impl Memory for PhysMem {
    fn read(&mut self, pa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let s = usize::try_from(pa).map_err(|_| MemError { pa, len: buf.len() as u64 })?;
        let src = self.0.get(s..s + buf.len()).ok_or(MemError { pa, len: buf.len() as u64 })?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write(&mut self, pa: u64, data: &[u8]) -> Result<(), MemError> {
        let s = usize::try_from(pa).map_err(|_| MemError { pa, len: data.len() as u64 })?;
        let dst = self.0.get_mut(s..s + data.len()).ok_or(MemError { pa, len: data.len() as u64 })?;
        dst.copy_from_slice(data);
        Ok(())
    }
}

/// One registration: `len` bytes at `va`, backed by pages in the order given (not contiguous).
#[derive(Clone)]
pub struct Mr {
    pub va: u64,
    pub len: u64,
    pub pages: Vec<u64>,
    pub access: Access,
    pub valid: bool,
}

#[derive(Default)]
pub struct KeyTable {
    pub mrs: HashMap<u32, Mr>,
}
impl Keys for KeyTable {
    fn translate(&mut self, _qp: Qpn, key: KeyRef, va: u64, len: u64, need: Access) -> Result<Extent, KeyError> {
        let k = match key {
            KeyRef::Local(l) => l.0,
            KeyRef::Remote(r) => r.0,
        };
        let mr = self.mrs.get(&k).ok_or(KeyError::InvalidKey)?;
        if !mr.valid {
            return Err(KeyError::InvalidKey);
        }
        if !mr.access.allows(need) {
            return Err(KeyError::AccessDenied);
        }
        let end = va.checked_add(len).ok_or(KeyError::OutOfBounds)?;
        if va < mr.va || end > mr.va + mr.len {
            return Err(KeyError::OutOfBounds);
        }
        let off = va - mr.va;
        let page = (off / PAGE) as usize;
        let in_page = off % PAGE;
        let pa = mr.pages[page] + in_page;
        Ok(Extent { pa, len: (PAGE - in_page).min(len) })
    }
    fn invalidate(&mut self, _qp: Qpn, rkey: Rkey) -> Result<(), KeyError> {
        let mr = self.mrs.get_mut(&rkey.0).ok_or(KeyError::InvalidKey)?;
        if !mr.valid {
            return Err(KeyError::InvalidKey);
        }
        mr.valid = false;
        Ok(())
    }
}

pub struct Node {
    pub eng: Engine,
    pub mem: PhysMem,
    pub keys: KeyTable,
    pub link: MemLink,
    next_page: u64,
    next_key: u32,
    pub cqes: Vec<Completion>,
}

impl Node {
    pub fn new(link: MemLink, mac: Mac, ip: Ipv4, mem_bytes: usize) -> Self {
        Node {
            eng: Engine::new(PortConfig { mac, ip, ..Default::default() }),
            mem: PhysMem(vec![0; mem_bytes]),
            keys: KeyTable::default(),
            link,
            next_page: 0,
            next_key: 0x100,
            cqes: Vec::new(),
        }
    }
    /// Register `len` bytes at virtual address `va` over freshly allocated pages, backed in
    /// reverse page order to exercise non-contiguous translation. Returns the key (lkey == rkey).
    pub fn reg(&mut self, va: u64, len: u64, access: Access) -> u32 {
        let n = len.div_ceil(PAGE).max(1);
        let mut pages: Vec<u64> = (0..n).map(|i| (self.next_page + i) * PAGE).collect();
        pages.reverse();
        self.next_page += n;
        assert!(self.next_page * PAGE <= self.mem.0.len() as u64, "test memory exhausted");
        let key = self.next_key;
        self.next_key += 1;
        // Registrations start at `va` which must be page aligned for this simple table.
        assert_eq!(va % PAGE, 0);
        self.keys.mrs.insert(key, Mr { va, len, pages, access, valid: true });
        key
    }
    pub fn write_va(&mut self, key: u32, va: u64, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let e = self.keys.translate(Qpn(0), KeyRef::Local(Lkey(key)), va + done as u64, (data.len() - done) as u64, Access::NONE).unwrap();
            self.mem.write(e.pa, &data[done..done + e.len as usize]).unwrap();
            done += e.len as usize;
        }
    }
    pub fn read_va(&mut self, key: u32, va: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        let mut done = 0;
        while done < len {
            let e = self.keys.translate(Qpn(0), KeyRef::Local(Lkey(key)), va + done as u64, (len - done) as u64, Access::NONE).unwrap();
            self.mem.read(e.pa, &mut out[done..done + e.len as usize]).unwrap();
            done += e.len as usize;
        }
        out
    }
    pub fn poll(&mut self, now: u64) -> usize {
        let n = self.eng.poll(now, &mut self.link, &mut self.mem, &mut self.keys);
        while let Some(c) = self.eng.pop_completion() {
            self.cqes.push(c);
        }
        n
    }
    pub fn take_cqes(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.cqes)
    }
}

pub const MAC_A: Mac = [0x02, 0, 0, 0, 0, 0xA];
pub const MAC_B: Mac = [0x02, 0, 0, 0, 0, 0xB];
pub const IP_A: Ipv4 = [10, 77, 0, 1];
pub const IP_B: Ipv4 = [10, 77, 0, 2];

pub struct Pair {
    pub a: Node,
    pub b: Node,
    pub now: u64,
}

impl Pair {
    pub fn new(imp: Impairments, seed: u64, mem_bytes: usize) -> Self {
        let (la, lb) = MemLink::pair(imp, seed);
        Pair { a: Node::new(la, MAC_A, IP_A, mem_bytes), b: Node::new(lb, MAC_B, IP_B, mem_bytes), now: 0 }
    }

    /// Connected RC QPs `qa` on A and `qb` on B.
    pub fn connect(&mut self, qa: u32, qb: u32, attrs: QpAttrs) {
        self.connect_psn(qa, qb, attrs, 0x1000 + qa, 0x1000 + qb)
    }

    /// As `connect`, with A's first PSN `psn_a` and B's `psn_b`.
    pub fn connect_psn(&mut self, qa: u32, qb: u32, attrs: QpAttrs, psn_a: u32, psn_b: u32) {
        for (node, me, peer, peer_ip, peer_mac, sq, rq) in [
            (&mut self.a, qa, qb, IP_B, MAC_B, psn_a, psn_b),
            (&mut self.b, qb, qa, IP_A, MAC_A, psn_b, psn_a),
        ] {
            node.eng.create_qp(Qpn(me), QpType::Rc).unwrap();
            let at = QpAttrs {
                remote_qpn: Qpn(peer),
                remote_ip: peer_ip,
                remote_mac: peer_mac,
                sq_psn: sq & 0xFFFFFF,
                rq_psn: rq & 0xFFFFFF,
                ..attrs
            };
            node.eng.modify_qp(Qpn(me), QpState::Init, &at).unwrap();
            node.eng.modify_qp(Qpn(me), QpState::Rtr, &at).unwrap();
            node.eng.modify_qp(Qpn(me), QpState::Rts, &at).unwrap();
        }
    }

    /// One step of both sides at the current time.
    pub fn step(&mut self) -> usize {
        self.a.link.set_now(self.now);
        self.a.poll(self.now) + self.b.poll(self.now)
    }

    /// Run until `done(self)` or the simulated deadline; time jumps to the next event when idle.
    pub fn run_until(&mut self, deadline_ns: u64, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let mut idle_rounds = 0;
        while self.now <= deadline_ns {
            let work = self.step();
            if done(self) {
                return true;
            }
            if work > 0 || self.a.eng.has_tx_work() || self.b.eng.has_tx_work() {
                idle_rounds = 0;
                // Let in-flight frames with tiny delays mature.
                self.now += 100;
                continue;
            }
            idle_rounds += 1;
            let next = [self.a.link.next_delivery(), self.a.eng.next_timer(), self.b.eng.next_timer()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t > self.now => self.now = t,
                Some(_) => self.now += 100,
                None => {
                    if idle_rounds > 2 {
                        return done(self);
                    }
                    self.now += 100;
                }
            }
        }
        false
    }
}

/// Deterministic test pattern.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut r = emu_roce::link::SplitMix64::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

pub fn rc_attrs() -> QpAttrs {
    QpAttrs {
        access: Access::ALL,
        pmtu: 1024,
        timeout: 10, // 4.2 ms
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 1, // 10 µs
        max_rd_atomic: 8,
        max_dest_rd_atomic: 8,
        ..Default::default()
    }
}

pub fn send_wr(wr_id: u64, op: SendOp, key: u32, va: u64, len: u32) -> SendWr {
    SendWr {
        wr_id,
        op,
        data: Gather::Sges(if len == 0 { vec![] } else { vec![Sge { addr: va, len, lkey: Lkey(key) }] }),
        signaled: true,
        solicited: false,
        fence: false,
        ud: None,
    }
}

pub fn recv_wr(wr_id: u64, key: u32, va: u64, len: u32) -> RecvWr {
    RecvWr { wr_id, sges: vec![Sge { addr: va, len, lkey: Lkey(key) }] }
}
pub mod bench;
