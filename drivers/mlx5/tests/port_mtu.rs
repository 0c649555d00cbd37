//! The port's max MTU (PMTU max_mtu) per device profile: the model refuses a port MTU or an RC
//! path MTU beyond it, and the driver reads it at bring-up and clamps to it. Where a test shows
//! what the old driver did (no PMTU read, path MTU as asked), it makes the driver believe in a
//! larger port.

use crate::common;
use common::*;
use emu_connectx::{Config as CxConfig, Profile};
use mlx5::{vport::PortMtu, Error, Mlx5, QpKind};
use rdma::Qpn;

fn up(p: &Profile) -> (Rig, Dev) {
    let (rig, hal, bar) = rig_with(CxConfig::for_profile(p.clone()));
    let dev = Mlx5::bring_up(hal, bar, mlx5::Config { vf: p.behaviour.vf, ..cfg() }).unwrap();
    (rig, dev)
}

fn rc_qp(dev: &mut Dev) -> Qpn {
    let cq = dev.create_cq(4).unwrap();
    let qp = dev.create_qp(QpKind::Rc, cq, cq, 4, 4, 0).unwrap();
    qp
}

#[test]
fn bring_up_reads_each_profiles_max_mtu() {
    for p in Profile::all() {
        let (_rig, dev) = up(&p);
        assert_eq!(dev.port_mtu.max, p.caps.max_mtu, "{}", p.name);
        assert_eq!(dev.port_mtu.oper, 1500, "{}", p.name);
        dev.shutdown().unwrap();
    }
}

/// The VF's port carries 1500 bytes: an RC path MTU of 4096 is clamped to 1024 (the largest
/// whose RoCEv2 packets fit) and the QP connects; the old driver asked for 4096 and was refused.
#[test]
fn path_mtu_is_clamped_to_the_port_and_over_it_is_refused() {
    let p = Profile::connectx7_vf();
    assert_eq!(p.caps.max_mtu, 1500);
    let (_rig, mut dev) = up(&p);
    assert_eq!(dev.port_mtu.max_path_mtu(), 1024);
    let qp = rc_qp(&mut dev);
    let a = rdma::RcConnectAttrs { mtu: 4096, ..rc_attrs(Qpn(0x42)) };
    dev.connect_rc(qp, &a).unwrap();
    // The old driver: no idea of the port's max.
    let qp2 = rc_qp(&mut dev);
    dev.port_mtu = PortMtu { max: 9978, admin: 9978, oper: 9978 };
    match dev.connect_rc(qp2, &a) {
        Err(Error::Command { opcode, status, .. }) => assert_eq!((opcode, status), (mlx5::op::INIT2RTR_QP, 0x03)),
        other => panic!("path MTU 4096 over a 1500-byte port: {other:?}"),
    }
    dev.port_mtu = PortMtu { max: 1500, admin: 1500, oper: 1500 };
    dev.shutdown().unwrap();
    // A 9978-byte port takes 4096.
    let (_rig, mut dev) = up(&Profile::connectx7());
    assert_eq!(dev.port_mtu.max_path_mtu(), 4096);
    let qp = rc_qp(&mut dev);
    dev.connect_rc(qp, &a).unwrap();
    dev.shutdown().unwrap();
}

/// Port MTU (PMTU admin_mtu): set within max_mtu, clamped to it when asked for more; beyond it
/// the model refuses (BAD_PARAM), as the old driver would have met without the clamp.
#[test]
fn port_mtu_is_clamped_to_max_mtu_and_over_it_is_refused() {
    for p in Profile::all() {
        let (rig, mut dev) = up(&p);
        assert_eq!(dev.set_port_mtu(1024).unwrap(), 1024, "{}", p.name);
        let got = dev.set_port_mtu(9000).unwrap();
        assert_eq!(got, 9000.min(p.caps.max_mtu), "{}", p.name);
        assert_eq!(rig.cx.device().vport.mtu, got, "{}", p.name);
        dev.port_mtu.max = u16::MAX;
        match dev.set_port_mtu(p.caps.max_mtu + 1) {
            Err(Error::Command { opcode, status, .. }) => assert_eq!((opcode, status), (mlx5::op::ACCESS_REG, 0x03), "{}", p.name),
            other => panic!("{}: MTU over max_mtu: {other:?}", p.name),
        }
        dev.shutdown().unwrap();
    }
}
