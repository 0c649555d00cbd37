//! rping server ↔ rping client, each a full runner node (mlx5 driver + emulated ConnectX),
//! over an in-process link: CM, SEND, RDMA READ, RDMA WRITE, data verified every ping.

use emu_connectx::SimClock;
use emu_roce::{Impairments, MemLink};
use emu_runner::{Clocked, Node};
use rdma::cm::CmConfig;
use rping::{Config, Error, Role, Rping, Status};

const SERVER: [u8; 4] = [10, 77, 0, 1];
const CLIENT: [u8; 4] = [10, 77, 0, 2];

fn pair(imp: Impairments) -> (SimClock, Node, Node) {
    let clock = SimClock::new();
    clock.advance(1_000_000);
    let (a, b) = MemLink::pair(imp, 7);
    let s = Node::new(clock.clone(), SERVER, [0x52, 0x54, 0, 0x77, 0, 1], 0x1_0000_0000, Box::new(Clocked(a, clock.clone()))).unwrap();
    let c = Node::new(clock.clone(), CLIENT, [0x52, 0x54, 0, 0x77, 0, 2], 0x2_0000_0000, Box::new(Clocked(b, clock.clone()))).unwrap();
    (clock, s, c)
}

fn run(imp: Impairments, cm: CmConfig, count: u32, size: u32) -> (Status, Status, rping::Stats, rping::Stats) {
    let (clock, mut s, mut c) = pair(imp);
    let mut rs = Rping::new(&mut s.v, cm, Config { role: Role::Server { port: 7174 }, count, size, verify: true }).unwrap();
    let mut rc =
        Rping::new(&mut c.v, cm, Config { role: Role::Client { ip: SERVER, port: 7174 }, count, size, verify: true }).unwrap();
    let (mut ss, mut cs) = (Status::Running, Status::Running);
    for _ in 0..2_000_000 {
        clock.advance(2_000);
        ss = rs.poll(&mut s.v, clock.now_ns());
        cs = rc.poll(&mut c.v, clock.now_ns());
        s.poll();
        c.poll();
        if ss != Status::Running && cs != Status::Running {
            break;
        }
    }
    assert!(rs.error().is_none() && rc.error().is_none(), "server {:?} client {:?}", rs.error(), rc.error());
    (ss, cs, rs.stats(), rc.stats())
}

#[test]
fn rping_300_verified_pings_4k() {
    let (ss, cs, st_s, st_c) = run(Impairments::default(), CmConfig::default(), 300, 4096);
    assert_eq!(cs, Status::Done { pings: 300 });
    assert_eq!(ss, Status::Done { pings: 300 });
    assert_eq!(st_c.verified, 300);
    assert_eq!((st_s.bytes_read, st_s.bytes_written), (300 * 4096, 300 * 4096));
}

#[test]
fn rping_sizes_across_pmtu_boundaries() {
    for size in [24, 1023, 1025, 65536] {
        let (ss, cs, _, st_c) = run(Impairments::default(), CmConfig::default(), 20, size);
        assert_eq!((ss, cs, st_c.verified), (Status::Done { pings: 20 }, Status::Done { pings: 20 }, 20), "size {size}");
    }
}

#[test]
fn rping_over_lossy_link() {
    let imp = Impairments { loss: 0.02, duplicate: 0.01, reorder: 0.02, reorder_delay_ns: 30_000, ..Impairments::default() };
    // ACK timeout 4.096 us << 10 (~4 ms) so each loss costs little virtual time.
    let cm = CmConfig { local_ack_timeout: 10, cm_response_timeout: 14, ..CmConfig::default() };
    let (ss, cs, _, st_c) = run(imp, cm, 100, 2048);
    assert_eq!((ss, cs, st_c.verified), (Status::Done { pings: 100 }, Status::Done { pings: 100 }, 100));
}

#[test]
fn client_without_server_is_unreachable_or_rejected() {
    let (clock, mut s, mut c) = pair(Impairments::default());
    let mut rc = Rping::new(&mut c.v, CmConfig { max_cm_retries: 2, cm_response_timeout: 14, ..CmConfig::default() }, Config {
        role: Role::Client { ip: SERVER, port: 7174 },
        count: 5,
        size: 64,
        verify: true,
    })
    .unwrap();
    let mut st = Status::Running;
    for _ in 0..2_000_000 {
        clock.advance(10_000);
        st = rc.poll(&mut c.v, clock.now_ns());
        s.poll();
        c.poll();
        if st != Status::Running {
            break;
        }
    }
    assert_eq!(st, Status::Failed);
    assert!(matches!(rc.error(), Some(Error::Rejected { .. } | Error::Unreachable)), "{:?}", rc.error());
}
