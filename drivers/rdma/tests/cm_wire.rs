//! CM codec tests: byte-exact against the REQ Linux nvme-rdma sent (linuxpeer.md capture),
//! REP/REJ/DREQ layouts built from the field facts, and no-panic parsing of garbage.
use proptest::prelude::*;
use rdma::cm_wire::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The first REQ MAD Linux sent (linuxpeer.md "The first REQ frame"): frame bytes 0x3e..0xb6
/// verbatim, the alternate path zero, private data = cma_hdr + nvme_rdma_cm_req + zeros.
fn linux_req_mad() -> [u8; 256] {
    let mut frame = hex(
        "52 54 00 77 00 01 52 54 00 77 00 02 08 00 45 00
         01 34 81 72 40 00 40 11 a3 aa 0a 4d 00 02 0a 4d
         00 01 d8 72 12 b7 01 20 00 00 64 00 ff ff 00 00
         00 01 80 00 00 00 80 01 00 00 00 00 00 01 01 07
         02 03 00 00 00 00 00 00 00 02 7e 98 0c 6f 00 10
         00 00 00 00 00 00 6f 0c 98 7e 00 00 00 00 00 00
         00 00 01 06 11 44 50 54 00 ff fe 77 00 02 00 00
         00 00 00 00 00 00 00 00 11 80 00 00 00 00 00 00
         00 a1 2e d2 69 a7 ff ff 37 f0 ff ff ff ff 00 00
         00 00 00 00 00 00 00 00 ff ff 0a 4d 00 02 00 00
         00 00 00 00 00 00 00 00 ff ff 0a 4d 00 01 c9 31
         a0 00 00 40 00 98",
    );
    frame.resize(0x3e + 256, 0);
    // Private data at frame 0xe2 (MAD 24 + 140).
    let pd = hex(
        "00 40 eb 6a 00 00 00 00 00 00 00 00 00 00 00 00 0a 4d 00 02
         00 00 00 00 00 00 00 00 00 00 00 00 0a 4d 00 01
         00 00 00 00 20 00 1f 00",
    );
    frame[0xe2..0xe2 + pd.len()].copy_from_slice(&pd);
    let mut mad = [0u8; 256];
    mad.copy_from_slice(&frame[0x3e..0x3e + 256]);
    mad
}

#[test]
fn linux_req_decodes_to_the_recorded_field_values() {
    let mad = linux_req_mad();
    let (h, m) = CmMsg::parse(&mad).unwrap();
    assert_eq!(h.tid, 0x0000_0002_7e98_0c6f);
    assert_eq!((h.base_version, h.mgmt_class, h.class_version, h.method, h.attr_id), (1, 7, 2, 3, attr::REQ));
    let CmMsg::Req(r) = m else { panic!("not a REQ") };
    assert_eq!(r.local_comm_id, 0x6f0c_987e);
    // Linux TID rule: low 32 bits = the local comm ID as Linux stores it (byte-swapped on LE).
    assert_eq!(h.tid as u32, r.local_comm_id.swap_bytes());
    assert_eq!(r.service_id, service_id_tcp(4420));
    assert_eq!(r.service_id, 0x0000_0000_0106_1144);
    assert_eq!(tcp_port_of_service_id(r.service_id), Some(4420));
    assert_eq!(r.local_ca_guid, guid_from_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x02]));
    assert_eq!((r.local_qkey, r.local_qpn, r.responder_resources, r.initiator_depth), (0, 0x11, 128, 0));
    assert_eq!((r.remote_cm_response_timeout, r.transport_service_type, r.end_to_end_flow_control), (20, 0, true));
    assert_eq!((r.starting_psn, r.local_cm_response_timeout, r.retry_count), (0x2ed269, 20, 7));
    assert_eq!((r.pkey, r.path_mtu, r.rdc_exists, r.rnr_retry_count), (0xffff, 3, false, 7));
    assert_eq!((r.max_cm_retries, r.srq, r.extended_transport_type), (15, false, 0));
    let p = r.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(ipv4_from_gid(&p.local_gid), Some([10, 77, 0, 2]));
    assert_eq!(ipv4_from_gid(&p.remote_gid), Some([10, 77, 0, 1]));
    assert_eq!((p.flow_label, p.packet_rate, p.traffic_class, p.hop_limit, p.sl, p.subnet_local, p.local_ack_timeout), (0xc931a, 0, 0, 64, 0, false, 19));
    assert_eq!(r.alternate, Path::default());
    // rdma_cm header + NVMe-RDMA request in the private data.
    let cma = CmaHdr::parse(&r.private_data).unwrap();
    assert_eq!(cma, CmaHdr { src_port: 0xeb6a, src_ip: [10, 77, 0, 2], dst_ip: [10, 77, 0, 1] });
    // The flow label is rdma_cm's hash of the two ports, and the RC UDP sport follows from it.
    assert_eq!(rdma_cm_flow_label(0xeb6a, 4420), 0xc931a);
    assert_eq!(flow_label_to_udp_sport(0xc931a), 54056);
    assert_eq!(flow_label_to_udp_sport(0xc8a62), 51792);
    assert_eq!(flow_label_to_udp_sport(0x8105a), 53370);
    let nv = NvmeRdmaCmReq::parse(&r.private_data[cma_f::LEN..]).unwrap();
    assert_eq!(nv, NvmeRdmaCmReq { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 });
}

