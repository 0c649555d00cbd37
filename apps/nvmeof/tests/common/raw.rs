//! Raw NVMe-RDMA queues for target tests: a host-side QP that sends hand-made capsules and
//! reads the response CQE, with helpers for Connect and enabling a controller.

use hal::DmaRegion;
use nvmeof::host::{cm_req_private, property_set_sqe, HostEnv};
use nvmeof::wire::*;
use nvmeof::Status;
use rdma::*;
use zerocopy::byteorder::little_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

use super::*;

pub struct Raw {
    pub qp: Qpn,
    pub cq: Cqn,
    cmd: TBuf,
    cmd_lkey: Lkey,
    rsp: TBuf,
    rsp_lkey: Lkey,
    pub data: TBuf,
    pub rkey: Rkey,
}

pub const DATA_LEN: usize = 64 * 1024;

impl Raw {
    pub fn connect(hd: &mut TDev, w: &mut World, qid: u16, depth: u16) -> Raw {
        let cq = hd.create_cq(256).unwrap();
        let qp = hd.create_rc_qp(cq, cq, 64, 64).unwrap();
        let loc = Access { local_write: true, ..Default::default() };
        let cmd = hd.alloc_buf(8192).unwrap();
        let (cmd_lkey, _) = hd.reg_mr(cmd.paddr(), 8192, loc).unwrap();
        let rsp = hd.alloc_buf(16 * 64).unwrap();
        let (rsp_lkey, _) = hd.reg_mr(rsp.paddr(), 16 * 64, loc).unwrap();
        let data = hd.alloc_buf(DATA_LEN).unwrap();
        let all = Access { local_write: true, remote_read: true, remote_write: true };
        let (_, rkey) = hd.reg_mr(data.paddr(), DATA_LEN as u64, all).unwrap();
        let h = w.cm_connect(hd, qp, &cm_req_private(qid, depth)).unwrap();
        // Connected once the queue's poll group has taken it in (the target's next turn).
        for _ in 0..10 {
            if w.cm_poll(hd, h) != nvmeof::host::ConnectPoll::Pending {
                break;
            }
            w.idle(hd);
        }
        assert!(matches!(w.cm_poll(hd, h), nvmeof::host::ConnectPoll::Connected { .. }));
        Raw { qp, cq, cmd, cmd_lkey, rsp, rsp_lkey, data, rkey }
    }

    /// Send `bytes` as one capsule; return the response CQE.
    pub fn xchg(&mut self, hd: &mut TDev, w: &mut World, bytes: &[u8]) -> Cqe {
        self.try_xchg(hd, w, bytes).expect("response")
    }

    /// Like `xchg`; `None` when the queue is gone (transport error / no answer).
    pub fn try_xchg(&mut self, hd: &mut TDev, w: &mut World, bytes: &[u8]) -> Option<Cqe> {
        self.cmd.write(0, bytes);
        hd.post_recv(self.qp, &RecvWr { wr_id: 7, sge: Sge { addr: self.rsp.paddr(), len: 16, lkey: self.rsp_lkey } }).unwrap();
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sge: Sge { addr: self.cmd.paddr(), len: bytes.len() as u32, lkey: self.cmd_lkey },
            signaled: true,
            fence: false,
            ud: None,
        };
        hd.post_send(self.qp, &wr).unwrap();
        let mut wc = [Completion::default(); 8];
        for _ in 0..1000 {
            w.idle(hd);
            let n = hd.poll_cq(self.cq, &mut wc);
            for c in &wc[..n] {
                if c.status != WcStatus::Success {
                    return None;
                }
                if c.opcode == WcOpcode::Recv {
                    let mut b = [0u8; 16];
                    self.rsp.read(0, &mut b);
                    return Some(Cqe::read_from_bytes(&b).unwrap());
                }
            }
        }
        None
    }

    pub fn keyed(&self, len: u32) -> SglDesc {
        Sgl::Keyed { addr: self.data.paddr(), len, key: self.rkey.0, invalidate: false }.encode()
    }
}

pub fn st(c: &Cqe) -> Status {
    Status::from_field(c.status.get())
}

pub fn sqe(op: u8, cid: u16) -> Sqe {
    let mut s = Sqe::zeroed();
    s.opcode = op;
    s.flags = PSDT_SGL;
    s.cid = U16::new(cid);
    s.dptr.typ = sgl_type::KEYED_ADDR;
    s
}

pub fn connect_sqe(qid: u16, sqsize: u16, cid: u16) -> Sqe {
    let mut c = ConnectCmd::zeroed();
    c.opcode = FABRICS_OPCODE;
    c.fctype = fctype::CONNECT;
    c.cid = U16::new(cid);
    c.qid = U16::new(qid);
    c.sqsize = U16::new(sqsize);
    c.kato = U32::new(if qid == 0 { 60_000 } else { 0 });
    let mut s = Sqe::read_from_bytes(c.as_bytes()).unwrap();
    s.flags = PSDT_SGL;
    s
}

pub fn connect_data(cntlid: u16) -> ConnectData {
    let mut d = ConnectData::zeroed();
    d.hostid = [9; 16];
    d.cntlid = U16::new(cntlid);
    put_str(&mut d.subsysnqn, SUBNQN, 0);
    put_str(&mut d.hostnqn, HOSTNQN, 0);
    d
}

/// Admin queue connected and enabled; returns (admin, cntlid).
pub fn setup(hd: &mut TDev, w: &mut World) -> (Raw, u16) {
    let mut a = Raw::connect(hd, w, 0, 32);
    a.data.write(0, connect_data(0xFFFF).as_bytes());
    let mut s = connect_sqe(0, 31, 1);
    s.dptr = a.keyed(1024);
    let c = a.xchg(hd, w, s.as_bytes());
    assert!(st(&c).is_success());
    let cntlid = c.dw0.get() as u16;
    let mut en = property_set_sqe(nvmeof::wire::prop::CC, 0x0046_0001);
    en.cid = U16::new(2);
    assert!(st(&a.xchg(hd, w, en.as_bytes())).is_success());
    (a, cntlid)
}

pub fn io_queue(hd: &mut TDev, w: &mut World, cntlid: u16) -> Raw {
    let mut q = Raw::connect(hd, w, 1, 32);
    let mut s = connect_sqe(1, 31, 3);
    s.dptr = Sgl::Inline { offset: 0, len: 1024 }.encode();
    let mut cap = s.as_bytes().to_vec();
    cap.extend_from_slice(connect_data(cntlid).as_bytes());
    let c = q.xchg(hd, w, &cap);
    assert!(st(&c).is_success(), "{:?}", st(&c));
    q
}

pub fn read_ok(q: &mut Raw, hd: &mut TDev, w: &mut World, cid: u16) {
    let mut r = sqe(io_op::READ, cid);
    r.nsid = U32::new(1);
    r.dptr = q.keyed(512);
    let c = q.xchg(hd, w, r.as_bytes());
    assert_eq!(c.cid.get(), cid);
    assert!(st(&c).is_success(), "{:?}", st(&c));
}