#[test]
fn req_built_from_field_facts_encodes_to_the_linux_bytes() {
    let mut pd = [0u8; 92];
    CmaHdr { src_port: 0xeb6a, src_ip: [10, 77, 0, 2], dst_ip: [10, 77, 0, 1] }.write(&mut pd);
    pd[36..68].copy_from_slice(&NvmeRdmaCmReq { recfmt: 0, qid: 0, hrqsize: 32, hsqsize: 31, cntlid: 0 }.to_bytes());
    let req = Req {
        local_comm_id: 0x6f0c987e,
        service_id: service_id_tcp(4420),
        local_ca_guid: guid_from_mac([0x52, 0x54, 0x00, 0x77, 0x00, 0x02]),
        local_qkey: 0,
        local_qpn: 0x11,
        responder_resources: 128,
        local_eecn: 0,
        initiator_depth: 0,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport_service_type: 0,
        end_to_end_flow_control: true,
        starting_psn: 0x2ed269,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: mtu_bytes_to_enum(1024).unwrap(),
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport_type: 0,
        primary: Path {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: gid_from_ipv4([10, 77, 0, 2]),
            remote_gid: gid_from_ipv4([10, 77, 0, 1]),
            flow_label: rdma_cm_flow_label(0xeb6a, 4420),
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 19,
        },
        alternate: Path::default(),
        sap_supported: false,
        private_data: pd,
    };
    let tid = (2u64 << 32) | 0x6f0c987eu32.swap_bytes() as u64;
    let got = CmMsg::Req(req).encode(tid);
    assert_eq!(got.to_vec(), linux_req_mad().to_vec());
}

#[test]
fn rep_layout_matches_the_field_facts() {
    // REP as nvmet sends it (linuxpeer.md): RespRes 0, InitDepth 128, ack delay 15, E2E 1, RNR 7.
    let rep = Rep {
        local_comm_id: 0x11223344,
        remote_comm_id: 0x6f0c987e,
        local_qkey: 0,
        local_qpn: 0x12,
        local_eecn: 0,
        starting_psn: 0xabcdef,
        responder_resources: 0,
        initiator_depth: 128,
        target_ack_delay: 15,
        failover_accepted: 0,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x505400fffe770001,
        private_data: pad(&NvmeRdmaCmRep { recfmt: 0, crqsize: 32 }.to_bytes()),
    };
    let tid = 0x0000_0002_7e98_0c6f;
    let mad = CmMsg::Rep(rep).encode(tid);
    let mut want = vec![0u8; 256];
    want[..24].copy_from_slice(&hex("01 07 02 03 0000 0000 00000002 7e980c6f 0013 0000 00000000"));
    want[24..60].copy_from_slice(&hex(
        "11223344 6f0c987e 00000000 000012 00 000000 00 abcdef 00 00 80 79 e0 505400fffe770001",
    ));
    want[60..64].copy_from_slice(&hex("0000 2000"));
    assert_eq!(mad.to_vec(), want);
    assert_eq!(CmMsg::parse(&mad).unwrap().1, CmMsg::Rep(rep));
}

#[test]
fn rej_mra_dreq_layouts_match_the_field_facts() {
    let rej = Rej {
        local_comm_id: 0,
        remote_comm_id: 0x6f0c987e,
        message_rejected: msg_code::REQ,
        reject_info_length: 0,
        reason: rej_reason::CONSUMER_DEFINED,
        ari: [0; 72],
        private_data: pad(&NvmeRdmaCmRej { recfmt: 0, sts: nvme_rdma_sts::INVALID_HSQSIZE }.to_bytes()),
    };
    let mad = CmMsg::Rej(rej).encode(5);
    assert_eq!(&mad[16..18], &[0x00, 0x12]);
    assert_eq!(&mad[24..36], &hex("00000000 6f0c987e 00 00 001c"));
    assert_eq!(&mad[24 + 84..24 + 88], &hex("0000 0400"));
    let mra = Mra { local_comm_id: 1, remote_comm_id: 2, message_mraed: msg_code::REP, service_timeout: 24, private_data: [0; 222] };
    let mad = CmMsg::Mra(mra).encode(5);
    assert_eq!(&mad[24..34], &hex("00000001 00000002 40 c0"));
    let dreq = Dreq { local_comm_id: 1, remote_comm_id: 2, remote_qpn: 0x123456, private_data: [0; 220] };
    let mad = CmMsg::Dreq(dreq).encode(5);
    assert_eq!(&mad[24..36], &hex("00000001 00000002 123456 00"));
    for m in [CmMsg::Rej(rej), CmMsg::Mra(mra), CmMsg::Dreq(dreq)] {
        assert_eq!(CmMsg::parse(&m.encode(9)).unwrap(), (MadHdr::cm(m.attr_id(), 9), m));
    }
}

#[test]
fn non_cm_and_short_mads_are_refused() {
    let mut mad = linux_req_mad();
    assert!(matches!(CmMsg::parse(&mad[..255]), Err(WireError::Short { .. })));
    mad[2] = 1; // class version 1
    assert!(matches!(CmMsg::parse(&mad), Err(WireError::NotCm { .. })));
    let mut mad = linux_req_mad();
    mad[17] = 0x17; // SIDR_REQ
    assert_eq!(CmMsg::parse(&mad), Err(WireError::UnknownAttr(0x17)));
    let mut pd = [0u8; 36];
    pd[1] = 0x60;
    assert!(CmaHdr::parse(&pd).is_err());
}

proptest! {
    #[test]
    fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), attr in 0x10u16..0x1b) {
        let _ = CmMsg::parse(&bytes);
        let mut mad = bytes.clone();
        mad.resize(256, 0);
        mad[..4].copy_from_slice(&[1, 7, 2, 3]);
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        if let Ok((h, m)) = CmMsg::parse(&mad) {
            // Whatever decodes re-encodes to the same message.
            prop_assert_eq!(CmMsg::parse(&m.encode(h.tid)).unwrap().1, m);
        }
        let _ = CmaHdr::parse(&bytes);
        let _ = NvmeRdmaCmReq::parse(&bytes);
        let _ = NvmeRdmaCmRep::parse(&bytes);
        let _ = NvmeRdmaCmRej::parse(&bytes);
        let _ = MadHdr::parse(&bytes);
    }

    #[test]
    fn field_get_set_roundtrip(byte in 0usize..20, bit in 0u8..8, width in 1u8..=64, v in any::<u64>()) {
        let fld = Field { byte, bit, width };
        let mut buf = [0xA5u8; 40];
        let orig = buf;
        let masked = if width == 64 { v } else { v & ((1u64 << width) - 1) };
        fld.set(&mut buf, v);
        prop_assert_eq!(fld.get(&buf), masked);
        // Bits outside the field are untouched.
        fld.set(&mut buf, fld.get(&orig));
        prop_assert_eq!(buf, orig);
    }
}
